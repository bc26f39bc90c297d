"""The text lane (``StreamProcessor``): plain text skips the generic event machinery — stages
that pass it (``text_lane`` is ``PASSES_TEXT``) or take it (``take_text``), and encoders that
write it directly (``fast_path.text_sse``). Each shortcut must say exactly what the long way says, in every state."""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects import DIALECTS
from addon.jsonio import dumpb
from addon.model import (
    Event,
    Finish,
    MessageStart,
    StreamEnd,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from addon.report.outcome import FlowReport, Outcome
from addon.shell.stream_attach import stream_callable
from addon.stream.capture import CaptureStage
from addon.stream.custom_calls import CustomToolStage
from addon.stream.hold_calls import RepairStage
from addon.stream.processor import State, StreamProcessor
from addon.stream.sse import encode_pairs
from addon.stream.stages import PASSES_TEXT, HideThinkingStage, TextToolStage
from addon.textproto.parser import TextProtocolParser
from addon.transforms.repair import ToolSchemas

ORIGINS = ("openai_chat", "anthropic", "openai_responses", "gemini")
ENCODERS = ("openai_chat", "anthropic", "openai_responses", "gemini")

texts = st.text(min_size=1, max_size=20) | st.sampled_from(["a", "\u00e9\u4e2d", '"\\', "\ud800"])
_PLAIN = re.compile(r"[ !#-\[\]-~]+")
"""A plain text: printable ASCII without a quote or a backslash."""


@st.composite
def events(draw: Any) -> Event:
    kind = draw(st.sampled_from(["start", "text", "text", "text", "think", "call", "fin", "wire"]))
    if kind == "start":
        origin = draw(st.sampled_from(ORIGINS))
        return MessageStart(
            origin,
            id=draw(st.sampled_from([None, "id-1", "resp_2"])),
            model=draw(st.sampled_from([None, "m", "gemini-x"])),
            created=draw(st.sampled_from([None, 7])),
        )
    if kind == "text":
        return TextDelta(draw(texts))
    if kind == "wire":  # text with extras takes the long way: it must not upset the short one
        return TextDelta(draw(texts), extra={"anthropic": {"block": {"citations": []}}})
    if kind == "think":
        return ThinkingDelta(draw(texts), draw(st.sampled_from([None, "sig"])))
    if kind == "call":
        i = draw(st.integers(0, 2))
        return draw(
            st.sampled_from(
                [
                    ToolCallStart(i, f"call_{i}", "read", '{"a":'),
                    ToolCallArgsDelta(i, "1}"),
                    ToolCallEnd(i),
                ]
            )
        )
    return draw(st.sampled_from([Finish("stop", raw="stop"), StreamEnd()]))


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(ENCODERS),
    seq=st.lists(events(), max_size=25),
    quoted=st.booleans(),
    framed=st.booleans(),
)
def test_an_encoders_text_shortcut_writes_what_feed_writes(
    name: str, seq: list[Event], quoted: bool, framed: bool
) -> None:
    """Wherever ``text_sse`` answers, its bytes are ``feed``'s, and the two encoders stay in
    the same state: everything after comes out the same. Given the text's JSON string as
    ``dumpb`` writes it (``quoted``), it writes that string (and reads a plain text from it:
    no ``text`` then). Wherever the encoder has a
    ``text_frame``, a text written into it by the caller (``framed``, encoder untouched) is
    ``feed``'s bytes too, and nothing after changes."""
    short, long = DIALECTS[name].stream_encoder(), DIALECTS[name].stream_encoder()
    offer = short.fast_path
    assert offer is not None, f"{name} has no text shortcut"
    fast = offer.text_sse
    for event in seq:
        expected = b"".join(encode_pairs(long.feed(event)))
        got = None
        if type(event) is TextDelta and not event.extra:
            string = dumpb(event.text) if quoted else None
            frame = offer.text_frame
            if framed and frame is not None and event.text:
                got = frame[0] + dumpb(event.text) + frame[1]
            elif string is not None and _PLAIN.fullmatch(event.text):
                got = fast(None, string)  # the encoder reads the plain text from its string
            else:
                got = fast(event.text, string)
        if got is None:
            got = b"".join(encode_pairs(short.feed(event)))
        assert got == expected, event
    assert encode_pairs(short.finish()) == encode_pairs(long.finish())


