"""The stream pipeline: upstream bytes in, client bytes out (``StreamProcessor``), sans-IO.

Contract: ``feed(chunk) -> list[bytes]`` takes chunks split anywhere and returns ``[]``, never
an empty ``bytes``, when nothing is ready; ``finish()`` flushes and is idempotent; ``abort``
is the shell's way out. Never eat a stream, never hand a client another dialect's bytes: a
same-dialect stream falls back to ``passthrough`` of the raw bytes (``error`` says why),
another dialect's ends with an error event in the client's dialect (``_stop``). The body's
reader is the framing's (``SSEReader``, ``JsonArrayReader``, ``EventStreamReader``), the
client's side is ``Output``; the lanes (``addon.stream.lanes``) take the common read, and
``fast=False`` turns them off, to the same bytes. The whole story: docs/streams.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from addon.dialects.base import Framing, StreamDecoder, StreamEncoder
from addon.model import Event, StreamError
from addon.stream import lanes
from addon.stream.decompress import Decompressor
from addon.stream.fastpath import FastPath
from addon.stream.framed_readers import EventStreamReader, JsonArrayReader
from addon.stream.framing import JsonArrayWriter
from addon.stream.lanes import Lane
from addon.stream.output import Output
from addon.stream.sse_reader import SSEReader
from addon.stream.stages import Stage

MAX_EVENT_BYTES = 16 * 1024 * 1024
"""Default bound of one line, one event's data, one JSON-array item, a non-stream body."""

_OUT = ("sse", "json_array")
"""The client's framings."""

NOT_A_STREAM = "the upstream's body is not an event stream"


