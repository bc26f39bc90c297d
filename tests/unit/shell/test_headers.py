"""The shell's header helpers: one pass over mitmproxy's fields, the same result as its
dictionary interface."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from mitmproxy import http

from addon.shell.headers import header_map, replace_headers

NAMES = ["Authorization", "x-api-key", "X-Api-Key", "anthropic-version", "Accept", "cookie"]
VALUES = ["a", "Bearer sk-x", "é", "two, parts", ""]


def fields_of(pairs: list[tuple[str, str]]) -> http.Headers:
    return http.Headers([(k.encode(), v.encode()) for k, v in pairs])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES)), max_size=8),
    st.lists(st.sampled_from([n.lower() for n in NAMES] + ["absent"]), max_size=3),
    st.lists(st.tuples(st.sampled_from([*NAMES, "New-One"]), st.sampled_from(VALUES)), max_size=3),
)
def test_replacing_headers_in_one_pass_is_pop_then_set(
    pairs: list[tuple[str, str]], drop: list[str], put: list[tuple[str, str]]
) -> None:
    ours, theirs = fields_of(pairs), fields_of(pairs)
    replace_headers(ours, drop, put)
    for name in drop:
        theirs.pop(name, None)
    for name, value in put:
        theirs[name] = value
    assert header_map(ours) == header_map(theirs)
    assert sorted(f[0].lower() for f in ours.fields) == sorted(f[0].lower() for f in theirs.fields)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES)), max_size=8))
def test_the_header_map_joins_repeated_headers_as_mitmproxy_reads_them(
    pairs: list[tuple[str, str]],
) -> None:
    headers = fields_of(pairs)
    expected = {name.lower(): ", ".join(headers.get_all(name)) for name in headers}
    assert header_map(headers) == expected


def test_bytes_that_are_not_utf8_survive_a_replacement() -> None:
    headers = http.Headers([(b"x-odd", b"\xff\xfe"), (b"x-api-key", b"k")])
    replace_headers(headers, ["x-api-key"], [("authorization", "Bearer k")])
    assert headers.fields == ((b"x-odd", b"\xff\xfe"), (b"authorization", b"Bearer k"))
    assert header_map(headers)["x-odd"] == "\udcff\udcfe"