@pytest.mark.parametrize("name", ["openai_chat", "anthropic", "gemini"])
def test_a_plain_text_stream_is_written_in_the_encoders_frame(name: str) -> None:
    """The encoders of these dialects have a ``text_frame`` after their first plain text (the
    text lane then writes the others itself); the next ``feed`` of something else drops it
    where the frame may change."""
    encoder: Any = DIALECTS[name].stream_encoder()
    for event in (MessageStart("openai_chat", id="c", model="m"), TextDelta("Hi")):
        pairs = encoder.feed(event)
    assert encoder.text_frame is None
    assert encoder.text_sse("there", None) is not None
    frame = encoder.text_frame
    assert frame is not None and b"".join(encode_pairs(pairs)).startswith(frame[0][:20])
    encoder.feed(ToolCallStart(0, "call_1", "read", "{}"))
    if name != "openai_chat":  # a chat chunk's frame is the envelope's: it stays
        assert encoder.text_frame is None


@settings(max_examples=300, deadline=None)
@given(seq=st.lists(events(), max_size=25))
def test_stages_that_pass_text_pass_it_in_any_state(seq: list[Event]) -> None:
    stages = [
        RepairStage(ToolSchemas({"read": {"type": "object"}}), Counter()),
        CustomToolStage(frozenset({"read"})),
        HideThinkingStage(),
    ]
    for stage in stages:
        assert stage.text_lane is PASSES_TEXT
        for event in seq:
            if type(event) is TextDelta and not event.extra:
                assert stage.feed(event) == [event]
            else:
                stage.feed(event)


pieces = st.lists(
    st.sampled_from(["plain ", "<", "<<CALL_t1>>", "<think>", "</think>", "x", " ", "\n", "{"])
    | st.text(max_size=6)
    | st.just('<<CALL_t1>>\n<invoke name="read">{"a":1}</invoke>'),
    max_size=20,
)


@settings(max_examples=400, deadline=None)
@given(protocol=st.sampled_from(["invoke", "bracket", None]), parts=pieces)
def test_the_parser_takes_only_text_it_would_pass_unchanged(
    protocol: str | None, parts: list[str]
) -> None:
    """Where ``take_text`` says yes, ``feed`` says exactly ``[TextDelta(text)]``; where it says
    no, nothing changed: the parser goes on as if it had not been asked. Where it has a
    ``text_sink``, that says what ``take_text`` says of a plain text's JSON string."""

    def parser() -> TextProtocolParser:
        return TextProtocolParser(
            protocol,  # type: ignore[arg-type]
            trigger="<<CALL_t1>>" if protocol == "invoke" else None,
            tools={"read"},
            ids=lambda n: f"call_{n}",
        )

    asked, plain, told = parser(), parser(), parser()
    for text in parts:
        expected = plain.feed(text)
        if asked.take_text(text):
            assert expected == [TextDelta(text)]
        else:
            assert asked.feed(text) == expected
        sink = told.text_sink
        took = told.take_text(text)
        if sink is not None and _PLAIN.fullmatch(text):
            assert sink(dumpb(text)) == took
        if not took:
            told.feed(text)
    assert asked.finish() == plain.finish() == told.finish()


_CHUNK = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}\n\n'
)


def _stream(texts: list[str]) -> list[bytes]:
    import json

    first = _CHUNK.replace(b'{"content":%s}', b'{"role":"assistant","content":""}')
    body = [first] + [_CHUNK % json.dumps(t).encode() for t in texts]
    return [
        *body,
        b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]


def _from_openai(client: str, stages: list[Any] | None = None, **options: Any) -> StreamProcessor:
    """A processor from an OpenAI chat upstream to ``client`` (same dialect when it is one)."""
    return StreamProcessor(
        DIALECTS["openai_chat"].stream_decoder(),
        DIALECTS[client].stream_encoder(),
        stages or (),
        same_dialect=client == "openai_chat",
        **options,
    )


def _both_ways(
    lane: StreamProcessor, slow: StreamProcessor, chunks: list[bytes]
) -> tuple[bytes, bytes]:
    """What ``lane`` gives for one read per chunk (where the lanes apply) and what ``slow``
    gives for the same bytes read one at a time (the line and event decoders), ends included."""
    got = b"".join(b for c in chunks for b in lane.feed(c)) + b"".join(lane.finish())
    whole = b"".join(chunks)
    want = b"".join(b for i in range(len(whole)) for b in slow.feed(whole[i : i + 1]))
    return got, want + b"".join(slow.finish())


