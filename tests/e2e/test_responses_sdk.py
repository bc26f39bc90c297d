"""End to end: the official openai SDK's Responses API (as Codex CLI speaks it) → mitmdump →
an OpenAI-compatible Chat Completions upstream; and Cursor's Responses-shaped agent body
sent raw to ``/chat/completions``.

The upstream only knows Chat Completions and function tools: a function tool loop
and a custom (freeform) tool must work both streamed and whole, in the client's
own dialect.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.e2e.harness import (
    JSONReply,
    Proxy,
    Recorded,
    ScriptedUpstream,
    SSEReply,
    raw_request,
    sse_from_payloads,
)

PATCH = '*** Begin Patch\n*** Add File: notes.txt\n+hello "world"\n*** End Patch\n'
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a shell command",
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"],
        },
        "strict": False,
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files with a patch.",
        "format": {
            "type": "grammar",
            "syntax": "lark",
            "definition": 'start: "*** Begin Patch" LF body "*** End Patch"',
        },
    },
]
CALLS = [
    ("call_e2e_0", "exec_command", json.dumps({"cmd": "cat hello.txt"})),
    ("call_e2e_1", "apply_patch", json.dumps({"input": PATCH})),
]
BASE = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def client(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy.base_url}/v1", api_key="sk-e2e", max_retries=0, timeout=15
    )


def chat_calls_sse() -> bytes:
    """Two calls, arguments split over chunks, as an OpenAI-compatible gateway streams them."""
    payloads: list[Any] = [
        {**BASE, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    ]
    for i, (id_, name, args) in enumerate(CALLS):
        start = {"index": i, "id": id_, "type": "function", "function": {"name": name}}
        payloads.append(
            {
                **BASE,
                "choices": [{"index": 0, "delta": {"tool_calls": [start]}, "finish_reason": None}],
            }
        )
        for k in range(0, len(args), 7):
            frag = {"index": i, "function": {"arguments": args[k : k + 7]}}
            payloads.append(
                {
                    **BASE,
                    "choices": [
                        {"index": 0, "delta": {"tool_calls": [frag]}, "finish_reason": None}
                    ],
                }
            )
    payloads.append({**BASE, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    payloads.append(
        {
            **BASE,
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
        }
    )
    return sse_from_payloads([*payloads, "[DONE]"])


def chat_calls_json() -> dict[str, Any]:
    return {
        "id": "chatcmpl-r",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                        for i, n, a in CALLS
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
    }


def check_first_turn(rec: Recorded) -> None:
    assert rec.path == "/v1/chat/completions"
    body = rec.json()
    assert body["messages"][0] == {"role": "system", "content": "You are Codex."}
    assert body["messages"][-1]["role"] == "user"
    tools = {t["function"]["name"]: t["function"] for t in body["tools"]}
    assert tools["exec_command"]["parameters"]["required"] == ["cmd"]
    patch = tools["apply_patch"]
    assert patch["parameters"]["properties"]["input"]["type"] == "string"
    assert "*** Begin Patch" in patch["description"]  # the grammar goes along


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_function_and_custom_tool_loop(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    def first(rec: Recorded) -> SSEReply | JSONReply:
        check_first_turn(rec)
        return SSEReply(chat_calls_sse(), seed=3) if stream else JSONReply(chat_calls_json())

    upstream.script = first
    params: dict[str, Any] = {
        "model": "gpt-5",
        "instructions": "You are Codex.",
        "input": [{"role": "user", "content": "read hello.txt and write notes.txt"}],
        "tools": TOOLS,
        "reasoning": {"effort": "medium"},
        "store": False,
    }
    if stream:
        with client(proxy).responses.stream(**params) as s:
            response = s.get_final_response()
    else:
        response = client(proxy).responses.create(**params)
    items = [(o.type, o.call_id, o.name) for o in response.output if o.type != "reasoning"]
    assert items == [
        ("function_call", "call_e2e_0", "exec_command"),
        ("custom_tool_call", "call_e2e_1", "apply_patch"),
    ]
    fn, custom = [o for o in response.output if o.type != "reasoning"]
    assert json.loads(fn.arguments) == {"cmd": "cat hello.txt"}  # type: ignore[union-attr]
    assert custom.input == PATCH  # type: ignore[union-attr]
    assert response.usage is not None and response.usage.output_tokens == 4

    seen: list[Any] = []

    def second(rec: Recorded) -> SSEReply | JSONReply:
        seen.append(rec.json())
        text = "Done: notes.txt written."
        if not stream:
            body = chat_calls_json()
            body["choices"][0]["message"] = {"role": "assistant", "content": text}
            body["choices"][0]["finish_reason"] = "stop"
            return JSONReply(body)
        payloads = [
            {**BASE, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
            {**BASE, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            "[DONE]",
        ]
        return SSEReply(sse_from_payloads(payloads), seed=4)

    upstream.script = second
    history: list[Any] = [
        *params["input"],
        {"type": "function_call", "call_id": "call_e2e_0", "name": "exec_command",
         "arguments": fn.arguments},  # type: ignore[union-attr]
        {"type": "custom_tool_call", "call_id": "call_e2e_1", "name": "apply_patch",
         "input": PATCH},
        {"type": "function_call_output", "call_id": "call_e2e_0", "output": "MAGIC-4242"},
        {"type": "custom_tool_call_output", "call_id": "call_e2e_1", "output": "Success."},
    ]  # fmt: skip
    params["input"] = history
    if stream:
        with client(proxy).responses.stream(**params) as s:
            again = s.get_final_response()
    else:
        again = client(proxy).responses.create(**params)
    assert again.output_text == "Done: notes.txt written."
    (body,) = seen
    assistant = next(m for m in body["messages"] if m.get("tool_calls"))
    calls = {c["id"]: c["function"] for c in assistant["tool_calls"]}
    assert json.loads(calls["call_e2e_1"]["arguments"]) == {"input": PATCH}
    results = [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]
    assert results == [("call_e2e_0", "MAGIC-4242"), ("call_e2e_1", "Success.")]


CURSOR_AGENT_BODY: dict[str, Any] = {
    # Shape of Cursor's agent-mode body for GPT-named models (BYOK, custom base URL), as
    # described by Cursor forum threads and the Bifrost gateway's Cursor integration.
    "model": "gpt-5.1-codex",
    "stream": True,
    "instructions": "You are a coding agent in Cursor.",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "add notes.txt"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Check the file first."}],
            "encrypted_content": "gAAAAB-opaque",
        },
        {
            "type": "function_call",
            "call_id": "call_c1",
            "name": "read_file",
            "arguments": '{"path": "notes.txt"}',
        },
        {"type": "function_call_output", "call_id": "call_c1", "output": "no such file"},
    ],
    "tools": [
        {
            "type": "function",
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        {
            "type": "custom",
            "name": "ApplyPatch",
            "description": "Apply a patch",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"},
        },
    ],
    "reasoning": {"effort": "high", "summary": "auto"},
    "text": {"verbosity": "medium"},
    "include": ["reasoning.encrypted_content"],
    "store": False,
    "previous_response_id": None,
    "prompt_cache_retention": "24h",
}


def test_cursor_agent_body_is_answered_in_chat_completions(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    seen: list[Any] = []

    def reply(rec: Recorded) -> SSEReply:
        seen.append(rec.json())
        return SSEReply(
            sse_from_payloads(
                [
                    {**BASE, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]},
                    {**BASE, "choices": [{"index": 0, "delta": {"tool_calls": [
                        {"index": 0, "id": "call_p", "type": "function",
                         "function": {"name": "ApplyPatch", "arguments": json.dumps({"input": PATCH})}}
                    ]}, "finish_reason": None}]},
                    {**BASE, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                    "[DONE]",
                ]
            ),
            seed=5,
        )  # fmt: skip

    upstream.script = reply
    status, headers, raw = raw_request(
        proxy.port,
        "POST",
        "/v1/chat/completions",
        json.dumps(CURSOR_AGENT_BODY).encode(),
        {"content-type": "application/json", "authorization": "Bearer sk-cursor"},
    )
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    (body,) = seen
    for key in ("input", "instructions", "include", "store", "text", "prompt_cache_retention"):
        assert key not in body, key
    assert body["messages"][0] == {"role": "system", "content": "You are a coding agent in Cursor."}
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    chunks = [
        json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: {")
    ]
    assert raw.decode().rstrip().endswith("data: [DONE]")
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    calls = [tc for c in chunks for ch in c["choices"] for tc in ch["delta"].get("tool_calls", [])]
    assert calls[0]["type"] == "function" and calls[0]["function"]["name"] == "ApplyPatch"
    arguments = "".join(tc["function"].get("arguments", "") for tc in calls)
    assert arguments == PATCH  # Cursor gets the raw patch text, not JSON
