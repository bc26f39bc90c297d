"""End to end: every request recorded from a real client program, replayed through mitmdump.

The recordings in ``../shared/fixtures/real/clients/`` are what Claude Code,
Codex CLI, OpenCode, the Vercel AI SDK and Gemini CLI really sent (headers and body), with
the scripted answers they got. Each request is sent as recorded (its key
replaced by a test key) to a proxy in front of an OpenAI-compatible upstream.
The upstream checks it got a valid Chat Completions request with the key as a
Bearer token, and answers with the recorded answer re-encoded as Chat
Completions SSE. The client must get back, in its own dialect, the same text
and tool calls (ids, names, arguments) as the recording.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from addon.dialects import DIALECTS
from addon.dialects.openai_chat.stream_encode import OpenAIChatStreamEncoder
from addon.model import (
    Event,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallStart,
)
from addon.stream.processor import StreamProcessor
from tests.e2e.harness import (
    SAME_DIALECT_ROUTES,
    Proxy,
    Recorded,
    ScriptedUpstream,
    SSEReply,
    raw_request,
)
from tests.realdata import FIXTURES
from tests.unit.helpers import sse_events

CLIENTS = FIXTURES / "clients"
TEST_KEY = "sk-e2e-recorded-client-key"
CLIENT_DIALECTS = {
    "claude-code-": "anthropic",
    "ai-sdk-6.0.326-anthropic-": "anthropic",
    "codex-": "openai_responses",
    "opencode-": "openai_chat",
    "ai-sdk-6.0.326-openai-compatible-": "openai_chat",
    "gemini-cli-": "gemini",
}
_SKIP_HEADERS = {"host", "content-length", "accept-encoding", "connection"}
_KEY_HEADERS = {"authorization", "x-api-key", "x-goog-api-key"}


def recordings() -> list[str]:
    if not CLIENTS.is_dir():
        return []
    return sorted(
        p.name.removesuffix(".request.json")
        for p in CLIENTS.glob("*-turn*.request.json")
        if any(p.name.startswith(prefix) for prefix in CLIENT_DIALECTS)
    )


def dialect_of(name: str) -> str:
    return next(d for prefix, d in CLIENT_DIALECTS.items() if name.startswith(prefix))


def unified(dialect: str, raw: bytes) -> list[Event]:
    decoder = DIALECTS[dialect].stream_decoder()
    out: list[Event] = []
    for e in sse_events(raw):
        if e.data:
            out += decoder.feed(e.data, e.event)
    return out + decoder.finish()


@dataclass
class Answer:
    text: str
    calls: list[tuple[str, str, Any]]
    """(id, name, arguments parsed as JSON, or the raw text of a custom call)."""


def summarize(events: list[Event]) -> Answer:
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls: dict[int, list[Any]] = {}
    custom: set[int] = set()
    for e in events:
        if isinstance(e, ToolCallStart):
            calls[e.index] = [e.id, e.name, e.arguments]
            if getattr(e, "custom", False):
                custom.add(e.index)
        elif isinstance(e, ToolCallArgsDelta) and e.index in calls:
            calls[e.index][2] += e.delta
    out = []
    for i, (id_, name, args) in calls.items():
        out.append((id_, name, args if i in custom else json.loads(args or "{}")))
    return Answer(text, out)


def as_openai_sse(dialect: str, raw: bytes) -> bytes:
    """The recorded answer as an OpenAI-compatible upstream would have sent it."""
    processor = StreamProcessor(DIALECTS[dialect].stream_decoder(), OpenAIChatStreamEncoder())
    out = b"".join(processor.feed(raw) + processor.finish())
    assert processor.error is None, processor.error
    return out


@pytest.mark.parametrize("name", recordings())
def test_recorded_request_through_the_proxy(
    name: str, proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    recorded = json.loads((CLIENTS / f"{name}.request.json").read_text())
    answer = (CLIENTS / f"{name}.response.sse").read_bytes()
    dialect = dialect_of(name)
    seen: list[Any] = []

    def reply(rec: Recorded) -> SSEReply:
        assert rec.path == "/v1/chat/completions", rec.path
        assert rec.headers.get("authorization") == f"Bearer {TEST_KEY}"
        assert "x-api-key" not in rec.headers and "x-goog-api-key" not in rec.headers
        body = rec.json()
        seen.append(body)
        check_chat_body(body)
        return SSEReply(as_openai_sse(dialect, answer), seed=7)

    upstream.script = reply
    status, resp_headers, body = raw_request(
        proxy.port,
        recorded["method"],
        recorded["path"],
        json.dumps(recorded["body"]).encode(),
        client_headers(recorded),
        timeout=15,
    )
    assert status == 200, body[:500]
    assert resp_headers["content-type"].startswith("text/event-stream")
    assert len(seen) == 1
    got = summarize(unified(dialect, body))
    want = summarize(unified(dialect, answer))
    assert got == want
    assert TEST_KEY not in proxy.log_text()


def client_headers(recorded: dict[str, Any]) -> dict[str, str]:
    """The recorded client's headers, its key replaced by the test's."""
    return {
        k: (TEST_KEY if k.lower() in ("x-api-key", "x-goog-api-key") else f"Bearer {TEST_KEY}")
        if k.lower() in _KEY_HEADERS
        else v
        for k, v in recorded["headers"].items()
        if k.lower() not in _SKIP_HEADERS
    }


@pytest.mark.parametrize(
    "name", [n for n in recordings() if dialect_of(n) != "gemini" and "ai-sdk" not in n]
)
def test_an_unchanged_request_reaches_an_upstream_of_its_dialect_byte_for_byte(
    name: str, start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """Claude Code, Codex CLI and OpenCode through routes to their own dialect: the rewrite
    leaves their requests as they were, and the upstream gets the client's very bytes."""
    recorded = json.loads((CLIENTS / f"{name}.request.json").read_text())
    answer = (CLIENTS / f"{name}.response.sse").read_bytes()
    routes = tmp_path / "routes.toml"
    routes.write_text(SAME_DIALECT_ROUTES)
    p = start_proxy(bridge_routes=str(routes))
    upstream.script = lambda rec: SSEReply(answer, seed=7)
    sent = json.dumps(recorded["body"], indent=1).encode()  # not how the bridge would write it
    status, _, body = raw_request(
        p.port, recorded["method"], recorded["path"], sent, client_headers(recorded), timeout=15
    )
    assert status == 200, body[:500]
    (rec,) = upstream.requests
    assert rec.path == recorded["path"]
    assert rec.body == sent
    assert summarize(unified(dialect_of(name), body)) == summarize(
        unified(dialect_of(name), answer)
    )
    dialect = dialect_of(name)
    p.wait_for_log(
        re.compile(
            rf"cursor-bridge flow route=\w+ outcome=rewritten client={dialect} upstream={dialect} "
        )
    )


