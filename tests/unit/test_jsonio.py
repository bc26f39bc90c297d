"""Strict JSON (``addon.jsonio``): msgspec, and the standard library for what msgspec refuses
that is still JSON. Small or big, hot path or not, it reads and writes the same."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.jsonio import REFUSED, dumpb, dumps, fast_loads, loads

PAD = "p" * 100_000


def big(raw: bytes) -> bytes:
    """``raw`` as a value inside a big body."""
    return b'{"pad":"' + PAD.encode() + b'","v":' + raw + b"}"


def _not_json(name: str) -> None:
    raise AssertionError(f"{name} written")


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_what_it_writes_reads_back_the_same_as_the_standard_library_reads_it(value: Any) -> None:
    for v in (value, {"pad": PAD, "v": value}):
        raw = dumpb(v)
        assert loads(raw) == v == json.loads(raw)
        assert dumps(v) == raw.decode()
        json.loads(raw.decode("utf-8"), parse_constant=_not_json)  # UTF-8, no NaN / Infinity


STRICT_REFUSALS = [
    pytest.param(b"NaN", id="NaN"),
    pytest.param(b"[Infinity]", id="Infinity"),
    pytest.param(b"-Infinity", id="-Infinity"),
    pytest.param(b"1e400", id="overflowing float"),
    pytest.param(b"[-1e999]", id="overflowing negative float"),
    pytest.param(b'"\xff"', id="not UTF-8"),
    pytest.param(b'"\xed\xa0\xbd"', id="a surrogate encoded as UTF-8"),
    pytest.param(b"[1,]", id="trailing comma"),
    pytest.param(b"{'a':1}", id="single quotes"),
    pytest.param(b'"a" "b"', id="trailing text"),
    pytest.param(b"", id="empty"),
]


@pytest.mark.parametrize("raw", STRICT_REFUSALS)
def test_what_is_not_strict_json_is_a_value_error_small_or_big(raw: bytes) -> None:
    for body in (raw, big(raw)):
        with pytest.raises(ValueError):
            loads(body)
        with pytest.raises(REFUSED):
            fast_loads(body)


@pytest.mark.parametrize(
    "raw, value",
    [
        (b'"\\ud83d"', "\ud83d"),  # a lone surrogate escape is JSON (msgspec refuses it)
        (b"123456789012345678901234567890", 123456789012345678901234567890),
        (b"-9223372036854775809", -9223372036854775809),  # every digit kept
        (b"18446744073709551616", 18446744073709551616),
        (b"1.5e308", 1.5e308),
        (b'{"a":1,"a":2}', {"a": 2}),
        (b'\t ["\xc3\xa9"] \n', ["é"]),
    ],
)
def test_json_that_is_awkward_is_read_exactly_small_or_big(raw: bytes, value: Any) -> None:
    assert loads(raw) == value
    assert loads(big(raw)) == {"pad": PAD, "v": value}
    assert loads(raw.decode("utf-8")) == value


def test_nesting_too_deep_is_a_recursion_error() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    for body in (deep, big(deep)):
        with pytest.raises(RecursionError):
            loads(body)
    # Deep, but within the standard library's reach: read.
    fine = b"[" * 600 + b"]" * 600
    assert loads(big(fine))["v"] == json.loads(fine)


def test_writing_is_compact_strict_utf8() -> None:
    assert dumpb({"a": "é漢🙂", "b": [1, 2.5, None, True]}) == (
        '{"a":"é漢🙂","b":[1,2.5,null,true]}'.encode()
    )
    # A lone surrogate cannot be UTF-8: the whole value with ASCII escapes, still JSON.
    assert dumpb({"a": "\ud83d", "b": "é"}) == b'{"a":"\\ud83d","b":"\\u00e9"}'
    assert dumps({"a": "\ud83d"}) == '{"a":"\\ud83d"}'
    assert dumpb(2**70) == b"1180591620717411303424"
    for value in (math.nan, math.inf, -math.inf):
        assert dumpb([value]) == b"[null]"  # never NaN / Infinity
    text = "x" * (5 << 20)  # past 4 MiB: the size where orjson slowed down
    assert dumpb({"a": text}) == b'{"a":"' + text.encode() + b'"}'


def test_the_hot_path_reads_a_json_string_as_loads_does() -> None:
    for raw in (b'"plain"', b'"line\\nbreak \\u00e9 \\"q\\""', '"é"'.encode()):
        assert fast_loads(raw) == loads(raw)
