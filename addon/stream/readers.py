"""The readers of an upstream's body, one per framing (``reader_for``): SSE, the general way
(``SSEReader``: lines → events → the decoder → the client's ``Output``); one JSON array whose
items are the events (Gemini without ``alt=sse``: ``JsonArrayReader``); AWS event-stream frames
(Kiro: ``EventStreamReader``); and a body that is no stream at all, read whole (``WholeBody``).

Contract: each returns what a read found (``Found``), keeps ``pending`` / ``forget`` and the
counts; a body whose first bytes fail to frame is named for what came instead."""

from __future__ import annotations

from collections.abc import Callable

from addon.dialects.base import Framing
from addon.model import Event
from addon.stream.eventstream import EventStreamSplitter, Frame
from addon.stream.fastpath import FastPath, Runs
from addon.stream.foreign import not_a_stream
from addon.stream.framing import JsonArraySplitter
from addon.stream.output import Output, join_runs
from addon.stream.reading import Decoding, Failure, Foreign, Found, after
from addon.stream.sse import (
    EventDecoder,
    LineDecoder,
    SSEComment,
    SSEEvent,
    SSEForeign,
    encode_event,
    simple_events,
)

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


class SSEReader:
    """An SSE body the general way: lines → events → the decoder → the client's side. The
    whole events a read completes are read at once: by a fast run (``Runs.take``) or, one-line
    events, here (with ``coalesce`` their texts joined: text that came together goes out
    together). ``pending_raw`` keeps the event being assembled, given back on a failure."""

    def __init__(
        self,
        decoding: Decoding,
        output: Output,
        fast: FastPath,
        runs: Runs | None,
        coalesce: bool,
        max_event_bytes: int,
    ) -> None:
        self._decoding = decoding
        self._output = output
        self._skippable = fast.skippable  # the general way passes such events as their bytes
        self._runs = runs
        self._coalesce = coalesce
        self._max = max_event_bytes
        self.lines = LineDecoder()
        self.events = EventDecoder()
        self.pending_raw = bytearray()
        """The raw lines of the SSE event being assembled."""
        self.events_in = 0
        self.skipped_decoding = 0

    def feed(self, chunk: bytes) -> Found:
        if self.events.idle and not self.pending_raw:
            found = self.read_whole(chunk)
            if found is not None:
                return found
        return self.run(self.lines.feed(chunk), final=False)

    def finish(self, tail: bytes) -> Found:
        lines = self.lines.feed(tail) if tail else []
        lines += self.lines.finish()
        return self.run(lines, final=True)

    def at_boundary(self) -> bool:
        """The bytes read so far end where an event does (nothing held)."""
        lines = self.lines
        return lines.started and not lines.held and self.events.idle and not self.pending_raw

    def forget(self) -> None:
        """Drop whatever is held for reading (memory returns)."""
        self.lines.clear()
        self.events = EventDecoder()
        self.pending_raw = bytearray()

    def pending(self) -> bytes:
        """The bytes held but not read as lines."""
        return self.lines.pending()

    def read_whole(self, chunk: bytes) -> Found | None:
        """The whole events that end in ``chunk`` (the start of the first held from the chunk
        before) read at once, then the rest of the chunk as usual; None (nothing taken) where
        the chunk does not allow it."""
        cut = chunk.rfind(b"\n\n")
        if cut == -1:
            return None
        lines = self.lines
        start = b"" if lines.started and not lines.held else lines.take_line_start(chunk)
        if start is None:
            return None
        cut += 2
        whole = start + chunk[:cut] if start else (chunk if cut == len(chunk) else chunk[:cut])
        found: list[bytes] | Failure | None
        if self._runs is not None and (found := self._runs.take(whole)) is not None:
            self.events.saw_event()
        elif (simple := simple_events(whole)) is not None:
            if self._coalesce and len(simple) > 1:
                found = self._coalesced(simple)
            else:
                found = self._simple(simple)
        else:
            # Not whole one-line events: the line decoder reads all of it.
            return self.run(lines.feed(start + chunk), final=False)
        rest = chunk[cut:]
        if not rest:
            return found
        if isinstance(found, Failure):
            return found.then(rest)
        more = self.run(lines.feed(rest), final=False)
        return found + more if isinstance(more, list) else after(found, more)

    def run(self, lines: list[tuple[str, bytes]], final: bool) -> Found:
        out: list[bytes] = []
        for i, (line, raw) in enumerate(lines):
            self.pending_raw += raw
            try:
                item = self.events.feed_line(line)
                if isinstance(item, SSEComment):
                    del self.pending_raw[len(self.pending_raw) - len(raw) :]
                    if self._output.writer is None:
                        out.append(encode_event(item))
                elif isinstance(item, SSEForeign):
                    rest = b"".join(r for _, r in lines[i + 1 :])
                    return Foreign(bytes(self.pending_raw) + rest, out)
                elif item is not None:
                    self._dispatch(item, out)
            except Exception as e:
                rest = b"".join(r for _, r in lines[i + 1 :])
                return Failure(f"{type(e).__name__}: {e}", bytes(self.pending_raw) + rest, out)
        if self.lines.held > self._max or self.events.size > self._max:
            return Failure(f"an event longer than {self._max} bytes", bytes(self.pending_raw), out)
        if final:
            try:
                last = self.events.finish()
                if last is not None:
                    self._dispatch(last, out)
                out.extend(self._output.end(self._decoding.end()))
            except Exception as e:
                return Failure(f"{type(e).__name__}: {e}", bytes(self.pending_raw), out)
        return self._output.out(out)

    def _simple(self, events: list[tuple[str, bytes]]) -> list[bytes] | Failure:
        """Whole one-line events (``simple_events``), dispatched as ``run`` would."""
        out: list[bytes] = []
        self.events.saw_event()
        for i, (data, raw) in enumerate(events):
            self.pending_raw += raw
            try:
                self._dispatch(SSEEvent(data), out)
            except Exception as e:
                rest = b"".join(r for _, r in events[i + 1 :])
                return Failure(f"{type(e).__name__}: {e}", bytes(self.pending_raw) + rest, out)
        return self._output.out(out)

    def _coalesced(self, events: list[tuple[str, bytes]]) -> list[bytes] | Failure:
        """Events that arrived together: decoded, their runs of plain text (or thinking)
        joined (``join_runs``), then through the stages and the encoder in one pass: the same
        text at the same moment in fewer events. A failure gives back (same dialect) the
        bytes of all of them: nothing of them was emitted."""
        self.events.saw_event()
        decoded: list[Event] = []
        decode = self._decoding.feed
        try:
            for data, raw in events:
                self.pending_raw += raw
                if data:
                    self.events_in += 1
                    decoded += decode(data, None)
            out = self._output.through(join_runs(decoded))
        except Exception as e:
            return Failure(f"{type(e).__name__}: {e}", bytes(self.pending_raw))
        self.pending_raw.clear()
        return self._output.out(out)

    def _dispatch(self, item: SSEEvent, out: list[bytes]) -> None:
        if not item.data:
            # A named event without data carries nothing a dialect could decode.
            self.pending_raw.clear()
            return
        self.events_in += 1
        skippable = self._skippable
        if skippable is not None and item.event is None and skippable(item.data):
            out.append(bytes(self.pending_raw))
            self.pending_raw.clear()
            self.skipped_decoding += 1
            return
        out.extend(self._output.through(self._decoding.feed(item.data, item.event)))
        self.pending_raw.clear()


type BodyReader = SSEReader | JsonArrayReader | EventStreamReader
"""The reader of an upstream's body, for its framing (``reader_for``)."""


def reader_for(
    framing: Framing,
    decoding: Decoding,
    output: Output,
    fast: FastPath,
    runs: Runs | None,
    answer: Answer,
    coalesce: bool,
    max_event_bytes: int,
) -> BodyReader:
    """The reader of the upstream's body for its framing."""
    if framing == "sse":
        return SSEReader(decoding, output, fast, runs, coalesce, max_event_bytes)
    if framing == "json_array":
        return JsonArrayReader(decoding, output, answer, max_event_bytes)
    return EventStreamReader(decoding, output, answer)
