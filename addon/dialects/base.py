"""What every dialect offers: a codec for requests, whole responses and streams.

Contract: a dialect turns its wire JSON into the unified model and back. It
never sees bytes of a socket, headers or mitmproxy; SSE framing belongs to
``addon.stream``. Decoders are lenient (unknown fields are kept in ``extra``),
encoders produce what the wire's official clients accept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from addon.model import JSON, ClientError, Event, Notes, Request, Response


class StreamDecoder(Protocol):
    """One upstream SSE event in, unified events out."""

    def feed(self, data: str, event: str | None) -> list[Event]: ...
    def finish(self) -> list[Event]: ...


class StreamEncoder(Protocol):
    """Unified events in, ``(event name, data)`` pairs out; ``finish`` is idempotent."""

    def feed(self, event: Event) -> list[tuple[str | None, str]]: ...
    def finish(self) -> list[tuple[str | None, str]]: ...


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    path: str
    """The end of the chat endpoint's path (``/chat/completions``, ``/messages``)."""
    decode_request: Callable[[JSON, Notes], Request]
    encode_request: Callable[[Request, Notes], JSON]
    decode_response: Callable[[JSON], Response]
    encode_response: Callable[[Response], JSON]
    stream_decoder: Callable[[], StreamDecoder]
    stream_encoder: Callable[[], StreamEncoder]
    encode_error: Callable[[ClientError], JSON]
    error_message: Callable[[Any], str | None]
    """The message of an error body the upstream sent in this dialect, if there is one."""


def describe(notes: Notes) -> str:
    """``Counter({"flat tools → OpenAI": 3})`` → ``"3 flat tools → OpenAI"``, joined by "; "."""
    return "; ".join(f"{n} {what}" for what, n in notes.items())
