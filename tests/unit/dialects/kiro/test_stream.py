"""Kiro answers: AWS event-stream frames → the client's stream or whole answer.

Frames are written by ``tests.eventstream_frames`` from the format's specification (valid
preludes, headers and CRC32s) and read by the bridge with botocore's parser; hypothesis cuts
them anywhere.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon.dialects.kiro.stream import CONTEXT_WINDOW, KiroStreamDecoder
from addon.model import (
    Finish,
    MessageStart,
    StreamEnd,
    StreamError,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageEvent,
)
from addon.plan import UpstreamError
from addon.plan.answer import AnswerState, decode_answer, encode_answer, stream_processor
from addon.plan.errors import unreadable_answer, upstream_error
from addon.stream.eventstream import EventStreamSplitter, split_all
from tests import eventstream_frames as ef
from tests.unit.dialects.kiro.conftest import CLIENTS, TEXT_ANSWER, plan_for, run
from tests.unit.helpers import sse_events


def sse(raw: bytes) -> list[tuple[str | None, Any]]:
    """The client's events, each payload read as JSON (``[DONE]`` as it is)."""
    return [
        (e.event, e.data if e.data == "[DONE]" else json.loads(e.data))
        for e in sse_events(raw)
        if e.data
    ]


def view(client: str, raw: bytes) -> dict[str, Any]:
    """What the client reads: text, reasoning, calls (name, arguments), finish, errors."""
    assert b"\x00" not in raw, "binary frames never reach the client"
    text, reasoning, errors = "", "", []
    calls: dict[Any, list[str]] = {}
    finish = None
    for _name, data in sse(raw):
        if data == "[DONE]":
            continue
        if client == "openai_chat":
            if "error" in data:
                errors.append(data["error"])
                continue
            for choice in data.get("choices", ()):
                delta = choice.get("delta", {})
                text += delta.get("content") or ""
                reasoning += delta.get("reasoning_content") or ""
                for tc in delta.get("tool_calls") or ():
                    slot = calls.setdefault(tc["index"], ["", ""])
                    slot[0] += tc.get("function", {}).get("name") or ""
                    slot[1] += tc.get("function", {}).get("arguments") or ""
                finish = choice.get("finish_reason") or finish
        elif client == "anthropic":
            kind = data.get("type")
            if kind == "error":
                errors.append(data["error"])
            elif kind == "content_block_start" and data["content_block"]["type"] == "tool_use":
                calls[data["index"]] = [data["content_block"]["name"], ""]
            elif kind == "content_block_delta":
                d = data["delta"]
                if d["type"] == "text_delta":
                    text += d["text"]
                elif d["type"] == "thinking_delta":
                    reasoning += d["thinking"]
                elif d["type"] == "input_json_delta":
                    calls[data["index"]][1] += d["partial_json"]
            elif kind == "message_delta":
                finish = data["delta"].get("stop_reason") or finish
        else:
            kind = data.get("type")
            if kind in ("error", "response.failed"):
                errors.append(data)
            elif kind == "response.output_text.delta":
                text += data["delta"]
            elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
                reasoning += data["delta"]
            elif kind == "response.output_item.done" and data["item"]["type"] == "function_call":
                calls[data["item"]["call_id"]] = [data["item"]["name"], data["item"]["arguments"]]
            elif kind == "response.completed":
                finish = data["response"]["status"]
    return {
        "text": text,
        "reasoning": reasoning,
        "calls": [(n, json.loads(a) if a else None) for n, a in calls.values()],
        "finish": finish,
        "errors": errors,
    }


TOOL_LOOP = ef.stream(
    [
        ("reasoningContentEvent", {"text": "The user wants a.", "signature": "sig-1"}),
        *ef.text_events("I'll read both files. ", 4),
        *ef.tool_events("tooluse_AAA", "Read", json.dumps({"path": "a.txt"}), 5),
        *ef.tool_events("tooluse_BBB", "Read", json.dumps({"path": "b.txt"}), 2),
        *ef.usage_events(4.5),
    ]
)