def check_chat_body(body: dict[str, Any]) -> None:
    """What every OpenAI-compatible upstream needs: roles, and each call answered in order."""
    assert isinstance(body["model"], str) and body["messages"]
    for key in ("input", "instructions", "system", "thinking", "output_config"):
        assert key not in body, key
    pending: list[str] = []
    for m in body["messages"]:
        assert m["role"] in ("system", "developer", "user", "assistant", "tool"), m["role"]
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, (m["tool_call_id"], pending)
            pending.remove(m["tool_call_id"])
            continue
        assert not pending, f"tool calls without results: {pending}"
        for call in m.get("tool_calls") or []:
            assert call["type"] == "function"
            json.loads(call["function"]["arguments"])
            pending.append(call["id"])
    assert "cache_control" not in json.dumps(body)
    for tool in body.get("tools") or []:
        assert tool["type"] == "function" and tool["function"]["name"]


def test_claude_codes_head_probe_passes_through(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    recorded = CLIENTS / "claude-code-2.1.197-default-aux-head.request.json"
    if not recorded.exists():
        pytest.skip("recordings not available")
    status, _, _ = raw_request(proxy.port, "HEAD", "/")
    (rec,) = upstream.requests
    assert (rec.method, rec.path) == ("HEAD", "/")
    assert status == 404  # the scripted upstream's own answer, untouched
