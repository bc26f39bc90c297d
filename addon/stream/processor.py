"""One streamed answer, sans-IO (``StreamProcessor``), and the general way of reading an SSE
body (``SSEReader``: lines → events → the decoder → the client's ``Output``).

Contract: ``feed(chunk)`` takes chunks split anywhere and returns ``[]``, never ``b""``, when
nothing is ready; ``finish()`` is idempotent; ``abort(why)`` is the shell's way out. What a
read does follows the ``State`` alone, moved only by ``TRANSITIONS``: a failed stream stays so."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum

from addon.dialects.base import Framing, StreamDecoder, StreamEncoder
from addon.model import Event, StreamError
from addon.stream import fastpath
from addon.stream.decompress import Decompressor
from addon.stream.fastpath import FastPath, Lane, Runs
from addon.stream.framed_readers import (
    NOT_A_STREAM,
    Answer,
    EventStreamReader,
    JsonArrayReader,
    WholeBody,
)
from addon.stream.framing import JsonArrayWriter
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
from addon.stream.stages import Stage


class State(Enum):
    """Where one stream is; each says what a read does there (``feed_general``)."""

    READING = "reading"
    """The body is read as a stream (its framing's reader), the bytes so far ending inside an
    event (or no read route to track)."""
    BETWEEN = "between"
    """The same, the bytes so far ending where an event does: a fast route may take the next
    read (``addon.stream.fastpath``)."""
    COLLECTING = "collecting"
    """Another dialect's body that is not a stream: a read is kept (bounded) to be read whole
    at the end (``whole``)."""
    PASSTHROUGH = "passthrough"
    """A client of the upstream's dialect after a failure: a read goes out as it came."""
    STOPPED = "stopped"
    """The client's stream was ended with an error event: a read is dropped."""
    DONE = "done"
    """The body ended (``finish``): a read fed after it goes out as it came."""
    PASSED = "passed"
    """The body ended while passing through: a read goes out as it came."""


class Input(Enum):
    """What moves a stream from one ``State`` to another."""

    BOUNDARY = "a read that ends where an event does"
    INSIDE = "a read that ends inside an event"
    FOREIGN = "a body that is not a stream, on another dialect"
    RAW = "a failure a client of the upstream's dialect gets the rest raw after"
    STOP = "a failure on another dialect or on binary frames: the client's stream ends"
    END = "the body's end (finish)"


READING, BETWEEN, COLLECTING = State.READING, State.BETWEEN, State.COLLECTING
PASSTHROUGH, STOPPED, DONE, PASSED = State.PASSTHROUGH, State.STOPPED, State.DONE, State.PASSED
BOUNDARY, INSIDE, FOREIGN = Input.BOUNDARY, Input.INSIDE, Input.FOREIGN
RAW, STOP, END = Input.RAW, Input.STOP, Input.END

# The transitions: the state an input leads to from each state (None: it cannot happen there).
# fmt: off
_INPUTS =         (BOUNDARY, INSIDE,  FOREIGN,    RAW,         STOP,    END)
_NEXT = {
    READING:      (BETWEEN,  READING, COLLECTING, PASSTHROUGH, STOPPED, DONE),
    BETWEEN:      (BETWEEN,  READING, COLLECTING, PASSTHROUGH, STOPPED, DONE),
    COLLECTING:   (None,     None,    None,       None,        STOPPED, DONE),
    PASSTHROUGH:  (None,     None,    None,       PASSTHROUGH, None,    PASSED),
    STOPPED:      (None,     None,    None,       None,        STOPPED, STOPPED),
    DONE:         (None,     None,    None,       PASSED,      STOPPED, DONE),
    PASSED:       (None,     None,    None,       PASSED,      None,    PASSED),
}
# fmt: on
TRANSITIONS: dict[State, dict[Input, State]] = {
    state: {i: s for i, s in zip(_INPUTS, row, strict=True) if s is not None}
    for state, row in _NEXT.items()
}


class StreamStateError(RuntimeError):
    """An input the stream's state cannot take: a bug of ours (the shell's failure policy)."""


MAX_EVENT_BYTES = 16 * 1024 * 1024
"""Default bound of one line, one event's data, one JSON-array item, a non-stream body."""

_OUT = ("sse", "json_array")
"""The client's framings."""


class StreamProcessor:
    """One streamed answer: its ``State``, the body's reader, the client's ``Output``; the
    failure policy (``_fail``: the rest raw for a client of the upstream's dialect, else an
    error event ends the client's stream, as with AWS event-stream frames)."""

    def __init__(
        self,
        decoder: StreamDecoder,
        encoder: StreamEncoder,
        stages: Sequence[Stage] = (),
        decompressor: Decompressor | None = None,
        framing_in: Framing = "sse",
        framing_out: Framing = "sse",
        *,
        same_dialect: bool = True,
        max_event_bytes: int = MAX_EVENT_BYTES,
        whole: Callable[[bytes], list[Event]] | None = None,
        keep_original: int = 0,
        raw_ok: bool = False,
        coalesce: bool | None = None,
        status: int | None = None,
        content_type: str | None = None,
        redact: Callable[[str], str] | None = None,
        fast: bool = True,
    ) -> None:
        if framing_in not in ("sse", "json_array", "aws_eventstream") or framing_out not in _OUT:
            raise ValueError(f"unknown framing {framing_in!r} → {framing_out!r}")
        self._redact = redact  # for the error message of ``_stop`` (it may quote the upstream)
        self._decompressor = decompressor
        self.same_dialect = same_dialect
        self.fast = fast
        coalesce = (not same_dialect) if coalesce is None else coalesce
        self._fast_path = fp = FastPath.of(
            decoder.fast_path,
            encoder.fast_path,
            [stage.text_lane for stage in stages],
            fast=fast,
            raw_ok=raw_ok and same_dialect,
            coalesce=coalesce,
            sse_in=framing_in == "sse",
            sse_out=framing_out == "sse",
            raw_bytes=decompressor is None,
        )
        self._track = fp.track
        self._binary = framing_in == "aws_eventstream"  # never given to a client raw
        self._decoding = Decoding(decoder, strict=same_dialect and not self._binary)
        self._lanes: list[Lane] = []  # the read routes of ``reader``: their counts add to ours
        self._max = max_event_bytes
        self._whole = whole
        self._collected: WholeBody | None = None  # COLLECTING: the body so far
        self._keep = keep_original
        self.state = READING
        """Where the stream is: what a read does (``State``), changed by ``TRANSITIONS``."""
        self.original = bytearray()
        """The first ``keep_original`` bytes the upstream sent (decompressed), for the view."""
        self.whole_body = False
        """The body was not a stream and was read whole (``whole``) for another dialect."""
        self.error: str | None = None
        """Why the processor gave up rewriting (the rest passed raw, or the stream stopped)."""
        self.ended_with_error: str | None = None
        """Why the client's stream ended with an error the bridge wrote (a cut stream, a body
        that is not a stream: the shell's ⚠)."""
        self.last_chunk = b""
        """The last chunk fed, decompressed: what a client of the upstream's dialect gets when
        the processor fails on it."""
        writer = JsonArrayWriter() if framing_out == "json_array" else None
        self._output = Output(stages, encoder, writer, fp.text_sse, fp.stages)
        self._runs = fastpath.runs(self._output, fp)
        answer = (status, content_type)  # to say what came when the body is not a stream
        self._body_reader = _reader(
            framing_in, self._decoding, self._output, fp, self._runs, answer, coalesce, self._max
        )
        self._bytes_in = 0
        self.feed: Callable[[bytes], list[bytes]] = self.reader()
        """Upstream bytes in (split anywhere), client bytes out: ``[]``, never ``b""``, when
        nothing is ready."""

    # ------------------------------------------------------------------ public

    @property
    def events_in(self) -> int:
        runs = self._runs.events_in if self._runs is not None else 0
        whole = self._collected.events_in if self._collected is not None else 0
        return self._body_reader.events_in + runs + whole + sum(e.events_in for e in self._lanes)

    @property
    def bytes_in(self) -> int:
        """Bytes fed (decompressed)."""
        return self._bytes_in + sum(lane.bytes_in for lane in self._lanes)

    @property
    def bytes_out(self) -> int:
        return self._output.bytes_out + sum(lane.bytes_out for lane in self._lanes)

    @property
    def skipped_decoding(self) -> int:
        """Events passed on as the upstream's bytes, undecoded (``raw_ok``)."""
        runs = self._runs.skipped_decoding if self._runs is not None else 0
        lanes = sum(lane.skipped_decoding for lane in self._lanes)
        return self._body_reader.skipped_decoding + runs + lanes

    @property
    def passthrough(self) -> bool:
        """The client got the upstream's bytes from some point on (``error`` says why)."""
        return self.state is PASSTHROUGH or self.state is PASSED

    @property
    def skipped(self) -> int:
        """Events of another dialect the decoder could not read, skipped."""
        return self._decoding.skipped

    @property
    def skip_reason(self) -> str | None:
        """Why the first of them could not be read."""
        return self._decoding.skip_reason

    def feed_general(self, chunk: bytes) -> list[bytes]:
        """``feed`` the general way (``reader`` first looks for a fast route)."""
        if not chunk:
            return []
        if self._decompressor is not None:
            try:
                chunk = self._decompressor.feed(chunk)
            except Exception as e:
                return self._fail(Failure(f"cannot decompress the stream: {e}", chunk))
        self.last_chunk = chunk
        self._bytes_in += len(chunk)
        if self._keep and len(self.original) < self._keep:
            self.original += chunk[: self._keep - len(self.original)]
        state = self.state
        if state is READING or state is BETWEEN:
            found = self._body_reader.feed(chunk)
            if not isinstance(found, list):
                return self._settle(found)
            if self._track:
                # The view's copy of the start must be whole before a route may skip a read.
                at = self._body_reader.at_boundary() and len(self.original) >= self._keep
                if at is not (state is BETWEEN):
                    self._to(BOUNDARY if at else INSIDE)
            return found
        if state is COLLECTING:
            assert self._collected is not None
            self._collected.feed(chunk)
            return []
        if state is STOPPED:
            return []
        return self._output.out([chunk])  # PASSTHROUGH, DONE, PASSED

    def reader(
        self,
        general: Callable[[bytes], list[bytes]] | None = None,
        clock: Callable[[], int] | None = None,
        spent: Callable[[int], None] | None = None,
        failed: Callable[[bytes, Exception], list[bytes]] | None = None,
    ) -> Callable[[bytes], list[bytes]]:
        """A function for each read of the body (``feed``; the shell's stream callable): a read
        route's where the stream has one (``fastpath.reads``), else ``general`` (default:
        ``feed_general``). The time reads take goes to ``spent``, a route's bug to ``failed``."""

        def bug(chunk: bytes, e: Exception) -> list[bytes]:
            assert failed is not None
            self.last_chunk = chunk
            return failed(chunk, e)

        read, lane = fastpath.reads(
            self._output,
            self._fast_path,
            self._fail,
            general or self.feed_general,
            clock,
            spent,
            bug if failed is not None else None,
        )
        if lane is not None:
            lane.open = self.state is BETWEEN
            self._lanes.append(lane)
        return read

    def finish(self) -> list[bytes]:
        state = self.state
        self._to(END)
        if state is DONE or state is PASSED or state is STOPPED:
            return []
        tail = b""
        if self._decompressor is not None:
            try:
                tail = self._decompressor.finish()
            except Exception as e:
                self.error = self.error or f"cannot decompress the end of the stream: {e}"
        if state is PASSTHROUGH:
            return self._output.out([tail])
        if state is COLLECTING:
            return self._end_body(tail)
        found = self._body_reader.finish(tail)
        out = found if isinstance(found, list) else self._settle(found)
        self.ended_with_error = self.ended_with_error or self._decoding.end_error
        return out

    def abort(self, why: str) -> list[bytes]:
        """The shell's way out when the processor itself failed: a same-dialect stream passes
        through from here on (``[]``); another dialect's ends with an error event."""
        if self.same_dialect and not self._binary:
            self._to(RAW)
            self.error = self.error or why
            return []
        # Also after ``finish`` raised: what it wrote was lost with it, so the client's stream
        # has no ending yet — it gets the error event.
        return self._stop(why)

    def upstream_ended(self) -> bool:
        """Whether the upstream's stream had reached its own end (``[DONE]`` …), for a body
        that will never be fed again (the client hung up): asks the decoder's ``finish``."""
        state = self.state
        if state is DONE or state is PASSED or state is STOPPED:
            return self.ended_with_error is None
        if state is not READING and state is not BETWEEN:
            return False
        return self._decoding.ended()

    # ------------------------------------------------------------------ internals

    def _to(self, event: Input) -> None:
        """Take ``event``: the state ``TRANSITIONS`` names, the read routes opened in BETWEEN."""
        if (state := TRANSITIONS[self.state].get(event)) is None:
            why = f"{event.name} ({event.value})"
            raise StreamStateError(f"a stream in state {self.state.name} cannot take {why}")
        self.state = state
        for lane in self._lanes:
            lane.open = state is BETWEEN

    def _settle(self, found: Failure | Foreign) -> list[bytes]:
        """What a reader found that is not the client's bytes, applied."""
        if isinstance(found, Failure):
            return self._fail(found)
        if self.same_dialect:
            return self._fail(Failure(NOT_A_STREAM, found.raw, found.done))
        # A line that is no event-stream line: the rest of the body is something else.
        body = self._collected = WholeBody(self._decoding, self._output, self._whole, self._max)
        body.feed(found.raw + self._body_reader.pending())
        self._body_reader.forget()
        out = self._output.out(found.done)
        if self.state is DONE:  # read at the body's end: it ends here
            return out + self._end_body()
        self._to(FOREIGN)
        return out

    def _fail(self, failure: Failure) -> list[bytes]:
        """A read that could not go on: a client of the upstream's dialect gets the rest raw
        (what stages hold first); any other, or AWS event-stream frames, an error (``_stop``)."""
        if self._binary or not self.same_dialect:
            return self._stop(failure.why, failure.done)
        state = self.state
        self._to(RAW)
        if state is PASSTHROUGH or state is PASSED:  # passing already: the bytes go on
            return self._output.out([*failure.done, failure.raw])
        self.error = failure.why
        held = self._body_reader.pending()
        self._forget()
        return self._output.out([*failure.done, *self._output.drain(), failure.raw, held])

    def _stop(self, why: str, done: Sequence[bytes] = ()) -> list[bytes]:
        """What stages hold goes out, then the client's stream ends with an error in its own
        dialect, and later bytes are dropped: it cannot read the upstream's bytes."""
        if self.state is STOPPED:  # the client's stream has ended already
            return []
        self._to(STOP)
        self.error = why
        self.ended_with_error = why
        self._forget()
        out = [*done]
        try:
            message = f"cursor-bridge could not read the upstream's stream: {why}"
            message = self._redact(message) if self._redact is not None else message
            out += self._output.end_with(StreamError(message, "bridge_stream_error"))
        except Exception:  # already failing: the error event is best effort
            pass
        return self._output.out(out)

    def _forget(self) -> None:
        """Drop whatever is held for reading: nothing more will be read (memory returns)."""
        self._body_reader.forget()
        if self._collected is not None:
            self._collected.forget()

    def _end_body(self, tail: bytes = b"") -> list[bytes]:
        """The end of a body that was not an event stream (another dialect): read whole."""
        body = self._collected
        assert body is not None
        body.feed(tail)
        found = body.end(self.events_in > 0)
        if not isinstance(found, list):
            return self._fail(found)
        self.whole_body = True
        self.ended_with_error = self.ended_with_error or self._decoding.end_error
        return found


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


type _Reader = SSEReader | JsonArrayReader | EventStreamReader


def _reader(
    framing: Framing,
    decoding: Decoding,
    output: Output,
    fast: FastPath,
    runs: Runs | None,
    answer: Answer,
    coalesce: bool,
    max_event_bytes: int,
) -> _Reader:
    """The reader of the upstream's body for its framing."""
    if framing == "sse":
        return SSEReader(decoding, output, fast, runs, coalesce, max_event_bytes)
    if framing == "json_array":
        return JsonArrayReader(decoding, output, answer, max_event_bytes)
    return EventStreamReader(decoding, output, answer)
