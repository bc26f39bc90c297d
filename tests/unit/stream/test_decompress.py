"""Incremental Content-Encoding decoders: round trips fed whole, in 1-byte and in random chunks."""

from __future__ import annotations

import gzip
import random
import zlib
from collections.abc import Callable

import brotli
import pytest

from addon.stream.decompress import (
    DecompressError,
    UnsupportedEncoding,
    make_decompressor,
    zstd_module,
)
from tests.unit.helpers import bytewise, whole

SSE_TEXT = ('data: {"content": "héllo wörld 😀"}\n\n' * 200).encode()
NOISE = random.Random(0).randbytes(20_000)  # incompressible: many output chunks
PAYLOAD = SSE_TEXT + NOISE + SSE_TEXT


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def zstd(data: bytes) -> bytes:
    return bytes(zstd_module().compress(data))


type Split = Callable[[bytes], list[bytes]]


def random_sizes(data: bytes) -> list[bytes]:
    rng = random.Random(len(data))
    chunks, i = [], 0
    while i < len(data):
        n = rng.randint(1, 300)
        chunks.append(data[i : i + n])
        i += n
    return chunks


SPLITS = [
    pytest.param(whole, id="whole"),
    pytest.param(bytewise, id="one-byte"),
    pytest.param(random_sizes, id="random"),
]


def decompress(encoding: str, chunks: list[bytes]) -> bytes:
    d = make_decompressor(encoding)
    assert d is not None
    out = b"".join(d.feed(chunk) for chunk in chunks) + d.finish()
    assert d.finish() == b""  # idempotent
    return out


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        pytest.param("gzip", gzip.compress, id="gzip"),
        pytest.param("x-gzip", gzip.compress, id="x-gzip"),
        pytest.param("deflate", zlib.compress, id="deflate-zlib"),
        pytest.param("deflate", raw_deflate, id="deflate-raw"),
        pytest.param("br", brotli.compress, id="br"),
        pytest.param("zstd", zstd, id="zstd"),
    ],
)
def test_round_trip(encoding: str, compress: Callable[[bytes], bytes], split: Split) -> None:
    assert decompress(encoding, split(compress(PAYLOAD))) == PAYLOAD


@pytest.mark.parametrize("level", range(10))
def test_raw_deflate_is_told_from_zlib_at_every_level(level: int) -> None:
    c = zlib.compressobj(level, wbits=-zlib.MAX_WBITS)
    assert decompress("deflate", bytewise(c.compress(SSE_TEXT) + c.flush())) == SSE_TEXT
    assert decompress("deflate", bytewise(zlib.compress(SSE_TEXT, level))) == SSE_TEXT


@pytest.mark.parametrize("split", SPLITS)
def test_concatenated_gzip_members(split: Split) -> None:
    data = gzip.compress(b"one ") + gzip.compress(b"two ") + gzip.compress(PAYLOAD)
    assert decompress("gzip", split(data)) == b"one two " + PAYLOAD


def test_gzip_member_ending_exactly_at_a_chunk_end() -> None:
    chunks = [gzip.compress(b"one "), gzip.compress(b"two")]
    assert decompress("gzip", chunks) == b"one two"


@pytest.mark.parametrize("split", SPLITS)
def test_zero_padding_between_and_after_gzip_members_is_skipped(split: Split) -> None:
    data = gzip.compress(b"one ") + b"\0" * 5 + gzip.compress(b"two") + b"\0" * 3
    assert decompress("gzip", split(data)) == b"one two"


@pytest.mark.parametrize("split", SPLITS)
def test_several_zstd_frames(split: Split) -> None:
    data = zstd(b"one ") + zstd(b"two ") + zstd(PAYLOAD)
    assert decompress("zstd", split(data)) == b"one two " + PAYLOAD


def test_zstd_frame_ending_exactly_at_a_chunk_end() -> None:
    assert decompress("zstd", [zstd(b"one "), zstd(b"two")]) == b"one two"


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        pytest.param("gzip, br", lambda d: brotli.compress(gzip.compress(d)), id="gzip-then-br"),
        pytest.param("br,gzip", lambda d: gzip.compress(brotli.compress(d)), id="br-then-gzip"),
        pytest.param(" Deflate ,  ZSTD ", lambda d: zstd(zlib.compress(d)), id="case-and-spaces"),
        pytest.param("identity, gzip", gzip.compress, id="identity-in-the-list"),
    ],
)
@pytest.mark.parametrize("split", SPLITS)
def test_stacked_encodings_are_undone_in_reverse_order(
    encoding: str, compress: Callable[[bytes], bytes], split: Split
) -> None:
    assert decompress(encoding, split(compress(PAYLOAD))) == PAYLOAD


@pytest.mark.parametrize("value", [None, "", "identity", " Identity ", "identity, identity"])
def test_no_encoding_needs_no_decoder(value: str | None) -> None:
    assert make_decompressor(value) is None


