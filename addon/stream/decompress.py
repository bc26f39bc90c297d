"""Incremental ``Content-Encoding`` decoders for streamed answers.

Contract: bytes in, bytes out, chunk by chunk; ``finish`` flushes and is
idempotent. Some upstreams compress an SSE answer even when the request said
``Accept-Encoding: identity``; the processor must read it as it arrives, so
whole-body decoding (mitmproxy's ``get_content``) cannot be used. No I/O here.

Supported: ``gzip`` / ``x-gzip`` (concatenated members too), ``deflate``
(zlib-wrapped, or raw as some servers send it), ``br`` (the ``brotli``
package) and ``zstd`` (the ``zstandard`` package), both of which mitmproxy
itself depends on. ``gzip, br`` is undone in reverse order.
"""

from __future__ import annotations

import zlib
from typing import Protocol


class UnsupportedEncoding(ValueError):
    """A Content-Encoding we cannot undo incrementally; the stream is passed through as is."""


class DecompressError(ValueError):
    """The compressed bytes are corrupt."""


class Decompressor(Protocol):
    def feed(self, chunk: bytes) -> bytes: ...
    def finish(self) -> bytes: ...


class _Zlib:
    """gzip (``wbits=31``) or deflate (zlib-wrapped, falling back to raw)."""

    def __init__(self, gzip: bool) -> None:
        self._gzip = gzip
        self._wbits = 31 if gzip else 15
        self._obj = zlib.decompressobj(self._wbits)
        self._started = False
        self._done = False

    def feed(self, chunk: bytes) -> bytes:
        try:
            if not self._gzip and not self._started and chunk:
                self._started = True
                try:
                    return self._loop(chunk)
                except zlib.error:
                    # Raw deflate without the zlib header (seen from some servers).
                    self._wbits = -15
                    self._obj = zlib.decompressobj(self._wbits)
            self._started = True
            return self._loop(chunk)
        except zlib.error as e:
            raise DecompressError(str(e)) from e

    def _loop(self, chunk: bytes) -> bytes:
        out = [self._obj.decompress(chunk)]
        # A gzip body may hold several members back to back.
        while self._obj.eof and self._obj.unused_data:
            rest = self._obj.unused_data
            self._obj = zlib.decompressobj(self._wbits)
            out.append(self._obj.decompress(rest))
        return b"".join(out)

    def finish(self) -> bytes:
        if self._done:
            return b""
        self._done = True
        try:
            return self._obj.flush()
        except zlib.error as e:
            raise DecompressError(str(e)) from e


class _Brotli:
    def __init__(self) -> None:
        import brotli

        self._obj = brotli.Decompressor()

    def feed(self, chunk: bytes) -> bytes:
        try:
            out: bytes = self._obj.process(chunk)
        except Exception as e:  # brotli.error is not a stable name across versions
            raise DecompressError(f"brotli: {e}") from e
        return out

    def finish(self) -> bytes:
        return b""


class _Zstd:
    def __init__(self) -> None:
        import zstandard

        self._module = zstandard
        self._obj = zstandard.ZstdDecompressor().decompressobj()
        self._done = False

    def feed(self, chunk: bytes) -> bytes:
        out = []
        try:
            while chunk:
                out.append(self._obj.decompress(chunk))
                # A zstd body may hold several frames; the object stops at the first end.
                chunk = self._obj.unused_data if self._obj.eof else b""
                if chunk:
                    self._obj = self._module.ZstdDecompressor().decompressobj()
        except self._module.ZstdError as e:
            raise DecompressError(f"zstd: {e}") from e
        return b"".join(out)

    def finish(self) -> bytes:
        return b""


class _Chain:
    def __init__(self, steps: list[Decompressor]) -> None:
        self._steps = steps

    def feed(self, chunk: bytes) -> bytes:
        for step in self._steps:
            chunk = step.feed(chunk)
        return chunk

    def finish(self) -> bytes:
        data = b""
        for step in self._steps:
            data = step.feed(data) if data else b""
            data += step.finish()
        return data


def _one(name: str) -> Decompressor | None:
    match name:
        case "" | "identity":
            return None
        case "gzip" | "x-gzip":
            return _Zlib(gzip=True)
        case "deflate":
            return _Zlib(gzip=False)
        case "br":
            return _Brotli()
        case "zstd":
            return _Zstd()
    raise UnsupportedEncoding(f"Content-Encoding {name!r} cannot be decoded incrementally")


def make_decompressor(content_encoding: str | None) -> Decompressor | None:
    """A decoder for the header's value, or None when the body is not encoded."""
    if not content_encoding:
        return None
    names = [n.strip().lower() for n in content_encoding.split(",")]
    steps = [s for s in (_one(n) for n in reversed(names)) if s is not None]
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else _Chain(steps)
