"""Tool kinds an upstream cannot run are left out, on every route (``transforms.tools``).

Each client dialect's own non-function tool kinds (Codex's ``namespace``, ``tool_search`` and
``web_search``; Anthropic's server tools; Gemini's ``googleSearch``; OpenAI chat's nested
tools) go through ``decide`` to every upstream dialect, native and on a text protocol: an
upstream that runs them gets them, any other gets the request without them and the flow's
decisions name them. A 400 only when the client asked for what was left out.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.model import ToolMode
from addon.plan import Incoming, Reject, Rewrite, decide
from tests.realdata import FIXTURES, read

CODEX_TURN1 = FIXTURES / "clients" / "codex-0.169.0-responses-gpt-5.5-turn1.request.json"
NAMESPACE: dict[str, Any] = {
    # What Codex CLI 0.169 declares for its sub-agent tools (openai-python's NamespaceTool).
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for spawning and managing sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "spawn_agent",
            "description": "Spawn a sub-agent.",
            "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
        }
    ],
}
READ_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
UPSTREAMS = ("openai_chat", "anthropic", "openai_responses", "gemini", "gemini_code_assist", "kiro")
PATHS = {
    "openai_chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "openai_responses": "/v1/responses",
    "gemini": "/v1beta/models/gemini-3-pro-preview:streamGenerateContent",
}


def codex_body() -> dict[str, Any]:
    """Codex CLI's recorded request (a skip where the recordings are not beside the checkout)."""
    body: dict[str, Any] = json.loads(read(f"clients/{CODEX_TURN1.name}"))["body"]
    body["tools"].append(NAMESPACE)
    return body


CLIENTS: dict[str, tuple[dict[str, Any] | None, dict[str, str]]] = {
    # client dialect: (body, {tool type: its label in the decisions}); None: Codex's recording
    "openai_responses": (
        None,
        {
            "tool_search": "tool_search",
            "web_search": "web_search",
            "namespace": "multi_agent_v1 (namespace)",
        },
    ),
    "anthropic": (
        {
            "model": "claude-sonnet-4-6",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"name": "Read", "input_schema": READ_SCHEMA},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            ],
        },
        {"web_search_20250305": "web_search (web_search_20250305)"},
    ),
    "gemini": (
        {
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [
                {"functionDeclarations": [{"name": "Read", "parameters": READ_SCHEMA}]},
                {"googleSearch": {}},
            ],
        },
        {"googleSearch": "googleSearch"},
    ),
    "openai_chat": (
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"type": "function", "function": {"name": "Read", "parameters": READ_SCHEMA}},
                {"type": "web_search", "web_search": {"name": "search", "context": "low"}},
            ],
        },
        {"web_search": "search (web_search)"},
    ),
}


def case(client: str) -> tuple[dict[str, Any], dict[str, str]]:
    body, labels = CLIENTS[client]
    return (codex_body() if body is None else body), labels


RUNS = {"gemini_code_assist": "gemini"}
"""An upstream dialect that runs another's own tools (Code Assist: Gemini's)."""


def run(
    client: str, upstream: str, body: dict[str, Any], mode: ToolMode = "native"
) -> Rewrite | Reject:
    route = Route(
        name="r", path="*", client=client, upstream=upstream, tool_mode=mode, project="p-1"
    )  # type: ignore[arg-type]
    raw = json.dumps(body).encode()
    d = decide(Settings(routes=(route,)), route, Incoming("POST", "h", PATHS[client], {}, raw), {})
    assert isinstance(d, Rewrite | Reject), d
    return d


def wire_tools(upstream: str, body: dict[str, Any]) -> str:
    """The tool list the upstream got, as JSON text."""
    if upstream == "gemini_code_assist":
        body = body["request"]
    if upstream == "kiro":
        current = body["conversationState"]["currentMessage"]["userInputMessage"]
        return json.dumps(current.get("userInputMessageContext", {}).get("tools", []))
    return json.dumps(body.get("tools", []))