def splits(raw: bytes) -> st.SearchStrategy[list[bytes]]:
    cuts = st.lists(st.integers(0, len(raw)), max_size=40).map(sorted)
    return cuts.map(lambda c: [raw[a:b] for a, b in zip([0, *c], [*c, len(raw)], strict=True)])


# --------------------------------------------------------------------------- framing


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_frames_split_anywhere_come_out_whole(data: st.DataObject) -> None:
    raw = TOOL_LOOP + TEXT_ANSWER
    want, error = split_all(raw)
    assert error is None
    pieces = data.draw(splits(raw))
    splitter = EventStreamSplitter()
    got = [f for p in pieces for f in splitter.feed(p)]
    splitter.finish()
    assert splitter.error is None and splitter.pending() == b""
    assert got == want
    assert b"".join(f.raw for f in got) == raw
    assert [f.event for f in got][:2] == ["reasoningContentEvent", "assistantResponseEvent"]


def test_a_frame_with_a_bad_crc_is_an_error_not_a_crash() -> None:
    frames = ef.stream(ef.text_events("hello", 2))
    first = len(ef.event("assistantResponseEvent", {"content": "hel"}))
    for where in (4, 9, first + 20, first + len(frames[first:]) - 1):  # prelude, CRC, payload
        bad = bytearray(frames)
        bad[where] ^= 0x40
        splitter = EventStreamSplitter()
        got = splitter.feed(bytes(bad))
        assert splitter.error is not None
        assert ("Checksum" in splitter.error) or ("do not fit" in splitter.error)
        assert b"".join(f.raw for f in got) + splitter.pending() == bytes(bad)
        assert splitter.feed(b"more") == []


def test_a_body_cut_inside_a_frame_is_an_error() -> None:
    raw = ef.stream(ef.text_events("hello", 2))
    frames, error = split_all(raw[:-3])
    assert len(frames) == 1 and error is not None and "inside an event-stream message" in error


def test_exception_and_error_frames_become_error_events() -> None:
    raw = ef.exception("ThrottlingException", "Too many requests") + ef.error("E1", "boom")
    frames, error = split_all(raw)
    assert error is None
    assert [f.event for f in frames] == [":exception", ":error"]
    assert json.loads(frames[0].text) == {
        "exceptionType": "ThrottlingException",
        "message": "Too many requests",
    }
    assert json.loads(frames[1].text) == {"exceptionType": "E1", "message": "boom"}


# --------------------------------------------------------------------------- decoder


def decode(raw: bytes) -> list[Any]:
    frames, error = split_all(raw)
    assert error is None
    d = KiroStreamDecoder()
    out = [e for f in frames for e in d.feed(f.text, f.event)]
    return out + d.finish()


def test_the_decoder_reads_text_reasoning_calls_and_usage() -> None:
    events = decode(TOOL_LOOP)
    assert isinstance(events[0], MessageStart) and events[0].origin == "kiro"
    assert ThinkingDelta("The user wants a.", "sig-1") in events
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "I'll read both files. "
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.index, s.id, s.name) for s in starts] == [
        (0, "tooluse_AAA", "Read"),
        (1, "tooluse_BBB", "Read"),
    ]
    args = {0: starts[0].arguments, 1: starts[1].arguments}
    for e in events:
        if isinstance(e, ToolCallArgsDelta):
            args[e.index] += e.delta
    assert json.loads(args[0]) == {"path": "a.txt"} and json.loads(args[1]) == {"path": "b.txt"}
    assert [e.index for e in events if isinstance(e, ToolCallEnd)] == [0, 1]
    tail = events[-3:]
    assert tail[0] == Finish("tool_calls")
    assert isinstance(tail[1], UsageEvent)
    assert tail[1].usage.input_tokens == round(0.045 * CONTEXT_WINDOW)
    assert tail[1].usage.raw["metering"]["unit"] == "credit"
    assert isinstance(tail[2], StreamEnd)


