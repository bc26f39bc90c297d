"""End to end, issue 28: an upstream that reuses its call ids from turn to turn.

A Gemini-compatible server that sends one ``responseId`` in every answer (the bridge makes
Gemini's missing call ids from it: ``call_<responseId>_<n>``), and an OpenAI-compatible one
that numbers its calls per answer (``call_0`` every turn), each behind a real mitmdump, driven
through the 3-turn tool loops of ``test_reasoning_store`` (a Cursor-shaped openai SDK client, a
Claude Code-shaped anthropic SDK client with thinking on; both drop the reasoning from their
history). The loop completes, every call id the client sent back is unique (the last request's
history holds them all), and the reasoning store still puts back each turn's Gemini 3
``thoughtSignature`` / DeepSeek ``reasoning_content`` — the turn-2 call's under its renamed id.
The scripted upstreams refuse what the real services refuse (``tests/upstream_rules.py``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream, SSEReply
from tests.e2e.test_reasoning_store import (
    MODEL_DEEPSEEK,
    MODEL_GEMINI,
    TURNS,
    DeepSeek,
    Gemini,
    Strict,
    claude_code_loop,
    cursor_loop,
    routes,
)

pytestmark = pytest.mark.filterwarnings("ignore:The model 'claude-opus-4-5' is deprecated")

RESPONSE_ID = "same-answer-id"


class SameResponseId(Gemini):
    """Gemini 3 as in ``test_reasoning_store``, but every answer (each chunk) says the same
    ``responseId``: the ids the bridge makes for its calls repeat from turn to turn."""

    def __init__(self) -> None:
        super().__init__(code_assist=False)

    def __call__(self, rec: Recorded) -> JSONReply | SSEReply:
        reply = super().__call__(rec)
        if reply.status != 200:
            return reply
        if isinstance(reply, JSONReply):
            return JSONReply({**reply.body, "responseId": RESPONSE_ID})
        events = [e for e in reply.body.split(b"\r\n\r\n") if e]
        body = b""
        for event in events:
            chunk = json.loads(event.removeprefix(b"data: "))
            body += b"data: " + json.dumps({**chunk, "responseId": RESPONSE_ID}).encode()
            body += b"\r\n\r\n"
        return SSEReply(body, chunk_min=3, chunk_max=40)


CALL_ID = re.compile(rb'"id": "call_\d(\d)"')


class NumberedPerAnswer(DeepSeek):
    """DeepSeek in thinking mode as in ``test_reasoning_store``, but its calls are numbered per
    answer (``call_0``, ``call_1`` every turn), as many OpenAI-compatible servers do."""

    def __call__(self, rec: Recorded) -> JSONReply | SSEReply:
        reply = super().__call__(rec)
        if reply.status != 200:
            return reply
        if isinstance(reply, JSONReply):
            message = reply.body["choices"][0]["message"]
            for i, call in enumerate(message.get("tool_calls") or ()):
                call["id"] = f"call_{i}"
            return reply
        return SSEReply(CALL_ID.sub(rb'"id": "call_\1"', reply.body), chunk_min=4, chunk_max=50)


CASES: dict[str, tuple[Callable[[], Strict], str]] = {
    "gemini": (SameResponseId, MODEL_GEMINI),
    "openai_chat": (NumberedPerAnswer, MODEL_DEEPSEEK),
}


def sent_call_ids(dialect: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The call ids of the history the client sent (as the upstream got them): its calls'
    and its results'."""
    if dialect == "gemini":
        parts = [p for c in body["contents"] for p in c["parts"]]
        calls = [p["functionCall"]["id"] for p in parts if "functionCall" in p]
        results = [p["functionResponse"]["id"] for p in parts if "functionResponse" in p]
        return calls, results
    messages = body["messages"]
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    return calls, results


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("client", ["cursor", "claude-code"])
@pytest.mark.parametrize("dialect", list(CASES))
def test_a_loop_over_an_upstream_that_reuses_call_ids_gets_fresh_ones(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    dialect: str,
    client: str,
    stream: bool,
) -> None:
    make, model = CASES[dialect]
    script = make()
    upstream.script = script
    proxy = start_proxy(bridge_routes=routes(tmp_path, dialect))
    if client == "cursor":
        text = cursor_loop(lambda: proxy.base_url, model, stream)
    else:
        text = claude_code_loop(lambda: proxy.base_url, model, stream)
    assert text == TURNS[2][2]
    # Every turn accepted: each turn's reasoning came back, the renamed call's too.
    assert script.refused == [] and len(script.bodies) == 3
    calls, results = sent_call_ids(dialect, script.bodies[-1])
    assert len(calls) == sum(len(t[1]) for t in TURNS) == 3
    assert len(set(calls)) == 3, calls
    assert sorted(results) == sorted(calls)
    repeated = f"call_{RESPONSE_ID}_0" if dialect == "gemini" else "call_0"
    assert calls[2] == f"{repeated}_2", calls  # the turn-2 call, renamed
    log = proxy.log_text()
    assert "Traceback" not in log
