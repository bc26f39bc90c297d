"""openai_responses stream codec: recorded Codex answers, other dialects' streams, generated event
sequences → the openai SDK's Responses stream accumulator.

The client side is the openai SDK: events are built the way its stream builds them and folded
by its own ``ResponseStreamState`` (what ``client.responses.stream(...)`` does); one test runs
``client.responses.stream`` itself over an ``httpx.MockTransport`` serving our bytes.
"""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects.anthropic.stream import AnthropicStreamDecoder
from addon.dialects.anthropic.stream_encode import AnthropicStreamEncoder
from addon.dialects.openai_chat.stream import OpenAIChatStreamDecoder
from addon.dialects.openai_chat.stream_encode import OpenAIChatStreamEncoder
from addon.dialects.openai_responses import NAME
from addon.dialects.openai_responses.stream import CUT, OpenAIResponsesStreamDecoder
from addon.dialects.openai_responses.stream_encode import OpenAIResponsesStreamEncoder
from addon.model import (
    Event,
    Finish,
    MessageStart,
    RawEvent,
    StreamEnd,
    StreamError,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UnsupportedShape,
    Usage,
    UsageEvent,
)
from addon.stream.processor import StreamProcessor
from addon.stream.sse import encode_pairs
from tests.realdata import OPENAI_STREAMS, as_sse, fixture_names, read
from tests.unit.dialects.ids_shapes import RESPONSE_ID
from tests.unit.helpers import (
    Pairs,
    accumulate,
    check_sequence,
    payloads,
    recorded,
    sdk_final,
    sse_events,
)

CODEX = [f"clients/codex-0.169.0-responses-gpt-5.5-turn{n}.response.sse" for n in (1, 2, 3)]
ANTHROPIC_STREAMS = fixture_names("anthropic-")


# --------------------------------------------------------------------------- helpers


def decode_all(raw: bytes) -> list[Event]:
    dec = OpenAIResponsesStreamDecoder()
    return [ev for e in sse_events(raw) for ev in dec.feed(e.data, e.event)] + dec.finish()


def encode_all(events: list[Event]) -> Pairs:
    enc = OpenAIResponsesStreamEncoder()
    return [p for e in events for p in enc.feed(e)] + enc.finish()


def calls_of(response: Any) -> list[tuple[str, str, str, str]]:
    out: list[tuple[str, str, str, str]] = []
    for o in response.output:
        if o.type == "function_call":
            out.append((o.type, o.call_id, o.name, o.arguments))
        elif o.type == "custom_tool_call":
            out.append((o.type, o.call_id, o.name, o.input))
    return out