@settings(max_examples=100, deadline=None)
@given(
    client=st.sampled_from(ENCODERS),
    protocol=st.sampled_from(["invoke", None]),
    parts=st.lists(
        st.sampled_from(["Hi ", "<<CALL_t1>>", "<think>x</think>", "\u00e9", "<"])
        | st.text(max_size=5),
        max_size=15,
    ),
)
def test_a_stream_through_the_lane_is_the_stream_without_it(
    client: str, protocol: str | None, parts: list[str]
) -> None:
    """The whole pipeline, one event per read (the lane) against the same events read through
    the line decoder one byte at a time (no lane): the client gets the same bytes."""

    def processor() -> StreamProcessor:
        stages = []
        if protocol:
            stages.append(
                TextToolStage(
                    TextProtocolParser(
                        "invoke", trigger="<<CALL_t1>>", tools={"read"}, ids=lambda n: f"c{n}"
                    )
                )
            )
        stages.append(RepairStage(ToolSchemas({"read": {"type": "object"}}), Counter()))
        return _from_openai(client, stages, coalesce=True)

    chunks = _stream(["Hi ", "there ", *parts])  # the first text teaches the decoder the frame
    lane, slow = processor(), processor()
    decoded: list[str] = []
    decoder: Any = lane._decoding.decoder
    decode = decoder.feed
    decoder.feed = lambda data, event: decoded.append(data) or decode(data, event)
    got, want = _both_ways(lane, slow, chunks)
    assert got == want
    assert len(decoded) < len(chunks), "the lane was taken: some events were not decoded"


@settings(max_examples=50, deadline=None)
@given(
    client=st.sampled_from(ENCODERS),
    keep=st.integers(0, 1500),
    parts=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=30),
)
def test_the_views_copy_of_the_start_is_whole_whatever_path_a_read_takes(
    client: str, keep: int, parts: list[str]
) -> None:
    """``original`` (what the content view shows of the upstream's stream) holds exactly the
    first ``keep_original`` bytes, on the raw path (same dialect, nothing to change) and the
    text lane alike."""
    processor = _from_openai(client, raw_ok=client == "openai_chat", keep_original=keep)
    chunks = _stream(["Hi ", "there ", *parts])
    for chunk in chunks:
        processor.feed(chunk)
    processor.finish()
    assert bytes(processor.original) == b"".join(chunks)[:keep]


@pytest.mark.parametrize("client", ENCODERS)
@pytest.mark.parametrize("way_out", ["finish", "abort"])
def test_no_read_takes_the_lane_once_the_stream_took_a_way_out(client: str, way_out: str) -> None:
    """After ``finish`` or ``abort`` a read is what the general path says (passed as it is, or
    dropped), never a text event encoded after the client's stream ended."""
    chunks = _stream(["Hi ", "there ", "again "])
    late = chunks[2]
    lane, general = _from_openai(client, coalesce=True), _from_openai(client, coalesce=True)
    for chunk in chunks[:3]:
        lane.feed(chunk)
    whole = b"".join(chunks[:3])
    for i in range(len(whole)):
        general.feed(whole[i : i + 1])
    assert lane.state is State.BETWEEN, "a read of one event would take the lane here"
    for p in (lane, general):
        p.finish() if way_out == "finish" else p.abort("test")
    assert lane.state is not State.BETWEEN
    assert lane.feed(late) == general.feed(late)


_RAW_BODIES = [
    b"plain",
    b"caf\xc3\xa9",  # UTF-8 as it is
    b"a\\nb",  # an escape
    b"\\u00e9",
    b"\\u0000",
    b"x\\",  # ends in a backslash: the quote after it is escaped
    b"\\\\",  # an escaped backslash at the end
    b'a\\"b',  # an escaped quote
    b'a"b',  # a bare quote: not one JSON string
    b"a\rb",  # a raw control character: a line break for SSE
    b"a\n\ndata: [DONE]",  # two events in one read
    b"\\x",  # an escape JSON has not
    b"\xff",  # not UTF-8
    b"",
]