def test_token_counts_win_over_the_context_estimate() -> None:
    raw = ef.stream(
        [
            *ef.text_events("hi", 1),
            *ef.usage_events(3.0),
            ("metadataEvent", {"tokenUsage": {"inputTokens": 1200, "outputTokens": 7}}),
        ]
    )
    usage = next(e for e in decode(raw) if isinstance(e, UsageEvent)).usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (1200, 7, 1207)


def test_a_call_without_input_gets_empty_arguments_and_repeats_are_ignored() -> None:
    raw = ef.stream(
        [
            ("toolUseEvent", {"name": "List", "toolUseId": "t1"}),
            ("toolUseEvent", {"name": "List", "toolUseId": "t1", "stop": True}),
            ("toolUseEvent", {"name": "List", "toolUseId": "t1", "input": "{}", "stop": True}),
        ]
    )
    events = decode(raw)
    assert ToolCallArgsDelta(0, "{}") in events
    assert len([e for e in events if isinstance(e, ToolCallStart)]) == 1


def test_a_stream_cut_inside_a_call_or_empty_ends_with_an_error() -> None:
    raw = ef.stream([("toolUseEvent", {"name": "Read", "toolUseId": "t1", "input": '{"pa'})])
    assert decode(raw)[-1] == StreamError(
        "the Kiro stream ended inside a tool call (cut short upstream)", "upstream_cut"
    )
    d = KiroStreamDecoder()
    (only,) = d.finish()
    assert isinstance(only, StreamError) and only.type == "upstream_cut"


def test_content_length_exceeded_is_a_length_finish() -> None:
    raw = ef.stream(ef.text_events("long", 1)) + ef.exception(
        "ContentLengthExceededException", "too long"
    )
    assert Finish("length", raw="ContentLengthExceededException") in decode(raw)


# --------------------------------------------------------------------------- through the plan


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_tool_loop_answer_reaches_each_client(client: str) -> None:
    got = view(client, run(client, [TOOL_LOOP]))
    assert got["text"] == "I'll read both files. "
    assert got["calls"] == [("Read", {"path": "a.txt"}), ("Read", {"path": "b.txt"})]
    assert got["reasoning"] == "The user wants a."
    assert (
        got["finish"]
        == {
            "openai_chat": "tool_calls",
            "anthropic": "tool_use",
            "openai_responses": "completed",
        }[client]
    )
    assert got["errors"] == []


