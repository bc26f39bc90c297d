"""Incremental ``Content-Encoding`` decoders for streamed answers (``make_decompressor``).

Contract: bytes in, bytes out, chunks split anywhere; ``finish`` flushes, is idempotent and
raises ``DecompressError`` for a stream cut before its end marker; corrupt input raises
``DecompressError``, an encoding it cannot undo ``UnsupportedEncoding`` (both ``ValueError``).
mitmproxy decodes only whole bodies; a stream must be undone as it comes."""

from __future__ import annotations

import zlib
from typing import Any, Protocol


class UnsupportedEncoding(ValueError):
    """A Content-Encoding we cannot undo incrementally."""


class DecompressError(ValueError):
    """The compressed bytes are corrupt or cut short."""


class Decompressor(Protocol):
    def feed(self, chunk: bytes) -> bytes: ...
    def finish(self) -> bytes: ...


def _truncated(name: str) -> DecompressError:
    return DecompressError(f"{name}: the stream ends before its end marker (truncated)")


class _Gzip:
    """gzip members, one after the other; zero padding between or after them is skipped."""

    def __init__(self) -> None:
        self._obj: zlib._Decompress | None = None  # None between members
        self._done = False

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        try:
            while chunk:
                if self._obj is None:
                    chunk = chunk.lstrip(b"\0")
                    if not chunk:
                        break
                    self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out.append(self._obj.decompress(chunk))
                if not self._obj.eof:
                    break
                chunk = self._obj.unused_data
                self._obj = None
        except zlib.error as e:
            raise DecompressError(f"gzip: {e}") from e
        return b"".join(out)

    def finish(self) -> bytes:
        if self._done:
            return b""
        self._done = True
        if self._obj is not None:  # inside a member
            raise _truncated("gzip")
        return b""


# The first byte of a zlib stream: compression method 8 (deflate), window size up to 32 KiB.
_ZLIB_CMF = frozenset(range(0x08, 0x80, 0x10))


def _is_zlib_header(head: bytes) -> bool:
    cmf, flg = head[0], head[1]
    return cmf in _ZLIB_CMF and (cmf << 8 | flg) % 31 == 0


class _Deflate:
    """deflate: zlib-wrapped (RFC 9110), or raw deflate as some servers send it.

    The first two bytes tell them apart: a raw stream practically never starts
    with a valid zlib header (it would have to open with a non-final stored
    block and a set padding bit).
    """

    def __init__(self) -> None:
        self._head = b""  # the first byte, while waiting for the second
        self._obj: zlib._Decompress | None = None
        self._done = False

    def feed(self, chunk: bytes) -> bytes:
        if self._obj is None:
            chunk = self._head + chunk
            if len(chunk) < 2:
                self._head = chunk
                return b""
            self._head = b""
            self._obj = zlib.decompressobj(zlib.MAX_WBITS if _is_zlib_header(chunk) else -15)
        try:
            out = self._obj.decompress(chunk)
        except zlib.error as e:
            raise DecompressError(f"deflate: {e}") from e
        if self._obj.unused_data:
            raise DecompressError("deflate: bytes after the end of the stream")
        return out

    def finish(self) -> bytes:
        if self._done:
            return b""
        self._done = True
        if self._head or (self._obj is not None and not self._obj.eof):
            raise _truncated("deflate")
        return b""


class _Brotli:
    def __init__(self) -> None:
        import brotli

        self._error: type[Exception] = brotli.error
        self._obj = brotli.Decompressor()
        self._started = False
        self._done = False

    def feed(self, chunk: bytes) -> bytes:
        if not chunk:
            return b""
        self._started = True
        try:
            out: bytes = self._obj.process(chunk)
        except self._error as e:
            raise DecompressError(f"br: {e}") from e
        return out

    def finish(self) -> bytes:
        if self._done:
            return b""
        self._done = True
        if self._started and not self._obj.is_finished():
            raise _truncated("br")
        return b""


def zstd_module() -> Any:
    """The zstd bindings: the standard library's (3.14) or its backport, which mitmproxy 12 installs."""
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        from backports import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]
    return zstd


class _Zstd:
    """zstd frames, one after the other."""

    def __init__(self) -> None:
        zstd = zstd_module()
        self._new = zstd.ZstdDecompressor
        self._error: type[Exception] = zstd.ZstdError
        self._obj = self._new()
        self._in_frame = False
        self._done = False

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        try:
            while chunk:
                if self._obj.eof:  # a decompressobj stops at the end of its frame
                    self._obj = self._new()
                self._in_frame = True
                out.append(self._obj.decompress(chunk))
                if not self._obj.eof:
                    break
                self._in_frame = False
                chunk = self._obj.unused_data
        except self._error as e:
            raise DecompressError(f"zstd: {e}") from e
        return b"".join(out)

    def finish(self) -> bytes:
        if self._done:
            return b""
        self._done = True
        if self._in_frame:
            raise _truncated("zstd")
        return b""


class _Chain:
    """Several decoders, the output of each fed to the next."""

    def __init__(self, steps: list[Decompressor]) -> None:
        self._steps = steps

    def feed(self, chunk: bytes) -> bytes:
        for step in self._steps:
            if not chunk:
                break
            chunk = step.feed(chunk)
        return chunk

    def finish(self) -> bytes:
        data = b""
        for step in self._steps:
            data = (step.feed(data) if data else b"") + step.finish()
        return data


def _one(name: str) -> Decompressor | None:
    match name:
        case "" | "identity":
            return None
        case "gzip" | "x-gzip":
            return _Gzip()
        case "deflate":
            return _Deflate()
        case "br":
            return _Brotli()
        case "zstd":
            return _Zstd()
    raise UnsupportedEncoding(f"Content-Encoding {name!r} cannot be decoded")


def make_decompressor(content_encoding: str | None) -> Decompressor | None:
    """A decoder for a ``Content-Encoding`` value, or None when the body is not encoded:
    ``gzip`` / ``x-gzip``, ``deflate`` (zlib-wrapped or raw), ``br``, ``zstd``, and lists of
    them (undone in reverse order)."""
    if not content_encoding:
        return None
    names = [name.strip().lower() for name in content_encoding.split(",")]
    steps = [step for step in map(_one, reversed(names)) if step is not None]
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else _Chain(steps)
