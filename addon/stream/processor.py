"""The stream pipeline: upstream SSE bytes in, client SSE bytes out.

    bytes ─► [decompress] ─► SSE lines ─► SSE events ─► upstream decoder ─► unified events
          ─► stages (text protocol, tool-call assembly, ...) ─► client encoder ─► SSE ─► bytes

Contract: sans-IO. ``feed(chunk) -> list[bytes]`` may be called with chunks
split anywhere (inside a line, inside a UTF-8 character); it returns ``[]``
when nothing is ready and never an empty ``bytes`` (mitmproxy would end an
HTTP/1 chunked body on it). ``finish()`` flushes and is idempotent.

Never eat a stream, and never hand a client bytes of another dialect. What happens when
something cannot be read depends on ``same_dialect`` (client and upstream speak one dialect):

- same dialect: if decoding or rewriting fails, the processor records why in ``error``,
  switches to ``passthrough`` and returns the raw (decompressed) bytes of everything not yet
  emitted: the event that failed, the lines after it and the unfinished tail. Bytes fed after
  that are returned as they come;
- another dialect: an event the upstream decoder cannot read is skipped (``skipped`` counts
  them, ``skip_reason`` keeps the first reason) and the stream goes on; a failure anywhere
  else ends the client's stream with an error event in its own dialect (``_stop``) and later
  bytes are dropped.

A body sent as ``text/event-stream`` that is not an event stream (a JSON error object, an HTML
page, plain text: ``SSEForeign``) is passed through on a same-dialect route; on another it is
collected (bounded) and, when it ends, handed to ``whole`` — the plan's reading of a whole
body: a whole answer's events, or a ``StreamError`` quoting it.

Do not decode what nobody reads: with ``raw_ok`` (the plan: same dialect, no stage that changes
events) an event whose data the decoder calls ``skippable`` (for OpenAI chat: a plain text
chunk) is passed on as the upstream's bytes without being decoded (``skipped_decoding``).

Reads, not events, are the unit of work where it pays (``reader``, ``_fast``): the whole
events a read completes (the start of the first one held from the read before) are looked at
once — a run nobody reads passes as its bytes (the decoder's ``skippable_run``), a run of
plain text is read in one pass (``text_run``) and, with ``coalesce`` (another dialect, or a
text protocol that rewrites the text anyway), goes through the stages and the encoder as one
delta; text that arrived together reaches the client together, in fewer events. A
same-dialect client without ``coalesce`` keeps the upstream's chunks one for one, whatever
the reads.

``fast=False`` turns the lanes off (``addon.stream.fastpath``): every read goes the general
way, to the same bytes, counts and records (``tests/unit/test_fast_path_equivalence.py``).

A stream the upstream cut (no finish, no ``[DONE]`` / ``message_stop``) is reported by the
decoders as a ``StreamError`` of type ``upstream_cut``; the encoders then end the client's
stream the way its dialect shows a failure, never with a made-up clean ending.

Memory is bounded: an unfinished line, an event's data, a JSON-array item and the collected
non-stream body never grow past ``max_event_bytes``. Past it the stream is passed through
(same dialect; memory returns) or ended with an error event (another dialect). ``original``
keeps the first ``keep_original`` bytes the upstream sent (decompressed) for the shell's view.

SSE comments (``: keep-alive``) are forwarded as they are, so that idle
connections stay open through the proxy.

Framings (``addon.stream.framing``): the upstream's body is read as SSE (``framing_in="sse"``)
or as one JSON array whose items are the events (``"json_array"``, Gemini without
``alt=sse``: each item goes to the decoder as ``feed(item, None)``); the client's body is
written as SSE or as one JSON array of the encoder's data (``[`` item ``,\r\n`` item … ``]``,
closed by ``finish()``). SSE comments have no JSON-array form and are dropped there. On a
failure the raw bytes given back are the upstream's, whatever the framings — except for AWS
event-stream frames (``"aws_eventstream"``, Kiro; ``addon.stream.eventstream``: each frame goes to
the decoder as ``feed(payload, event type)``), which no client of another dialect can read: a
bad CRC, a cut frame or a failure of ours ends the client's stream with an error in its dialect
(``_stop``) and the bytes after it are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from addon.dialects.base import (
    DecoderFastPath,
    EncoderFastPath,
    Framing,
    StreamDecoder,
    StreamEncoder,
)
from addon.dialects.framed import PLAIN_ASCII, UNQUOTED, framed_texts, unquoted_run
from addon.jsonio import REFUSED, fast_loads
from addon.model import Event, StreamError, TextDelta, ThinkingDelta
from addon.stream.decompress import Decompressor
from addon.stream.eventstream import EventStreamSplitter, Frame
from addon.stream.fastpath import PASSES_TEXT, TextLane
from addon.stream.foreign import not_a_stream
from addon.stream.framing import JsonArraySplitter, JsonArrayWriter
from addon.stream.sse import (
    EventDecoder,
    LineDecoder,
    SSEComment,
    SSEEvent,
    SSEForeign,
    encode_event,
    encode_pairs,
    simple_events,
)

MAX_EVENT_BYTES = 16 * 1024 * 1024
"""Default bound of one line, one event's data, one JSON-array item, a non-stream body."""

