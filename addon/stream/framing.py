"""JSON-array framing: a streamed body that is one JSON array written item by item.

Contract: sans-IO and incremental; ``JsonArraySplitter`` reads it (one item as soon as it
closes), ``JsonArrayWriter`` writes it (``[``, items joined by ``,\r\n``, ``]``). Gemini
answers ``:streamGenerateContent`` without ``alt=sse`` this way."""

from __future__ import annotations

import re
from typing import Literal

_SKIP = re.compile(rb'(?:[^"{}\[\]]++|"(?:[^"\\]++|\\.)*+")*+', re.S)
"""Inside an item: everything up to the next bracket outside strings, whole strings included
(possessive, so an unfinished string costs one pass, never a backtracking search)."""
_STRING_BODY = re.compile(rb'(?:[^"\\]++|\\.)*+', re.S)
"""The rest of a string up to its closing quote (or a backslash whose byte is not here yet)."""
_NON_BLANK = re.compile(rb"[^ \t\r\n]")
_BOM = b"\xef\xbb\xbf"

MAX_ITEM = 64 * 1024 * 1024
"""The largest item held (bytes): a body that never closes its item is not buffered forever."""

type _State = Literal["start", "item", "in_item", "after", "done", "failed"]


def _match_end(pattern: re.Pattern[bytes], buf: bytearray, pos: int) -> int:
    m = pattern.match(buf, pos)
    return pos if m is None else m.end()


