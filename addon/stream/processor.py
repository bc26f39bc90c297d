"""One streamed answer, sans-IO (``StreamProcessor``): its state, and what each state does
with the next bytes (the body's reader, ``addon.stream.readers``; a fast route,
``addon.stream.fastpath``; the client's side, ``addon.stream.output``).

Contract: ``feed(chunk)`` takes chunks split anywhere and returns ``[]``, never ``b""``, when
nothing is ready; ``finish()`` is idempotent; ``upstream_cut(cause)`` ends the client's stream
with its dialect's error (idempotent, nothing after ``finish``); ``abort(why)`` is the shell's
way out. What the stream does with the next bytes, at the body's end, when the upstream breaks
off or sends an error, follows its ``State`` alone, by one table (``ROWS``, at the end of the
class, and ``TRANSITIONS``, ``addon.stream.states``): later work adds rows, not places. A
failed stream stays so."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from addon.dialects.base import Framing, StreamDecoder, StreamEncoder
from addon.model import Event, StreamError
from addon.stream import fastpath
from addon.stream.decompress import Decompressor
from addon.stream.fastpath import FastPath, Reader, Runs
from addon.stream.framing import JsonArrayWriter
from addon.stream.output import Output, cut_message
from addon.stream.readers import NOT_A_STREAM, BodyReader, WholeBody, reader_for
from addon.stream.reading import Decoding, Failure, Foreign
from addon.stream.stages import Stage
from addon.stream.states import (
    BETWEEN,
    BOUNDARY,
    CALL,
    CALLED,
    COLLECTING,
    CUT,
    CUT_CAUSES,
    DONE,
    END,
    ERROR,
    FOREIGN,
    INSIDE,
    PASSED,
    PASSTHROUGH,
    RAW,
    READING,
    SECOND_CALL,
    STOP,
    STOPPED,
    TRANSITIONS,
    Input,
    State,
    StreamStateError,
)

MAX_EVENT_BYTES = 16 * 1024 * 1024
"""Default bound of one line, one event's data, one JSON-array item, a non-stream body."""

_OUT = ("sse", "json_array")
"""The client's framings."""


class StreamFacts:
    """What one stream has read, written and ended with: what the shell reads of it (counts
    summed over its readers, why it failed or ended with an error, the view's copy)."""

    _runs: Runs | None
    _collected: WholeBody | None
    _fast: fastpath.Route | None
    _body_reader: BodyReader
    _bytes_in: int
    _output: Output
    _decoding: Decoding
    state: State

    def __init__(self) -> None:
        self._bytes_in = 0
        self.original = bytearray()
        """The first ``keep_original`` bytes the upstream sent (decompressed), for the view."""
        self.whole_body = False
        """The body was not a stream and was read whole (``whole``) for another dialect."""
        self.error: str | None = None
        """Why the processor gave up rewriting (the rest passed raw, or the stream stopped)."""
        self.ended_with_error: str | None = None
        """Why the client's stream ended with an error the bridge wrote (a cut stream, a body
        that is not a stream: the shell's ⚠)."""
        self.cut: str | None = None
        """How the upstream broke the body off, once the client's stream ended for it."""
        self.error_event: str | None = None
        """The message of the first error event the client got from the upstream's stream
        (``ERROR``): the upstream's own, or its decoder's for a body that ended before the
        stream's own end."""
        self.last_chunk = b""
        """The last chunk fed, decompressed: what a client of the upstream's dialect gets when
        the processor fails on it."""

    @property
    def events_in(self) -> int:
        whole = self._collected.events_in if self._collected is not None else 0
        return self._body_reader.events_in + whole + self.fast_events

    @property
    def fast_events(self) -> int:  # of events_in, those a fast route or run took
        return sum(r.events_in for r in (self._runs, self._fast) if r is not None)

    @property
    def bytes_in(self) -> int:
        """Bytes fed (decompressed)."""
        return self._bytes_in + (self._fast.bytes_in if self._fast is not None else 0)

    @property
    def bytes_out(self) -> int:
        return self._output.bytes_out + (self._fast.bytes_out if self._fast is not None else 0)

    @property
    def skipped_decoding(self) -> int:
        """Events passed on as the upstream's bytes, undecoded (``raw_ok``)."""
        fast = sum(r.skipped_decoding for r in (self._runs, self._fast) if r is not None)
        return self._body_reader.skipped_decoding + fast

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