@settings(max_examples=200, deadline=None)
@given(
    client=st.sampled_from(ENCODERS),
    raw_ok=st.booleans(),
    bodies=st.lists(st.sampled_from(_RAW_BODIES), max_size=8),
    call_at=st.integers(0, 8),
)
def test_a_read_of_one_event_says_what_the_line_decoder_says(
    client: str, raw_ok: bool, bodies: list[bytes], call_at: int
) -> None:
    """Reads of one event each (the skip lane of a same-dialect route with nothing to change,
    or the text lane) against the same bytes read one at a time (the line and event
    decoders): the client gets the same bytes, whatever lies between the frame's ends — text
    as it is, escapes, quotes, control characters, bytes that are not UTF-8 — and after a
    tool call (no chunk is skippable from then on)."""
    same = client == "openai_chat"

    def processor() -> StreamProcessor:
        return _from_openai(client, raw_ok=raw_ok and same, coalesce=not same)

    head = _stream(["Hi ", "there "])
    body = [_CHUNK % (b'"' + raw + b'"') for raw in bodies]
    call = (
        b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
        b'[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",'
        b'"function":{"name":"read","arguments":"{}"}}]},"finish_reason":null}]}\n\n'
    )
    body.insert(min(call_at, len(body)), call)
    chunks = [*head[:3], *body, *head[3:]]
    lane, slow = processor(), processor()
    general: list[bytes] = []  # the reads that did not take a lane
    fast = lane._body_reader.read_whole
    lane._body_reader.read_whole = lambda chunk: general.append(chunk) or fast(chunk)  # type: ignore[method-assign]
    got, want = _both_ways(lane, slow, chunks)
    assert got == want
    if lane._track:  # a route with a lane (not same-dialect without raw_ok)
        assert len(general) < len(chunks), "a lane was taken (at least by 'there ')"
    assert (lane.error is None) == (slow.error is None)
    assert lane.events_in == slow.events_in
    assert lane.bytes_in == slow.bytes_in and lane.bytes_out == slow.bytes_out


