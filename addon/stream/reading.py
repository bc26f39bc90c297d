"""What the body's readers return and decode with: a read's ``Found`` (the client's bytes, a
``Failure``, ``Foreign`` bytes) and the upstream decoder under its skip policy (``Decoding``).

A reader returns what it found and the processor alone decides what follows (its ``State``):
no reader holds its owner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from addon.dialects.base import StreamDecoder
from addon.model import Event, StreamError


@dataclass(slots=True)
class Failure:
    """A read that could not go on: the processor passes the rest through raw (a client of the
    upstream's dialect) or ends the client's stream with an error."""

    why: str
    """What went wrong (the client's error message and the log line quote it)."""
    raw: bytes
    """The upstream's bytes of the read not yet given to the client: the failed event's and
    what followed it in the read."""
    done: list[bytes] = field(default_factory=list)
    """The client's bytes the read had written before it failed (they go out first)."""

    def then(self, rest: bytes) -> Failure:
        """The same failure, with ``rest`` (the read's bytes after it) not given either."""
        return Failure(self.why, self.raw + rest, self.done)


@dataclass(slots=True)
class Foreign:
    """A line that is no event-stream line: the body is something else from there on (a JSON
    error, an HTML page, plain text)."""

    raw: bytes
    """The body's bytes from that line on, as far as the read went."""
    done: list[bytes] = field(default_factory=list)
    """The client's bytes the read had written before that line."""


type Found = list[bytes] | Failure | Foreign
"""What a read found: the client's bytes (``[]``: nothing yet), a failure, or foreign bytes."""


def after(done: list[bytes], found: Found) -> Found:
    """``found`` with the client's bytes ``done`` before it."""
    if isinstance(found, list):
        return done + found
    if isinstance(found, Failure):
        return Failure(found.why, found.raw, done + found.done)
    return Foreign(found.raw, done + found.done)


class Decoding:
    """The upstream's stream decoder as the readers use it: an event it cannot read fails the
    read on a ``strict`` stream (a client of its dialect, who then gets the bytes raw), and is
    skipped on any other (counted, the first reason kept)."""

    def __init__(self, decoder: StreamDecoder, strict: bool) -> None:
        self.decoder = decoder
        self.strict = strict
        """An event the decoder cannot read fails the read (else it is skipped)."""
        self.skipped = 0
        """Events skipped: the decoder could not read them."""
        self.skip_reason: str | None = None
        """Why the first of them could not be read."""
        self.end_error: str | None = None
        """The message of the first error among the events read at the body's end (``end``:
        a cut stream)."""

    def feed(self, data: str, event: str | None) -> list[Event]:
        """The decoder's events for one event's data (none for an event it skipped)."""
        try:
            return self.decoder.feed(data, event)
        except Exception as e:
            if self.strict:
                raise
            self.skipped += 1
            if self.skip_reason is None:
                self.skip_reason = f"{type(e).__name__}: {e}"
            return []

    def end(self) -> list[Event]:
        """The decoder's events at the body's end (``finish``), an error among them noted."""
        events = self.decoder.finish()
        self.noted(events)
        return events

    def ended(self) -> bool:
        """Whether the upstream's stream had reached its own end (``[DONE]``, ``message_stop``
        …): the decoder's ``finish`` says no error (its events are dropped)."""
        try:
            return not any(isinstance(e, StreamError) for e in self.decoder.finish())
        except Exception:
            return False

    def noted(self, events: list[Event]) -> None:
        """An error among ``events`` read at the body's end is the bridge's ``end_error``."""
        for event in events:
            if isinstance(event, StreamError) and self.end_error is None:
                self.end_error = event.message