@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_tools_an_upstream_cannot_run_are_left_out_and_named(client: str, upstream: str) -> None:
    body, labels = case(client)
    d = run(client, upstream, body)
    assert isinstance(d, Rewrite), d
    tools = wire_tools(upstream, d.wire.body)
    runs = RUNS.get(upstream, upstream) == client
    for kind in labels:
        assert (f'"{kind}"' in tools) == runs, (kind, tools)
    assert "Read" in tools or "exec_command" in tools  # the function tools go on
    notes = [n for n in d.plan.request_notes if "cannot run left out" in n]
    if runs:
        assert notes == []
    else:
        assert notes == [f"tools the {upstream} upstream cannot run left out: "
                         + ", ".join(labels.values())]  # fmt: skip
        assert notes[0] in d.summary  # the flow comment's decisions


@pytest.mark.parametrize("mode", ["invoke", "bracket"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_text_protocol_carries_function_tools_only(client: str, mode: ToolMode) -> None:
    body, labels = case(client)
    d = run(client, "openai_chat", body, mode)
    assert isinstance(d, Rewrite), d
    assert "tools" not in d.wire.body
    assert d.plan.request_notes[
        f"tools the {mode} text protocol cannot run left out: {', '.join(labels.values())}"
    ]
    system = json.dumps(d.wire.body["messages"][0])
    assert "Read" in system or "exec_command" in system


def test_a_responses_upstream_runs_a_chat_clients_custom_tool() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "custom", "custom": {"name": "patch", "description": "a patch"}}],
    }
    d = run("openai_chat", "openai_responses", body)
    assert isinstance(d, Rewrite)
    assert d.wire.body["tools"] == [{"type": "custom", "name": "patch", "description": "a patch"}]


@pytest.mark.parametrize("upstream", [u for u in UPSTREAMS if u != "anthropic"])
def test_a_tool_choice_that_forces_a_left_out_tool_is_refused(upstream: str) -> None:
    body, _ = case("anthropic")
    d = run("anthropic", upstream, {**body, "tool_choice": {"type": "tool", "name": "web_search"}})
    assert isinstance(d, Reject) and d.status == 400
    assert d.message == (
        f"tool_choice asks for tool 'web_search' of type 'web_search_20250305', which the "
        f"{upstream} upstream cannot run"
    )
    err = json.loads(d.body)
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("upstream", [u for u in UPSTREAMS if u != "openai_responses"])
def test_a_request_of_only_tools_the_upstream_cannot_run_is_refused(upstream: str) -> None:
    """Claude Code's WebSearch request, Gemini CLI's web search: only the server tool."""
    body = {**codex_body(), "tools": [{"type": "web_search"}]}
    d = run("openai_responses", upstream, body)
    assert isinstance(d, Reject) and d.status == 400
    assert "'web_search', which the" in d.message and "no other tool" in d.message
    assert json.loads(d.body)["error"]["code"] == "unsupported_tool"


@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_a_hosted_tool_choice_only_a_responses_upstream_runs(upstream: str) -> None:
    """Responses' ``tool_choice: {"type": "web_search"}`` asks the upstream to run it."""
    body = {**codex_body(), "tool_choice": {"type": "web_search"}}
    d = run("openai_responses", upstream, body)
    if upstream == "openai_responses":
        assert isinstance(d, Rewrite) and d.wire.body["tool_choice"] == {"type": "web_search"}
        return
    assert isinstance(d, Reject) and d.status == 400
    assert (
        d.message
        == f"tool_choice asks for the 'web_search' tool, which the {upstream} upstream cannot run"
    )
    assert json.loads(d.body)["error"]["param"] == "tool_choice"


def test_a_hosted_tool_choice_on_a_text_protocol_is_refused() -> None:
    body = {**codex_body(), "tool_choice": {"type": "file_search"}}
    d = run("openai_responses", "openai_responses", body, "invoke")
    assert isinstance(d, Reject)
    assert "'file_search' tool, which the invoke text protocol cannot run" in d.message