def no_logprobs(data: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(data)
    payload.pop("logprobs", None)
    return payload


def completed_of(raw: bytes) -> dict[str, Any]:
    for e in sse_events(raw):
        if e.event == "response.completed":
            response: dict[str, Any] = json.loads(e.data)["response"]
            return response
    raise AssertionError("no response.completed")


# --------------------------------------------------------------------------- Codex recordings


@pytest.mark.parametrize("name", CODEX)
def test_recorded_answer_is_resent_event_for_event(name: str) -> None:
    raw = read(name)
    pairs = encode_all(decode_all(raw))
    # (The scripted recording leaves out ``logprobs``, which the SDK's types require.)
    assert [(n, no_logprobs(d)) for n, d in pairs] == [
        (e.event, no_logprobs(e.data)) for e in sse_events(raw)
    ]
    check_sequence(pairs)


@pytest.mark.parametrize("name", CODEX)
def test_recorded_answer_through_the_processor_to_the_sdk(name: str) -> None:
    """Bytes split anywhere → processor (Responses → Responses) → the SDK's own client."""
    raw = read(name)
    processor = StreamProcessor(OpenAIResponsesStreamDecoder(), OpenAIResponsesStreamEncoder())
    rng = random.Random(name)
    out: list[bytes] = []
    pos = 0
    while pos < len(raw):
        step = rng.randint(1, 300)
        out += processor.feed(raw[pos : pos + step])
        pos += step
    out += processor.finish()
    assert processor.error is None
    body = b"".join(out)

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/responses"
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = openai.OpenAI(
        api_key="k",
        base_url="http://bridge.test/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    with client.responses.stream(model="gpt-5.5", input="hi") as stream:
        final = stream.get_final_response()
    want = completed_of(raw)
    assert final.id == want["id"]
    assert final.output_text == "".join(
        c["text"] for o in want["output"] if o["type"] == "message" for c in o["content"]
    )
    assert calls_of(final) == [
        (o["type"], o["call_id"], o["name"], o.get("arguments", o.get("input")))
        for o in want["output"]
        if o["type"] in ("function_call", "custom_tool_call")
    ]
    assert final.usage is not None and final.usage.total_tokens == want["usage"]["total_tokens"]
    reasoning = [o for o in final.output if o.type == "reasoning"]
    assert reasoning[0].encrypted_content == want["output"][0]["encrypted_content"]


@pytest.mark.parametrize("name", CODEX)
def test_recorded_answer_for_a_chat_client(name: str) -> None:
    """Responses upstream → Cursor / an OpenAI chat client: calls with their exact ids and
    arguments (apply_patch's raw input as its arguments), reasoning, text, usage."""
    raw = read(name)
    enc = OpenAIChatStreamEncoder()
    datas = [d for e in decode_all(raw) for _, d in enc.feed(e)] + [d for _, d in enc.finish()]
    assert datas[-1] == "[DONE]"
    acc = accumulate(datas)
    want = completed_of(raw)
    calls = [o for o in want["output"] if o["type"] in ("function_call", "custom_tool_call")]
    got = [(c["id"], c["name"], "".join(c["fragments"])) for _, c in sorted(acc["calls"].items())]
    assert got == [(c["call_id"], c["name"], c.get("arguments", c.get("input"))) for c in calls]
    assert acc["reasoning"] == want["output"][0]["summary"][0]["text"]
    text = "".join(
        c["text"] for o in want["output"] if o["type"] == "message" for c in o["content"]
    )
    assert acc["content"] == text
    assert acc["finish"] == ("tool_calls" if calls else "stop")
    assert acc["usage"]["total_tokens"] == want["usage"]["total_tokens"]


def test_recorded_answer_for_an_anthropic_client() -> None:
    """Responses upstream → Claude Code: the encrypted reasoning rides as the thinking
    signature, so that it comes back on the next turn."""
    raw = read(CODEX[1])
    enc = AnthropicStreamEncoder()
    pairs = [p for e in decode_all(raw) for p in enc.feed(e)] + enc.finish()
    deltas = [json.loads(d)["delta"] for n, d in pairs if n == "content_block_delta"]
    signature = [d["signature"] for d in deltas if d["type"] == "signature_delta"]
    assert signature == [completed_of(raw)["output"][0]["encrypted_content"]]
    starts = [json.loads(d)["content_block"] for n, d in pairs if n == "content_block_start"]
    assert [(b["type"], b.get("id")) for b in starts] == [
        ("thinking", None),
        ("tool_use", "call_rec_t2_0"),
        ("tool_use", "call_rec_t2_1"),
    ]


# --------------------------------------------------------------------------- other dialects


@pytest.mark.parametrize("name", OPENAI_STREAMS)
def test_recorded_chat_stream_becomes_a_responses_stream(name: str) -> None:
    source = payloads(as_sse(name))
    dec = OpenAIChatStreamDecoder()
    events = [ev for d in source for ev in dec.feed(d, None)] + dec.finish()
    pairs = encode_all(events)
    check_sequence(pairs)
    final = sdk_final(pairs)
    acc = accumulate(source)
    assert final.status == "completed"
    assert final.output_text == acc["content"]
    assert [(c[1], c[2], c[3]) for c in calls_of(final)] == [
        (c["id"], c["name"], "".join(c["fragments"])) for _, c in sorted(acc["calls"].items())
    ]
    if acc["usage"]:
        assert final.usage.input_tokens == acc["usage"]["prompt_tokens"]
        assert final.usage.output_tokens == acc["usage"]["completion_tokens"]


@pytest.mark.parametrize("name", ANTHROPIC_STREAMS)
def test_recorded_anthropic_stream_becomes_a_responses_stream(name: str) -> None:
    dec = AnthropicStreamDecoder()
    events = [ev for n, d in recorded(name) for ev in dec.feed(d, n)] + dec.finish()
    pairs = encode_all(events)
    check_sequence(pairs)
    final = sdk_final(pairs)
    thinking = [o for o in final.output if o.type == "reasoning"]
    signatures = [
        json.loads(d)["delta"]["signature"]
        for n, d in recorded(name)
        if n == "content_block_delta" and json.loads(d)["delta"].get("type") == "signature_delta"
    ]
    if signatures:
        assert thinking and thinking[-1].encrypted_content == signatures[-1]
    starts = [
        json.loads(d)["content_block"]["id"]
        for n, d in recorded(name)
        if n == "content_block_start" and json.loads(d)["content_block"]["type"] == "tool_use"
    ]
    assert [c[1] for c in calls_of(final)] == starts


# --------------------------------------------------------------------------- encoder rules


def start() -> list[Event]:
    return [MessageStart("openai_chat", id="chatcmpl-9", model="gpt")]


def test_text_thinking_and_calls_from_another_dialect() -> None:
    events = [
        *start(),
        ThinkingDelta("plan "),
        ThinkingDelta("more"),
        ThinkingDelta("", signature="sig"),
        TextDelta("Hello "),
        TextDelta("world"),
        ToolCallStart(0, "call_a", "f", '{"x"'),
        ToolCallArgsDelta(0, ": 1}"),
        ToolCallStart(1, "call_b", "apply_patch", "*** Begin", custom=True),
        ToolCallArgsDelta(1, " Patch"),
        Finish("tool_calls"),
        UsageEvent(Usage(4, 6, origin="openai_chat", raw={"prompt_tokens": 4})),
        StreamEnd(),
    ]
    pairs = encode_all(events)
    datas = check_sequence(pairs)
    final = sdk_final(pairs)
    assert RESPONSE_ID.fullmatch(final.id) and final.model == "gpt"  # ours, not "chatcmpl-9"
    assert [o.type for o in final.output] == [
        "reasoning",
        "message",
        "function_call",
        "custom_tool_call",
    ]
    assert final.output[0].summary[0].text == "plan more"
    assert final.output[0].encrypted_content == "sig"
    assert final.output_text == "Hello world"
    assert calls_of(final) == [
        ("function_call", "call_a", "f", '{"x": 1}'),
        ("custom_tool_call", "call_b", "apply_patch", "*** Begin Patch"),
    ]
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (
        4,
        6,
        10,
    )
    names = [d["type"] for d in datas]
    assert "response.custom_tool_call_input.delta" in names
    assert "response.custom_tool_call_input.done" in names


def test_interleaved_parallel_calls_each_keep_their_fragments() -> None:
    events = [
        *start(),
        ToolCallStart(0, "a", "f", '{"p":'),
        ToolCallStart(1, "b", "g", '{"q":'),
        ToolCallArgsDelta(0, ' "one"}'),
        ToolCallArgsDelta(1, ' "two"}'),
        ToolCallEnd(1),
        ToolCallEnd(0),
        Finish("tool_calls"),
    ]
    pairs = encode_all(events)
    check_sequence(pairs)
    assert calls_of(sdk_final(pairs)) == [
        ("function_call", "a", "f", '{"p": "one"}'),
        ("function_call", "b", "g", '{"q": "two"}'),
    ]


def test_length_finish_is_an_incomplete_response() -> None:
    pairs = encode_all([*start(), TextDelta("cut"), Finish("length"), StreamEnd()])
    datas = check_sequence(pairs)
    assert datas[-1]["type"] == "response.incomplete"
    final = sdk_final(pairs)
    assert final.status == "incomplete"
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.output_text == "cut"


def test_stream_error_fails_the_response_and_closes_open_items() -> None:
    enc = OpenAIResponsesStreamEncoder()
    pairs = [
        p for e in [*start(), TextDelta("part"), ToolCallStart(0, "c", "f")] for p in enc.feed(e)
    ]
    pairs += enc.feed(StreamError("upstream exploded", "overloaded_error", "anthropic", status=529))
    assert enc.feed(TextDelta("late")) == [] and enc.finish() == []
    datas = check_sequence(pairs, unended=True)
    failed = datas[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "upstream exploded"}
    # The text ended when the call started; the call never ended: no done event, not in
    # the output (a client would run it).
    assert [o["type"] for o in failed["output"]] == ["message"]
    names = [n for n, _ in pairs]
    assert "response.function_call_arguments.done" not in names
    assert names.count("response.output_item.done") == 1


def test_a_cut_upstream_is_not_a_clean_ending() -> None:
    pairs = encode_all([*start(), TextDelta("half")])
    datas = check_sequence(pairs)
    assert datas[-1]["type"] == "response.failed"
    assert "ended before the answer was complete" in datas[-1]["response"]["error"]["message"]


def test_finish_is_idempotent_and_stream_end_finishes() -> None:
    enc = OpenAIResponsesStreamEncoder()
    pairs = [p for e in [*start(), TextDelta("x"), Finish("stop")] for p in enc.feed(e)]
    pairs += enc.feed(StreamEnd())
    assert json.loads(pairs[-1][1])["type"] == "response.completed"
    assert enc.finish() == [] and enc.finish() == []


def test_finish_without_anything_still_gives_a_response() -> None:
    enc = OpenAIResponsesStreamEncoder()
    pairs = enc.feed(StreamEnd())
    check_sequence(pairs)
    assert sdk_final(pairs).output == []


def test_refusals_become_refusal_parts() -> None:
    raw = "\n".join(
        f"event: {e['type']}\ndata: {json.dumps(e)}\n"
        for e in [
            {"type": "response.created", "response": {"id": "resp_r", "object": "response",
             "created_at": 1, "model": "m", "output": [], "status": "in_progress"},
             "sequence_number": 0},
            {"type": "response.output_item.added", "output_index": 0, "sequence_number": 1,
             "item": {"id": "msg_r", "type": "message", "role": "assistant", "content": [],
                      "status": "in_progress"}},
            {"type": "response.content_part.added", "output_index": 0, "item_id": "msg_r",
             "content_index": 0, "part": {"type": "refusal", "refusal": ""}, "sequence_number": 2},
            {"type": "response.refusal.delta", "output_index": 0, "item_id": "msg_r",
             "content_index": 0, "delta": "I can't.", "sequence_number": 3},
            {"type": "response.completed", "sequence_number": 4, "response": {"id": "resp_r",
             "object": "response", "created_at": 1, "model": "m", "status": "completed",
             "output": []}},
        ]
    ).encode()  # fmt: skip
    events = decode_all(raw)
    assert TextDelta("I can't.", extra={NAME: {"item_id": "msg_r", "refusal": True}}) in events
    final = sdk_final(encode_all(events))
    assert final.output[0].content[0].type == "refusal"
    assert final.output[0].content[0].refusal == "I can't."
    chat = OpenAIChatStreamEncoder()
    datas = [d for e in events for _, d in chat.feed(e)]
    assert accumulate(datas)["content"] == "I can't."  # a chat client still gets the words


# --------------------------------------------------------------------------- decoder


def decode_payloads(*items: dict[str, Any]) -> list[Event]:
    """The events of these payloads (a cut at their end is not reported: the tests here are
    about what the events say; ``test_a_cut_upstream_still_ends_its_calls`` checks the cut)."""
    dec = OpenAIResponsesStreamDecoder()
    events = [ev for p in items for ev in dec.feed(json.dumps(p), p.get("type"))]
    return events + [e for e in dec.finish() if not isinstance(e, StreamError)]


CREATED = {
    "type": "response.created",
    "response": {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "output": []},
}


def test_text_and_arguments_given_only_in_done_events_are_not_lost() -> None:
    events = decode_payloads(
        CREATED,
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}},
        {"type": "response.output_text.done", "output_index": 0, "item_id": "msg_1",
         "content_index": 0, "text": "whole"},
        {"type": "response.output_item.added", "output_index": 1,
         "item": {"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f"}},
        {"type": "response.output_item.done", "output_index": 1,
         "item": {"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f",
                  "arguments": "{}"}},
        {"type": "response.output_item.done", "output_index": 2,
         "item": {"id": "rs_2", "type": "reasoning",
                  "summary": [{"type": "summary_text", "text": "late"}]}},
    )  # fmt: skip
    assert [type(e).__name__ for e in events] == [
        "MessageStart", "TextDelta", "ToolCallStart", "ToolCallArgsDelta", "ToolCallEnd",
        "ThinkingDelta",
    ]  # fmt: skip
    assert events[1] == TextDelta("whole", extra={NAME: {"item_id": "msg_1"}})
    assert events[3] == ToolCallArgsDelta(0, "{}")
    assert events[5] == ThinkingDelta("late", extra={NAME: {"item_id": "rs_2"}})


