"""Incremental Content-Encoding decoders, fed in 1-byte and random chunks."""

from __future__ import annotations

import gzip
import random
import zlib
from collections.abc import Callable

import brotli
import pytest
import zstandard

from addon.stream.decompress import DecompressError, UnsupportedEncoding, make_decompressor

PAYLOAD = ('data: {"content": "héllo wörld 😀"}\n\n' * 200).encode()


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": lambda d: zstandard.ZstdCompressor().compress(d),
}


def feed(encoding: str, data: bytes, sizes: Callable[[], int]) -> bytes:
    d = make_decompressor(encoding)
    assert d is not None
    out, i = b"", 0
    while i < len(data):
        n = sizes()
        out += d.feed(data[i : i + n])
        i += n
    out += d.finish()
    assert d.finish() == b""
    return out


@pytest.mark.parametrize("encoding", list(ENCODERS))
@pytest.mark.parametrize("split", ["one-byte", "random"])
def test_round_trip(encoding: str, split: str) -> None:
    rng = random.Random(4)
    sizes = (lambda: 1) if split == "one-byte" else (lambda: rng.randint(1, 300))
    assert feed(encoding, ENCODERS[encoding](PAYLOAD), sizes) == PAYLOAD


def test_raw_deflate_is_detected() -> None:
    assert feed("deflate", raw_deflate(PAYLOAD), lambda: 7) == PAYLOAD


def test_concatenated_gzip_members() -> None:
    assert feed("gzip", gzip.compress(b"one ") + gzip.compress(b"two"), lambda: 5) == b"one two"


def test_stacked_encodings_are_undone_in_reverse_order() -> None:
    data = brotli.compress(gzip.compress(PAYLOAD))
    assert feed("gzip, br", data, lambda: 64) == PAYLOAD


@pytest.mark.parametrize("value", [None, "", "identity", " Identity "])
def test_no_encoding_needs_no_decoder(value: str | None) -> None:
    assert make_decompressor(value) is None


def test_unknown_encoding_is_named() -> None:
    with pytest.raises(UnsupportedEncoding, match="'compress'"):
        make_decompressor("compress")


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_corrupt_input_raises(encoding: str) -> None:
    d = make_decompressor(encoding)
    assert d is not None
    with pytest.raises(DecompressError):
        d.feed(b"\x00\x01\x02 certainly not compressed" * 4)
        d.finish()
