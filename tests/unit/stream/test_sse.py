"""SSE codec: every decoder case is checked whole, byte by byte, and followed by trailing data."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from addon.stream.sse import (
    EventDecoder,
    LineDecoder,
    SSEComment,
    SSEEvent,
    SSEForeign,
    encode_data,
    encode_event,
)
from tests.realdata import FIXTURES
from tests.unit.helpers import bytewise, whole

type Item = SSEEvent | SSEComment

REAL = FIXTURES
TAIL = b"data: tail"  # trailing data: an extra line without its terminator


@dataclass
class Decoded:
    before_finish: list[Item]  # what came out of feed() alone
    items: list[Item]  # everything, finish() included
    pending: bytes  # LineDecoder.pending() just before finish()


def decode(chunks: list[bytes]) -> Decoded:
    """Feed the chunks, then finish; check that no byte is lost or duplicated on the way."""
    lines, events = LineDecoder(), EventDecoder()
    items: list[Item] = []
    seen = raw = b""

    def take(pairs: list[tuple[str, bytes]]) -> None:
        nonlocal raw
        for line, line_raw in pairs:
            raw += line_raw
            item = events.feed_line(line)
            if item is not None:
                items.append(item)

    for chunk in chunks:
        seen += chunk
        take(lines.feed(chunk))
        assert raw + lines.pending() == seen  # raw lines so far + pending() == input so far
    before, pending = list(items), lines.pending()
    take(lines.finish())
    last = events.finish()
    if last is not None:
        items.append(last)
    assert raw == seen
    assert lines.pending() == b""
    assert lines.finish() == []  # idempotent
    assert events.finish() is None  # idempotent
    return Decoded(before, items, pending)


def check(data: bytes, expected: list[Item], *, at_boundary: bool = True) -> None:
    """h11's habit: the input whole, byte by byte, and each of them followed by trailing data.

    ``at_boundary``: ``data`` ends between two events, so that everything expected
    comes out before ``finish()`` once more bytes follow, and the trailing line
    stays pending, to come out alone at the end.
    """
    for split in (whole, bytewise):
        assert decode(split(data)).items == expected
        trailing = decode(split(data + TAIL))
        assert trailing.pending.endswith(TAIL)
        if at_boundary:
            assert trailing.before_finish == expected
            assert trailing.pending == TAIL
            assert trailing.items == [*expected, SSEEvent("tail")]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"", [], id="empty-input"),
        pytest.param(b"data: hello\n\n", [SSEEvent("hello")], id="simple"),
        pytest.param(b"data: a\ndata: b\ndata: c\n\n", [SSEEvent("a\nb\nc")], id="data-lines-join"),
        pytest.param(b"data: a\ndata\ndata: b\n\n", [SSEEvent("a\n\nb")], id="empty-data-line"),
        pytest.param(b"data: 1\n\ndata: 2\n\n", [SSEEvent("1"), SSEEvent("2")], id="two-events"),
        pytest.param(b"event: ping\ndata: {}\n\n", [SSEEvent("{}", event="ping")], id="event"),
        pytest.param(b"event: ping\n\n", [SSEEvent("", event="ping")], id="event-without-data"),
        pytest.param(b"data:x\n\n", [SSEEvent("x")], id="no-space-after-colon"),
        pytest.param(b"data:  x \n\n", [SSEEvent(" x ")], id="only-one-space-removed"),
        pytest.param(b"data: a:b: c\n\n", [SSEEvent("a:b: c")], id="colon-in-value"),
        pytest.param(b"data\n\n", [SSEEvent("")], id="field-without-colon"),
        pytest.param(b"data\ndata\n\n", [SSEEvent("\n")], id="fields-without-colon-join"),
        pytest.param(
            b": keep-alive\n\ndata: x\n\n",
            [SSEComment(" keep-alive"), SSEEvent("x")],
            id="comment",
        ),
        pytest.param(b":\n:x\n", [SSEComment(""), SSEComment("x")], id="comment-empty-and-bare"),
        pytest.param(
            b"data: a\n: in between\ndata: b\n\n",
            [SSEComment(" in between"), SSEEvent("a\nb")],
            id="comment-inside-event",
        ),
        pytest.param(b"data: a\rdata: b\r\r", [SSEEvent("a\nb")], id="cr"),
        pytest.param(b"data: a\r\ndata: b\r\n\r\n", [SSEEvent("a\nb")], id="crlf"),
        pytest.param(
            b"data: a\r\n\rdata: b\n\r\n", [SSEEvent("a"), SSEEvent("b")], id="mixed-endings"
        ),
        pytest.param(b"data: a\n\rdata: b\n\n", [SSEEvent("a"), SSEEvent("b")], id="lf-cr-is-two"),
        pytest.param("event: €\ndata: €uro 😀\n\n".encode(), [SSEEvent("€uro 😀", "€")], id="utf8"),
        pytest.param(b"data: \xff\xfe\n\n", [SSEEvent("\ufffd\ufffd")], id="invalid-utf8"),
        pytest.param(b"\xef\xbb\xbfdata: x\n\n", [SSEEvent("x")], id="bom-at-start"),
        pytest.param(
            b"id: 7\nretry: 100\ndata: x\n\n", [SSEEvent("x", id="7", retry=100)], id="id-retry"
        ),
        pytest.param(b"id: a\0b\ndata: x\n\n", [SSEEvent("x")], id="id-with-nul-ignored"),
        pytest.param(b"retry: soon\ndata: x\n\n", [SSEEvent("x")], id="retry-word-ignored"),
        pytest.param(b"retry: 1.5\ndata: x\n\n", [SSEEvent("x")], id="retry-decimal-ignored"),
        pytest.param(b"retry: -1\ndata: x\n\n", [SSEEvent("x")], id="retry-negative-ignored"),
        pytest.param(
            "retry: ١٢\ndata: x\n\n".encode(), [SSEEvent("x")], id="retry-non-ascii-digits-ignored"
        ),
        pytest.param(
            b"data: a\n\nfoo: bar\ndata: x\n\n",
            [SSEEvent("a"), SSEEvent("x")],
            id="unknown-field-ignored",
        ),
        pytest.param(
            b"data: a\n\nData: x\n\n", [SSEEvent("a")], id="field-names-are-case-sensitive"
        ),
        pytest.param(
            b'{"error": {"message": "no"}}\n\n',
            [SSEForeign('{"error": {"message": "no"}}')],
            id="json-is-not-a-stream",
        ),
        pytest.param(b"foo: bar\n\n", [SSEForeign("foo: bar")], id="unknown-field-first"),
        pytest.param(
            b"data: a\n\n<html>\n\n", [SSEEvent("a"), SSEForeign("<html>")], id="html-later"
        ),
        pytest.param(b"\n\n\r\n\r", [], id="blank-lines-only"),
    ],
)
def test_decoder(data: bytes, expected: list[Item]) -> None:
    check(data, expected)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"data: last", [SSEEvent("last")], id="unterminated-line"),
        pytest.param(b"data: a\n\ndata: b\n", [SSEEvent("a"), SSEEvent("b")], id="no-blank-line"),
        pytest.param(b"data: a\r", [SSEEvent("a")], id="cr-at-the-very-end"),
        pytest.param(b"event: bye", [SSEEvent("", event="bye")], id="event-name-only"),
        pytest.param(b": bye", [SSEComment(" bye")], id="comment"),
        pytest.param("data: 😀".encode(), [SSEEvent("😀")], id="utf8"),
        pytest.param(b"\xef\xbb\xbfdata: x", [SSEEvent("x")], id="bom-at-start"),
    ],
)
def test_event_left_open_at_the_end_is_dispatched_by_finish(
    data: bytes, expected: list[Item]
) -> None:
    check(data, expected, at_boundary=False)


def test_block_with_only_id_or_retry_is_not_dispatched_but_carries_over() -> None:
    check(b"id: 7\nretry: 5\n\n", [], at_boundary=False)
    check(b"id: 7\nretry: 5\n\ndata: x\n\n", [SSEEvent("x", id="7", retry=5)])


def test_crlf_split_across_feeds_is_one_terminator() -> None:
    lines = LineDecoder()
    assert lines.feed(b"data: a\r") == []
    assert lines.pending() == b"data: a\r"
    assert lines.feed(b"\n\r") == [("data: a", b"data: a\r\n")]
    assert lines.feed(b"\n") == [("", b"\r\n")]
    assert lines.pending() == b""


def test_cr_held_at_the_end_is_a_terminator_at_finish() -> None:
    lines = LineDecoder()
    assert lines.feed(b"data: a\r") == []
    assert lines.finish() == [("data: a", b"data: a\r")]
    assert lines.finish() == []


@pytest.mark.parametrize("char", [pytest.param("€", id="euro"), pytest.param("😀", id="emoji")])
def test_multibyte_character_cut_in_the_middle_survives(char: str) -> None:
    data = f"data: {char}\n".encode()
    start = len(b"data: ")
    for cut in range(start + 1, start + len(char.encode())):
        lines = LineDecoder()
        assert lines.feed(data[:cut]) == []
        assert lines.pending() == data[:cut]
        assert lines.feed(data[cut:]) == [(f"data: {char}", data)]


def test_long_line_in_small_chunks_is_held_then_returned_whole() -> None:
    line = b"data: " + b"x" * 10_000
    lines = LineDecoder()
    for i in range(0, len(line), 7):
        assert lines.feed(line[i : i + 7]) == []
    assert lines.pending() == line
    assert lines.feed(b"\n") == [(line.decode(), line + b"\n")]


def test_finish_is_idempotent() -> None:
    lines, events = LineDecoder(), EventDecoder()
    assert lines.feed(b"data: x") == []
    assert lines.finish() == [("data: x", b"data: x")]
    assert lines.finish() == []
    assert events.feed_line("data: x") is None
    assert events.finish() == SSEEvent("x")
    assert events.finish() is None


@pytest.mark.parametrize(
    ("item", "encoded"),
    [
        pytest.param(SSEEvent("x"), b"data: x\n\n", id="plain"),
        pytest.param(SSEEvent(""), b"data: \n\n", id="empty-data"),
        pytest.param(
            SSEEvent("a\nb", event="message_start", id="1", retry=5),
            b"event: message_start\nid: 1\nretry: 5\ndata: a\ndata: b\n\n",
            id="all-fields",
        ),
        pytest.param(SSEEvent("a\r\nb\rc"), b"data: a\ndata: b\ndata: c\n\n", id="cr-in-data"),
        pytest.param(SSEEvent("€"), "data: €\n\n".encode(), id="utf8"),
        pytest.param(SSEComment(" ping"), b": ping\n\n", id="comment"),
        pytest.param(SSEComment("a\nb"), b":a\n:b\n\n", id="comment-over-two-lines"),
    ],
)
def test_encode_event(item: Item, encoded: bytes) -> None:
    assert encode_event(item) == encoded


@pytest.mark.parametrize(
    "data", [pytest.param(d, id=d or "empty") for d in ['{"a":1}', "", "€ 😀", "a\nb", "a\rb"]]
)
def test_encode_data_is_encode_event_of_an_unnamed_event(data: str) -> None:
    assert encode_data(data) == encode_event(SSEEvent(data))


# ---------------------------------------------------------------------------- properties

field_text = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\r\n\0"), max_size=10
)
sse_line = st.one_of(
    st.builds("data: {}".format, field_text),
    st.builds("data:{}".format, field_text),
    st.builds("event: {}".format, field_text),
    st.builds("id: {}".format, field_text),
    st.builds("retry: {}".format, st.one_of(st.integers(0, 10**6).map(str), field_text)),
    st.builds(":{}".format, field_text),
    st.sampled_from(["", "", "data", "event", "unknown: x"]),
)
sse_stream = st.builds(
    lambda pairs, tail: b"".join(line.encode() + end for line, end in pairs) + tail.encode(),
    st.lists(st.tuples(sse_line, st.sampled_from([b"\n", b"\r\n", b"\r"])), max_size=25),
    st.one_of(st.just(""), sse_line),
)


@given(data=st.one_of(sse_stream, st.binary(max_size=200)), draw=st.data())
def test_any_split_gives_the_same_events_and_loses_no_byte(
    data: bytes, draw: st.DataObject
) -> None:
    cuts = sorted(draw.draw(st.lists(st.integers(0, len(data)), max_size=15)))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    assert decode(chunks).items == decode([data]).items  # decode() checks the bytes


sse_event = st.builds(
    SSEEvent,
    data=st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r"), max_size=30),
    event=st.none() | field_text,
    id=st.none() | field_text,
    retry=st.none() | st.integers(0, 10**9),
)


@given(item=st.one_of(sse_event, st.builds(SSEComment, field_text)))
def test_encoded_items_decode_to_themselves(item: Item) -> None:
    assert decode([encode_event(item)]).items == [item]


# ---------------------------------------------------------------------------- recordings

RECORDINGS = sorted(REAL.glob("*.sse")) if REAL.is_dir() else []


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=p.name) for p in RECORDINGS]
    or [pytest.param(None, marks=pytest.mark.skip(reason=f"no *.sse recordings in {REAL}"))],
)
def test_recorded_stream_decodes_to_json_events_that_reencode_to_themselves(path: Path) -> None:
    data = path.read_bytes()
    decoded = decode(whole(data))
    events = [item for item in decoded.items if isinstance(item, SSEEvent)]
    assert events
    for event in events:
        if event.data != "[DONE]":
            json.loads(event.data)
        assert decode(whole(encode_event(event))).items == [event]
    assert decode([data[i : i + 7] for i in range(0, len(data), 7)]).items == decoded.items
