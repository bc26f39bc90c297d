"""The anthropic dialect: requests from Claude Code, answers and streams for the anthropic SDK."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects.anthropic import DIALECT as ANTHROPIC
from addon.dialects.anthropic.stream import AnthropicStreamDecoder, AnthropicStreamEncoder
from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.dialects.openai_chat.stream import OpenAIChatStreamDecoder
from addon.model import (
    ClientError,
    Event,
    Finish,
    MessageStart,
    Notes,
    Response,
    StreamEnd,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    UsageEvent,
)
from addon.stream.sse import EventDecoder, LineDecoder, SSEEvent
from tests.realdata import OPENAI_STREAMS, as_sse, fixture_names, read
from tests.unit.test_openai_stream import accumulate, payloads

CLAUDE_CODE_BODY: dict[str, Any] = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 32000,
    "stream": True,
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
    ],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look at this"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AAA="},
                },
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Need to read.", "signature": "sig-1"},
                {"type": "tool_use", "id": "call_1", "name": "Read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "call_2", "name": "Read", "input": {"path": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "A"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": [{"type": "text", "text": "B"}],
                    "is_error": True,
                },
            ],
        },
    ],
    "tools": [{"name": "Read", "description": "read", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "metadata": {"user_id": "u-1"},
    "stop_sequences": ["STOP"],
    "top_k": 5,
}


def to_openai(body: dict[str, Any]) -> dict[str, Any]:
    notes: Notes = Counter()
    return OPENAI.encode_request(ANTHROPIC.decode_request(body, notes), notes)


def test_claude_code_request_to_openai() -> None:
    out = to_openai(CLAUDE_CODE_BODY)
    assert out["messages"] == [
        {
            "role": "system",
            "content": [
                {
                    "type": "text",
                    "text": "You are Claude Code.",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look at this"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA="}},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Need to read.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"path": "a"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"path": "b"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "A"},
        {"role": "tool", "tool_call_id": "call_2", "content": "[tool error] B"},
    ]
    assert out["tools"] == [
        {
            "type": "function",
            "function": {"name": "Read", "description": "read", "parameters": {"type": "object"}},
        }
    ]
    assert out["tool_choice"] == "required" and out["parallel_tool_calls"] is False
    assert out["max_tokens"] == 32000 and out["stop"] == ["STOP"] and out["user"] == "u-1"
    assert "top_k" not in out and "thinking" not in out and "metadata" not in out
    assert out["stream_options"] == {"include_usage": True}


def test_anthropic_round_trip_is_stable() -> None:
    notes: Notes = Counter()
    once = ANTHROPIC.encode_request(ANTHROPIC.decode_request(CLAUDE_CODE_BODY, notes), notes)
    twice = ANTHROPIC.encode_request(ANTHROPIC.decode_request(once, notes), notes)
    assert once == twice
    assert once["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "Need to read.",
        "signature": "sig-1",
    }


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        pytest.param(
            [{"type": "web_search_20250305", "name": "web_search"}], "server tool", id="server-tool"
        ),
        pytest.param(
            [{"description": "x", "input_schema": {}}], "tools[0] has no name", id="no-name"
        ),
    ],
)
def test_tool_mistakes_get_anthropic_errors(tools: list[Any], message: str) -> None:
    with pytest.raises(ClientError) as info:
        to_openai(
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "x"}],
                "tools": tools,
            }
        )
    assert message in info.value.message
    assert ANTHROPIC.encode_error(info.value) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": info.value.message},
    }


def test_whole_answer_for_the_anthropic_client() -> None:
    answer = Response(
        "openai_chat",
        "chatcmpl-1",
        "gpt",
        (
            Thinking("hm"),
            Text("Reading."),
            ToolCall("call_1", "Read", '{"path": "a"}'),
            ToolCall("call_2", "Read", "{broken"),
        ),
        "tool_calls",
        "tool_calls",
        Usage(10, 5, 15),
    )
    assert ANTHROPIC.encode_response(answer) == {
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "model": "gpt",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": ""},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "call_1", "name": "Read", "input": {"path": "a"}},
            {
                "type": "tool_use",
                "id": "call_2",
                "name": "Read",
                "input": {"_raw_arguments": "{broken"},
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


# --------------------------------------------------------------------------- streams


def sdk_accumulate(pairs: list[tuple[str | None, str]]) -> Any:
    snapshot = None
    bufs: dict[int, bytes] = {}
    for _, data in pairs:
        event = json.loads(data)
        if event["type"] in ("ping", "error"):
            continue
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)  # type: ignore[arg-type]
    assert snapshot is not None
    return snapshot


def anthropic_events(name: str) -> list[SSEEvent]:
    raw = read(name)
    if name.endswith(".chunks.txt"):
        raw = b"".join(b"data: " + line + b"\n\n" for line in raw.splitlines() if line.strip())
    lines, decoder = LineDecoder(), EventDecoder()
    out = []
    for line, _ in [*lines.feed(raw), *lines.finish()]:
        item = decoder.feed_line(line)
        if isinstance(item, SSEEvent):
            out.append(item)
    return out


def encode_all(events: list[Event]) -> list[tuple[str | None, str]]:
    enc = AnthropicStreamEncoder()
    out = [p for e in events for p in enc.feed(e)]
    return out + enc.finish()


def content_of(message: Any) -> list[Any]:
    blocks = [
        b.model_dump(exclude={"citations", "parsed_output", "caller"}) for b in message.content
    ]
    for b in blocks:
        if b.get("type") == "thinking":
            b["signature"] = b["signature"] or ""  # a start without the key, or with "": same
    return blocks


@pytest.mark.parametrize("name", fixture_names("anthropic-"))
def test_recorded_anthropic_streams_survive_decode_and_encode(name: str) -> None:
    source = [(e.event, e.data) for e in anthropic_events(name)]
    dec = AnthropicStreamDecoder()
    events = [ev for _, data in source for ev in dec.feed(data, None)]
    original, rebuilt = sdk_accumulate(source), sdk_accumulate(encode_all(events))
    assert content_of(rebuilt) == content_of(original)
    assert rebuilt.stop_reason == original.stop_reason
    assert rebuilt.usage.output_tokens == original.usage.output_tokens


@pytest.mark.parametrize("name", OPENAI_STREAMS)
def test_recorded_openai_streams_become_anthropic_messages(name: str) -> None:
    datas = payloads(as_sse(name))
    dec = OpenAIChatStreamDecoder()
    events = [ev for d in datas for ev in dec.feed(d, None)] + dec.finish()
    message = sdk_accumulate(encode_all(events))
    expected = accumulate(datas)
    uses = [b for b in message.content if b.type == "tool_use"]
    assert [(b.id, b.name) for b in uses] == [
        (c["id"], c["name"]) for c in expected["calls"].values()
    ]
    for block, call in zip(uses, expected["calls"].values(), strict=True):
        assert block.input == json.loads("".join(call["fragments"]) or "{}")
    assert "".join(b.text for b in message.content if b.type == "text") == expected["content"]
    assert (
        "".join(b.thinking for b in message.content if b.type == "thinking")
        == expected["reasoning"]
    )
    want = {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}[
        expected["finish"]
    ]
    assert message.stop_reason == want


@st.composite
def event_sequences(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = [MessageStart("openai_chat", id="x", model="m")]
    calls = 0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["text", "thinking", "call", "args", "sig"]))
        if kind == "text":
            events.append(TextDelta(draw(st.text(min_size=1, max_size=5))))
        elif kind == "thinking":
            events.append(ThinkingDelta(draw(st.text(min_size=1, max_size=5))))
        elif kind == "sig":
            events.append(ThinkingDelta("", signature="sig"))
        elif kind == "call" and calls < 3:
            events.append(ToolCallStart(calls + 1, f"call_{calls}", "f", '{"a": '))
            events.append(ToolCallArgsDelta(calls + 1, f"{calls}}}"))
            calls += 1
    events += [ToolCallEnd(i + 1) for i in range(calls)]
    events += [Finish("tool_calls" if calls else "stop"), UsageEvent(Usage(3, 4, 7)), StreamEnd()]
    return events


@settings(max_examples=300, deadline=None)
@given(event_sequences())
def test_any_event_sequence_gives_a_well_formed_anthropic_stream(events: list[Event]) -> None:
    pairs = encode_all(events)
    kinds = [json.loads(d)["type"] for _, d in pairs]
    assert [name for name, _ in pairs] == kinds  # SSE event name matches the payload type
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    started = [
        json.loads(d)["index"] for _, d in pairs if json.loads(d)["type"] == "content_block_start"
    ]
    stopped = [
        json.loads(d)["index"] for _, d in pairs if json.loads(d)["type"] == "content_block_stop"
    ]
    assert started == list(range(len(started))) and stopped == started
    message = sdk_accumulate(pairs)
    uses = [b for b in message.content if b.type == "tool_use"]
    assert [b.input for b in uses] == [{"a": i} for i in range(len(uses))]
    assert message.stop_reason == ("tool_use" if uses else "end_turn")
    assert message.usage.output_tokens == 4
