"""The upstream bodies that are not SSE: one JSON array whose items are the events (Gemini
without ``alt=sse``: ``JsonArrayReader``), AWS event-stream frames (Kiro: ``EventStreamReader``),
and a body that is no stream at all, read whole (``WholeBody``).

Contract: as ``SSEReader``'s (what a read found, ``pending``, ``forget``, the counts); a body
whose first bytes fail to frame is named for what came instead, not by a parser's complaint."""

from __future__ import annotations

from collections.abc import Callable

from addon.dialects.base import Framing
from addon.model import Event
from addon.stream.eventstream import EventStreamSplitter, Frame
from addon.stream.foreign import not_a_stream
from addon.stream.framing import JsonArraySplitter
from addon.stream.output import Output
from addon.stream.reading import Decoding, Failure, Found

NOT_A_STREAM = "the upstream's body is not an event stream"

type Answer = tuple[int | None, str | None]
"""The answer's status and content type (to say what came when the body is not a stream)."""


def _what_came(framing: Framing, events_in: int, head: bytes, answer: Answer) -> str | None:
    """A body whose very first bytes failed to frame: what came instead of the stream, if it
    is not one at all (an HTML sign-in page, a JSON error); None otherwise."""
    if events_in:
        return None
    status, content_type = answer
    return not_a_stream(framing, head, status=status, content_type=content_type)


class JsonArrayReader:
    """One JSON array: each item is one event's data (``feed(item, None)`` to the decoder)."""

    def __init__(
        self, decoding: Decoding, output: Output, answer: Answer, max_event_bytes: int
    ) -> None:
        self._decoding = decoding
        self._output = output
        self._answer = answer
        self._max = max_event_bytes
        self._items = JsonArraySplitter(max_event_bytes)
        self.events_in = 0
        self.skipped_decoding = 0

    def feed(self, chunk: bytes) -> Found:
        return self._run(self._items.feed(chunk), final=False)

    def finish(self, tail: bytes) -> Found:
        items = self._items.feed(tail) if tail else []
        if self._items.error is None:
            items += self._items.finish()
        return self._run(items, final=True)

    def pending(self) -> bytes:
        return self._items.pending()

    def forget(self) -> None:
        self._items = JsonArraySplitter(self._max)

    def at_boundary(self) -> bool:
        return False

    def _run(self, items: list[tuple[str, bytes]], final: bool) -> Found:
        decode = self._decoding.feed
        out: list[bytes] = []
        for i, (text, raw) in enumerate(items):
            try:
                self.events_in += 1
                out.extend(self._output.through(decode(text, None)))
            except Exception as e:
                rest = b"".join(r for _, r in items[i + 1 :])
                return Failure(f"{type(e).__name__}: {e}", raw + rest, out)
        if self._items.error is not None:
            why = _what_came("json_array", self.events_in, self._items.pending(), self._answer)
            return Failure(why or f"cannot read the JSON array: {self._items.error}", b"", out)
        if final:
            try:
                out.extend(self._output.end(self._decoding.end()))
            except Exception as e:
                return Failure(f"{type(e).__name__}: {e}", b"", out)
        return self._output.out(out)


class EventStreamReader:
    """AWS event-stream frames: each frame is one event (``feed(payload, event type)``)."""

    def __init__(self, decoding: Decoding, output: Output, answer: Answer) -> None:
        self._decoding = decoding
        self._output = output
        self._answer = answer
        self._frames = EventStreamSplitter()
        self.events_in = 0
        self.skipped_decoding = 0

    def feed(self, chunk: bytes) -> Found:
        return self._run(self._frames.feed(chunk), final=False)

    def finish(self, tail: bytes) -> Found:
        frames = self._frames.feed(tail) if tail else []
        self._frames.finish()
        return self._run(frames, final=True)

    def pending(self) -> bytes:
        return self._frames.pending()

    def forget(self) -> None:
        pass  # nothing more is read after a failure: ``_stop`` drops the rest

    def at_boundary(self) -> bool:
        return False

    def _run(self, frames: list[Frame], final: bool) -> Found:
        # Binary frames are never given to a client raw: the processor ends the client's
        # stream on any failure here (``raw`` stays empty).
        decode = self._decoding.feed
        out: list[bytes] = []
        for frame in frames:
            try:
                self.events_in += 1
                out.extend(self._output.through(decode(frame.text, frame.event)))
            except Exception as e:
                return Failure(f"{type(e).__name__}: {e}", b"", out)
        if self._frames.error is not None:
            head = self._frames.pending()
            why = _what_came("aws_eventstream", self.events_in, head, self._answer)
            return Failure(why or f"cannot read the event stream: {self._frames.error}", b"", out)
        if final:
            try:
                out.extend(self._output.end(self._decoding.end()))
            except Exception as e:
                return Failure(f"{type(e).__name__}: {e}", b"", out)
        return self._output.out(out)


class WholeBody:
    """A body that is not an event stream, on another dialect: kept (``feed``, bounded) and read
    whole at its end (``end``) by ``whole``, the plan's reading of a whole answer."""

    def __init__(
        self,
        decoding: Decoding,
        output: Output,
        whole: Callable[[bytes], list[Event]] | None,
        max_event_bytes: int,
    ) -> None:
        self._decoding = decoding
        self._output = output
        self._whole = whole
        self._max = max_event_bytes
        self._body = bytearray()
        self._cut = False
        """More came than ``max_event_bytes``: the body cannot be read whole."""
        self.events_in = 0

    @property
    def held(self) -> int:
        """How many bytes of the body are kept."""
        return len(self._body)

    def forget(self) -> None:
        """Drop the body kept (memory returns)."""
        self._body = bytearray()

    def feed(self, chunk: bytes) -> None:
        room = self._max - len(self._body)
        if len(chunk) > room:
            self._cut = True
        if room > 0:
            self._body += chunk[:room]

    def end(self, events_before: bool) -> list[bytes] | Failure:
        """The client's bytes for the whole body; a failure quoting it when it cannot be one
        answer: events were read before it (``events_before``), it was cut, or nothing reads a
        whole body here."""
        body = bytes(self._body)
        self._body = bytearray()
        if events_before or self._whole is None or self._cut:
            quote = body[:200].decode("utf-8", "replace").strip()
            return Failure(f"{NOT_A_STREAM}: {quote!r}", b"")
        out: list[bytes] = []
        try:
            events = self._whole(body)
            self._decoding.noted(events)
            self.events_in += 1
            out.extend(self._output.through(events))
            out.extend(self._output.end([]))
        except Exception as e:
            return Failure(f"{type(e).__name__}: {e}", b"", out)
        return self._output.out(out)
