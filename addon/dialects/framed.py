"""The one matcher of framed runs: a read of whole SSE events that are all one frame (the
bytes a dialect writes before and after a JSON string) around a body each.

Contract: bytes in, an exact answer out — a yes only where reading the events one by one
would find the same bodies; a no costs the caller the slow way, never a wrong answer. Used by
OpenAI chat's ``text_run`` / ``skippable_run`` and the fast path (``addon.stream.processor``)."""

from __future__ import annotations

import re

from addon.jsonio import REFUSED, fast_strings

UNQUOTED = re.compile(rb'[^"\x00-\x1f]*(?<!\\)').fullmatch
"""Between a frame's ends: no quote, no control character, no backslash last (it would
escape the closing quote) (the stream fast path)…"""
PLAIN_ASCII = re.compile(rb"[ !#-\[\]-~]*").fullmatch
"""…and printable ASCII without a quote or a backslash: a JSON string's content that is its
text, written as ``dumpb`` writes it."""
_CONTROL = bytes(range(32))
_NOT_PLAIN = _CONTROL + b'"\\\x7f'
"""What a plain text's bytes hold none of, bar what is not ASCII (``PLAIN_ASCII``)."""
_BACKSLASH = ord("\\")


def framed_run(chunk: bytes, head: bytes, tail: bytes, bodies: list[bytes]) -> bool:
    """Whether ``chunk`` is events of one frame and nothing else: ``head``, a body without a
    quote and not ending in a backslash, ``tail``, again and again. The bodies go to
    ``bodies`` (their other bytes are for the caller to check). The frame's ends are a JSON
    string's quotes: each body ends at the first quote after its start (``find``: memchr), and
    the next one starts a frame's tail and head further on; the chunk is then compared with
    the frames written around the bodies found (one ``memcmp``)."""
    size, start = len(chunk), len(head)
    step = len(tail) + start
    find, add = chunk.find, bodies.append
    pos = start
    for _ in range(size):  # each event takes at least one byte: bounded
        end = find(b'"', pos)
        if end < 0 or chunk[end - 1] == _BACKSLASH:
            return False
        add(chunk[pos:end])
        pos = end + step
        if pos >= size:
            break
    return pos == size + start and chunk == head + (tail + head).join(bodies) + tail


def unquoted_run(chunk: bytes, head: bytes, tail: bytes) -> int:
    """How many events ``chunk`` holds when it is events of one frame whose bodies
    ``UNQUOTED`` takes (``framed_run``), else 0."""
    bodies: list[bytes] = []
    if framed_run(chunk, head, tail, bodies):
        joined = b"".join(bodies)
        if len(joined.translate(None, _CONTROL)) == len(joined):  # none in any body
            return len(bodies)
    return 0


def framed_texts(chunk: bytes, head: bytes, tail: bytes) -> tuple[int, bytes | None, object]:
    """``framed_run`` for the text lane: how many events, and their text as one delta — as
    one plain JSON string (printable ASCII without a backslash: its bytes are the text) or
    decoded (anything else: each body read as a JSON string of its own, as event by event,
    then joined). ``(0, None, None)``: not such a read, or a body that is not a JSON string's
    content."""
    bodies: list[bytes] = []
    if not framed_run(chunk, head, tail, bodies):
        return 0, None, None
    n = len(bodies)
    joined = b"".join(bodies)
    if joined.isascii() and len(joined.translate(None, _NOT_PLAIN)) == len(joined):
        return n, b'"' + joined + b'"', None  # as PLAIN_ASCII would say, in fewer passes
    try:
        # Bodies hold no quote and end in no backslash (``framed_run``): n strings exactly
        # when each is a JSON string's content (the count checked all the same).
        texts = fast_strings(b'["' + b'","'.join(bodies) + b'"]')
    except REFUSED:
        return 0, None, None
    return (n, None, "".join(texts)) if len(texts) == n else (0, None, None)