@pytest.mark.parametrize("client", list(CLIENTS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_split_gives_the_same_client_bytes(client: str, data: st.DataObject) -> None:
    raw = TOOL_LOOP if data.draw(st.booleans()) else TEXT_ANSWER
    plan = plan_for(client)  # one answer, read two ways: its id is the same
    whole = run(client, [raw], plan)
    assert run(client, data.draw(splits(raw)), plan) == whole


@pytest.mark.parametrize("client", list(CLIENTS))
def test_an_exception_frame_ends_the_clients_stream_with_an_error(client: str) -> None:
    raw = ef.stream(ef.text_events("partial ", 2)) + ef.exception(
        "ThrottlingException", "Too many requests, please wait"
    )
    got = view(client, run(client, [raw[i : i + 5] for i in range(0, len(raw), 5)]))
    assert got["text"] == "partial "
    assert len(got["errors"]) == 1
    assert "ThrottlingException: Too many requests, please wait" in json.dumps(got["errors"][0])


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_bad_crc_mid_stream_ends_the_clients_stream_with_an_error(client: str) -> None:
    good = ef.stream(ef.text_events("kept ", 1))
    bad = bytearray(ef.stream(ef.text_events("lost", 1)))
    bad[-1] ^= 0xFF
    processor = stream_processor(plan_for(client), AnswerState.of(plan_for(client)), None)
    out = processor.feed(good + bytes(bad)) + processor.feed(b"after") + processor.finish()
    got = view(client, b"".join(out))
    assert got["text"] == "kept "
    assert len(got["errors"]) == 1 and "Checksum mismatch" in json.dumps(got["errors"][0])
    assert processor.error is not None and "Checksum" in processor.error
    assert not processor.passthrough


def test_bracket_text_calls_are_read_beside_native_ones() -> None:
    text = 'Let me look.\n[Calling tool: List]\nInput: {"pattern": "*.txt"}\n'
    raw = ef.stream(
        [*ef.text_events(text, 6), *ef.tool_events("tooluse_N", "Read", '{"path": "a"}', 2)]
    )
    for client in CLIENTS:
        got = view(client, run(client, [raw[i : i + 3] for i in range(0, len(raw), 3)]))
        assert got["text"].strip() == "Let me look."
        assert sorted(got["calls"], key=str) == [
            ("List", {"pattern": "*.txt"}),
            ("Read", {"path": "a"}),
        ], client
        assert got["finish"] in ("tool_calls", "tool_use", "completed")
    # an undeclared tool stays text
    raw = ef.stream(ef.text_events("[Calling tool: Rm]\nInput: {}\n", 2))
    got = view("openai_chat", run("openai_chat", [raw]))
    assert got["calls"] == [] and "[Calling tool: Rm]" in got["text"]


# --------------------------------------------------------------------------- whole answers


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_whole_answer_is_assembled_from_the_frames(client: str) -> None:
    plan = plan_for(client, stream=False)
    answer = decode_answer(plan, AnswerState.of(plan), TOOL_LOOP)
    body = json.loads(encode_answer(plan, answer))
    if client == "openai_chat":
        message = body["choices"][0]["message"]
        assert message["content"] == "I'll read both files. "
        assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
            {"path": "a.txt"},
            {"path": "b.txt"},
        ]
        assert body["choices"][0]["finish_reason"] == "tool_calls"
        assert body["usage"]["prompt_tokens"] == round(0.045 * CONTEXT_WINDOW)
    elif client == "anthropic":
        kinds = [b["type"] for b in body["content"]]
        assert kinds == ["thinking", "text", "tool_use", "tool_use"]
        assert body["content"][0]["signature"] == "sig-1"
        assert body["content"][2]["id"] == "tooluse_AAA"
        assert body["stop_reason"] == "tool_use"
    else:
        calls = [i for i in body["output"] if i["type"] == "function_call"]
        assert [c["call_id"] for c in calls] == ["tooluse_AAA", "tooluse_BBB"]
        assert body["status"] == "completed"


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_whole_answer_that_is_an_exception_is_the_clients_error(client: str) -> None:
    plan = plan_for(client, stream=False)
    raw = ef.exception("ThrottlingException", "slow down")
    with pytest.raises(UpstreamError) as caught:
        decode_answer(plan, AnswerState.of(plan), raw)
    assert caught.value.status == 429
    body = json.loads(upstream_error(plan, caught.value))
    assert "ThrottlingException: slow down" in json.dumps(body)
    if client == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"


def test_a_whole_answer_with_a_bad_crc_is_unreadable() -> None:
    from addon.model import UnsupportedShape

    bad = bytearray(TEXT_ANSWER)
    bad[-2] ^= 1
    plan = plan_for("openai_chat", stream=False)
    with pytest.raises(UnsupportedShape, match="Checksum mismatch"):
        decode_answer(plan, AnswerState.of(plan), bytes(bad))
    assert b"Checksum" in unreadable_answer(plan, "Checksum mismatch")


def test_a_whole_bracket_answer_keeps_the_order_of_its_parts() -> None:
    plan = plan_for("anthropic", stream=False)
    raw = ef.stream(
        [
            ("reasoningContentEvent", {"text": "thinking"}),
            *ef.text_events('Sure.\n[Calling tool: List]\nInput: {"pattern": "x"}', 3),
        ]
    )
    body = json.loads(encode_answer(plan, decode_answer(plan, AnswerState.of(plan), raw)))
    assert [b["type"] for b in body["content"]] == ["thinking", "text", "tool_use"]
    assert body["content"][2]["name"] == "List"
    assert re.fullmatch(r"[A-Za-z0-9_-]+", body["content"][2]["id"])
    assert body["stop_reason"] == "tool_use"
