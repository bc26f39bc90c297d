"""End to end: Codex CLI's tool kinds that another upstream cannot run are left out, not refused.

Codex CLI 0.169 declares, besides its function and custom tools, ``tool_search`` and
``web_search`` (in the recording, ``../shared/fixtures/real/clients/codex-0.169.0-…``) and a
``namespace`` tool for its sub-agents (``multi_agent_v1``, openai-python's ``NamespaceTool``;
added here to the recorded request, the recording's run had it deferred). The recorded request
goes through mitmdump to an Anthropic and to a Gemini upstream; each scripted upstream refuses
a tool type it does not know the way the real service does (Anthropic: 400
``invalid_request_error`` naming the tag; Gemini: 400 ``INVALID_ARGUMENT`` "Unknown name").
Codex must get its answer, and the flow's decisions must name what was left out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    Headers,
    JSONReply,
    Proxy,
    Recorded,
    ScriptedUpstream,
    SSEReply,
    raw_request,
    sse_from_payloads,
)
from tests.e2e.test_real_clients import TEST_KEY, client_headers
from tests.realdata import FIXTURES, read

RECORDED = FIXTURES / "clients" / "codex-0.169.0-responses-gpt-5.5-turn1.request.json"
NAMESPACE: dict[str, Any] = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for spawning and managing sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "spawn_agent",
            "description": "Spawn a sub-agent.",
            "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
            "strict": False,
        }
    ],
}
ANSWER = "hello.txt says hi"
LEFT_OUT = "tool_search, web_search, multi_agent_v1 (namespace)"

# Anthropic's tool union: custom tools (no type, or "custom") and its own versioned types.
ANTHROPIC_TOOL_TAGS = ("custom", "bash_20250124", "text_editor_20250728", "web_search_20250305")
# google.genai Tool's fields, and FunctionDeclaration's.
GEMINI_TOOL_KEYS = {
    "functionDeclarations", "googleSearch", "googleSearchRetrieval", "codeExecution",
    "urlContext", "retrieval", "fileSearch", "computerUse", "googleMaps", "enterpriseWebSearch",
}  # fmt: skip
GEMINI_DECLARATION_KEYS = {
    "name", "description", "parameters", "parametersJsonSchema", "response",
    "responseJsonSchema", "behavior",
}  # fmt: skip


def anthropic_upstream(bodies: list[Any]) -> Callable[[Recorded], JSONReply | SSEReply]:
    def reply(rec: Recorded) -> JSONReply | SSEReply:
        assert rec.path == "/v1/messages", rec.path
        assert rec.headers.get("x-api-key") == TEST_KEY
        body = rec.json()
        bodies.append(body)
        for i, tool in enumerate(body.get("tools") or []):
            tag = tool.get("type", "custom")
            if tag not in ANTHROPIC_TOOL_TAGS or not isinstance(tool.get("name"), str):
                return JSONReply(
                    {
                        "type": "error",
                        "error": {
                            "type": "invalid_request_error",
                            "message": f"tools.{i}: Input tag '{tag}' found using 'type' does "
                            "not match any of the expected tags",
                        },
                    },
                    status=400,
                )
            if tag == "custom":
                assert isinstance(tool.get("input_schema"), dict), tool
        events = [
            ("message_start", {"type": "message_start", "message": {
                "id": "msg_e2e", "type": "message", "role": "assistant", "model": body["model"],
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": ANSWER}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": 5}}),
            ("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip
        sse = b"".join(
            f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
        )
        return SSEReply(sse, seed=3)

    return reply


def gemini_upstream(bodies: list[Any]) -> Callable[[Recorded], JSONReply | SSEReply]:
    def reply(rec: Recorded) -> JSONReply | SSEReply:
        assert rec.path == "/v1beta/models/gpt-5.5:streamGenerateContent?alt=sse", rec.path
        assert rec.headers.get("x-goog-api-key") == TEST_KEY
        body = rec.json()
        bodies.append(body)
        for i, tool in enumerate(body.get("tools") or []):
            unknown = sorted(set(tool) - GEMINI_TOOL_KEYS) or sorted(
                set(d) - GEMINI_DECLARATION_KEYS
                for d in tool.get("functionDeclarations") or []
                if set(d) - GEMINI_DECLARATION_KEYS
            )
            if unknown:
                return JSONReply(
                    {
                        "error": {
                            "code": 400,
                            "message": f'Invalid JSON payload received. Unknown name "{unknown[0]}"'
                            f" at 'tools[{i}]': Cannot find field.",
                            "status": "INVALID_ARGUMENT",
                        }
                    },
                    status=400,
                )
        chunk = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": ANSWER}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5},
            "modelVersion": "gemini-3-pro-preview",
        }
        return SSEReply(sse_from_payloads([chunk]), seed=4)

    return reply


UPSTREAMS = {"anthropic": anthropic_upstream, "gemini": gemini_upstream}


def codex_request() -> tuple[dict[str, Any], dict[str, Any]]:
    recorded = json.loads(read(f"clients/{RECORDED.name}"))
    body = recorded["body"]
    body["tools"].append(NAMESPACE)
    return recorded, body


@pytest.mark.parametrize("kind", sorted(UPSTREAMS))
def test_the_scripted_upstream_refuses_codex_tools_as_the_service_does(kind: str) -> None:
    """The fake is as strict as the service: the request as Codex wrote it would be refused."""
    _, body = codex_request()
    bodies: list[Any] = []
    sent = {
        "anthropic": {"model": "m", "tools": body["tools"]},
        "gemini": {"tools": [{"functionDeclarations": [{"name": "f"}]}, *body["tools"][-2:]]},
    }[kind]
    path = {
        "anthropic": "/v1/messages",
        "gemini": "/v1beta/models/gpt-5.5:streamGenerateContent?alt=sse",
    }[kind]
    key = {"x-api-key": TEST_KEY, "x-goog-api-key": TEST_KEY}
    rec = Recorded("POST", path, Headers(key), json.dumps(sent).encode())
    reply = UPSTREAMS[kind](bodies)(rec)
    assert isinstance(reply, JSONReply) and reply.status == 400, reply


@pytest.mark.parametrize("kind", sorted(UPSTREAMS))
def test_codex_with_its_namespace_tool_is_answered_by_another_upstream(
    kind: str, start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text(
        f'[[routes]]\nname = "codex-{kind}"\npath = "*/v1/responses"\n'
        f'client = "openai_responses"\nupstream = "{kind}"\n'
    )
    proxy = start_proxy(bridge_routes=str(routes), bridge_debug=True, termlog_verbosity="debug")
    bodies: list[Any] = []
    upstream.script = UPSTREAMS[kind](bodies)
    recorded, body = codex_request()
    status, headers, raw = raw_request(
        proxy.port,
        "POST",
        recorded["path"],
        json.dumps(body).encode(),
        client_headers(recorded),
        timeout=15,
    )
    assert status == 200, raw[:500]
    assert headers["content-type"].startswith("text/event-stream")
    events = [
        json.loads(line[len(b"data: ") :])
        for line in raw.splitlines()
        if line.startswith(b"data: ") and line != b"data: [DONE]"
    ]
    (done,) = [e for e in events if e["type"] == "response.completed"]
    (message,) = [o for o in done["response"]["output"] if o["type"] == "message"]
    assert message["content"][0]["text"] == ANSWER
    # The upstream got Codex's function tools, not the kinds it cannot run.
    (sent,) = bodies
    text = json.dumps(sent["tools"])
    assert "exec_command" in text and "spawn_agent" not in text and "namespace" not in text
    proxy.wait_for_log(f"tools the {kind} upstream cannot run left out: {LEFT_OUT}")
    assert TEST_KEY not in proxy.log_text() and "Traceback" not in proxy.log_text()
