"""anthropic stream codec: recorded streams and generated event sequences → the SDK's accumulator.

The client side of every test is the anthropic SDK itself: each event is
validated against its ``RawMessageStreamEvent`` types and folded with its own
``accumulate_event``, as ``client.messages.stream(...)`` does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects.anthropic import DIALECT
from addon.dialects.anthropic.stream import AnthropicStreamDecoder
from addon.dialects.anthropic.stream_encode import AnthropicStreamEncoder, _Call
from addon.dialects.openai_chat.stream import OpenAIChatStreamDecoder
from addon.dialects.openai_chat.stream_encode import OpenAIChatStreamEncoder
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
from addon.stream.sse import encode_pairs
from tests.realdata import OPENAI_STREAMS, as_sse, fixture_names
from tests.unit.dialects.ids_shapes import MESSAGE_ID
from tests.unit.helpers import (
    Pairs,
    accumulate,
    content_of,
    pairs_of,
    payloads,
    recorded,
    sdk_message,
)

ANTHROPIC_RECORDINGS = fixture_names("anthropic-")


# --------------------------------------------------------------------------- helpers


def encode_all(events: list[Event]) -> Pairs:
    enc = AnthropicStreamEncoder()
    return [p for e in events for p in enc.feed(e)] + enc.finish()


def decode_all(pairs: Pairs) -> list[Event]:
    dec = AnthropicStreamDecoder()
    return [ev for name, data in pairs for ev in dec.feed(data, name)] + dec.finish()


def kinds(pairs: Pairs) -> list[str]:
    return [str(json.loads(d)["type"]) for _, d in pairs]


def check_block_structure(pairs: Pairs, *, strict: bool = True) -> None:
    """Anthropic's framing: message_start first; blocks 0, 1, 2 … started and stopped once,
    one open at a time; message_delta then message_stop last. ``strict``: no delta outside
    its block."""
    payloads_ = [json.loads(d) for _, d in pairs]
    types = [p["type"] for p in payloads_]
    assert types[0] == "message_start"
    assert types[-2:] == ["message_delta", "message_stop"]
    assert types.count("message_start") == 1 and types.count("message_stop") == 1
    open_: int | None = None
    started: list[int] = []
    stopped: list[int] = []
    for p in payloads_:
        match p["type"]:
            case "content_block_start":
                assert open_ is None, "a block started while another is open"
                open_ = p["index"]
                started.append(p["index"])
            case "content_block_stop":
                assert p["index"] == open_
                stopped.append(p["index"])
                open_ = None
            case "content_block_delta":
                assert p["index"] in started
                if strict:
                    assert p["index"] == open_
    assert open_ is None
    assert started == list(range(len(started))) and stopped == started


# --------------------------------------------------------------------------- recordings


@pytest.mark.parametrize("name", ANTHROPIC_RECORDINGS)
def test_recorded_anthropic_stream_survives_decode_and_encode(name: str) -> None:
    source = recorded(name)
    rebuilt = encode_all(decode_all(source))
    original, again = sdk_message(source, strict=False), sdk_message(rebuilt)
    assert content_of(again) == content_of(original)
    assert again.stop_reason == original.stop_reason
    assert again.id == original.id and again.model == original.model
    assert again.usage == original.usage


@pytest.mark.parametrize(
    "name", [n for n in ANTHROPIC_RECORDINGS if "spliced" not in n]
)  # the spliced one has two message_starts on purpose
def test_recorded_anthropic_stream_is_resent_event_for_event(name: str) -> None:
    """Anthropic → Anthropic: the same events in the same order, except pings, empty deltas
    (Anthropic opens every tool block with ``partial_json: ""``) and block stops: a stream
    cut at max_tokens (the ``truncated-max_tokens`` recording) has no stop for its last
    block, the encoder closes it."""
    source = recorded(name)
    rebuilt = encode_all(decode_all(source))
    check_block_structure(rebuilt)
    mine, theirs = comparable(rebuilt), comparable(source)
    assert [p["type"] for p in mine] == [p["type"] for p in theirs]
    for got, want in zip(mine, theirs, strict=True):
        if want["type"] == "content_block_start" and want["content_block"]["type"] == "thinking":
            want["content_block"].setdefault("signature", "")  # the encoder always writes it
        assert got == want


def comparable(pairs: Pairs) -> list[dict[str, Any]]:
    out = []
    for name, data in pairs:
        payload = json.loads(data)
        if name in ("ping", "content_block_stop"):
            continue
        delta = payload.get("delta", {})
        if payload["type"] == "content_block_delta" and "" in delta.values():
            continue
        out.append(payload)
    return out


def test_spliced_second_message_start_is_mirrored() -> None:
    """A retry spliced into the stream (vercel-ai's EDGECASE fixture): the client gets the
    second message_start too, with block numbering restarted as upstream did."""
    names = [n for n in ANTHROPIC_RECORDINGS if "spliced" in n]
    if not names:
        pytest.skip("the spliced Anthropic recording is not available")
    [name] = names
    rebuilt = encode_all(decode_all(recorded(name)))
    types = kinds(rebuilt)
    assert types.count("message_start") == 2 and types[-1] == "message_stop"
    second = types.index("message_start", 1)
    # the first message's open tool block is closed before the restart
    assert json.loads(rebuilt[second - 1][1]) == {"type": "content_block_stop", "index": 1}


@pytest.mark.parametrize("name", OPENAI_STREAMS)
def test_recorded_openai_stream_becomes_an_anthropic_message(name: str) -> None:
    datas = payloads(as_sse(name))
    dec = OpenAIChatStreamDecoder()
    events = [ev for d in datas for ev in dec.feed(d, None)] + dec.finish()
    pairs = encode_all(events)
    check_block_structure(pairs)
    message = sdk_message(pairs)
    expected = accumulate(datas)
    uses = [b for b in message.content if b.type == "tool_use"]
    calls = list(expected["calls"].values())
    assert [(b.id, b.name) for b in uses] == [(c["id"], c["name"]) for c in calls]
    for block, call in zip(uses, calls, strict=True):
        assert block.input == json.loads("".join(call["fragments"]) or "{}")
    assert "".join(b.text for b in message.content if b.type == "text") == expected["content"]
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    assert thinking == expected["reasoning"]
    want = {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}
    assert message.stop_reason == want[expected["finish"]]
    if expected["usage"]:  # sent after the finish reason, still in message_delta
        assert message.usage.output_tokens == expected["usage"]["completion_tokens"]
        # Anthropic counts cache reads apart from input_tokens; OpenAI in prompt_tokens.
        cached = (expected["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")
        assert (message.usage.cache_read_input_tokens or 0) == (cached or 0)
        assert message.usage.input_tokens + (cached or 0) == expected["usage"]["prompt_tokens"]


def test_gateway_tool_index_1_after_text_becomes_block_1() -> None:
    """openai-chat-stream-claude-text-then-tool_call-index1: the gateway numbers the first
    call 1 (after text); Anthropic blocks are 0 (text) and 1 (tool_use), contiguous."""
    name = "openai-chat-stream-claude-text-then-tool_call-index1.vercel-ai.sse"
    dec = OpenAIChatStreamDecoder()
    events = [ev for d in payloads(as_sse(name)) for ev in dec.feed(d, None)] + dec.finish()
    assert [e.index for e in events if isinstance(e, ToolCallStart)] == [1]
    pairs = encode_all(events)
    starts = [json.loads(d) for n, d in pairs if n == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [
        (0, "text"),
        (1, "tool_use"),
    ]


# --------------------------------------------------------------------------- encoder rules


def test_message_start_usage_and_message_delta_from_another_dialect() -> None:
    events: list[Event] = [
        MessageStart("openai_chat", id="chatcmpl-1", model="gpt"),
        TextDelta("hi"),
        Finish("stop", raw="stop"),
        UsageEvent(Usage(12, 3, 15, origin="openai_chat", raw={"prompt_tokens": 12})),
        StreamEnd(),
    ]
    pairs = encode_all(events)
    check_block_structure(pairs)
    start = json.loads(pairs[0][1])
    assert MESSAGE_ID.fullmatch(start["message"]["id"])  # ours: the upstream's is chat's
    assert start == {
        "type": "message_start",
        "message": {
            "id": start["message"]["id"],
            "type": "message",
            "role": "assistant",
            "model": "gpt",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        },
    }
    assert json.loads(pairs[-2][1]) == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 3, "input_tokens": 12},
    }


@pytest.mark.parametrize(
    ("reason", "raw", "origin", "want"),
    [
        pytest.param("tool_calls", "tool_calls", "openai_chat", "tool_use", id="tool_calls"),
        pytest.param("length", "length", "openai_chat", "max_tokens", id="length"),
        pytest.param("stop", "stop", "openai_chat", "end_turn", id="stop"),
        pytest.param("content_filter", "content_filter", "openai_chat", "refusal", id="filter"),
        pytest.param("other", "weird", "openai_chat", "end_turn", id="other"),
        pytest.param("stop", "stop_sequence", "anthropic", "stop_sequence", id="anthropic-raw"),
        pytest.param("stop", "pause_turn", "anthropic", "pause_turn", id="pause_turn"),
    ],
)
def test_stop_reason(reason: Any, raw: str, origin: str, want: str) -> None:
    pairs = encode_all([MessageStart(origin), Finish(reason, raw=raw), StreamEnd()])
    assert json.loads(pairs[-2][1])["delta"]["stop_reason"] == want


def test_finish_closes_everything_once_without_finish_or_end() -> None:
    enc = AnthropicStreamEncoder()
    out = enc.feed(TextDelta("a")) + enc.feed(ToolCallStart(0, "c1", "f", '{"x": 1'))
    out += enc.finish()
    assert enc.finish() == [] and enc.feed(StreamEnd()) == []
    check_block_structure(out)
    assert json.loads(out[-2][1])["delta"]["stop_reason"] == "end_turn"
    assert sdk_message(out).content[1].input == {"x": 1}  # the partial input, as the SDK reads


def test_stream_end_emits_the_end_and_finish_adds_nothing() -> None:
    enc = AnthropicStreamEncoder()
    out = enc.feed(MessageStart("openai_chat")) + enc.feed(StreamEnd())
    assert kinds(out) == ["message_start", "message_delta", "message_stop"]
    assert enc.finish() == []


def test_stream_error_becomes_an_error_event_and_ends_the_stream() -> None:
    enc = AnthropicStreamEncoder()
    out = enc.feed(TextDelta("a")) + enc.feed(StreamError("boom", "server_error"))
    assert json.loads(out[-1][1]) == {
        "type": "error",
        "error": {"type": "api_error", "message": "boom"},
    }
    assert out[-1][0] == "error"
    assert enc.feed(TextDelta("b")) == [] and enc.finish() == []


def test_raw_events_only_from_anthropic() -> None:
    enc = AnthropicStreamEncoder()
    assert enc.feed(RawEvent("openai_chat", {"type": "x"})) == []
    out = enc.feed(RawEvent("anthropic", {"type": "future_event", "n": 1}))
    assert out[-1] == ("future_event", '{"type":"future_event","n":1}')


def test_redacted_thinking_and_server_tool_blocks_are_renumbered() -> None:
    source: list[dict[str, Any]] = [
        {"type": "message_start", "message": _message("msg_1")},
        {"type": "content_block_start", "index": 0, "content_block": _redacted()},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "x"}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {
                "type": "citations_delta",
                "citation": {
                    "type": "char_location",
                    "cited_text": "x",
                    "document_index": 0,
                    "document_title": None,
                    "start_char_index": 0,
                    "end_char_index": 1,
                },
            },
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "q"}'},
        },
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": _usage(5)},
        {"type": "message_stop"},
    ]
    pairs = [(e["type"], json.dumps(e)) for e in source]
    events = decode_all(pairs)
    assert not any(isinstance(e, ToolCallStart | ToolCallArgsDelta) for e in events)
    rebuilt = encode_all(events)
    check_block_structure(rebuilt)
    got = sdk_message(rebuilt)
    assert content_of(got) == content_of(sdk_message(pairs, strict=False))
    assert got.content[2].input == {"query": "q"}


def _message(id_: str) -> dict[str, Any]:
    return {
        "id": id_,
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(1),
    }


def _usage(output: int) -> dict[str, Any]:
    return {"input_tokens": 3, "output_tokens": output}


def _redacted() -> dict[str, Any]:
    return {"type": "redacted_thinking", "data": "opaque"}


def test_stop_sequence_of_an_anthropic_upstream_is_kept() -> None:
    source: list[dict[str, Any]] = [
        {"type": "message_start", "message": _message("m")},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "stop_sequence", "stop_sequence": "STOP"},
            "usage": {"output_tokens": 2},
        },
        {"type": "message_stop"},
    ]
    rebuilt = encode_all(decode_all([(e["type"], json.dumps(e)) for e in source]))
    assert json.loads(rebuilt[-2][1]) == source[1]


def test_interleaved_parallel_call_fragments_are_held_back_not_lost() -> None:
    """Call 1 starts while call 0's arguments are half-way: call 1 waits (start + buffered
    fragments) until call 0 is complete, then streams live."""
    events: list[Event] = [
        MessageStart("openai_chat"),
        ToolCallStart(0, "a", "f", '{"p": '),
        ToolCallStart(1, "b", "g", '{"q": '),
        ToolCallArgsDelta(1, '"y"'),
        ToolCallArgsDelta(0, '"x"'),
        ToolCallArgsDelta(0, "}"),
        ToolCallArgsDelta(1, "}"),
        Finish("tool_calls"),
    ]
    pairs = encode_all(events)
    check_block_structure(pairs)
    deltas = [
        (p["index"], p["delta"]["partial_json"])
        for p in map(json.loads, (d for _, d in pairs))
        if p["type"] == "content_block_delta"
    ]
    assert deltas == [(0, '{"p": '), (0, '"x"'), (0, "}"), (1, '{"q": "y"'), (1, "}")]
    message = sdk_message(pairs)
    assert [b.input for b in message.content] == [{"p": "x"}, {"q": "y"}]
    assert message.stop_reason == "tool_use"


def test_sequential_calls_are_streamed_live() -> None:
    enc = AnthropicStreamEncoder()
    enc.feed(MessageStart("openai_chat"))
    enc.feed(ToolCallStart(0, "a", "f", '{"p": 1}'))
    out = enc.feed(ToolCallStart(1, "b", "g"))
    assert kinds(out) == ["content_block_stop", "content_block_start"]
    assert kinds(enc.feed(ToolCallArgsDelta(1, "{}"))) == ["content_block_delta"]
    assert kinds(enc.feed(ToolCallEnd(1))) == ["content_block_stop"]


def test_late_fragment_after_text_still_reaches_its_block() -> None:
    """Text between an unfinished call's fragments closes the tool block; the late fragment is
    sent to that block's index rather than dropped (the SDK accumulates by index)."""
    events: list[Event] = [
        ToolCallStart(3, "a", "f", '{"p": '),
        TextDelta("hm"),
        ToolCallArgsDelta(3, "1}"),
    ]
    pairs = encode_all(events)
    check_block_structure(pairs, strict=False)
    assert sdk_message(pairs).content[0].input == {"p": 1}


