"""``bridge_fast_path=false``: every stream event goes the general way, and the client gets
the same answer as with the fast path on (the fast path may only ever be a shortcut); on,
the stream takes it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from tests.e2e.harness import Proxy, ScriptedUpstream, SSEReply, sse_from_payloads, stream_request


def _chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _upstream_stream(reasoning: bool) -> bytes:
    """Reasoning (or OpenAI's first chunk: the role and an empty text), 60 words, a tool call."""
    first = {"reasoning_content": "Let me see."} if reasoning else {"content": ""}
    words = [f"word{i} " for i in range(60)]
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "Read", "arguments": '{"path": "README.md"}'},
    }
    payloads = [
        _chunk({"role": "assistant", **first}),
        *[_chunk({"content": w}) for w in words],
        _chunk({"tool_calls": [call]}),
        _chunk({}, "tool_calls"),
    ]
    # Compact JSON, as OpenAI writes its chunks: the fast path learns a text chunk's frame
    # from it (a body written with spaces goes the general way, fast path on or off).
    compact = [json.dumps(p, separators=(",", ":")) for p in payloads]
    return sse_from_payloads(compact) + b"data: [DONE]\n\n"


CLIENTS = {
    "anthropic": (
        "/v1/messages",
        {
            "model": "m",
            "max_tokens": 100,
            "stream": True,
            "messages": [{"role": "user", "content": "read it"}],
            "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
        },
    ),
    "openai_chat": (
        "/v1/chat/completions",
        {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": "read it"}],
            "tools": [
                {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}
            ],
        },
    ),
}


LINE = re.compile(r"events_in=(\d+)(?: fast_events=(\d+))?")


CASES = [
    # client, the upstream reasons first, the fast path applies
    ("anthropic", True, True),  # the text read (another dialect: texts joined)
    ("openai_chat", False, True),  # the skip read (same dialect, plain text passed as bytes)
    ("openai_chat", True, False),  # same dialect after reasoning: every chunk decoded
]


@pytest.mark.parametrize(("client", "reasoning", "applies"), CASES)
def test_the_fast_path_off_gives_the_client_the_same_answer(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    client: str,
    reasoning: bool,
    applies: bool,
) -> None:
    """What the option guarantees, whatever the reads' timing: with the fast path on the
    stream takes it (the flow's line counts ``fast_events``), off it never does; the client
    gets the same events either way. How many text deltas one upstream read becomes depends
    on timing (texts of events read together are joined, fast path or not, and the relay
    hands on an upstream read whole: docs/architecture.md), so each run of text deltas is
    compared as its joined text; every other event, and the answer rebuilt from the events
    (its thinking, text, tool calls, stop reason), exactly."""
    path, body = CLIENTS[client]
    got, counted = [], []
    for fast in (True, False):
        proxy = start_proxy(bridge_fast_path=fast)
        upstream.enqueue(
            SSEReply(_upstream_stream(reasoning), chunk_min=1, chunk_max=40, seed=7, delay=0.002)
        )
        resp = stream_request(
            proxy.port,
            "POST",
            path,
            json.dumps(body).encode(),
            {"content-type": "application/json", "authorization": "Bearer t"},
        )
        assert resp.status == 200, resp.body[:300]
        got.append(resp.body)
        m = proxy.wait_for_log(LINE, timeout=10)
        counted.append((int(m[1]), int(m[2] or 0)))
        proxy.close()
    (events_fast, taken), (events_slow, not_taken) = counted
    assert events_fast == events_slow == 64  # every upstream event read, either way
    if applies:  # pieces of 1-40 bytes, 2 ms apart: no read holds the whole body
        assert taken > 0, "bridge_fast_path=true: no event took the fast path"
    assert not_taken == 0, f"bridge_fast_path=false: {not_taken} events took the fast path"
    # Two answers, two message ids of the bridge's (issue 35); all else the same events.
    made = re.compile(rb'"id":"msg_01[0-9A-Za-z]{22}"')
    first, second = (_events(made.sub(b'"id":"made"', g)) for g in got)
    assert _joined(first) == _joined(second)
    answer = _answer(client, first)
    assert answer == _answer(client, second)
    assert answer == {
        "thinking": "Let me see." if reasoning else "",
        "text": "".join(f"word{i} " for i in range(60)),
        "calls": [("call_1", "Read", {"path": "README.md"})],
        "stop": "tool_use" if client == "anthropic" else "tool_calls",
    }


def _events(body: bytes) -> list[object]:
    """The stream's events: each data line's JSON (``[DONE]`` as its bytes), in order."""
    out: list[object] = []
    for block in body.split(b"\n\n"):
        data = [line[6:] for line in block.split(b"\n") if line.startswith(b"data: ")]
        if data:
            out.append(data[0] if data[0] == b"[DONE]" else json.loads(b"\n".join(data)))
    return out


def _joined(events: list[object]) -> list[object]:
    """The events, each run of text deltas one joined text."""
    out: list[object] = []
    run: list[str] = []
    for event in events:
        text = _text_delta(event) if isinstance(event, dict) else None
        if text is not None:
            run.append(text)
            continue
        if run:
            out.append("".join(run))
            run = []
        out.append(event)
    return out


def _answer(client: str, events: list[object]) -> dict[str, object]:
    """The answer the client rebuilds from the events, as its SDK does: thinking, text, tool
    calls (id, name, arguments parsed), stop reason."""
    thinking, text, calls, stop = [], [], {}, None
    args: dict[int, list[str]] = {}
    for e in events:
        if not isinstance(e, dict):
            continue
        if client == "anthropic":
            block, delta = e.get("content_block") or {}, e.get("delta") or {}
            if e.get("type") == "content_block_start" and block.get("type") == "tool_use":
                calls[e["index"]] = (block["id"], block["name"])
            kind = delta.get("type")
            thinking += [delta["thinking"]] if kind == "thinking_delta" else []
            text += [delta["text"]] if kind == "text_delta" else []
            if kind == "input_json_delta":
                args.setdefault(e["index"], []).append(delta["partial_json"])
            stop = delta.get("stop_reason") or stop
            continue
        for choice in e.get("choices") or []:
            d = choice.get("delta") or {}
            thinking += [d["reasoning_content"]] if d.get("reasoning_content") else []
            text += [d["content"]] if d.get("content") else []
            for call in d.get("tool_calls") or []:
                if call.get("id"):
                    calls[call["index"]] = (call["id"], call["function"]["name"])
                args.setdefault(call["index"], []).append(call["function"].get("arguments", ""))
            stop = choice.get("finish_reason") or stop
    return {
        "thinking": "".join(thinking),
        "text": "".join(text),
        "calls": [(*calls[i], json.loads("".join(args[i]) or "{}")) for i in sorted(calls)],
        "stop": stop,
    }


def _text_delta(event: dict[str, object]) -> str | None:
    """The text of an event that carries only a text delta (Anthropic's or OpenAI chat's)."""
    delta = event.get("delta")
    if event.get("type") == "content_block_delta" and isinstance(delta, dict):
        return delta.get("text") if delta.get("type") == "text_delta" else None
    choices = event.get("choices")
    if isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict):
        d = choices[0].get("delta")
        if (
            isinstance(d, dict)
            and set(d) == {"content"}
            and choices[0].get("finish_reason") is None
        ):
            return str(d["content"])
    return None
