"""An upstream's SSE body, read the general way: lines, events, the decoder, the client's side.

Contract: ``feed(chunk)`` / ``finish(tail)`` return the client's bytes for what the chunk
completes; the raw bytes of the event being assembled are kept (``pending_raw``) so that a
failure gives them back (the processor's ``_fail``). The whole events a read completes are
read at once (``read_whole``): a run nobody reads passes as its bytes (``skip_run``), a run of
plain text is one delta (``text_run``), and with ``coalesce`` the text of events that came
together reaches the client as one delta. Counts: ``events_in``, ``skipped_decoding``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from addon.model import Event
from addon.stream.fastpath import FastPath
from addon.stream.output import Output, join_runs
from addon.stream.sse import (
    EventDecoder,
    LineDecoder,
    SSEComment,
    SSEEvent,
    SSEForeign,
    encode_event,
    simple_events,
)


class Host(Protocol):
    """What a body's reader calls of the processor: its decoding, its failure policy, its
    end."""

    _stopped: bool
    passthrough: bool

    def _decode(self, data: str, event: str | None) -> list[Event]: ...
    def _fail(self, why: str, raw: bytes, done: Sequence[bytes] = ()) -> list[bytes]: ...
    def _stop(self, why: str, done: Sequence[bytes] = ()) -> list[bytes]: ...
    def _foreign(self, raw: bytes, done: list[bytes], final: bool) -> list[bytes]: ...
    def _end(self, out: list[bytes], decoder: bool = True) -> None: ...


class SSEReader:
    """Lines → events → the decoder → the client's side (``Output``), for one stream."""

    def __init__(
        self,
        host: Host,
        output: Output,
        fast: FastPath,
        *,
        coalesce: bool,
        max_event_bytes: int,
    ) -> None:
        self._host = host
        self._output = output
        self._out = output.out
        self._skippable = fast.skippable
        self._skip_run = fast.skip_run
        self._text_run = fast.text_run
        self._coalesce = coalesce
        self._max = max_event_bytes
        self.lines = LineDecoder()
        self.events = EventDecoder()
        self.pending_raw = bytearray()  # raw lines of the SSE event being assembled
        self.events_in = 0
        self.skipped_decoding = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        if self.events.idle and not self.pending_raw:
            out = self.read_whole(chunk)
            if out is not None:
                return out
        return self.run(self.lines.feed(chunk), final=False)

    def finish(self, tail: bytes) -> list[bytes]:
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

    def read_whole(self, chunk: bytes) -> list[bytes] | None:
        """Whole events read in one pass where the chunk allows it, else None (nothing taken).

        A read rarely ends where an event does: the events that end in this chunk (with the
        start of the first one held from the chunk before) are read at once, and what comes
        after the last of them goes to the line decoder as usual."""
        cut = chunk.rfind(b"\n\n")
        if cut == -1:
            return None
        lines = self.lines
        start = b"" if lines.started and not lines.held else lines.take_line_start(chunk)
        if start is None:
            return None
        cut += 2
        whole = start + chunk[:cut] if start else (chunk if cut == len(chunk) else chunk[:cut])
        if self._skip_run is not None and (n := self._skip_run(whole)):
            # Nothing in it anybody reads: the events go on as they came.
            self.events_in += n
            self.skipped_decoding += n
            self.events.saw_event()
            out = self._out([whole])
        elif self._text_run is not None and (run := self._text_run(whole)) is not None:
            out = self._run_text(*run, whole)
        elif (simple := simple_events(whole)) is not None:
            out = self._run_simple(simple)
        else:
            # Not for a fast path: the line decoder reads all of it, as if nothing was taken.
            return self.run(self.lines.feed(start + chunk), final=False)
        rest = chunk[cut:]
        host = self._host
        if not rest or host._stopped:
            return out
        if host.passthrough:  # the fast path failed: from here on the bytes pass as they are
            return out + self._out([rest])
        return out + self.run(self.lines.feed(rest), final=False)

    def run(self, lines: list[tuple[str, bytes]], final: bool) -> list[bytes]:
        host = self._host
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
                    return host._foreign(bytes(self.pending_raw) + rest, out, final)
                elif item is not None:
                    self._dispatch(item, out)
            except Exception as e:
                rest = b"".join(r for _, r in lines[i + 1 :])
                return host._fail(f"{type(e).__name__}: {e}", bytes(self.pending_raw) + rest, out)
        if self.lines.held > self._max or self.events.size > self._max:
            return host._fail(
                f"an event longer than {self._max} bytes", bytes(self.pending_raw), out
            )
        if final:
            try:
                last = self.events.finish()
                if last is not None:
                    self._dispatch(last, out)
                host._end(out)
            except Exception as e:
                return host._fail(f"{type(e).__name__}: {e}", bytes(self.pending_raw), out)
        return self._out(out)

    def _run_simple(self, events: list[tuple[str, bytes]]) -> list[bytes]:
        """Whole one-line events (``simple_events``): dispatched as ``run`` would — except
        that with ``coalesce`` a run of plain text (or thinking) deltas that came in one
        chunk goes through the stages and the encoder as one delta (``_coalesced``)."""
        if self._coalesce and len(events) > 1:
            return self._coalesced(events)
        out: list[bytes] = []
        self.events.saw_event()
        for i, (data, raw) in enumerate(events):
            self.pending_raw += raw
            try:
                self._dispatch(SSEEvent(data), out)
            except Exception as e:
                rest = b"".join(r for _, r in events[i + 1 :])
                why = f"{type(e).__name__}: {e}"
                return self._host._fail(why, bytes(self.pending_raw) + rest, out)
        return self._out(out)

    def _run_text(self, text: str, n: int, chunk: bytes) -> list[bytes]:
        """``n`` plain text events read at once (``text_run``), as one delta. (The event
        decoder saw events already: the decoder learned its text frame from one.)"""
        self.events_in += n
        if not text:
            return []
        try:
            return self._output.lane_text(text)
        except Exception as e:
            return self._host._fail(f"{type(e).__name__}: {e}", chunk)

    def _coalesced(self, events: list[tuple[str, bytes]]) -> list[bytes]:
        """Events that arrived together: decoded, their runs of plain text (or thinking)
        joined (``join_runs``), then through the stages and the encoder in one pass: the same
        text at the same moment in fewer events. A failure gives back (same dialect) the
        bytes of all of them: nothing of them was emitted."""
        self.events.saw_event()
        decoded: list[Event] = []
        decode = self._host._decode
        try:
            for data, raw in events:
                self.pending_raw += raw
                if data:
                    self.events_in += 1
                    decoded += decode(data, None)
            out = self._output.through(join_runs(decoded))
        except Exception as e:
            return self._host._fail(f"{type(e).__name__}: {e}", bytes(self.pending_raw))
        self.pending_raw.clear()
        return self._out(out)

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
        out.extend(self._output.through(self._host._decode(item.data, item.event)))
        self.pending_raw.clear()
