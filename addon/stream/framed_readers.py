"""The upstream bodies that are not SSE, read the general way: one JSON array whose items are
the events (Gemini without ``alt=sse``: ``JsonArrayReader``) and AWS event-stream frames
(Kiro: ``EventStreamReader``).

Contract: as ``SSEReader`` (``feed``, ``finish``, ``pending``, ``forget``, the counts).
A body whose very first bytes fail to frame is named for what came instead (an HTML page, a
JSON error: ``addon.stream.foreign``). Binary frames are never given to a client raw: any
failure on an event stream ends the client's stream (the processor's ``_stop``).
"""

from __future__ import annotations

from addon.dialects.base import Framing
from addon.stream.eventstream import EventStreamSplitter, Frame
from addon.stream.foreign import not_a_stream
from addon.stream.framing import JsonArraySplitter
from addon.stream.output import Output
from addon.stream.sse_reader import Host

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

    def __init__(self, host: Host, output: Output, answer: Answer, max_event_bytes: int) -> None:
        self._host = host
        self._output = output
        self._answer = answer
        self._max = max_event_bytes
        self._items = JsonArraySplitter(max_event_bytes)
        self.events_in = 0
        self.skipped_decoding = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        return self._run(self._items.feed(chunk), final=False)

    def finish(self, tail: bytes) -> list[bytes]:
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

    def _run(self, items: list[tuple[str, bytes]], final: bool) -> list[bytes]:
        host = self._host
        out: list[bytes] = []
        for i, (text, raw) in enumerate(items):
            try:
                self.events_in += 1
                out.extend(self._output.through(host._decode(text, None)))
            except Exception as e:
                rest = b"".join(r for _, r in items[i + 1 :])
                return host._fail(f"{type(e).__name__}: {e}", raw + rest, out)
        if self._items.error is not None:
            why = _what_came("json_array", self.events_in, self._items.pending(), self._answer)
            return host._fail(why or f"cannot read the JSON array: {self._items.error}", b"", out)
        if final:
            try:
                host._end(out)
            except Exception as e:
                return host._fail(f"{type(e).__name__}: {e}", b"", out)
        return self._output.out(out)


class EventStreamReader:
    """AWS event-stream frames: each frame is one event (``feed(payload, event type)``)."""

    def __init__(self, host: Host, output: Output, answer: Answer) -> None:
        self._host = host
        self._output = output
        self._answer = answer
        self._frames = EventStreamSplitter()
        self.events_in = 0
        self.skipped_decoding = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        return self._run(self._frames.feed(chunk), final=False)

    def finish(self, tail: bytes) -> list[bytes]:
        frames = self._frames.feed(tail) if tail else []
        self._frames.finish()
        return self._run(frames, final=True)

    def pending(self) -> bytes:
        return self._frames.pending()

    def forget(self) -> None:
        pass  # nothing more is read after a failure: ``_stop`` drops the rest

    def at_boundary(self) -> bool:
        return False

    def _run(self, frames: list[Frame], final: bool) -> list[bytes]:
        host = self._host
        out: list[bytes] = []
        for frame in frames:
            try:
                self.events_in += 1
                out.extend(self._output.through(host._decode(frame.text, frame.event)))
            except Exception as e:
                return host._stop(f"{type(e).__name__}: {e}", out)
        if self._frames.error is not None:
            head = self._frames.pending()
            why = _what_came("aws_eventstream", self.events_in, head, self._answer)
            return host._stop(why or f"cannot read the event stream: {self._frames.error}", out)
        if final:
            try:
                host._end(out)
            except Exception as e:
                return host._stop(f"{type(e).__name__}: {e}", out)
        return self._output.out(out)
