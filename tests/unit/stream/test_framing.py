"""JSON-array framing: the incremental splitter and writer, and the processor using them."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon.dialects.openai_chat.stream import OpenAIChatStreamDecoder
from addon.dialects.openai_chat.stream_encode import OpenAIChatStreamEncoder
from addon.model import Event, MessageStart, StreamEnd, TextDelta
from addon.stream.framing import JsonArraySplitter, JsonArrayWriter
from addon.stream.processor import StreamProcessor
from tests.unit.helpers import feed_at

# --------------------------------------------------------------------------- splitter


def split(data: bytes, cuts: list[int], max_item: int = 1 << 20) -> tuple[list[str], bytes, Any]:
    """Items, the raw bytes of everything returned plus what is pending, and the error."""
    s = JsonArraySplitter(max_item)
    items: list[str] = []
    raw = b""
    start = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        for text, r in s.feed(data[start:cut]):
            items.append(text)
            raw += r
        start = cut
        if s.error:
            return items, raw + s.pending(), s.error
    for text, r in s.finish():
        items.append(text)
        raw += r
    return items, raw + s.pending(), s.error


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
OBJECTS = st.dictionaries(st.text(), VALUES, max_size=5)


def array_bytes(items: list[Any], style: int) -> bytes:
    if style == 0:  # Gemini's own: items joined by ",\r\n"
        return ("[" + ",\r\n".join(json.dumps(i) for i in items) + "]").encode()
    if style == 1:  # pretty, unescaped UTF-8
        return json.dumps(items, indent=2, ensure_ascii=False).encode()
    return json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(OBJECTS | st.lists(VALUES, max_size=3), max_size=6),
    style=st.integers(0, 2),
    data=st.data(),
)
def test_any_split_gives_the_items_and_loses_no_byte(
    items: list[Any], style: int, data: Any
) -> None:
    body = array_bytes(items, style)
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=30))
    texts, raw, error = split(body, cuts)
    assert error is None
    assert [json.loads(t) for t in texts] == items
    assert raw == body


def test_byte_by_byte_inside_strings_escapes_and_utf8() -> None:
    items = [{"t": 'a "quoted" \\ back\\slash }{ ][ é 😀 \u2028'}, {"n": [1, {"x": "]"}]}]
    body = json.dumps(items, ensure_ascii=False).encode()
    texts, raw, error = split(body, list(range(len(body))))
    assert error is None and raw == body
    assert [json.loads(t) for t in texts] == items


def test_items_come_as_soon_as_they_close() -> None:
    s = JsonArraySplitter()
    assert s.feed(b'[{"a": 1}') == [('{"a": 1}', b'[{"a": 1}')]
    assert s.feed(b',\r\n{"b": "x') == []
    assert s.pending() == b',\r\n{"b": "x'
    assert s.feed(b'\\""}') == [('{"b": "x\\""}', b',\r\n{"b": "x\\""}')]
    assert s.feed(b"\n]\n") == []
    assert s.finish() == [] and s.error is None


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'"not an array"', "not a JSON array"),
        (b"[1, 2]", "not an object"),
        (b'[{"a": 1} {"b": 2}]', "after a JSON array item"),
        (b'[{"a": 1}] trailing', "after the end"),
    ],
)
def test_malformed_framing_is_reported_and_its_bytes_kept(body: bytes, why: str) -> None:
    texts, raw, error = split(body, [])
    assert error is not None and why in error
    assert raw == body
    assert all(json.loads(t) for t in texts)  # the items before the fault still came


def test_one_object_instead_of_an_array_is_one_item() -> None:
    texts, raw, error = split(b'\xef\xbb\xbf {"error": {"code": 400}}\n', [1, 2])
    assert error is None and raw.startswith(b"\xef\xbb\xbf")
    assert texts == ['{"error": {"code": 400}}']


def test_an_unfinished_item_is_handed_over_at_the_end() -> None:
    texts, raw, error = split(b'[{"a": 1},\n{"b": "cut', [5])
    assert error is None
    assert texts == ['{"a": 1}', '{"b": "cut']
    assert raw == b'[{"a": 1},\n{"b": "cut'


def test_an_item_larger_than_the_bound_fails() -> None:
    body = b'[{"a": "' + b"x" * 5000 + b'"}]'
    texts, raw, error = split(body, list(range(0, len(body), 100)), max_item=1000)
    assert error is not None and "larger than" in error
    assert texts == [] and raw.startswith(b'[{"a": "xxx')


def test_empty_array_and_trailing_comma() -> None:
    assert split(b" [ ] ", []) == ([], b" [ ] ", None)
    texts, _, error = split(b'[{"a":1},]', [])
    assert error is None and texts == ['{"a":1}']


# --------------------------------------------------------------------------- writer


def test_writer_writes_geminis_array() -> None:
    w = JsonArrayWriter()
    assert w.pairs([(None, '{"a":1}'), ("ignored", '{"b":2}')]) == [b'[{"a":1}', b',\r\n{"b":2}']
    assert w.pairs([]) == []
    assert w.close() == b"]"
    assert w.close() == b""
    assert JsonArrayWriter().close() == b"[]"


# --------------------------------------------------------------------------- processor


class _Echo:
    """A decoder that turns each item into a text delta of its ``t`` field."""

    fast_path = None

    def __init__(self) -> None:
        self.started = False

    def feed(self, data: str, event: str | None) -> list[Event]:
        item = json.loads(data)
        if "boom" in item:
            raise ValueError("boom")
        out: list[Event] = []
        if not self.started:
            self.started = True
            out.append(MessageStart("test", id="x"))
        return [*out, TextDelta(item["t"])]

    def finish(self) -> list[Event]:
        return [StreamEnd()]


class _JsonEncoder:
    fast_path = None

    def __init__(self) -> None:
        self.done = False

    def feed(self, event: Event) -> list[tuple[str | None, str]]:
        if isinstance(event, TextDelta):
            return [(None, json.dumps({"t": event.text}))]
        return []

    def finish(self) -> list[tuple[str | None, str]]:
        return []


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(), max_size=6), data=st.data())
def test_json_array_in_and_out_split_anywhere(texts: list[str], data: Any) -> None:
    body = array_bytes([{"t": t} for t in texts], 1)
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=20))
    p = StreamProcessor(_Echo(), _JsonEncoder(), framing_in="json_array", framing_out="json_array")
    out = feed_at(p, body, cuts)
    assert p.error is None
    assert json.loads(out) == [{"t": t} for t in texts]


def test_json_array_in_sse_out() -> None:
    body = b'[{"t": "a"}\n,\r\n{"t": "b"}]'
    p = StreamProcessor(_Echo(), _JsonEncoder(), framing_in="json_array")
    assert feed_at(p, body, [3, 9]) == b'data: {"t": "a"}\n\ndata: {"t": "b"}\n\n'


def test_sse_in_json_array_out_drops_comments() -> None:
    body = b': keep-alive\n\ndata: {"t": "a"}\n\n: ping\n\ndata: {"t": "b"}\n\n'
    p = StreamProcessor(_Echo(), _JsonEncoder(), framing_out="json_array")
    assert feed_at(p, body, [5]) == b'[{"t": "a"},\r\n{"t": "b"}]'


def test_nothing_written_is_an_empty_array() -> None:
    p = StreamProcessor(_Echo(), _JsonEncoder(), framing_in="json_array", framing_out="json_array")
    assert feed_at(p, b"[]", []) == b"[]"


@pytest.mark.parametrize("cut", range(1, 40))
def test_a_failing_item_gives_back_the_raw_rest(cut: int) -> None:
    body = b'[{"t": "a"},\r\n{"boom": 1},\r\n{"t": "c"}]'
    p = StreamProcessor(_Echo(), _JsonEncoder(), framing_in="json_array", framing_out="json_array")
    out = feed_at(p, body, [cut])
    assert p.passthrough and p.error is not None and "boom" in p.error
    assert out == b'[{"t": "a"}' + body[len(b'[{"t": "a"}') :]


def test_bad_framing_gives_back_the_raw_rest() -> None:
    body = b'[{"t": "a"} garbage {"t": "b"}]'
    p = StreamProcessor(_Echo(), _JsonEncoder(), framing_in="json_array")
    out = feed_at(p, body, [4, 15])
    assert p.passthrough and p.error is not None and "JSON array" in p.error
    assert out == b'data: {"t": "a"}\n\n' + body[len(b'[{"t": "a"}') :]


def test_a_cut_item_at_the_end_is_given_back() -> None:
    body = b'[{"t": "a"},\n{"t": "cu'
    p = StreamProcessor(_Echo(), _JsonEncoder(), framing_in="json_array", framing_out="json_array")
    out = feed_at(p, body, [7])
    assert p.passthrough
    assert out == b'[{"t": "a"}' + b',\n{"t": "cu'


def test_unknown_framing_is_refused() -> None:
    with pytest.raises(ValueError):
        StreamProcessor(_Echo(), _JsonEncoder(), framing_in="xml")  # type: ignore[arg-type]


def test_sse_path_is_unchanged_by_the_json_machinery() -> None:
    """OpenAI → OpenAI over SSE, split anywhere: the same bytes whichever way it is cut."""
    rng = random.Random(7)
    body = (
        b"".join(
            b"data: "
            + json.dumps(
                {"id": "c", "choices": [{"index": 0, "delta": {"content": f"w{i} "}}]}
            ).encode()
            + b"\n\n"
            for i in range(20)
        )
        + b"data: [DONE]\n\n"
    )

    def once(cuts: list[int]) -> bytes:
        p = StreamProcessor(OpenAIChatStreamDecoder(), OpenAIChatStreamEncoder())
        return feed_at(p, body, cuts)

    whole = once([])
    for _ in range(20):
        assert once(rng.sample(range(1, len(body)), 15)) == whole