def test_thinking_signature_goes_out_as_signature_delta() -> None:
    pairs = encode_all([ThinkingDelta("why"), ThinkingDelta("", signature="sig"), TextDelta("x")])
    deltas = [json.loads(d)["delta"] for n, d in pairs if n == "content_block_delta"]
    assert deltas == [
        {"type": "thinking_delta", "thinking": "why"},
        {"type": "signature_delta", "signature": "sig"},
        {"type": "text_delta", "text": "x"},
    ]
    assert sdk_message(pairs).content[0].signature == "sig"


def test_sse_bytes_of_the_encoder() -> None:
    pairs = encode_all([MessageStart("anthropic", envelope=_message("m")), TextDelta("é")])
    raw = b"".join(encode_pairs(pairs))
    assert raw.startswith(b"event: message_start\ndata: {")
    assert pairs_of(raw) == pairs


def test_dialect_record() -> None:
    assert DIALECT.name == "anthropic" and DIALECT.path == "/messages"
    assert isinstance(DIALECT.stream_encoder(), AnthropicStreamEncoder)
    assert isinstance(DIALECT.stream_decoder(), AnthropicStreamDecoder)


# --------------------------------------------------------------------------- decoder


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        pytest.param({"type": "ping"}, [], id="ping"),
        pytest.param({"type": "message_stop"}, [StreamEnd()], id="message_stop"),
        pytest.param(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            [
                StreamError(
                    "Overloaded",
                    "overloaded_error",
                    origin="anthropic",
                    raw={
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    },
                    status=529,
                )
            ],
            id="error",
        ),
        pytest.param(
            {"type": "brand_new", "x": 1},
            [RawEvent("anthropic", {"type": "brand_new", "x": 1})],
            id="unknown",
        ),
    ],
)
def test_decoder_single_events(payload: dict[str, Any], expected: list[Event]) -> None:
    assert AnthropicStreamDecoder().feed(json.dumps(payload), payload["type"]) == expected