def test_terminal_events() -> None:
    incomplete = decode_payloads(
        CREATED,
        {"type": "response.incomplete", "response": {
            "id": "resp_1", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
            "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}}},
    )  # fmt: skip
    assert isinstance(incomplete[1], UsageEvent) and incomplete[1].usage.total_tokens == 3
    assert isinstance(incomplete[2], Finish)
    assert (incomplete[2].reason, incomplete[2].raw) == ("length", "max_output_tokens")
    assert isinstance(incomplete[3], StreamEnd)
    failed = decode_payloads(
        CREATED,
        {"type": "response.failed", "response": {"id": "resp_1", "status": "failed",
                                                 "error": {"code": "server_error", "message": "x"}}},
    )  # fmt: skip
    assert isinstance(failed[1], StreamError) and failed[1].message == "x"
    assert failed[1].type == "server_error" and isinstance(failed[2], StreamEnd)
    error = decode_payloads(
        {"type": "error", "code": "rate_limit_exceeded", "message": "slow down"}
    )
    assert error == [
        StreamError(
            "slow down",
            "rate_limit_exceeded",
            origin=NAME,
            raw={"type": "error", "code": "rate_limit_exceeded", "message": "slow down"},
            status=429,
        )
    ]


def test_unknown_events_are_raw_and_come_back_only_to_responses_clients() -> None:
    ws_added = {"type": "response.output_item.added", "output_index": 0,
                "item": {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}}  # fmt: skip
    ws_searching = {"type": "response.web_search_call.searching", "output_index": 0,
                    "item_id": "ws_1"}  # fmt: skip
    ws_done = {"type": "response.output_item.done", "output_index": 0,
               "item": {"id": "ws_1", "type": "web_search_call", "status": "completed"}}  # fmt: skip
    keepalive = {"type": "keepalive"}
    events = decode_payloads(CREATED, ws_added, ws_searching, ws_done, keepalive)
    assert all(isinstance(e, RawEvent) and e.origin == NAME for e in events[1:])
    pairs = encode_all([*events, Finish("stop"), StreamEnd()])
    datas = check_sequence(pairs)
    assert [d["type"] for d in datas[2:-1]] == [
        "response.output_item.added",
        "response.web_search_call.searching",
        "response.output_item.done",
        "keepalive",
    ]
    assert datas[-1]["response"]["output"] == [ws_done["item"]]
    chat = OpenAIChatStreamEncoder()
    assert [chat.feed(e) for e in events[1:]] == [[], [], [], []]


def test_annotations_are_kept_in_the_text_part() -> None:
    annotation = {"type": "url_citation", "url": "https://x", "title": "x", "start_index": 0,
                  "end_index": 1}  # fmt: skip
    events = decode_payloads(
        CREATED,
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}},
        {"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_1",
         "content_index": 0, "delta": "A"},
        {"type": "response.output_text.annotation.added", "output_index": 0, "item_id": "msg_1",
         "content_index": 0, "annotation_index": 0, "annotation": annotation},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
    )  # fmt: skip
    final = sdk_final(encode_all(events))
    assert final.output[0].content[0].annotations[0].url == "https://x"