class StreamProcessor:
    """One streamed answer, the general way. Public state, for the shell: ``passthrough`` and
    ``error`` (why it fell back); ``ended_with_error`` (why the client's stream ended with an
    error the bridge wrote: a cut stream, a body that is not a stream; the shell's ⚠);
    ``skipped`` / ``skip_reason`` (events of another dialect it could not read);
    ``whole_body``; ``original`` (the first ``keep_original`` bytes, for the view);
    ``last_chunk`` (the last chunk fed the general way, decompressed: what a same-dialect
    client gets when the processor fails on it); the counts ``events_in``, ``bytes_in``,
    ``bytes_out``, ``skipped_decoding`` (the lanes' added)."""

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
        self._decoder = decoder
        self._redact = redact  # for the error message of ``_stop`` (it may quote the upstream)
        self._decompressor = decompressor
        self.same_dialect = same_dialect
        self.fast = fast
        coalesce = (not same_dialect) if coalesce is None else coalesce
        self._fast_path = FastPath.of(
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
        self._track = self._fast_path.track
        self._lanes: list[Lane] = []  # the lanes of ``reader``: their counts add to ours
        self._max = max_event_bytes
        self._whole = whole
        self._body: bytearray | None = None  # another dialect, not a stream: collected
        self._body_cut = False
        self._keep = keep_original
        self.original = bytearray()
        self.whole_body = False
        self.skipped = 0
        self.skip_reason: str | None = None
        self._binary = framing_in == "aws_eventstream"  # never given to a client raw
        self._stopped = False  # the client's stream was ended with an error (``_stop``)
        writer = JsonArrayWriter() if framing_out == "json_array" else None
        self._output = Output(stages, encoder, writer, self._fast_path)
        self._out = self._output.out
        answer = (status, content_type)  # to say what came when the body is not a stream
        self._input = _reader(self, framing_in, self._output, self._fast_path, answer, coalesce)
        # A lane takes a read only when the bytes fed so far end at an event boundary and the
        # stream goes on as usual (kept when ``_track``; False from any way out).
        self._between = False
        self._finished = False
        self.passthrough = False
        self.error: str | None = None
        self.ended_with_error: str | None = None
        self.last_chunk = b""
        self._events_in = 0
        self._bytes_in = 0
        self.feed: Callable[[bytes], list[bytes]] = self.reader()
        """Upstream bytes in (split anywhere), client bytes out (see the module docstring)."""

    # ------------------------------------------------------------------ public

    @property
    def events_in(self) -> int:
        return self._events_in + self._input.events_in + sum(lane.events_in for lane in self._lanes)

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
        lanes = sum(lane.skipped_decoding for lane in self._lanes)
        return self._input.skipped_decoding + lanes

    def feed_general(self, chunk: bytes) -> list[bytes]:
        """``feed`` the general way (``reader`` first looks for the common read)."""
        if not chunk:
            return []
        if self._decompressor is not None:
            try:
                chunk = self._decompressor.feed(chunk)
            except Exception as e:
                return self._fail(f"cannot decompress the stream: {e}", chunk)
        self.last_chunk = chunk
        self._bytes_in += len(chunk)
        if self._keep and len(self.original) < self._keep:
            self.original += chunk[: self._keep - len(self.original)]
        if self._stopped:
            return []
        if self.passthrough or self._finished:
            return self._out([chunk])
        if self._body is not None:
            self._collect(chunk)
            return []
        out = self._input.feed(chunk)
        if self._track:
            self._between = (
                self._input.at_boundary()
                and not (self._stopped or self.passthrough or self._finished)
                and self._body is None
                and len(self.original) >= self._keep  # the view's copy of the start is whole
            )
        return out

    def reader(
        self,
        general: Callable[[bytes], list[bytes]] | None = None,
        clock: Callable[[], int] | None = None,
        spent: Callable[[int], None] | None = None,
        failed: Callable[[bytes, Exception], list[bytes]] | None = None,
    ) -> Callable[[bytes], list[bytes]]:
        """A function for each read of the body (``feed``; the shell's stream callable): the
        lane's (``addon.stream.lanes``) where the stream has one, ``general`` for every other
        read (default: ``feed_general``; a shell's own also ends the body on ``b""``). With a
        ``clock`` and ``spent`` the time reads take goes to ``spent`` (sampled); a failure of a
        lane itself goes to ``failed`` with the chunk (then the ``last_chunk``)."""
        read, lane = lanes.reads(
            self, self._output, self._fast_path, general or self.feed_general, clock, spent, failed
        )
        if lane is not None:
            self._lanes.append(lane)
        return read

    def finish(self) -> list[bytes]:
        if self._finished:
            return []
        self._finished = True
        self._between = False
        tail = b""
        if self._decompressor is not None:
            try:
                tail = self._decompressor.finish()
            except Exception as e:
                self.error = self.error or f"cannot decompress the end of the stream: {e}"
        if self._stopped:
            return []
        if self.passthrough:
            return self._out([tail])
        if self._body is not None:
            self._collect(tail)
            return self._end_body()
        return self._input.finish(tail)

    # ------------------------------------------------------------------ internals

    def abort(self, why: str) -> list[bytes]:
        """The shell's way out when the processor itself failed: a same-dialect stream passes
        through from here on (nothing to give back: ``[]``); another dialect's is ended with an
        error event in the client's dialect (its bytes returned)."""
        if self.same_dialect and not self._binary:
            self.passthrough = True
            self._between = False
            self.error = self.error or why
            return []
        if self._stopped:
            return []
        # Also after ``finish`` raised: what it wrote was lost with it, so the client's stream
        # has no ending yet — it gets the error event.
        return self._stop(why)

    def _stop(self, why: str, done: Sequence[bytes] = ()) -> list[bytes]:
        """A client of another dialect cannot read the upstream's bytes (nor anyone AWS
        event-stream frames): what stages hold goes out, then the client's stream ends with an
        error in its own dialect, and later bytes are dropped. ``error`` says why."""
        self._stopped = True
        self._between = False
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
        return self._out(out)

    def _forget(self) -> None:
        """Drop whatever is held for reading: nothing more will be read (memory returns)."""
        self._input.forget()
        self._body = None

    def _foreign(self, raw: bytes, done: list[bytes], final: bool) -> list[bytes]:
        """A line that is no event-stream line: the rest of the body is something else."""
        if self.same_dialect:
            return self._fail(NOT_A_STREAM, raw, done)
        self._body = bytearray(raw)
        self._body += self._input.pending()
        self._input.forget()
        out = self._out(done)
        return out + self._end_body() if final else out

    def _collect(self, chunk: bytes) -> None:
        body = self._body
        assert body is not None
        room = self._max - len(body)
        if len(chunk) > room:
            self._body_cut = True
        if room > 0:
            body += chunk[:room]

    def _end_body(self) -> list[bytes]:
        """The end of a body that was not an event stream (another dialect): read whole."""
        body = bytes(self._body or b"")
        self._body = None
        if self._events_in or self._input.events_in or self._whole is None or self._body_cut:
            quote = body[:200].decode("utf-8", "replace").strip()
            return self._stop(f"{NOT_A_STREAM}: {quote!r}")
        out: list[bytes] = []
        try:
            events = self._whole(body)
            self._note_end_error(events)
            self._events_in += 1
            out.extend(self._output.through(events))
            self._end(out, decoder=False)
        except Exception as e:
            return self._stop(f"{type(e).__name__}: {e}", out)
        self.whole_body = True
        return self._out(out)

    def _decode(self, data: str, event: str | None) -> list[Event]:
        """The upstream decoder's events; on another dialect an event it cannot read is
        skipped (no events), counted, and its reason kept."""
        try:
            return self._decoder.feed(data, event)
        except Exception as e:
            if self.same_dialect and not self._binary:
                raise
            self.skipped += 1
            if self.skip_reason is None:
                self.skip_reason = f"{type(e).__name__}: {e}"
            return []

    def _end(self, out: list[bytes], decoder: bool = True) -> None:
        """The body ended: flush the decoder, the stages and the encoder; close the framing."""
        events = self._decoder.finish() if decoder else []
        self._note_end_error(events)
        out.extend(self._output.end(events))

    def _note_end_error(self, events: Sequence[Event]) -> None:
        """Events read at the body's end (the decoder's ``finish``, a whole body's reading):
        an error among them is the bridge's (``ended_with_error``)."""
        for event in events:
            if isinstance(event, StreamError):
                self.ended_with_error = self.ended_with_error or event.message

    def upstream_ended(self) -> bool:
        """Whether the upstream's stream had reached its own end (``[DONE]``,
        ``message_stop`` …) — for a body that stopped coming (the client hung up) and will
        never be fed again: asks the decoder's ``finish`` (whose events are dropped)."""
        if self._finished:
            return self.ended_with_error is None
        if self._stopped or self.passthrough or self._body is not None:
            return False
        try:
            return not any(isinstance(e, StreamError) for e in self._decoder.finish())
        except Exception:
            return False

    def _fail(self, why: str, raw: bytes, done: Sequence[bytes] = ()) -> list[bytes]:
        if self._binary or not self.same_dialect:
            return self._stop(why, done)
        self.passthrough = True
        self._between = False
        self.error = why
        held = self._input.pending()
        self._forget()
        return self._out([*done, *self._output.drain(), raw, held])


type _Reader = SSEReader | JsonArrayReader | EventStreamReader


def _reader(
    host: StreamProcessor,
    framing: Framing,
    output: Output,
    fast: FastPath,
    answer: tuple[int | None, str | None],
    coalesce: bool,
) -> _Reader:
    """The reader of the upstream's body for its framing."""
    if framing == "sse":
        return SSEReader(host, output, fast, coalesce=coalesce, max_event_bytes=host._max)
    if framing == "json_array":
        return JsonArrayReader(host, output, answer, host._max)
    return EventStreamReader(host, output, answer)
