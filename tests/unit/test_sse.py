"""SSE line and event codec: every case checked whole, byte by byte, and with trailing data."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from addon.stream.sse import (
    EventDecoder,
    LineDecoder,
    SSEComment,
    SSEEvent,
    encode_data,
    encode_event,
)
from tests.realdata import fixture_names, read

type Item = SSEEvent | SSEComment


def decode(chunks: list[bytes]) -> tuple[list[Item], bytes]:
    """Decode chunks; return the items and the raw bytes the line decoder handed out."""
    lines, events = LineDecoder(), EventDecoder()
    items: list[Item] = []
    raw = b""
    for chunk in [*chunks, None]:
        pairs = lines.finish() if chunk is None else lines.feed(chunk)
        for line, line_raw in pairs:
            raw += line_raw
            item = events.feed_line(line)
            if item is not None:
                items.append(item)
    last = events.finish()
    if last is not None:
        items.append(last)
    assert lines.finish() == [] and events.finish() is None  # idempotent
    return items, raw


def check(data: bytes, expected: list[Item]) -> None:
    """The h11 habit: whole input, byte by byte, and followed by trailing data."""
    whole, raw = decode([data])
    assert whole == expected
    assert raw == data
    bytewise, raw = decode([data[i : i + 1] for i in range(len(data))])
    assert bytewise == expected
    assert raw == data
    # Trailing data: an unterminated line stays pending until the end, then comes out.
    lines = LineDecoder()
    got = [line for chunk in (data, b"data: tail") for line, _ in lines.feed(chunk)]
    assert lines.pending().endswith(b"data: tail")
    assert "data: tail" not in got
    assert lines.finish()[-1][0].endswith("data: tail")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"data: hello\n\n", [SSEEvent("hello")], id="simple"),
        pytest.param(b"data: a\ndata: b\n\n", [SSEEvent("a\nb")], id="data-joins"),
        pytest.param(b"event: ping\ndata: {}\n\n", [SSEEvent("{}", event="ping")], id="event-name"),
        pytest.param(b"data:nospace\n\n", [SSEEvent("nospace")], id="no-space-after-colon"),
        pytest.param(b"data:  two\n\n", [SSEEvent(" two")], id="only-one-space-removed"),
        pytest.param(b"data\n\n", [SSEEvent("")], id="field-without-colon"),
        pytest.param(
            b": keep-alive\n\ndata: x\n\n", [SSEComment(" keep-alive"), SSEEvent("x")], id="comment"
        ),
        pytest.param(
            b"data: a\r\n\r\ndata: b\r\r", [SSEEvent("a"), SSEEvent("b")], id="crlf-and-cr"
        ),
        pytest.param(
            b"id: 7\nretry: 100\ndata: x\n\n", [SSEEvent("x", id="7", retry=100)], id="id-retry"
        ),
        pytest.param(b"retry: soon\ndata: x\n\n", [SSEEvent("x")], id="retry-not-digits"),
        pytest.param(b"foo: bar\ndata: x\n\n", [SSEEvent("x")], id="unknown-field"),
        pytest.param(b"event: lonely\n\n", [], id="no-data-no-dispatch"),
        pytest.param(
            b"data: last without blank line",
            [SSEEvent("last without blank line")],
            id="unterminated",
        ),
        pytest.param("data: €uro 😀\n\n".encode(), [SSEEvent("€uro 😀")], id="utf8"),
    ],
)
def test_decoder(data: bytes, expected: list[Item]) -> None:
    check(data, expected)


def test_crlf_split_across_feeds_is_one_terminator() -> None:
    lines = LineDecoder()
    assert lines.feed(b"data: a\r") == []
    assert lines.feed(b"\n\r\n") == [("data: a", b"data: a\r\n"), ("", b"\r\n")]


def test_multibyte_character_cut_in_the_middle() -> None:
    data = "data: 😀\n\n".encode()
    cut = data.index(b"\xf0") + 2
    items, _ = decode([data[:cut], data[cut:]])
    assert items == [SSEEvent("😀")]


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(SSEEvent("x"), id="plain"),
        pytest.param(SSEEvent("a\nb", event="message_start", id="1", retry=5), id="full"),
        pytest.param(SSEComment(" ping"), id="comment"),
    ],
)
def test_encode_then_decode_round_trips(item: Item) -> None:
    assert decode([encode_event(item)])[0] == [item]


def test_encode_data_fast_path() -> None:
    assert encode_data('{"a":1}') == b'data: {"a":1}\n\n'
    assert encode_data("a\nb") == b"data: a\ndata: b\n\n"


sse_lines = st.lists(
    st.one_of(
        st.builds(lambda t: f"data: {t}", st.text(max_size=12)),
        st.builds(lambda t: f"event: {t}", st.text(alphabet="abc_", max_size=6)),
        st.builds(lambda t: f":{t}", st.text(max_size=6)),
        st.just(""),
    ),
    max_size=20,
)


@given(
    lines=sse_lines,
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
)
def test_any_split_gives_the_same_events_and_loses_no_byte(
    lines: list[str], ending: str, cuts: list[int]
) -> None:
    lines = [line.replace("\r", "").replace("\n", "") for line in lines]
    data = "".join(line + ending for line in lines).encode()
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert decode(chunks) == decode([data])
    assert decode(chunks)[1] == data


@pytest.mark.parametrize("name", [n for n in fixture_names("") if n.endswith(".sse")])
def test_recorded_streams_decode_to_json_events(name: str) -> None:
    data = read(name)
    items, raw = decode([data])
    assert raw == data
    events = [i for i in items if isinstance(i, SSEEvent)]
    assert events
    for event in events:
        if event.data != "[DONE]":
            json.loads(event.data)
        assert decode([encode_event(event)])[0] == [event]