NOT_A_STREAM = "the upstream's body is not an event stream"


TIMED_READS = 64
"""A stream's first reads, each timed (``StreamProcessor.reader``)…"""
SAMPLE_EVERY = 16
"""…then one read in this many (a power of two), counted for all of them."""


def _no_clock() -> int:
    return 0


def _no_time(ns: int) -> None:
    pass


def _no_text(text: str | None, quoted: bytes | None) -> bytes | None:
    return None


def _no_text_sink(quoted: bytes) -> None:
    pass


class _Nobody:
    """No stage must see a plain text: nothing to record it in (a ``text_sink`` that takes
    every text)."""

    text_sink = staticmethod(_no_text_sink)

    def take_text(self, text: str) -> bool:
        return True


_NOBODY: TextLane = _Nobody()


def _json_value(raw: bytes) -> object:
    """The JSON value of ``raw``, or None when it is not JSON."""
    try:
        return fast_loads(raw)
    except REFUSED:
        return None


class Stage(Protocol):
    """A step between decoder and encoder: unified events in, unified events out.
    ``text_lane``: what it offers the text lane (``addon.stream.fastpath.TextLane``;
    ``PASSES_TEXT`` when plain text passes it untouched), or None: it is fed every event."""

    @property
    def text_lane(self) -> TextLane | None: ...
    def feed(self, event: Event) -> list[Event]: ...
    def finish(self) -> list[Event]: ...