def test_decoder_blocks() -> None:
    dec = AnthropicStreamDecoder()
    feed = [
        {"type": "message_start", "message": _message("msg_9")},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta",
                                                               "thinking": "t"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta",
                                                               "signature": "s"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                                                               "partial_json": "{}"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 7}},
    ]  # fmt: skip
    events = [ev for p in feed for ev in dec.feed(json.dumps(p), None)]
    assert events == [
        MessageStart("anthropic", id="msg_9", model="claude", envelope=_message("msg_9")),
        UsageEvent(Usage(3, 1, origin="anthropic", raw=_usage(1))),
        ThinkingDelta("t"),
        ThinkingDelta("", signature="s"),
        RawEvent("anthropic", {"type": "content_block_stop", "index": 0}),
        ToolCallStart(1, "toolu_1", "Read"),
        ToolCallArgsDelta(1, "{}"),
        ToolCallEnd(1),
        UsageEvent(Usage(None, 7, origin="anthropic", raw={"output_tokens": 7})),
        Finish(
            "tool_calls",
            raw="tool_use",
            extra={"anthropic": {"delta": {"stop_sequence": None}, "event": {}}},
        ),
    ]


def test_decoder_refuses_what_is_not_an_anthropic_event() -> None:
    with pytest.raises(UnsupportedShape):
        AnthropicStreamDecoder().feed("not json", None)
    with pytest.raises(UnsupportedShape):
        AnthropicStreamDecoder().feed("[1]", None)


