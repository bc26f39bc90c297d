"""Keys in answers (``addon.redact.KeyRedactor`` / ``StreamRedactor``): every form of a key the
proxy holds replaced in a whole body, and in a stream however it is cut — the stream's output
joined is the whole body's redaction, and no key ever gets through."""

from __future__ import annotations

import itertools
import json
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.redact import REDACTED, KeyRedactor

KEY = "sk-proj-Ab/cd+EF=0123456789xyz"
B = REDACTED.encode()


def forms(key: str) -> list[bytes]:
    escaped = json.dumps(key)[1:-1]
    return [
        f.encode()
        for f in {
            key,
            escaped,
            escaped.replace("/", "\\/"),
            json.dumps(key, ensure_ascii=False)[1:-1],
            quote(key, safe=""),
            quote_plus(key, safe=""),
        }
    ]


def streamed(keys: KeyRedactor, pieces: list[bytes]) -> tuple[bytes, list[bytes]]:
    stream = keys.stream()
    out = [stream.feed(p) for p in pieces]
    out.append(stream.finish())
    return b"".join(out), out


# --------------------------------------------------------------------------- whole bodies


@pytest.mark.parametrize("form", forms(KEY))
def test_every_form_of_a_key_is_replaced(form: bytes) -> None:
    keys = KeyRedactor([KEY])
    body = b'{"error": {"message": "Bad request made with key ' + form + b'"}}'
    assert keys.body(body) == b'{"error": {"message": "Bad request made with key ' + B + b'"}}'


def test_a_masked_echo_is_no_key() -> None:
    keys = KeyRedactor([KEY])
    body = "key sk-…9xyz, sk-proj-****9xyz, sk-proj-Ab/cd+EF…".encode()
    assert keys.body(body) is body


def test_short_values_and_no_values_search_for_nothing() -> None:
    assert not KeyRedactor([None, "", "ollama", "  x  "])
    assert KeyRedactor(["ollama"]).body(b"ollama ollama") == b"ollama ollama"
    assert "0123456789" not in repr(KeyRedactor([KEY]))


def test_a_key_is_searched_as_sent_stripped() -> None:
    """An environment value with a newline: the key sent (and echoed) is the stripped one."""
    assert KeyRedactor([f" {KEY}\n"]).body(f"<{KEY}>".encode()) == b"<" + B + b">"


def test_several_keys_the_longest_form_first() -> None:
    short, long = "sk-abcdefgh", "sk-abcdefgh-longer"
    keys = KeyRedactor([short, long])
    assert keys.body(f"{long} {short}".encode()) == B + b" " + B
    assert keys.count(f"{long} {short} {long}".encode()) == 3


# --------------------------------------------------------------------------- streams


def test_a_key_cut_anywhere_is_found() -> None:
    keys = KeyRedactor([KEY])
    body = f'data: {{"text": "your key is {KEY}, see"}}\n\n'.encode()
    whole = keys.body(body)
    assert KEY.encode() not in whole
    for cut in range(len(body) + 1):
        for cut2 in range(cut, min(len(body), cut + len(KEY) + 2) + 1):
            out, _ = streamed(keys, [body[:cut], body[cut:cut2], body[cut2:]])
            assert out == whole, (cut, cut2)


def test_only_the_start_of_a_key_is_held_back() -> None:
    """A read that ends with a complete event goes on whole, at once; one that ends in what
    could be the start of a key holds back just that, never as much as the longest form."""
    keys = KeyRedactor([KEY])
    stream = keys.stream()
    event = b'data: {"text": "sk"}\n\n'
    assert stream.feed(event) == event
    assert stream.feed(b'data: {"text": "s') == b'data: {"text": "'
    assert stream.feed(b"k-proj-Ab") == b""  # still the start of the key: held
    assert stream.feed(b"c") == b"sk-proj-Abc"  # not the key after all
    assert stream.feed(b'"}\n\ndata: sk-proj-') == b'"}\n\ndata: '
    assert stream.finish() == b"sk-proj-"  # the end of the body: what was held goes on


def test_the_held_tail_is_shorter_than_the_longest_form() -> None:
    keys = KeyRedactor([KEY])
    stream = keys.stream()
    longest = max(len(f) for f in forms(KEY))
    assert keys.longest == longest
    text = KEY.encode()[:-1]
    assert stream.feed(b"x" * 100 + text) == b"x" * 100
    assert len(stream.finish()) == len(text) < longest


def test_no_key_nothing_changes_and_nothing_is_held() -> None:
    keys = KeyRedactor([KEY])
    stream = keys.stream()
    data = b"data: " + b"y" * 5000 + b"\n\n"
    assert stream.feed(data) is data
    assert stream.finish() == b""
    assert stream.replaced == 0


# --------------------------------------------------------------------------- properties

KEY_CHARS = st.sampled_from(
    'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_/+=.~%"\\é'
)
"""Characters of real keys, and those a body quotes in another form (``/``, ``+``, ``=``,
``%``, ``"``, ``\\``, non-ASCII). (Never ``[`` or ``]``: a key made of pieces of
``[REDACTED]`` could be remade by a replacement.)"""
TEXT = st.text(st.sampled_from('ab \n:{}"\\/sk-KEY%2F0123456789'), max_size=30)


@st.composite
def bodies(draw: st.DrawFn, keys: list[str]) -> bytes:
    """Text with the keys' forms (and their starts) dropped in."""
    parts: list[bytes] = []
    for _ in range(draw(st.integers(0, 6))):
        parts.append(draw(TEXT).encode())
        key = draw(st.sampled_from(keys))
        form = draw(st.sampled_from(forms(key)))
        if draw(st.booleans()):
            form = form[: draw(st.integers(1, len(form)))]  # a start only: not a key
        parts.append(form)
    parts.append(draw(TEXT).encode())
    return b"".join(parts)


def chunked(draw: st.DrawFn, body: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=12)))
    ends = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(ends)]


def leaks(out: bytes, keys: list[str]) -> list[bytes]:
    return [f for k in keys for f in forms(k) if f in out]


@settings(max_examples=600, deadline=None)
@given(st.data(), st.text(KEY_CHARS, min_size=8, max_size=24))
def test_any_chunking_of_a_body_gives_its_redaction(data: st.DataObject, key: str) -> None:
    keys = KeyRedactor([key])
    body = data.draw(bodies([key]))
    whole = keys.body(body)
    out, pieces = streamed(keys, chunked(data.draw, body))
    assert out == whole
    assert not leaks(out, [key])
    # The bytes of one read: never a key (a key split over two reads is in neither).
    for piece in pieces:
        assert not leaks(piece, [key])


@settings(max_examples=300, deadline=None)
@given(st.data(), st.lists(st.text(KEY_CHARS, min_size=6, max_size=16), min_size=1, max_size=4))
def test_several_keys_any_chunking(data: st.DataObject, tails: list[str]) -> None:
    """Several keys (a pool): each starts ``K<n>_`` so that none overlaps another."""
    keys = [f"K{n}_{tail.replace('K', 'k')}" for n, tail in enumerate(tails)]
    redactor = KeyRedactor(keys)
    body = data.draw(bodies(keys))
    out, _ = streamed(redactor, chunked(data.draw, body))
    assert out == redactor.body(body)
    assert not leaks(out, keys)