class StreamProcessor:
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
        if framing_in not in ("sse", "json_array", "aws_eventstream") or framing_out not in (
            "sse",
            "json_array",
        ):
            raise ValueError(f"unknown framing {framing_in!r} → {framing_out!r}")
        self._decoder = decoder
        self._encoder = encoder
        self._redact = redact
        """Applied to the error message the processor writes itself (``_stop``): it may quote
        the upstream's bytes, and with them a credential the upstream echoed."""
        self._stages = tuple(stages)
        self._decompressor = decompressor
        self._lines = LineDecoder()
        self._events = EventDecoder()
        self._pending_raw = bytearray()  # raw lines of the SSE event being assembled
        self.same_dialect = same_dialect
        self.fast = fast
        """The fast path's lanes are taken (``addon.stream.fastpath``); False: every read goes
        the general way, to the same bytes (the equivalence tests run recordings both ways)."""
        offer = decoder.fast_path
        self._skippable: Callable[[str], bool] | None = (
            offer.skippable
            if offer is not None and raw_ok and same_dialect and framing_in == framing_out == "sse"
            else None
        )
        """``raw_ok``: no stage changes this stream's events (the plan says so); an event the
        decoder says nobody reads goes out as the upstream's bytes, undecoded."""
        sse = framing_in == "sse"
        self._coalesce = (not same_dialect) if coalesce is None else coalesce
        """Runs of plain text (or thinking) read together go through the stages and the
        encoder as one delta (default: for clients of another dialect only; a same-dialect
        client otherwise keeps the upstream's chunks one for one, whatever the reads)."""
        self._skip_run: Callable[[bytes], int] | None = (
            offer.skippable_run
            if fast and offer is not None and self._skippable is not None
            else None
        )
        """A whole chunk of events nobody reads: how many (the decoder's ``skippable_run``)."""
        self._text_run: Callable[[bytes], tuple[str, int] | None] | None = (
            offer.text_run
            if fast and offer is not None and self._skippable is None and sse and self._coalesce
            else None
        )
        """A whole chunk of plain text events, read at once: their joined text and count (the
        decoder's ``text_run``); it goes through the stages and the encoder as one delta."""
        self._lane = _text_lane(self._stages) if fast else None
        """(stage index, ``take_text``) of each stage a plain text delta must be shown to, or
        None: some stage must be fed every event (see ``Stage``)."""
        self._skipped_decoding = 0
        self._max = max_event_bytes
        self._whole = whole
        self._framing_in: Framing = framing_in
        self._answer = (status, content_type)
        """The answer's status and content type, to say what came when its body is not the
        framing's stream (``addon.stream.foreign``)."""
        self._body: bytearray | None = None
        """Another dialect, a body that is not an event stream: collected until it ends."""
        self._body_cut = False
        self._keep = keep_original
        self.original = bytearray()
        """The first ``keep_original`` bytes the upstream sent (decompressed)."""
        self.whole_body = False
        """The body was not an event stream and was read whole (``whole``)."""
        self.skipped = 0
        self.skip_reason: str | None = None
        self._items = JsonArraySplitter(max_event_bytes) if framing_in == "json_array" else None
        self._frames = EventStreamSplitter() if framing_in == "aws_eventstream" else None
        self._stopped = False
        """Binary framing only: the client's stream was ended with an error; later bytes are
        dropped (binary frames are never given to a client raw)."""
        self._writer = JsonArrayWriter() if framing_out == "json_array" else None
        self._encoder_fast: EncoderFastPath | None = (
            encoder.fast_path if fast and self._writer is None else None
        )
        self._text_sse: Callable[[str | None, bytes | None], bytes | None] | None = (
            self._encoder_fast.text_sse if self._encoder_fast is not None else None
        )
        """The encoder's fast path for plain text (``StreamEncoder``), SSE framing only."""
        self._lane_decoder: DecoderFastPath | None = offer if self._text_run is not None else None
        """A decoder that knows the frame of its plain text events (``text_frame``) on a
        stream that reads plain text by runs (``_text_run``): a read of one such event, at an
        event boundary, skips the line and event decoders (``feed``)."""
        self._track = decompressor is None and (
            self._lane_decoder is not None or self._skip_run is not None
        )
        """Whether reads of one whole event may skip the line and event decoders (``feed``):
        the bytes fed are the upstream's (nothing to decompress), and there is a way to read
        such an event whole (``_skip_run`` or the lane decoder)."""
        self._between = False
        """The bytes fed so far end at an event boundary, and the stream goes on as usual (not
        stopped, passed through, finished or collected; the view's copy of its start whole):
        kept only when ``_track``, and False from any way out (``_stop``, ``_fail``,
        ``abort``, ``finish``)."""
        self._frame = encode_pairs if self._writer is None else self._writer.pairs
        self._finished = False
        self.passthrough = False
        self.error: str | None = None
        """Why the processor fell back to passthrough, for the shell to log."""
        self.ended_with_error: str | None = None
        """Why the client's stream ended with an error the bridge wrote because the upstream's
        answer could not be read to its end (a cut stream, a body that is not an event stream,
        ``error``), None when it did not: the shell's ⚠ (an error event the upstream sent in
        its stream is the upstream's, not this)."""
        self.last_chunk = b""
        """The last chunk fed the general way (``feed_general``), decompressed: what a
        same-dialect client gets when the processor fails on it (``abort``). The common read
        (``reader``) cannot fail that way and does not set it."""
        self._events_in = 0
        self._bytes_in = 0
        self._bytes_out = 0
        self._lane_counts: list[Callable[[], tuple[int, int, int, int]]] = []
        """Each reader's counts of the common reads it took: events, bytes in, bytes out,
        events passed undecoded."""
        self.feed: Callable[[bytes], list[bytes]] = self.reader()
        """Upstream bytes in (split anywhere), client bytes out (see the module docstring)."""

    # ------------------------------------------------------------------ public

    def _lane_count(self, field: int) -> int:
        """What the readers' common reads add to one count (``_lane_counts``)."""
        return sum(counts()[field] for counts in self._lane_counts)

    @property
    def events_in(self) -> int:
        return self._events_in + self._lane_count(0)

    @property
    def bytes_in(self) -> int:
        """Bytes fed (decompressed)."""
        return self._bytes_in + self._lane_count(1)

    @property
    def bytes_out(self) -> int:
        return self._bytes_out + self._lane_count(2)

    @property
    def skipped_decoding(self) -> int:
        """Events passed on as the upstream's bytes, undecoded (``raw_ok``)."""
        return self._skipped_decoding + self._lane_count(3)

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
        if self._frames is not None:
            return self._run_frames(self._frames.feed(chunk), final=False)
        if self._items is not None:
            return self._run_items(self._items.feed(chunk), final=False)
        if self._events.idle and not self._pending_raw:
            out = self._fast(chunk)
            if out is None:
                out = self._run(self._lines.feed(chunk), final=False)
        else:
            out = self._run(self._lines.feed(chunk), final=False)
        if self._track:
            lines = self._lines
            self._between = (
                lines.started
                and not lines.held
                and self._events.idle
                and not self._pending_raw
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
        common read taken in one flat function, every other read by ``general`` (default:
        ``feed_general``; a shell's own also ends the body on ``b""``).

        The common read is one whole event at an event boundary (``_between``), shaped as the
        frame the decoder learned (its head, one JSON string's content, its tail: a plain text
        chunk). On a route where nobody reads such a chunk (``_skip_run``; the decoder's
        ``plain_frame``) it passes as its bytes; elsewhere (the lane decoder's ``text_frame``)
        its text takes the text lane without the line and event decoders and, where at most
        one stage must see it and takes it as its JSON string (``text_sink``), that string goes
        to the stage and into the frame the encoder writes a text in (``text_frame``), or to its
        ``text_sse``, undecoded. What lies between the frame's
        ends is checked by one regular expression: no quote, no control character (so one
        line, one event) and, for the text taken as it is, printable ASCII without a backslash
        (the text itself, as ``dumpb`` would write it); any other text is read by msgspec,
        which refuses anything but one JSON string.

        A read of several whole events shaped so (a bursty upstream; a proxy that fell behind
        reads what piled up) is taken too, event by event (``framed_run``): on the skip lane
        it passes as its bytes; on the text lane their text is one delta (as ``_text_run``
        makes it on the general way), its JSON string the bodies joined when every one is
        plain, else read as one JSON array of the bodies (``framed_texts``).

        Per read, the proxy runs this function and nothing else of ours: on a busy proxy each
        Python call and attribute more costs several times what it does in a loop (the CPU's
        caches hold mitmproxy's work between two events), so the checks are inline, and the
        counts of these reads are the function's own (``events_in`` and the others add them
        up).

        With a ``clock`` and ``spent``, the time reads take goes to ``spent``: each of the
        first ``TIMED_READS`` reads and the end (``b""``), then one read in ``SAMPLE_EVERY``,
        counted for that many (reading the clock costs as much as a common read). A failure
        of the common read itself (a bug of ours) goes to ``failed`` with the chunk (then the
        ``last_chunk``), as the shell's ``general`` handles one of the general way's."""
        general = general or self.feed_general
        timing = clock is not None and spent is not None
        now = clock or _no_clock
        add = spent or _no_time
        reads = mask = 0
        events = size_in = size_out = 0

        def took(started: int, chunk: bytes) -> None:
            nonlocal mask
            add((now() - started) * (SAMPLE_EVERY if mask and chunk else 1))
            if reads >= TIMED_READS:
                mask = SAMPLE_EVERY - 1

        def lane_failed(chunk: bytes, e: Exception) -> list[bytes]:
            if failed is None:
                raise e
            self.last_chunk = chunk
            return failed(chunk, e)

        def timed(chunk: bytes) -> list[bytes]:
            nonlocal reads
            reads += 1
            if reads & mask and chunk:
                return general(chunk)
            started = now()
            out = general(chunk)
            took(started, chunk)
            return out

        if not self._track:
            return timed if timing else general
        if self._skip_run is not None:
            decoder = self._decoder.fast_path
            assert decoder is not None  # ``_skip_run`` is its ``skippable_run``

            def skip(chunk: bytes) -> list[bytes]:
                nonlocal reads, events, size_in
                try:
                    started = -1
                    if timing:
                        reads += 1
                        if not reads & mask or not chunk:
                            started = now()
                    if self._between and (frame := decoder.plain_frame) is not None:
                        head, tail = frame
                        start = len(head)
                        n = len(chunk)
                        end = n - len(tail)
                        if end >= start and chunk.startswith(head) and chunk.endswith(tail):
                            if UNQUOTED(chunk, start, end) is not None:
                                k = 1
                            else:  # several events in one read (a burst, or a busy proxy)
                                k = unquoted_run(chunk, head, tail)
                        else:
                            k = 0
                        if k:
                            events += k
                            size_in += n
                            if started >= 0:
                                took(started, chunk)
                            return [chunk]
                    out = general(chunk)
                    if started >= 0:
                        took(started, chunk)
                    return out
                except Exception as e:  # a bug of ours: never a traceback in the proxy
                    return lane_failed(chunk, e)

            self._lane_counts.append(lambda: (events, size_in, size_in, events))
            return skip
        framed = self._lane_decoder
        if framed is None:
            return timed if timing else general
        lane = self._lane
        alone = lane is not None and len(lane) <= 1  # at most one stage must see a plain text
        take = lane[0][1] if lane and len(lane) <= 2 else None
        then = lane[1][1] if lane and len(lane) == 2 else None
        """The ``take_text`` of the first two stages that must see a plain text (the reasoning
        store's capture, a text protocol's parser), when there are no more than two."""
        few = lane is not None and len(lane) <= 2
        keeper: TextLane = _NOBODY
        """The text lane of the one stage that must see a plain text: its ``text_sink``."""
        if lane and alone:
            keeper = lane[0][2]
        write = self._text_sse or _no_text
        encoder = self._encoder_fast  # its ``text_frame``
        inline = alone and encoder is not None
        """A plain text may be taken without being decoded: given as its JSON string to the
        stage that must see it (``text_sink``) and to the encoder (into its ``text_frame``, or
        to ``text_sse`` without the text)."""

        def text(chunk: bytes) -> list[bytes]:
            nonlocal reads, events, size_in, size_out
            data: bytes | None  # (an annotation only: no work per read)
            try:
                started = -1
                if timing:
                    reads += 1
                    if not reads & mask or not chunk:
                        started = now()
                out: list[bytes] | None = None
                if self._between and (frame := framed.text_frame) is not None:
                    head, tail = frame
                    start = len(head)
                    end = len(chunk) - len(tail)
                    if end >= start and chunk.startswith(head) and chunk.endswith(tail):
                        count = 1
                        one = chunk[start - 1 : end + 1]  # the text's JSON string
                        string: bytes | None = one
                        value: object = None
                        if PLAIN_ASCII(chunk, start, end) is None:
                            if (
                                (q := chunk.find(b'"', start)) != end
                                and chunk.startswith(tail, q)
                                and (run := framed_texts(chunk, head, tail))[0]
                            ):  # several events in one read (a burst, a busy proxy): one delta
                                count, string, value = run
                            else:  # one event whose text is not plain
                                value = _json_value(one)
                                string = None  # written anew: as without the lane
                        quoted = string
                        if string is None:
                            pass
                        elif (
                            inline
                            and len(string) > 2
                            and (sink := keeper.text_sink) is not None
                            and sink(string) is not False
                        ):
                            events += count
                            size_in += len(chunk)
                            assert encoder is not None  # ``inline``
                            written = encoder.text_frame
                            try:
                                if written is not None:
                                    data = written[0] + string + written[1]
                                elif (data := write(None, string)) is None:
                                    out = self._written(string[1:-1].decode("ascii"))
                                if data is not None:
                                    size_out += len(data)
                                    out = [data]
                            except Exception as e:
                                out = self._fail(f"{type(e).__name__}: {e}", chunk)
                        else:
                            value = string[1:-1].decode("ascii")
                        if count and type(value) is str:
                            events += count
                            size_in += len(chunk)
                            try:
                                if not value:
                                    out = []
                                elif not few or (take is not None and not take(value)):
                                    out = self._lane_text(value)
                                elif then is not None and not then(value):
                                    out = self._lane_text(value, 1)  # the first stage took it
                                else:
                                    data = write(value, quoted)
                                    if data is None:
                                        out = self._written(value)
                                    else:
                                        size_out += len(data)
                                        out = [data]
                            except Exception as e:
                                out = self._fail(f"{type(e).__name__}: {e}", chunk)
                if out is None:
                    out = general(chunk)
                if started >= 0:
                    took(started, chunk)
                return out
            except Exception as e:  # a bug of ours: never a traceback in the proxy
                return lane_failed(chunk, e)

        self._lane_counts.append(lambda: (events, size_in, size_out, 0))
        return text

    def _fast(self, chunk: bytes) -> list[bytes] | None:
        """Whole events read in one pass where the chunk allows it, else None (nothing taken).

        A read rarely ends where an event does: the events that end in this chunk (with the
        start of the first one held from the chunk before) are read at once, and what comes
        after the last of them goes to the line decoder as usual."""
        cut = chunk.rfind(b"\n\n")
        if cut == -1:
            return None
        lines = self._lines
        start = b"" if lines.started and not lines.held else lines.take_line_start(chunk)
        if start is None:
            return None
        cut += 2
        whole = start + chunk[:cut] if start else (chunk if cut == len(chunk) else chunk[:cut])
        if self._skip_run is not None and (n := self._skip_run(whole)):
            # Nothing in it anybody reads: the events go on as they came.
            self._events_in += n
            self._skipped_decoding += n
            self._events.saw_event()
            out = self._out([whole])
        elif self._text_run is not None and (run := self._text_run(whole)) is not None:
            out = self._run_text(*run, whole)
        elif (simple := simple_events(whole)) is not None:
            out = self._run_simple(simple)
        else:
            # Not for a fast path: the line decoder reads all of it, as if nothing was taken.
            return self._run(self._lines.feed(start + chunk), final=False)
        rest = chunk[cut:]
        if not rest or self._stopped:
            return out
        if self.passthrough:  # the fast path failed: from here on the bytes pass as they are
            return out + self._out([rest])
        return out + self._run(self._lines.feed(rest), final=False)

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
        if self._frames is not None:
            frames = self._frames.feed(tail) if tail else []
            self._frames.finish()
            return self._run_frames(frames, final=True)
        if self._items is not None:
            items = self._items.feed(tail) if tail else []
            if self._items.error is None:
                items += self._items.finish()
            return self._run_items(items, final=True)
        lines = self._lines.feed(tail) if tail else []
        lines += self._lines.finish()
        return self._run(lines, final=True)

    # ------------------------------------------------------------------ internals

    def _run(self, lines: list[tuple[str, bytes]], final: bool) -> list[bytes]:
        out: list[bytes] = []
        for i, (line, raw) in enumerate(lines):
            self._pending_raw += raw
            try:
                item = self._events.feed_line(line)
                if isinstance(item, SSEComment):
                    del self._pending_raw[len(self._pending_raw) - len(raw) :]
                    if self._writer is None:
                        out.append(encode_event(item))
                elif isinstance(item, SSEForeign):
                    rest = b"".join(r for _, r in lines[i + 1 :])
                    return self._foreign(bytes(self._pending_raw) + rest, out, final)
                elif item is not None:
                    self._dispatch(item, out)
            except Exception as e:
                rest = b"".join(r for _, r in lines[i + 1 :])
                return self._fail(f"{type(e).__name__}: {e}", bytes(self._pending_raw) + rest, out)
        if self._lines.held > self._max or self._events.size > self._max:
            return self._fail(
                f"an event longer than {self._max} bytes", bytes(self._pending_raw), out
            )
        if final:
            try:
                last = self._events.finish()
                if last is not None:
                    self._dispatch(last, out)
                self._end(out)
            except Exception as e:
                return self._fail(f"{type(e).__name__}: {e}", bytes(self._pending_raw), out)
        return self._out(out)

    def _run_simple(self, events: list[tuple[str, bytes]]) -> list[bytes]:
        """Whole one-line events (``simple_events``): dispatched as ``_run`` would — except
        that with ``coalesce`` a run of plain text (or thinking) deltas that came in one
        chunk goes through the stages and the encoder as one delta (``_coalesced``)."""
        if self._coalesce and len(events) > 1:
            return self._coalesced(events)
        out: list[bytes] = []
        self._events.saw_event()
        for i, (data, raw) in enumerate(events):
            self._pending_raw += raw
            try:
                self._dispatch(SSEEvent(data), out)
            except Exception as e:
                rest = b"".join(r for _, r in events[i + 1 :])
                return self._fail(f"{type(e).__name__}: {e}", bytes(self._pending_raw) + rest, out)
        return self._out(out)

    def _run_text(self, text: str, n: int, chunk: bytes) -> list[bytes]:
        """``n`` plain text events read at once (``_text_run``), as one delta. (The event
        decoder saw events already: the decoder learned its text frame from one.)"""
        self._events_in += n
        if not text:
            return []
        try:
            return self._lane_text(text)
        except Exception as e:
            return self._fail(f"{type(e).__name__}: {e}", chunk)

    def _lane_text(self, text: str, taken: int = 0) -> list[bytes]:
        """A plain text delta (not empty) shown to the stages of the text lane, or fed to the
        ones that must see it, then written. ``taken``: how many of the lane's stages took it
        already."""
        lane = self._lane
        if lane is None:
            return self._out(self._through([TextDelta(text)]))
        for at, take, _ in lane[taken:]:
            if not take(text):
                # This stage must see the event: it and the ones after it are fed it (the
                # ones before took the text and passed it on as it was).
                events: list[Event] = [TextDelta(text)]
                for stage in self._stages[at:]:
                    events = _feed_all(stage, events)
                return self._out(self._encode(events))
        return self._written(text)

    def _written(self, text: str) -> list[bytes]:
        """A plain text delta (not empty) the stages passed, through the encoder."""
        sse = self._text_sse
        if sse is not None and (data := sse(text, None)) is not None:
            self._bytes_out += len(data)
            return [data]
        pairs = self._encoder.feed(TextDelta(text))
        return self._out(self._frame(pairs)) if pairs else []

    def _coalesced(self, events: list[tuple[str, bytes]]) -> list[bytes]:
        """Events that arrived together: decoded, their runs of plain text (or thinking)
        joined (``join_runs``), then through the stages and the encoder in one pass. The same
        text reaches the client at the same moment in fewer events (what a model that bursts,
        or a proxy that fell behind, reads in one go). A failure gives back (same dialect) the
        bytes of all of them: nothing of them was emitted."""
        self._events.saw_event()
        decoded: list[Event] = []
        try:
            for data, raw in events:
                self._pending_raw += raw
                if data:
                    self._events_in += 1
                    decoded += self._decode(data, None)
            out = self._through(join_runs(decoded))
        except Exception as e:
            return self._fail(f"{type(e).__name__}: {e}", bytes(self._pending_raw))
        self._pending_raw.clear()
        return self._out(out)

    def _run_items(self, items: list[tuple[str, bytes]], final: bool) -> list[bytes]:
        """JSON-array framing: each item is one event's data."""
        out: list[bytes] = []
        for i, (text, raw) in enumerate(items):
            try:
                self._events_in += 1
                out.extend(self._through(self._decode(text, None)))
            except Exception as e:
                rest = b"".join(r for _, r in items[i + 1 :])
                return self._fail(f"{type(e).__name__}: {e}", raw + rest, out)
        assert self._items is not None
        if self._items.error is not None:
            why = self._not_a_stream(self._items.pending())
            return self._fail(why or f"cannot read the JSON array: {self._items.error}", b"", out)
        if final:
            try:
                self._end(out)
            except Exception as e:
                return self._fail(f"{type(e).__name__}: {e}", b"", out)
        return self._out(out)

    def _run_frames(self, frames: list[Frame], final: bool) -> list[bytes]:
        """AWS event-stream framing: each frame is one event (its type from its headers)."""
        out: list[bytes] = []
        for frame in frames:
            try:
                self._events_in += 1
                out.extend(self._through(self._decode(frame.text, frame.event)))
            except Exception as e:
                return self._stop(f"{type(e).__name__}: {e}", out)
        assert self._frames is not None
        if self._frames.error is not None:
            why = self._not_a_stream(self._frames.pending())
            return self._stop(why or f"cannot read the event stream: {self._frames.error}", out)
        if final:
            try:
                self._end(out)
            except Exception as e:
                return self._stop(f"{type(e).__name__}: {e}", out)
        return self._out(out)

    def _not_a_stream(self, head: bytes) -> str | None:
        """A body whose very first bytes failed to frame: what came instead of the stream, if
        it is not one at all (an HTML sign-in page, a JSON error); None otherwise."""
        if self._events_in:
            return None
        status, content_type = self._answer
        return not_a_stream(self._framing_in, head, status=status, content_type=content_type)

    def abort(self, why: str) -> list[bytes]:
        """The shell's way out when the processor itself failed: a same-dialect stream passes
        through from here on (nothing to give back: ``[]``); another dialect's is ended with an
        error event in the client's dialect (its bytes returned)."""
        if self.same_dialect and self._frames is None:
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
            out += self._encode(self._end_stages(StreamError(message, "bridge_stream_error")))
            out += self._frame(self._encoder.finish())
            if self._writer is not None:
                out.append(self._writer.close())
        except Exception:  # already failing: the error event is best effort
            pass
        return self._out(out)

    def _forget(self) -> None:
        """Drop whatever is held for reading: nothing more will be read (memory returns)."""
        self._lines.clear()
        self._events = EventDecoder()
        self._pending_raw = bytearray()
        self._body = None
        if self._items is not None:
            self._items = JsonArraySplitter(self._max)

    def _foreign(self, raw: bytes, done: list[bytes], final: bool) -> list[bytes]:
        """A line that is no event-stream line: the rest of the body is something else."""
        if self.same_dialect:
            return self._fail(NOT_A_STREAM, raw, done)
        self._body = bytearray(raw)
        self._body += self._lines.pending()
        self._lines.clear()
        self._pending_raw.clear()
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
        if self._events_in or self._whole is None or self._body_cut:
            quote = body[:200].decode("utf-8", "replace").strip()
            return self._stop(f"{NOT_A_STREAM}: {quote!r}")
        out: list[bytes] = []
        try:
            events = self._whole(body)
            self._note_end_error(events)
            self._events_in += 1
            out.extend(self._through(events))
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
            if self.same_dialect and self._frames is None:
                raise
            self.skipped += 1
            if self.skip_reason is None:
                self.skip_reason = f"{type(e).__name__}: {e}"
            return []

    def _end(self, out: list[bytes], decoder: bool = True) -> None:
        """The body ended: flush the decoder, the stages and the encoder; close the framing."""
        events = self._decoder.finish() if decoder else []
        self._note_end_error(events)
        for stage in self._stages:
            events = _feed_all(stage, events) + stage.finish()
        out.extend(self._encode(events))
        out.extend(self._frame(self._encoder.finish()))
        if self._writer is not None:
            out.append(self._writer.close())

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

    def _dispatch(self, item: SSEEvent, out: list[bytes]) -> None:
        if not item.data:
            # A named event without data carries nothing a dialect could decode.
            self._pending_raw.clear()
            return
        self._events_in += 1
        skippable = self._skippable
        if skippable is not None and item.event is None and skippable(item.data):
            out.append(bytes(self._pending_raw))
            self._pending_raw.clear()
            self._skipped_decoding += 1
            return
        out.extend(self._through(self._decode(item.data, item.event)))
        self._pending_raw.clear()

    def _through(self, events: list[Event]) -> list[bytes]:
        """Unified events through the stages, then the client's encoder: its framed bytes."""
        for stage in self._stages:
            events = _feed_all(stage, events)
        return self._encode(events)

    def _encode(self, events: Iterable[Event]) -> list[bytes]:
        out: list[bytes] = []
        feed, frame, sse = self._encoder.feed, self._frame, self._text_sse
        for event in events:
            if (
                sse is not None
                and type(event) is TextDelta
                and event.text
                and not event.extra
                and (data := sse(event.text, None)) is not None
            ):
                out.append(data)  # a plain text (the text runs of reads that came together)
                continue
            pairs = feed(event)
            if pairs:
                out.extend(frame(pairs))
        return out

    def _fail(self, why: str, raw: bytes, done: Sequence[bytes] = ()) -> list[bytes]:
        if self._frames is not None or not self.same_dialect:
            return self._stop(why, done)
        self.passthrough = True
        self._between = False
        self.error = why
        held = self._lines.pending() if self._items is None else self._items.pending()
        self._forget()
        return self._out([*done, *self._drain_stages(), raw, held])

    def _end_stages(self, error: StreamError) -> list[Event]:
        """The stages' ending for a stream that fails: ``error`` through every stage, each
        finished after it (as ``_end`` does with a decoder's error), so that a stage lets out
        what it holds before the error and drops what must not reach a client (a tool call
        that never ended). A stage that fails here costs what it held, never the error."""
        events: list[Event] = [error]
        try:
            for stage in self._stages:
                events = _feed_all(stage, events) + stage.finish()
        except Exception:  # already failing: the error event is what matters
            return [error]
        return events

    def _drain_stages(self) -> list[bytes]:
        """What stages still hold (e.g. text the parser kept back) goes out before the raw rest."""
        out: list[bytes] = []
        try:
            for i, stage in enumerate(self._stages):
                events = stage.finish()
                for later in self._stages[i + 1 :]:
                    events = _feed_all(later, events)
                out.extend(self._encode(events))
        except Exception:  # already failing: keep what could be drained
            pass
        return out

    def _out(self, parts: Sequence[bytes]) -> list[bytes]:
        data = b"".join(parts)
        if not data:
            return []
        self._bytes_out += len(data)
        return [data]


def join_runs(events: list[Event]) -> list[Event]:
    """Adjacent plain text deltas joined into one, and adjacent plain thinking deltas (plain:
    no wire extras, no signature); every other event as it was, in order. Linear: each run is
    joined once."""
    out: list[Event] = []
    run: list[TextDelta | ThinkingDelta] = []

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            out.append(type(run[0])("".join(e.text for e in run)))
        run.clear()

    for event in events:
        if isinstance(event, TextDelta | ThinkingDelta) and _plain(event):
            if run and type(run[0]) is not type(event):
                flush()
            run.append(event)
        else:
            flush()
            out.append(event)
    flush()
    return out


def _plain(event: TextDelta | ThinkingDelta) -> bool:
    return not event.extra and getattr(event, "signature", None) is None


def _text_lane(
    stages: Sequence[Stage],
) -> tuple[tuple[int, Callable[[str], bool], TextLane], ...] | None:
    """(stage index, ``take_text``, lane) of each stage a plain text delta must be shown to, or
    None: some stage must be fed every event."""
    lane: list[tuple[int, Callable[[str], bool], TextLane]] = []
    for i, stage in enumerate(stages):
        offer = stage.text_lane
        if offer is None:
            return None
        if offer is not PASSES_TEXT:
            lane.append((i, offer.take_text, offer))
    return tuple(lane)


def _feed_all(stage: Stage, events: list[Event]) -> list[Event]:
    out: list[Event] = []
    for event in events:
        out.extend(stage.feed(event))
    return out
