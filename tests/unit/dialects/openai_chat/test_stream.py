"""openai_chat stream codec: recorded upstream chunks → unified events → client chunks.

For an OpenAI → OpenAI route the client must get what the upstream sent: the
same envelope on every chunk, the same text, reasoning, tool-call fragments,
finish reason, usage and unknown extras.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.dialects.openai_chat.stream import OpenAIChatStreamDecoder
from addon.dialects.openai_chat.stream_encode import OpenAIChatStreamEncoder
from addon.model import (
    Finish,
    MessageStart,
    RawEvent,
    StreamEnd,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UnsupportedShape,
)
from tests.realdata import OPENAI_STREAMS, as_sse
from tests.unit.helpers import accumulate, payloads


def transcode(datas: list[str]) -> list[str]:
    dec, enc = OpenAIChatStreamDecoder(), OpenAIChatStreamEncoder()
    out: list[str] = []
    for data in datas:
        for event in dec.feed(data, None):
            out.extend(d for _, d in enc.feed(event))
    for event in dec.finish():
        out.extend(d for _, d in enc.feed(event))
    out.extend(d for _, d in enc.finish())
    return out


@pytest.mark.parametrize("name", OPENAI_STREAMS)
def test_recorded_stream_reaches_the_client_unchanged_in_substance(name: str) -> None:
    source = payloads(as_sse(name))
    out = transcode(source)
    assert out[-1] == "[DONE]"
    assert accumulate(out) == accumulate(source)
    keys = ("id", "object", "created", "model", "system_fingerprint")
    sent = {k: {json.loads(d).get(k) for d in source if d != "[DONE]"} for k in keys}
    for data in out[:-1]:
        chunk = json.loads(data)
        for k in keys:
            # Every chunk has the envelope the upstream used (Grok changes `created` mid-stream).
            assert chunk.get(k) in sent[k]


@pytest.mark.parametrize("name", OPENAI_STREAMS)
def test_chunks_that_carry_one_thing_come_back_identical(name: str) -> None:
    """A source chunk that decodes to a single event is re-encoded to the same JSON."""
    source = payloads(as_sse(name))
    dec, enc = OpenAIChatStreamDecoder(), OpenAIChatStreamEncoder()
    compared = 0
    for data in source:
        events = [e for e in dec.feed(data, None) if not isinstance(e, ToolCallEnd | StreamEnd)]
        out = [d for e in events for _, d in enc.feed(e)]
        if data == "[DONE]" or len(events) != 1 or isinstance(events[0], MessageStart):
            continue
        compared += 1
        expected = json.loads(data)
        if not isinstance(events[0], RawEvent):  # raw chunks are re-sent exactly as they came
            expected = _normalized(expected)
        assert json.loads(out[0]) == expected
    assert compared > 0


def _normalized(chunk: dict[str, Any]) -> dict[str, Any]:
    """The differences the encoder is allowed: it drops empty ``content`` / ``reasoning_content``,
    empty ids and names on argument fragments, and always writes ``finish_reason``."""
    for choice in chunk.get("choices") or []:
        choice.setdefault("finish_reason", None)
        delta = choice.get("delta") or {}
        for key in ("content", "reasoning_content"):
            if key in delta and not delta[key]:
                del delta[key]
        for call in delta.get("tool_calls") or []:
            # GLM repeats type and an empty name on argument fragments.
            if not call.get("id"):
                call.pop("id", None)
                call.pop("type", None)
                if not (call.get("function") or {}).get("name"):
                    call.get("function", {}).pop("name", None)
    return chunk


def test_unknown_chunk_level_extras_and_keepalive_chunks_pass() -> None:
    base = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    source = [
        json.dumps({**base, "choices": [], "prompt_filter_results": [{"prompt_index": 0}]}),
        json.dumps(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": "hi"},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "obfuscation": "abc",
            }
        ),
        json.dumps(
            {**base, "choices": [{"index": 0, "delta": {"refusal": "no"}, "finish_reason": None}]}
        ),
        "[DONE]",
    ]
    out = [json.loads(d) for d in transcode(source)[:-1]]
    assert (
        out[0]["prompt_filter_results"] == [{"prompt_index": 0}] or out[1]["prompt_filter_results"]
    )
    text_chunk = next(c for c in out if c["choices"] and c["choices"][0]["delta"].get("content"))
    assert text_chunk["obfuscation"] == "abc"
    assert text_chunk["choices"][0]["logprobs"] is None
    assert any(c["choices"] and c["choices"][0]["delta"].get("refusal") == "no" for c in out)


def test_decoder_events_for_a_tool_call_stream() -> None:
    dec = OpenAIChatStreamDecoder()
    base = {"id": "x", "created": 1, "model": "m", "object": "chat.completion.chunk"}
    events = []
    for delta, finish in [
        ({"role": "assistant", "content": "Hi"}, None),
        (
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a'},
                    }
                ]
            },
            None,
        ),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '":1}'}}]}, None),
        ({}, "tool_calls"),
    ]:
        events += dec.feed(
            json.dumps(
                {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            ),
            None,
        )
    events += dec.feed("[DONE]", None)
    kinds = [type(e) for e in events]
    assert kinds == [
        MessageStart,
        TextDelta,
        ToolCallStart,
        ToolCallArgsDelta,
        ToolCallEnd,
        Finish,
        StreamEnd,
    ]
    start = events[2]
    assert isinstance(start, ToolCallStart) and (start.id, start.name, start.arguments) == (
        "c1",
        "f",
        '{"a',
    )
    finish = events[5]
    assert isinstance(finish, Finish) and finish.reason == "tool_calls"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param("not json", id="not-json"),
        pytest.param("[1, 2]", id="not-object"),
        pytest.param(json.dumps({"choices": [{"index": 1, "delta": {}}]}), id="second-choice"),
    ],
)
def test_chunks_we_cannot_read_raise_unsupported(data: str) -> None:
    with pytest.raises(UnsupportedShape):
        OpenAIChatStreamDecoder().feed(data, None)


def test_error_payload_mid_stream_reaches_the_client() -> None:
    out = transcode(['{"error": {"message": "overloaded", "type": "server_error"}}'])
    assert json.loads(out[0]) == {"error": {"message": "overloaded", "type": "server_error"}}


def test_raw_events_of_another_dialect_are_dropped() -> None:
    enc = OpenAIChatStreamEncoder()
    assert enc.feed(RawEvent("anthropic", {"type": "ping"})) == []