@pytest.mark.parametrize(
    ("value", "named"),
    [
        pytest.param("compress", "'compress'", id="compress"),
        pytest.param("gzip, lzma", "'lzma'", id="in-a-list"),
        pytest.param("GZIP2", "'gzip2'", id="near-miss"),
    ],
)
def test_unknown_encoding_is_refused_by_name(value: str, named: str) -> None:
    with pytest.raises(UnsupportedEncoding, match=named):
        make_decompressor(value)
    assert issubclass(UnsupportedEncoding, ValueError)


GARBAGE = b"\x00\x01\x02 certainly not compressed " * 8


def corrupt_gzip_checksum(data: bytes) -> bytes:
    out = bytearray(gzip.compress(data))
    out[-8] ^= 0xFF  # the CRC-32 in the trailer
    return bytes(out)


@pytest.mark.parametrize(
    ("encoding", "data"),
    [
        pytest.param("gzip", GARBAGE, id="gzip-garbage"),
        pytest.param("gzip", corrupt_gzip_checksum(PAYLOAD), id="gzip-bad-checksum"),
        pytest.param("gzip", gzip.compress(b"one") + b"trailing junk", id="gzip-junk-after"),
        pytest.param("deflate", GARBAGE, id="deflate-garbage"),
        pytest.param("deflate", zlib.compress(b"one") + b"junk", id="deflate-junk-after"),
        pytest.param("deflate", raw_deflate(b"one") + b"junk", id="deflate-raw-junk-after"),
        pytest.param("br", GARBAGE, id="br-garbage"),
        pytest.param("br", brotli.compress(b"one") + b"trailing junk", id="br-junk-after"),
        pytest.param("zstd", GARBAGE, id="zstd-garbage"),
        pytest.param("zstd", zstd(b"one") + b"trailing junk", id="zstd-junk-after"),
    ],
)
def test_corrupt_input_raises_a_value_error(encoding: str, data: bytes) -> None:
    d = make_decompressor(encoding)
    assert d is not None
    with pytest.raises(DecompressError):
        for chunk in random_sizes(data):
            d.feed(chunk)
        d.finish()
    assert issubclass(DecompressError, ValueError)


type Streamer = tuple[Callable[[bytes], bytes], Callable[[], bytes]]


def zlib_streamer(wbits: int) -> Callable[[], Streamer]:
    def make() -> Streamer:
        c = zlib.compressobj(wbits=wbits)
        return (lambda d: c.compress(d) + c.flush(zlib.Z_SYNC_FLUSH)), c.flush

    return make


def br_streamer() -> Streamer:
    c = brotli.Compressor()
    return (lambda d: c.process(d) + c.flush()), c.finish


def zstd_streamer() -> Streamer:
    c = zstd_module().ZstdCompressor()
    return (lambda d: c.compress(d, c.FLUSH_BLOCK)), c.flush


# A server streaming SSE compresses each event and flushes: (piece, end) per stream.
STREAMERS = [
    pytest.param("gzip", zlib_streamer(16 + zlib.MAX_WBITS), id="gzip"),
    pytest.param("deflate", zlib_streamer(zlib.MAX_WBITS), id="deflate-zlib"),
    pytest.param("deflate", zlib_streamer(-zlib.MAX_WBITS), id="deflate-raw"),
    pytest.param("br", br_streamer, id="br"),
    pytest.param("zstd", zstd_streamer, id="zstd"),
]
EVENTS = [f"data: {i} é 😀\n\n".encode() for i in range(5)]


@pytest.mark.parametrize(("encoding", "streamer"), STREAMERS)
def test_each_flushed_event_comes_out_as_soon_as_it_arrives(
    encoding: str, streamer: Callable[[], Streamer]
) -> None:
    piece, end = streamer()
    d = make_decompressor(encoding)
    assert d is not None
    for event in EVENTS:
        assert d.feed(piece(event)) == event
    assert d.feed(end()) + d.finish() == b""


@pytest.mark.parametrize("cut", ["after-a-flush", "mid-block"])
@pytest.mark.parametrize(("encoding", "streamer"), STREAMERS)
def test_truncated_stream_gives_its_bytes_then_raises_once_at_finish(
    encoding: str, streamer: Callable[[], Streamer], cut: str
) -> None:
    piece, _ = streamer()
    data = b"".join(piece(event) for event in EVENTS[:3])
    if cut == "mid-block":
        data += piece(EVENTS[3])[:3]
    d = make_decompressor(encoding)
    assert d is not None
    out = b"".join(d.feed(chunk) for chunk in bytewise(data))
    # Everything flushed, and perhaps the start of the cut block (deflate decodes bit by bit).
    assert out.startswith(b"".join(EVENTS[:3]))
    assert b"".join(EVENTS).startswith(out)
    with pytest.raises(DecompressError, match="truncated"):
        d.finish()
    assert d.finish() == b""


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd", "gzip, br"])
def test_empty_body_finishes_cleanly(encoding: str) -> None:
    d = make_decompressor(encoding)
    assert d is not None
    assert d.feed(b"") == b""
    assert d.finish() == b""
    assert d.finish() == b""