# --------------------------------------------------------------------------- property


@st.composite
def event_sequences(draw: st.DrawFn) -> tuple[list[Event], list[dict[str, Any]], str, str]:
    """Thinking, text, then 0-3 tool calls whose fragments interleave in any order, maybe text
    after them, finish / usage in either order, maybe no StreamEnd. Returns the events, the
    expected tool inputs (in start order), the expected text and thinking."""
    events: list[Event] = [MessageStart("openai_chat", id="chatcmpl-x", model="m")]
    thinking = draw(st.lists(st.text(min_size=1, max_size=4), max_size=3))
    events += [ThinkingDelta(t) for t in thinking]
    signed = draw(st.booleans())
    if thinking and signed:
        events.append(ThinkingDelta("", signature="sig"))
    text = draw(st.lists(st.text(min_size=1, max_size=4), max_size=3))
    events += [TextDelta(t) for t in text]
    n = draw(st.integers(0, 3))
    base = draw(st.sampled_from([0, 1, 5]))  # upstream numbering: 0-based, 1 after text, other
    inputs = [
        {"i": k, "s": draw(st.text(max_size=6)), "n": draw(st.lists(st.integers(), max_size=2))}
        for k in range(n)
    ]
    queues: list[list[Event]] = []
    for k, value in enumerate(inputs):
        args = json.dumps(value, ensure_ascii=draw(st.booleans()))
        cuts = sorted(draw(st.lists(st.integers(0, len(args)), max_size=4)))
        pieces = [args[a:b] for a, b in zip([0, *cuts], [*cuts, len(args)], strict=True)]
        queue: list[Event] = [ToolCallStart(base + k, f"call_{k}", f"tool{k}", pieces[0])]
        queue += [ToolCallArgsDelta(base + k, p) for p in pieces[1:]]
        if draw(st.booleans()):
            queue.append(ToolCallEnd(base + k))
        queues.append(queue)
    order: list[int] = []  # calls in the order they start (any order)
    while any(queues):
        k = draw(st.sampled_from([k for k, q in enumerate(queues) if q]))
        item = queues[k].pop(0)
        if isinstance(item, ToolCallStart):
            order.append(k)
        events.append(item)
    after = draw(st.lists(st.text(min_size=1, max_size=4), max_size=2))
    events += [TextDelta(t) for t in after]
    tail: list[Event] = [Finish("tool_calls" if n else "stop"), UsageEvent(Usage(3, 4, 7))]
    if draw(st.booleans()):
        tail.reverse()  # OpenAI: usage in a trailing chunk after the finish reason
    events += tail
    if draw(st.booleans()):
        events.append(StreamEnd())
    return events, [inputs[k] for k in order], "".join(text + after), "".join(thinking)