def test_summary_parts_stay_apart() -> None:
    def part(i: int, text: str) -> list[dict[str, Any]]:
        where = {"output_index": 0, "item_id": "rs_1", "summary_index": i}
        return [
            {"type": "response.reasoning_summary_part.added", **where,
             "part": {"type": "summary_text", "text": ""}},
            {"type": "response.reasoning_summary_text.delta", **where, "delta": text},
        ]  # fmt: skip

    events = decode_payloads(
        CREATED,
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": "rs_1", "type": "reasoning", "summary": []}},
        *part(0, "one"),
        *part(1, "two"),
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
    )  # fmt: skip
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    assert thinking == "one\n\ntwo"  # other dialects see the parts as paragraphs
    final = sdk_final(encode_all(events))
    assert [s.text for s in final.output[0].summary] == ["one", "two"]


def test_done_marker_and_garbage() -> None:
    dec = OpenAIResponsesStreamDecoder()
    assert dec.feed("[DONE]", None) == [StreamEnd()]
    assert dec.feed("[DONE]", None) == []
    with pytest.raises(UnsupportedShape):
        dec.feed("{not json", None)
    with pytest.raises(UnsupportedShape):
        dec.feed("[1]", None)


def test_a_cut_upstream_never_ends_its_calls() -> None:
    dec = OpenAIResponsesStreamDecoder()
    dec.feed(json.dumps(CREATED), None)
    dec.feed(
        json.dumps({"type": "response.output_item.added", "output_index": 0,
                    "item": {"id": "fc", "type": "function_call", "call_id": "c", "name": "f"}}),
        None,
    )  # fmt: skip
    # The cut is reported (never a made-up clean ending), and the open call is not ended:
    # it never was, and no client may get it as a whole call.
    assert dec.finish() == [StreamError(CUT, "upstream_cut")]
    assert dec.finish() == []


