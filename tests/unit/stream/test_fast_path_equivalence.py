"""The fast path is a shortcut to the same bytes: every recorded stream (the real services'
in ``../shared``, llama-server's and LiteLLM's in ``tests/fixtures/``), read with the fast
path on (``StreamProcessor(fast=True)``, the default) and off, gives the client the same
bytes, the same counts and the same records in the reasoning store — whatever the reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from addon.dialects import DIALECTS
from addon.stream.capture import CaptureStage
from addon.stream.processor import StreamProcessor
from tests.realdata import as_sse, fixture_names

UPSTREAMS = {
    "openai-chat-": "openai_chat",
    "anthropic-messages-": "anthropic",
    "gemini-api-": "gemini",
}
"""A recording's name prefix → the dialect it speaks (SSE recordings only)."""

RECORDINGS = [
    (name, dialect)
    for prefix, dialect in UPSTREAMS.items()
    for name in fixture_names(prefix)
    if name.endswith((".sse", ".chunks.txt"))
]
SERVERS = Path(__file__).resolve().parents[2] / "fixtures"
SERVER_UPSTREAMS = {
    "chat_": "openai_chat",
    "messages_": "anthropic",
    "responses_": "openai_responses",
    "gemini_": "gemini",
}
"""A real server's streamed answer (``tests/fixtures/{llama_cpp,litellm}/*_stream.sse``, its
first bytes as sent; the early errors are JSON bodies) → the dialect it speaks."""
SERVER_RECORDINGS = [
    (path, dialect)
    for server in ("llama_cpp", "litellm")
    for path in sorted((SERVERS / server).glob("*_stream.sse"))
    for prefix, dialect in SERVER_UPSTREAMS.items()
    if path.name.startswith(prefix)
]
CLIENTS = ["openai_chat", "anthropic", "openai_responses", "gemini"]


class _Records:
    """A reasoning store's view: what a capture stage wrote."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, str, Any]] = []

    def put(self, kind: str, key: str, value: Any) -> None:
        self.puts.append((kind, key, value))

    def get(self, kind: str, key: str) -> None:
        return None


def _reads(body: bytes, how: str) -> list[bytes]:
    if how == "whole":
        return [body]
    if how == "events":
        return [e + b"\n\n" for e in body.split(b"\n\n") if e]
    if how == "pairs":  # two whole events a read: a bursty upstream
        events = [e + b"\n\n" for e in body.split(b"\n\n") if e]
        return [b"".join(events[i : i + 2]) for i in range(0, len(events), 2)]
    return [body[i : i + 7] for i in range(0, len(body), 7)]  # split anywhere


def _run(upstream: str, client: str, reads: list[bytes], fast: bool) -> tuple[Any, ...]:
    records = _Records()
    same = upstream == client
    p = StreamProcessor(
        DIALECTS[upstream].stream_decoder(),
        DIALECTS[client].stream_encoder(),
        [CaptureStage(records, DIALECTS[upstream].reasoning)],
        same_dialect=same,
        raw_ok=same,
        coalesce=not same,
        fast=fast,
    )
    out = b"".join(b for r in reads for b in p.feed(r)) + b"".join(p.finish())
    counts = (p.events_in, p.bytes_in, p.bytes_out, p.skipped, p.error, p.ended_with_error)
    return out, counts, records.puts


@pytest.mark.parametrize("how", ["whole", "events", "pairs", "bytes7"])
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("name", "upstream"), [pytest.param(*r, id=r[0]) for r in RECORDINGS])
def test_a_recording_reads_the_same_with_the_fast_path_on_and_off(
    name: str, upstream: str, client: str, how: str
) -> None:
    reads = _reads(as_sse(name), how)
    fast = _run(upstream, client, reads, fast=True)
    slow = _run(upstream, client, reads, fast=False)
    assert fast[0] == slow[0]
    assert fast[1] == slow[1]
    assert fast[2] == slow[2]


def test_the_real_servers_recordings_are_all_in_the_corpus() -> None:
    """Each server's streamed files, every dialect it speaks: none left out by its name."""
    for server in ("llama_cpp", "litellm"):
        streams = {p.name for p in (SERVERS / server).glob("*_stream.sse")}
        assert len(streams) >= 10
        assert streams == {p.name for p, _ in SERVER_RECORDINGS if p.parent.name == server}
    assert {d for _, d in SERVER_RECORDINGS} == set(SERVER_UPSTREAMS.values())


@pytest.mark.parametrize("how", ["whole", "events", "pairs", "bytes7"])
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("path", "upstream"),
    [pytest.param(p, d, id=f"{p.parent.name}/{p.name}") for p, d in SERVER_RECORDINGS],
)
def test_a_real_servers_stream_reads_the_same_with_the_fast_path_on_and_off(
    path: Path, upstream: str, client: str, how: str
) -> None:
    reads = _reads(path.read_bytes(), how)
    fast = _run(upstream, client, reads, fast=True)
    slow = _run(upstream, client, reads, fast=False)
    assert fast == slow
    assert fast[0]  # the client got something: an answer or an error


_CHUNK = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}\n\n'
)
PLAIN = b"".join(
    [
        _CHUNK % b'""',
        *(_CHUNK % json.dumps(t).encode() for t in ["Hi ", "there, ", "caf\u00e9 ", "a\\b "] * 20),
        b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
)
"""Plain text from an OpenAI chat upstream, the lanes' own ground (ASCII, not, escapes)."""


@pytest.mark.parametrize("how", ["whole", "events", "pairs", "bytes7"])
@pytest.mark.parametrize("client", CLIENTS)
def test_plain_text_reads_the_same_with_the_fast_path_on_and_off(client: str, how: str) -> None:
    reads = _reads(PLAIN, how)
    assert _run("openai_chat", client, reads, fast=True) == _run(
        "openai_chat", client, reads, fast=False
    )


def test_the_switch_turns_every_lane_off() -> None:
    """Off, no read takes a lane: the reader is the general way itself."""
    p = StreamProcessor(
        DIALECTS["openai_chat"].stream_decoder(),
        DIALECTS["openai_chat"].stream_encoder(),
        raw_ok=True,
        fast=False,
    )
    assert p.feed == p.feed_general