class StreamProcessor(StreamFacts):
    """One streamed answer: its ``State``, the body's reader, the client's ``Output``, and one
    read function (``feed``, a ``fastpath.Reader``) whose route is the table's for the state;
    the failure policy (``_fail``: the rest raw for a client of the upstream's dialect, else an
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
        """``raw_ok``: the caller lets an event nobody reads pass as the upstream's bytes on a
        same-dialect stream; whether one does is then the stages' word (``changes_bytes``)."""
        if framing_in not in ("sse", "json_array", "aws_eventstream") or framing_out not in _OUT:
            raise ValueError(f"unknown framing {framing_in!r} → {framing_out!r}")
        self._redact = redact  # for the error message of ``_stop`` (it may quote the upstream)
        self._decompressor = decompressor
        self.decompressed = decompressor is not None  # content-encoded: undone as it comes
        self.same_dialect = same_dialect
        self.fast = fast
        coalesce = (not same_dialect) if coalesce is None else coalesce
        self._fast_path = fp = FastPath.of(
            decoder.fast_path,
            encoder.fast_path,
            stages,
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
        self._max = max_event_bytes
        self._whole = whole
        self._collected: WholeBody | None = None  # COLLECTING: the body so far
        self._keep = keep_original
        super().__init__()
        self.state = READING
        """Where the stream is (``State``): changed by ``_to`` alone, along ``TRANSITIONS``."""
        writer = JsonArrayWriter() if framing_out == "json_array" else None
        self._output = Output(stages, encoder, writer, fp.text_sse, fp.stages, self._error_event)
        self._fast = fastpath.route(self._output, fp, self._fail, self.feed_general)
        """The stream's fast route (the table's ``BETWEEN`` row; None: none)."""
        self._runs = fastpath.runs(self._output, fp)
        answer = (status, content_type)  # to say what came when the body is not a stream
        self._body_reader: BodyReader = reader_for(
            framing_in, self._decoding, self._output, fp, self._runs, answer, coalesce, self._max
        )
        self._routes: dict[State, fastpath.Read] = {}
        """What a read does in each state: ``ROWS`` with this stream's route and ``general``."""
        self._reader = Reader(self.feed_general)
        self.feed: Callable[[bytes], list[bytes]] = self.reader()
        """Upstream bytes in (split anywhere), client bytes out: ``[]``, never ``b""``, when
        nothing is ready. The stream's one read function (``reader`` configures it)."""

    # ------------------------------------------------------------------ public

    def feed_general(self, chunk: bytes) -> list[bytes]:
        """``feed`` the general way: the chunk decompressed and counted, then what the state's
        row reads with (``ROWS``)."""
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
        return ROWS[self.state].read(self, chunk)

    def reader(
        self,
        general: Callable[[bytes], list[bytes]] | None = None,
        clock: Callable[[], int] | None = None,
        spent: Callable[[int], None] | None = None,
        failed: Callable[[bytes, Exception], list[bytes]] | None = None,
    ) -> Callable[[bytes], list[bytes]]:
        """The stream's one read function (``feed``; the shell's stream callable), configured:
        in a state whose row is ``fast`` the stream's fast route takes the read first, any other
        read goes to ``general`` (default: ``feed_general``). The time reads take goes to
        ``spent``, a bug of ours to ``failed``. Called again, it configures the same reader
        (with no fast route, nothing timed and no ``failed``, the reader is ``general``)."""

        def bug(chunk: bytes, e: Exception) -> list[bytes]:
            assert failed is not None
            self.last_chunk = chunk
            return failed(chunk, e)

        general = general or self.feed_general
        route = general
        if self._fast is not None:
            self._fast.general = general
            route = self._fast.read
        self._routes = {state: route if row.fast else general for state, row in ROWS.items()}
        self._reader.configure(clock, spent, bug if failed is not None else None)
        self._reader.route = self._routes[self.state]
        if self._fast is None and (clock is None or spent is None) and failed is None:
            return general  # every row reads the general way, untimed: it is the reader
        return self._reader.read

    def finish(self) -> list[bytes]:
        """The body's end: what the state's row does there (``ROWS``: ``end``)."""
        state = self.state
        self._to(END)
        return ROWS[state].end(self)

    def upstream_cut(self, cause: str) -> list[bytes]:
        """The upstream's body broke off (``cause``: ``upstream_cut`` for a connection closed
        mid-body, ``upstream_reset``, ``upstream_idle`` for silence past the idle timeout …):
        the client's closing bytes, what the state's row does there (``ROWS``: ``cut``). While
        the body is read, the client's stream ends with its dialect's error event (a client of
        the upstream's dialect too: never raw bytes); after the body's end, or a second time,
        nothing. For the shell (issue 42)."""
        state = self.state
        self._to(CUT_CAUSES.get(cause, CUT))
        return ROWS[state].cut(self, cause)

    def second_call(self) -> None:
        """The upstream's stream ended with a call of the bridge's web search tool (the
        decoder, ``addon.stream.second_call``, held its ending): ``SECOND_CALL`` until the
        relay's leg's marker comes with the next call's body, or the body ends. A stream that
        failed already (passing raw, stopped) stays where it is."""
        if CALL in TRANSITIONS[self.state]:
            self._to(CALL)

    def second_call_ended(self) -> None:
        """The leg's marker came: the next upstream call's body is read (``READING``)."""
        if CALLED in TRANSITIONS[self.state]:
            self._to(CALLED)

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
        that will never be fed again (the client hung up): the state's row says (``ended``)."""
        return ROWS[self.state].ended(self)

    # ------------------------------------------------------------------ internals

    def _to(self, event: Input) -> None:
        """Take ``event``: the state ``TRANSITIONS`` names, and the read route its row says."""
        if (state := TRANSITIONS[self.state].get(event)) is None:
            why = f"{event.name} ({event.value})"
            raise StreamStateError(f"a stream in state {self.state.name} cannot take {why}")
        self.state = state
        self._reader.route = self._routes[state]

    # The rows' actions, by column of ``ROWS``.

    def _read_body(self, chunk: bytes) -> list[bytes]:
        """read (READING, BETWEEN): the body's reader; the move to BETWEEN or READING when
        a read route is tracked."""
        state = self.state
        found = self._body_reader.feed(chunk)
        if not isinstance(found, list):
            return self._settle(found)
        if self._track:
            # The view's copy of the start must be whole before a route may skip a read.
            at = self._body_reader.at_boundary() and len(self.original) >= self._keep
            if at is not (state is BETWEEN):
                self._to(BOUNDARY if at else INSIDE)
        return found

    def _read_call(self, chunk: bytes) -> list[bytes]:
        """read (SECOND_CALL): the body's reader, untracked — the leg's marker and the next
        call's events must reach the decoder, no fast route takes a read."""
        found = self._body_reader.feed(chunk)
        return found if isinstance(found, list) else self._settle(found)

    def _tail(self) -> bytes:
        """The decompressor's last bytes, at the body's end."""
        if self._decompressor is None:
            return b""
        try:
            return self._decompressor.finish()
        except Exception as e:
            self.error = self.error or f"cannot decompress the end of the stream: {e}"
            return b""

    def _end_body(self) -> list[bytes]:
        """end (READING, BETWEEN, SECOND_CALL): the body's reader finishes (the decoder's
        end, the stages and the encoder closed)."""
        found = self._body_reader.finish(self._tail())
        out = found if isinstance(found, list) else self._settle(found)
        self.ended_with_error = self.ended_with_error or self._decoding.end_error
        return out

    # The inputs that do not come from a read.

    def _error_event(self, error: StreamError) -> None:
        """The encoder is writing an error event (``Output``): ERROR, and its row's action."""
        state = self.state
        self._to(ERROR)
        ROWS[state].error(self, error)

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
            return out + self._end_whole()
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
        message = f"cursor-bridge could not read the upstream's stream: {why}"
        return self._end_client(why, message, "bridge_stream_error", done)

    def _end_client(
        self, why: str, message: str, kind: str, done: Sequence[bytes] = ()
    ) -> list[bytes]:
        """The client's stream ends (the state is STOPPED): ``done`` and what stages hold go
        out, then ``StreamError(message, kind)`` in the client's dialect (its encoder's
        ``end_with``)."""
        self.error = why
        self.ended_with_error = why
        self._forget()
        out = [*done]
        try:
            message = self._redact(message) if self._redact is not None else message
            out += self._output.end_with(StreamError(message, kind))
        except Exception:  # already failing: the error event is best effort
            pass
        return self._output.out(out)

    def _forget(self) -> None:
        """Drop whatever is held for reading: nothing more will be read (memory returns)."""
        self._body_reader.forget()
        if self._collected is not None:
            self._collected.forget()

    def _end_whole(self, tail: bytes = b"") -> list[bytes]:
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


# The rows' actions of one column each, on the stream they are given.


def _collect(self: StreamProcessor, chunk: bytes) -> list[bytes]:
    """read (COLLECTING): kept for the whole body's reading at its end."""
    assert self._collected is not None
    self._collected.feed(chunk)
    return []


def _pass(self: StreamProcessor, chunk: bytes) -> list[bytes]:
    """read (PASSTHROUGH, DONE, PASSED): out as it came."""
    return self._output.out([chunk])


def _end_collected(self: StreamProcessor) -> list[bytes]:
    """end (COLLECTING): the body kept is read whole."""
    return self._end_whole(self._tail())


def _end_passing(self: StreamProcessor) -> list[bytes]:
    """end (PASSTHROUGH): the last bytes out as they came."""
    return self._output.out([self._tail()])


def _noted(self: StreamProcessor, error: StreamError) -> None:
    """error (every state but STOPPED): the first error event of the upstream's stream."""
    if self.error_event is None:
        self.error_event = error.message


def _decoder_ended(self: StreamProcessor) -> bool:
    """ended (READING, BETWEEN): the decoder's ``finish`` says whether it saw the end."""
    return self._decoding.ended()


def _ended_cleanly(self: StreamProcessor) -> bool:
    """ended (STOPPED, DONE, PASSED): the body ended, and no error the bridge wrote."""
    return self.ended_with_error is None


def _cut_off(self: StreamProcessor, cause: str) -> list[bytes]:
    """cut (READING, BETWEEN, COLLECTING, PASSTHROUGH, SECOND_CALL): what stages hold (a
    call not ended dropped), then the client's stream ends with its dialect's error naming
    ``cause``, of the type for 503 (retryable: ``BRIDGE_ERROR_STATUS``); later bytes dropped."""
    message = cut_message(cause)
    self.cut = cause
    return self._end_client(message, message, cause)


# The rows' actions that need nothing of the stream.


def _drop(_: StreamProcessor, chunk: bytes) -> list[bytes]:
    """read (STOPPED): dropped; the client's stream has ended."""
    return []


def _ended(_: StreamProcessor) -> list[bytes]:
    """end (STOPPED, DONE, PASSED): nothing more (``finish`` is idempotent)."""
    return []


def _cut_after(_: StreamProcessor, cause: str) -> list[bytes]:
    """cut (STOPPED, DONE, PASSED): the client's stream had ended: nothing."""
    return []


def _ours(_: StreamProcessor, error: StreamError) -> None:
    """error (STOPPED): the error the bridge wrote itself (``_end_client``)."""


def _not_ended(_: StreamProcessor) -> bool:
    """ended (COLLECTING, PASSTHROUGH, SECOND_CALL): not known to have ended."""
    return False


class Row(NamedTuple):
    """What a stream does in one ``State``: each column one kind of input."""

    fast: bool
    """A read may take the stream's fast route first (``fastpath.route``: the skip read, the
    text read), the general way on what it does not take."""
    read: Callable[[StreamProcessor, bytes], list[bytes]]
    """The next bytes, the general way (decompressed and counted by ``feed_general``)."""
    end: Callable[[StreamProcessor], list[bytes]]
    """The body's end (``finish``: END)."""
    cut: Callable[[StreamProcessor, str], list[bytes]]
    """The upstream broke off (``upstream_cut``: CUT, RESET, IDLE), with its cause."""
    error: Callable[[StreamProcessor, StreamError], None]
    """An error event of the upstream's stream, written by the client's encoder (ERROR)."""
    ended: Callable[[StreamProcessor], bool]
    """Whether the upstream's stream reached its own end (``upstream_ended``)."""


_P = StreamProcessor
# The one table: what each state does with the next bytes (the fast route included), at the
# body's end, on a cut, on an error event; where each input leads is ``TRANSITIONS``.
# fmt: off
ROWS: dict[State, Row] = {
    #             fast   read           end              cut         error   ended
    READING:     Row(False, _P._read_body, _P._end_body,    _cut_off,   _noted, _decoder_ended),
    BETWEEN:     Row(True,  _P._read_body, _P._end_body,    _cut_off,   _noted, _decoder_ended),
    COLLECTING:  Row(False, _collect,      _end_collected,  _cut_off,   _noted, _not_ended),
    PASSTHROUGH: Row(False, _pass,         _end_passing,    _cut_off,   _noted, _not_ended),
    SECOND_CALL: Row(False, _P._read_call, _P._end_body,    _cut_off,   _noted, _not_ended),
    STOPPED:     Row(False, _drop,         _ended,          _cut_after, _ours,  _ended_cleanly),
    DONE:        Row(False, _pass,         _ended,          _cut_after, _noted, _ended_cleanly),
    PASSED:      Row(False, _pass,         _ended,          _cut_after, _noted, _ended_cleanly),
}
# fmt: on