def test_sse_bytes() -> None:
    pairs = encode_all([*start(), TextDelta("hi"), Finish("stop"), StreamEnd()])
    raw = b"".join(encode_pairs(pairs))
    assert raw.startswith(b"event: response.created\ndata: {")
    assert [e.event for e in sse_events(raw)] == [name for name, _ in pairs]


# --------------------------------------------------------------------------- properties


@st.composite
def event_sequences(draw: st.DrawFn) -> tuple[list[Event], str, list[tuple[str, str, bool]]]:
    """Unified events as upstream decoders produce them, in any interleaving: thinking, text,
    function and custom calls whose fragments interleave, raw events, usage, finish, end."""
    events: list[Event] = []
    if draw(st.booleans()):
        events.append(MessageStart(draw(st.sampled_from(["openai_chat", "anthropic", NAME]))))
    text_parts: list[str] = []
    queues: list[list[Event]] = []
    calls: list[tuple[str, str, bool]] = []
    for k in range(draw(st.integers(0, 3))):
        custom = draw(st.booleans())
        args = draw(st.text(max_size=8))
        cuts = sorted(draw(st.lists(st.integers(0, len(args)), max_size=3)))
        pieces = [args[a:b] for a, b in zip([0, *cuts], [*cuts, len(args)], strict=True)]
        queue: list[Event] = [ToolCallStart(k, f"call_{k}", f"tool{k}", pieces[0], custom=custom)]
        queue += [ToolCallArgsDelta(k, p) for p in pieces[1:]]
        if draw(st.booleans()):
            queue.append(ToolCallEnd(k))
        queues.append(queue)
        calls.append((f"call_{k}", args, custom))
    others = draw(
        st.lists(st.sampled_from(["text", "thinking", "signature", "raw", "usage"]), max_size=8)
    )
    for kind in others:
        queues.append([])
        match kind:
            case "text":
                t = draw(st.text(min_size=1, max_size=4))
                queues[-1].append(TextDelta(t))
                text_parts.append(t)
            case "thinking":
                queues[-1].append(ThinkingDelta(draw(st.text(min_size=1, max_size=4))))
            case "signature":
                queues[-1].append(ThinkingDelta("", signature="sig"))
            case "raw":
                queues[-1].append(RawEvent(NAME, {"type": "keepalive"}))
            case "usage":
                queues[-1].append(UsageEvent(Usage(1, 2)))
    while any(queues):
        k = draw(st.sampled_from([k for k, q in enumerate(queues) if q]))
        if isinstance(queues[k][0], TextDelta):  # texts in their order, anywhere among the rest
            k = next(j for j, q in enumerate(queues) if q and isinstance(q[0], TextDelta))
        events.append(queues[k].pop(0))
    ending = draw(st.sampled_from(["finish", "finish+end", "end", "none", "error", "length"]))
    if ending in ("finish", "finish+end"):
        events.append(Finish("tool_calls" if calls else "stop"))
    if ending == "length":
        events.append(Finish("length"))
    if ending in ("finish+end", "end", "length"):
        events.append(StreamEnd())
    if ending == "error":
        events.append(StreamError("boom"))
    return events, "".join(text_parts), calls


@settings(max_examples=300, deadline=None)
@given(event_sequences())
def test_any_event_sequence_gives_a_well_formed_responses_stream(
    case: tuple[list[Event], str, list[tuple[str, str, bool]]],
) -> None:
    events, text, calls = case
    pairs = encode_all(events)
    failed = any(isinstance(e, StreamError) for e in events) or not any(
        isinstance(e, Finish | StreamEnd) for e in events
    )
    datas = check_sequence(pairs, unended=failed)
    final = sdk_final(pairs)
    terminal = datas[-1]["type"]
    if failed:
        assert terminal == "response.failed"
        # A call that never ended is not delivered; the ones that ended are.
        ended = {f"call_{e.index}" for e in events if isinstance(e, ToolCallEnd)}
        calls = [c for c in calls if c[0] in ended]
    elif any(isinstance(e, Finish) and e.reason == "length" for e in events):
        assert terminal == "response.incomplete"
    else:
        assert terminal == "response.completed"
    assert final.output_text == text
    got = {c[1]: (c[3], c[0] == "custom_tool_call") for c in calls_of(final)}
    assert got == {cid: (args, custom) for cid, args, custom in calls}