class _Records:
    """A reasoning store's view: what a capture stage wrote."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, str, Any]] = []

    def put(self, kind: str, key: str, value: Any) -> None:
        self.puts.append((kind, key, value))

    def get(self, kind: str, key: str) -> None:
        return None


@settings(max_examples=150, deadline=None)
@given(
    client=st.sampled_from(ENCODERS),
    bodies=st.lists(st.sampled_from(_RAW_BODIES), min_size=1, max_size=8),
    thinking=st.booleans(),
)
def test_the_lane_shows_the_capture_stage_the_text_the_long_way_shows_it(
    client: str, bodies: list[bytes], thinking: bool
) -> None:
    """The reasoning store's capture stage on the text lane: by ``take_text`` or, text after
    text, by its ``text_sink`` (a plain text's JSON string, read when the turn is written). It
    writes the same records as when every read goes the long way, and the client gets the
    same bytes. (With reasoning first, the turn's record is keyed by its visible text.)"""
    same = client == "openai_chat"
    reasoning = _CHUNK.replace(b'{"content":%s}', b'{"reasoning_content":"Let me see."}')
    chunks = _stream(["Hi ", "there "])
    if thinking:
        chunks.insert(1, reasoning)
    body = [_CHUNK % (b'"' + raw + b'"') for raw in bodies]
    at = 4 if thinking else 3
    chunks[at:at] = body
    seen: list[_Records] = []

    def processor() -> StreamProcessor:
        records = _Records()
        seen.append(records)
        return _from_openai(
            client, [CaptureStage(records, DIALECTS["openai_chat"].reasoning)], coalesce=not same
        )

    lane, slow = processor(), processor()
    # Up to the first body: a later text that is not plain folds the run of plain texts away.
    got = b"".join(b for c in chunks[: at + 1] for b in lane.feed(c))
    # No event lost, and no line that is not SSE (the body is then read whole at its end).
    intact = lane.error is None and not lane.skipped and lane.state is not State.COLLECTING
    if client in ("anthropic", "gemini") and bodies[0] == b"plain" and intact:  # text after text
        turn = lane._output.stages[0].turn  # type: ignore[attr-defined]
        assert b'"plain"' in turn.visible.plain, "the text lane gave a text to the sink"
    got += b"".join(b for c in chunks[at + 1 :] for b in lane.feed(c)) + b"".join(lane.finish())
    whole = b"".join(chunks)
    want = b"".join(b for i in range(len(whole)) for b in slow.feed(whole[i : i + 1]))
    assert got == want + b"".join(slow.finish())
    assert seen[0].puts == seen[1].puts
    assert bool(seen[0].puts) == thinking
    assert lane.events_in == slow.events_in
    assert lane.bytes_in == slow.bytes_in and lane.bytes_out == slow.bytes_out


class _BrokenSink:
    """A stage whose text sink has a bug: it raises."""

    @property
    def text_lane(self) -> _BrokenSink:
        return self

    def take_text(self, text: str) -> bool:
        return True

    @property
    def text_sink(self) -> Any:
        def sink(quoted: bytes) -> None:
            raise RuntimeError("boom")

        return sink

    def feed(self, event: Event) -> list[Event]:
        return [event]

    def finish(self) -> list[Event]:
        return []


def test_a_bug_in_the_common_read_neither_escapes_nor_eats_the_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The common read runs outside the shell's general way: a bug in it still reaches the
    shell's handler. Another dialect's client gets an error event in its own dialect; a client
    of the upstream's dialect gets the upstream's bytes, the failed read's included. One log
    line, no traceback."""
    chunks = _stream(["Hi ", "there ", "again "])
    other = _from_openai("anthropic", [_BrokenSink()], coalesce=True)
    stream = stream_callable(other, "test", FlowReport("r", Outcome.REWRITTEN))
    with caplog.at_level(logging.WARNING):
        out = b"".join(b for c in [*chunks, b""] for b in stream(c))
    assert b"event: error" in out and b"again" not in out
    same = _from_openai("openai_chat", raw_ok=True)
    stream = stream_callable(same, "test", FlowReport("r", Outcome.REWRITTEN))
    got = b"".join(b for c in chunks[:2] for b in stream(c))
    same._decoding.decoder.plain_frame = 5  # type: ignore[attr-defined]  # the bug: not a frame
    with caplog.at_level(logging.WARNING):
        got += b"".join(b for c in [*chunks[2:], b""] for b in stream(c))
    assert got.endswith(b"".join(chunks[2:])) and same.passthrough  # from the failed read on
    assert [r.levelno for r in caplog.records] == [logging.ERROR] * 2
    assert all("stream rewrite failed" in r.getMessage() for r in caplog.records)
    assert all(r.exc_info is None for r in caplog.records)


_SPLIT_BODIES = [
    b"\\u00",  # an escape the next body would complete: refused, as event by event
    b"e9",
    b"\\ud83d",  # half of a surrogate pair, the other half in the next event
    b"\\ude00",
    b"a b c",
]
_CALL = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",'
    b'"function":{"name":"read","arguments":"{}"}}]},"finish_reason":null}]}\n\n'
)
_REASONING = _CHUNK.replace(b'{"content":%s}', b'{"reasoning_content":"Let me see."}')


@settings(max_examples=250, deadline=None)
@given(
    client=st.sampled_from(ENCODERS),
    raw_ok=st.booleans(),
    capture=st.booleans(),
    protocol=st.booleans(),
    bodies=st.lists(
        st.sampled_from(
            [*_RAW_BODIES, *_SPLIT_BODIES, b"plain", b"more plain", b"<<CALL_t1>>", b"<inv"]
        ),
        max_size=12,
    ),
    other=st.sampled_from([None, _CALL, _REASONING]),
    other_at=st.integers(0, 12),
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=12),
)
def test_a_read_of_several_events_says_what_the_general_way_says(
    client: str,
    raw_ok: bool,
    capture: bool,
    protocol: bool,
    bodies: list[bytes],
    other: bytes | None,
    other_at: int,
    sizes: list[int],
) -> None:
    """Reads of several whole events each (a bursty upstream, or a proxy that fell behind):
    the common read takes them when they are all of the learned frame (the skip lane passes
    them as they came; the text lane makes one delta of their text) and the general way for
    anything else. Against the same reads all taken the general way (``feed_general``): the
    same bytes to the client, the same records in the reasoning store, the same counts; with
    the reasoning store's capture and a text protocol's parser (the stages a text is shown to)
    or without."""
    same = client == "openai_chat"
    seen: list[_Records] = []

    def processor() -> StreamProcessor:
        records = _Records()
        seen.append(records)
        stages: list[Any] = (
            [CaptureStage(records, DIALECTS["openai_chat"].reasoning)] if capture else []
        )
        if protocol:
            parser = TextProtocolParser(
                "invoke", trigger="<<CALL_t1>>", tools={"read"}, ids=lambda n: f"c{n}"
            )
            stages.append(TextToolStage(parser))
        return _from_openai(client, stages, raw_ok=raw_ok and same, coalesce=not same)

    events = _stream(["Hi ", "there "])
    body = [_CHUNK % (b'"' + raw + b'"') for raw in bodies]
    if other is not None:
        body.insert(min(other_at, len(body)), other)
    events[3:3] = body
    reads = events[:3]  # the frame is learned from "there " (one event, one read)
    rest, i = events[3:], 0
    for n in sizes * len(rest):
        if i >= len(rest):
            break
        reads.append(b"".join(rest[i : i + n]))
        i += n
    lane, general = processor(), processor()
    fallback: list[bytes] = []  # reads the common read left to the general way
    fast = lane._body_reader.read_whole
    lane._body_reader.read_whole = lambda chunk: fallback.append(chunk) or fast(chunk)  # type: ignore[method-assign]
    got = b"".join(b for r in reads for b in lane.feed(r)) + b"".join(lane.finish())
    want = b"".join(b for r in reads for b in general.feed_general(r))
    assert got == want + b"".join(general.finish())
    assert seen[0].puts == seen[1].puts
    assert (lane.error, lane.skipped) == (general.error, general.skipped)
    assert lane.events_in == general.events_in
    assert lane.bytes_in == general.bytes_in and lane.bytes_out == general.bytes_out
    assert lane.skipped_decoding == general.skipped_decoding
    plain = all(b in (b"plain", b"more plain") for b in bodies)
    if lane._track and plain and other is None:
        bursts = {r for r in reads[3:] if r.count(b"\n\n") > 1 and b'finish_reason":"' not in r}
        assert not bursts & set(fallback), "the lane took every burst of plain text"


@pytest.mark.parametrize("client", ENCODERS)
@pytest.mark.parametrize("n", [2, 16])
def test_a_burst_of_plain_text_is_one_delta_on_another_dialect_and_as_sent_on_the_same(
    client: str, n: int
) -> None:
    """n plain text events in one read: on a same-dialect route with nothing to change they
    pass as the upstream's bytes (n events, none decoded); for a client of another dialect
    their text is one delta, its text all of theirs."""
    same = client == "openai_chat"
    processor = _from_openai(client, raw_ok=same, coalesce=not same)
    events = _stream(["Hi ", "there "])
    for chunk in events[:3]:
        processor.feed(chunk)
    burst = b"".join(_CHUNK % b'"w%d "' % i for i in range(n))
    out = b"".join(processor.feed(burst))
    assert processor.events_in == 3 + n
    if same:
        assert out == burst and processor.skipped_decoding == n + 1  # "there " passed too
    else:
        text = "".join(f"w{i} " for i in range(n))
        assert out.count(text.encode()) == 1 and out.count(b"\n\n") == 1


_HEAD, _TAIL = _CHUNK.split(b"%s")[0] + b'"', b'"' + _CHUNK.split(b"%s")[1]


@settings(max_examples=400, deadline=None)
@given(
    bodies=st.lists(
        st.sampled_from([b"", b"a", b"b c", b'"', b"\\", b"\\\\", b"\n", b"}"])
        | st.binary(max_size=6),
        min_size=1,
        max_size=6,
    ),
    cut=st.integers(0, 3),
)
def test_a_read_is_taken_as_framed_events_only_when_it_is_exactly_that(
    bodies: list[bytes], cut: int
) -> None:
    """``framed_run`` says yes only for bytes that are the frame around each body it found,
    each body without a quote and not ending in a backslash; and it finds the bodies of every
    read made that way."""
    from addon.dialects.framed import framed_run

    chunk = b"".join(_HEAD + b + _TAIL for b in bodies)
    chunk = chunk[: len(chunk) - cut]
    found: list[bytes] = []
    if framed_run(chunk, _HEAD, _TAIL, found):
        assert chunk == _HEAD + (_TAIL + _HEAD).join(found) + _TAIL
        assert all(b'"' not in b and not b.endswith(b"\\") for b in found)
    if not cut and all(b'"' not in b and not b.endswith(b"\\") for b in bodies):
        found = []
        assert framed_run(chunk, _HEAD, _TAIL, found) and found == bodies


def test_the_plain_text_check_of_several_events_is_the_regular_expressions() -> None:
    """Several events' text is checked for being plain by bytes methods, one event's by a
    regular expression: they say the same of every byte."""
    from addon.dialects.framed import _NOT_PLAIN, PLAIN_ASCII

    for b in range(256):
        one = bytes([b])
        by_methods = one.isascii() and len(one.translate(None, _NOT_PLAIN)) == 1
        assert by_methods == (PLAIN_ASCII(one) is not None), b