@settings(max_examples=300, deadline=None)
@given(event_sequences())
def test_any_event_sequence_gives_a_well_formed_anthropic_stream(
    case: tuple[list[Event], list[dict[str, Any]], str, str],
) -> None:
    events, inputs, text, thinking = case
    pairs = encode_all(events)
    check_block_structure(pairs)
    message = sdk_message(pairs)
    assert [b.input for b in message.content if b.type == "tool_use"] == inputs
    assert [b.id for b in message.content if b.type == "tool_use"] == [
        f"call_{v['i']}" for v in inputs
    ]
    assert "".join(b.text for b in message.content if b.type == "text") == text
    assert "".join(b.thinking for b in message.content if b.type == "thinking") == thinking
    assert message.stop_reason == ("tool_use" if inputs else "end_turn")
    assert message.usage.output_tokens == 4 and message.usage.input_tokens == 3
    assert MESSAGE_ID.fullmatch(message.id)  # ours, not the chat upstream's "chatcmpl-x"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\{}[]é \n', max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet='k"\\{}', max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=3), _json_values, max_size=3), st.data())
def test_argument_completeness_is_followed_fragment_by_fragment(
    value: dict[str, Any], data: st.DataObject
) -> None:
    """No proper prefix of a JSON object is complete; the whole text is, however it is cut
    (the hold-back decision for interleaved calls rests on this)."""
    text = json.dumps(value, ensure_ascii=data.draw(st.booleans()))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    call = _Call("id", "f", {})
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        call.add(text[a:b])
        assert call.complete() == (b == len(text))
    assert call.arguments() == text


def test_text_block_boundaries_and_fields_survive() -> None:
    """Web-search answers come as many text blocks, some with citations: Anthropic →
    Anthropic keeps each block and its start fields; an OpenAI client gets the text."""
    text_block: dict[str, Any] = {"type": "text", "text": "", "citations": []}
    source: list[dict[str, Any]] = [
        {"type": "message_start", "message": _message("m")},
        {"type": "content_block_start", "index": 0, "content_block": text_block},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "b"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": _usage(2)},
        {"type": "message_stop"},
    ]
    pairs = [(e["type"], json.dumps(e)) for e in source]
    events = decode_all(pairs)
    rebuilt = encode_all(events)
    assert [json.loads(d) for _, d in rebuilt[1:7]] == source[1:7]

    enc = OpenAIChatStreamEncoder()
    chunks = [d for e in events for _, d in enc.feed(e)] + [d for _, d in enc.finish()]
    assert accumulate(chunks)["content"] == "ab"