class JsonArraySplitter:
    """bytes → ``(item text, raw bytes)`` pairs, one per top-level item of a JSON array.

    Chunks split anywhere (inside a string, an escape, a UTF-8 character) give the JSON text of
    each top-level item as soon as its closing bracket arrives. Every byte is scanned about
    once (possessive regular expressions skip strings and text up to the next bracket, in C),
    UTF-8 is decoded only on whole items, and only the item being assembled is held: memory is
    bounded by the largest item (``max_item`` bytes, an error beyond). Each item comes with its
    raw bytes (the separators before it included), and the raw parts of all items returned so
    far plus ``pending()`` always equal the input, so that the caller can give back the exact
    original bytes. Malformed framing (not an array, a bare scalar item, text after the
    closing ``]``) is reported in ``error`` (the items before it are still returned) and
    nothing is consumed after it.

    Leniency: a body that is one JSON object instead of an array (some gateways answer an
    error or a single chunk so) is that one item; a comma before ``]`` is accepted. The items'
    own JSON is not validated here: that is the dialect decoder's job."""

    __slots__ = (
        "_buf",
        "_depth",
        "_in_string",
        "_item_start",
        "_max_item",
        "_pos",
        "_single",
        "_state",
        "error",
    )

    def __init__(self, max_item: int = MAX_ITEM) -> None:
        self._buf = bytearray()
        """Bytes not yet returned (from the end of the last item returned)."""
        self._pos = 0
        """Where scanning resumes in ``_buf``."""
        self._state: _State = "start"
        self._item_start = 0
        self._depth = 0
        self._in_string = False
        self._single = False
        """The body is one object, not an array."""
        self._max_item = max_item
        self.error: str | None = None
        """Why the framing could not be read; once set, nothing more is returned."""

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        if not chunk or self._state == "failed":
            return []  # after a failure the caller passes bytes through itself
        self._buf += chunk
        out: list[tuple[str, bytes]] = []
        consumed = self._scan(out)
        if consumed:
            del self._buf[:consumed]
            self._pos -= consumed
            self._item_start = max(self._item_start - consumed, 0)
        if len(self._buf) > self._max_item and self.error is None:
            self._fail(f"a JSON array item larger than {self._max_item} bytes")
        return out

    def finish(self) -> list[tuple[str, bytes]]:
        """What is left when the body ends: an unfinished item is returned as it is, so that
        the caller's decoder reports it (it is not JSON) and gives its bytes back."""
        if self._state != "in_item":
            return []  # what is held is framing (``]``, separators, blanks), not content
        raw = bytes(self._buf)
        text = raw[self._item_start :].decode("utf-8", "replace")
        self._buf.clear()
        self._pos = self._item_start = 0
        self._state = "done"
        return [(text, raw)]

    def pending(self) -> bytes:
        """The raw bytes not yet returned as (part of) an item."""
        return bytes(self._buf)

    # ------------------------------------------------------------------ internals

    def _fail(self, why: str) -> bool:
        self._state = "failed"
        self.error = why
        return True

    def _scan(self, out: list[tuple[str, bytes]]) -> int:
        """Scan from ``_pos``; append finished items; return how many bytes were consumed."""
        buf = self._buf
        consumed = 0
        pos = self._pos
        while True:
            state = self._state
            if state == "in_item":
                if self._in_string:
                    end = _match_end(_STRING_BODY, buf, pos)
                    if end < len(buf) and buf[end] == 0x22:  # the closing quote
                        self._in_string = False
                        pos = end + 1
                        continue
                    pos = end  # the end of the data, or a backslash whose byte is to come
                    break
                end = _match_end(_SKIP, buf, pos)
                if end >= len(buf):
                    pos = end
                    break
                c = buf[end]
                pos = end + 1
                if c == 0x22:  # a string that does not end in what has come so far
                    self._in_string = True
                elif c in (0x7B, 0x5B):  # { [
                    self._depth += 1
                else:
                    self._depth -= 1
                    if self._depth == 0:
                        raw = bytes(buf[consumed:pos])
                        text = bytes(buf[self._item_start : pos]).decode("utf-8", "replace")
                        out.append((text, raw))
                        consumed = pos
                        self._state = "done" if self._single else "after"
                continue
            # Between items: the next non-blank byte decides.
            m = _NON_BLANK.search(buf, pos)
            if m is None:
                pos = len(buf)
                break
            step = self._punctuation(buf, m.start(), state)
            if step is None:
                break
            pos = step
        self._pos = pos
        return consumed

    def _punctuation(self, buf: bytearray, at: int, state: _State) -> int | None:
        """The non-blank byte at ``at``, between items: where scanning resumes, or None to
        stop (more bytes needed, or the framing failed)."""
        c = buf[at]
        if state == "start":
            if at == 0 and c == _BOM[0]:  # nothing is consumed before the first item
                if len(buf) < len(_BOM) and _BOM.startswith(bytes(buf)):
                    return None  # the rest of a byte-order mark may follow
                if buf.startswith(_BOM):
                    return len(_BOM)
            if c == 0x5B:  # [
                self._state = "item"
                return at + 1
            if c == 0x7B:  # {: one object, not an array
                self._single = True
                self._open_item(at)
                return at + 1
            self._fail(f"the body is not a JSON array (starts with {bytes([c])!r})")
            return None
        if state == "item":
            if c in (0x7B, 0x5B):
                self._open_item(at)
                return at + 1
            if c == 0x5D:  # ]: an empty array, or a comma before the end
                self._state = "done"
                return at + 1
            self._fail(f"a JSON array item that is not an object ({bytes([c])!r})")
            return None
        if state == "after":
            if c == 0x2C:  # ,
                self._state = "item"
                return at + 1
            if c == 0x5D:
                self._state = "done"
                return at + 1
            self._fail(f"{bytes([c])!r} after a JSON array item, not ',' or ']'")
            return None
        self._fail("data after the end of the JSON array")  # done (or failed)
        return None

    def _open_item(self, at: int) -> None:
        self._state = "in_item"
        self._item_start = at
        self._depth = 1
        self._in_string = False


class JsonArrayWriter:
    """Encoder ``(name, data)`` pairs → the bytes of one JSON array, written as items come
    (event names have no place in this framing and are dropped)."""

    __slots__ = ("_closed", "_count")

    def __init__(self) -> None:
        self._count = 0
        self._closed = False

    def pairs(self, pairs: list[tuple[str | None, str]]) -> list[bytes]:
        if self._closed or not pairs:
            return []
        out: list[bytes] = []
        for _, data in pairs:
            out.append((b"[" if self._count == 0 else b",\r\n") + data.encode())
            self._count += 1
        return out

    def close(self) -> bytes:
        """``]`` (``[]`` when nothing was written); idempotent."""
        if self._closed:
            return b""
        self._closed = True
        return b"]" if self._count else b"[]"
