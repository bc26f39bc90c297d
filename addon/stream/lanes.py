"""The lanes: one reader object per stream whose ``read`` is the shell's stream callable.

Contract: ``read(chunk) -> list[bytes]`` takes the common read (one or several whole events at
an event boundary, shaped as the frame the decoder learned) in one flat method and hands every
other read to ``general`` (the processor's ``feed_general``, or the shell's wrapper of it),
to the same bytes, counts and records. Counts of the reads a lane took are its attributes
(``events_in``, ``bytes_in``, ``bytes_out``, ``skipped_decoding``), added by the processor.
Reads are timed when given a clock: the first ``TIMED_READS``, then one in ``SAMPLE_EVERY``.
Why it is built so (inline checks, locals, no wrapper): docs/speed.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from addon.dialects.base import DecoderFastPath
from addon.dialects.framed import PLAIN_ASCII, UNQUOTED, framed_texts, unquoted_run
from addon.jsonio import REFUSED, fast_loads
from addon.stream.fastpath import NOBODY, FastPath, TextLane
from addon.stream.output import Output

TIMED_READS = 64
"""A stream's first reads, each timed…"""
SAMPLE_EVERY = 16
"""…then one read in this many (a power of two), counted for all of them."""

type Read = Callable[[bytes], list[bytes]]
type Lane = SkipLane | TextLaneReads
"""A reader that takes reads itself: its counts add to the processor's."""
type Failed = Callable[[bytes, Exception], list[bytes]]


class GeneralPath(Protocol):
    """What a lane reads and calls of the processor (``StreamProcessor``): whether a read
    may take the lane, and its failure policy (``_fail``)."""

    _between: bool
    """The bytes fed so far end at an event boundary and the stream goes on as usual."""
    last_chunk: bytes

    def _fail(self, why: str, raw: bytes, done: Sequence[bytes] = ()) -> list[bytes]: ...


def _no_clock() -> int:
    return 0


def _no_time(ns: int) -> None:
    pass


def _no_text(text: str | None, quoted: bytes | None) -> bytes | None:
    return None


def _json_value(raw: bytes) -> object:
    """The JSON value of ``raw``, or None when it is not JSON."""
    try:
        return fast_loads(raw)
    except REFUSED:
        return None


class Reads:
    """The general way for every read, timed (``read``). Also the base of the lanes: the
    clock, the count of reads, and ``failed`` for a failure of a lane itself (a bug of ours:
    never a traceback in the proxy; without ``failed`` it is raised)."""

    def __init__(
        self,
        path: GeneralPath,
        general: Read,
        clock: Callable[[], int] | None,
        spent: Callable[[int], None] | None,
        failed: Failed | None,
    ) -> None:
        self._path = path
        self._general = general
        self._timing = clock is not None and spent is not None
        self._now = clock or _no_clock
        self._add = spent or _no_time
        self._failed = failed
        self._reads = 0
        self._mask = 0
        """0 while every read is timed, then ``SAMPLE_EVERY - 1``."""

    def read(self, chunk: bytes) -> list[bytes]:
        self._reads += 1
        if self._reads & self._mask and chunk:
            return self._general(chunk)
        started = self._now()
        out = self._general(chunk)
        self._took(started, chunk)
        return out

    def _took(self, started: int, chunk: bytes) -> None:
        self._add((self._now() - started) * (SAMPLE_EVERY if self._mask and chunk else 1))
        if self._reads >= TIMED_READS:
            self._mask = SAMPLE_EVERY - 1

    def _lane_failed(self, chunk: bytes, e: Exception) -> list[bytes]:
        if self._failed is None:
            raise e
        self._path.last_chunk = chunk
        return self._failed(chunk, e)


class SkipLane(Reads):
    """A same-dialect stream nobody changes: a read of whole events each shaped as the
    decoder's ``plain_frame`` (a plain text chunk nobody reads) passes as its bytes, undecoded;
    several in one read too (``unquoted_run``). Every event it took is out as it came in."""

    def __init__(
        self,
        path: GeneralPath,
        decoder: DecoderFastPath,
        general: Read,
        clock: Callable[[], int] | None,
        spent: Callable[[int], None] | None,
        failed: Failed | None,
    ) -> None:
        super().__init__(path, general, clock, spent, failed)
        self._decoder = decoder
        self.events_in = 0
        self.bytes_in = 0

    @property
    def bytes_out(self) -> int:
        return self.bytes_in

    @property
    def skipped_decoding(self) -> int:
        return self.events_in

    def read(self, chunk: bytes) -> list[bytes]:
        try:
            started = -1
            if self._timing:
                self._reads += 1
                if not self._reads & self._mask or not chunk:
                    started = self._now()
            if self._path._between and (frame := self._decoder.plain_frame) is not None:
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
                    self.events_in += k
                    self.bytes_in += n
                    if started >= 0:
                        self._took(started, chunk)
                    return [chunk]
            out = self._general(chunk)
            if started >= 0:
                self._took(started, chunk)
            return out
        except Exception as e:  # a bug of ours: never a traceback in the proxy
            return self._lane_failed(chunk, e)


class TextLaneReads(Reads):
    """Plain text past the line and event decoders: a read of whole events each shaped as the
    decoder's ``text_frame`` is one text delta. A plain string (printable ASCII, no backslash)
    is never decoded: where one stage at most must see it (``inline``) it goes to that stage's
    ``text_sink`` and into the encoder's ``text_frame`` (or ``text_sse``); any other text is
    read by msgspec and shown to the stages' ``take_text``, then written."""

    def __init__(
        self,
        path: GeneralPath,
        output: Output,
        fast: FastPath,
        general: Read,
        clock: Callable[[], int] | None,
        spent: Callable[[int], None] | None,
        failed: Failed | None,
    ) -> None:
        super().__init__(path, general, clock, spent, failed)
        assert fast.decoder is not None
        self._framed = fast.decoder
        self._output = output
        lane = fast.stages
        alone = lane is not None and len(lane) <= 1  # at most one stage must see a plain text
        self._take = lane[0][1] if lane and len(lane) <= 2 else None
        self._then = lane[1][1] if lane and len(lane) == 2 else None
        """The ``take_text`` of the first two stages that must see a plain text (the reasoning
        store's capture, a text protocol's parser), when there are no more than two."""
        self._few = lane is not None and len(lane) <= 2
        self._keeper: TextLane = lane[0][2] if lane and alone else NOBODY
        """The text lane of the one stage that must see a plain text: its ``text_sink``."""
        self._write = fast.text_sse or _no_text
        self._encoder = fast.encoder  # its ``text_frame``
        self._inline = alone and fast.encoder is not None
        """A plain text may be taken without being decoded: given as its JSON string to the
        stage that must see it (``text_sink``) and to the encoder."""
        self.events_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.skipped_decoding = 0

    def read(self, chunk: bytes) -> list[bytes]:
        try:
            started = -1
            if self._timing:
                self._reads += 1
                if not self._reads & self._mask or not chunk:
                    started = self._now()
            out: list[bytes] | None = None
            if self._path._between and (frame := self._framed.text_frame) is not None:
                head, tail = frame
                start = len(head)
                end = len(chunk) - len(tail)
                if end >= start and chunk.startswith(head) and chunk.endswith(tail):
                    count = 1
                    string: bytes | None = chunk[start - 1 : end + 1]  # the text's JSON string
                    value: object = None
                    if PLAIN_ASCII(chunk, start, end) is None:
                        if (
                            (q := chunk.find(b'"', start)) != end
                            and chunk.startswith(tail, q)
                            and (run := framed_texts(chunk, head, tail))[0]
                        ):  # several events in one read (a burst, a busy proxy): one delta
                            count, string, value = run
                        else:  # one event whose text is not plain
                            value = _json_value(chunk[start - 1 : end + 1])
                            string = None  # written anew: as without the lane
                    if string is None:
                        if type(value) is str:
                            out = self._text(chunk, count, value, None)
                    elif (
                        self._inline
                        and len(string) > 2
                        and (sink := self._keeper.text_sink) is not None
                        and sink(string) is not False
                    ):
                        out = self._sunk(chunk, count, string)
                    else:
                        out = self._text(chunk, count, string[1:-1].decode("ascii"), string)
            if out is None:
                out = self._general(chunk)
            if started >= 0:
                self._took(started, chunk)
            return out
        except Exception as e:  # a bug of ours: never a traceback in the proxy
            return self._lane_failed(chunk, e)

    def _sunk(self, chunk: bytes, count: int, string: bytes) -> list[bytes]:
        """A plain text the one stage that must see it took as its JSON string: into the
        encoder's frame (or its ``text_sse``), undecoded."""
        self.events_in += count
        self.bytes_in += len(chunk)
        encoder = self._encoder
        assert encoder is not None  # ``inline``
        written = encoder.text_frame
        data: bytes | None
        try:
            if written is not None:
                data = written[0] + string + written[1]
            elif (data := self._write(None, string)) is None:
                return self._output.written(string[1:-1].decode("ascii"))
            self.bytes_out += len(data)
            return [data]
        except Exception as e:
            return self._path._fail(f"{type(e).__name__}: {e}", chunk)

    def _text(self, chunk: bytes, count: int, value: str, quoted: bytes | None) -> list[bytes]:
        """A text (``quoted``: its JSON string, when plain) shown to the stages that must see
        it, then written."""
        self.events_in += count
        self.bytes_in += len(chunk)
        output = self._output
        try:
            if not value:
                return []
            take = self._take
            if not self._few or (take is not None and not take(value)):
                return output.lane_text(value)
            then = self._then
            if then is not None and not then(value):
                return output.lane_text(value, 1)  # the first stage took it
            data = self._write(value, quoted)
            if data is None:
                return output.written(value)
            self.bytes_out += len(data)
            return [data]
        except Exception as e:
            return self._path._fail(f"{type(e).__name__}: {e}", chunk)


def reads(
    path: GeneralPath,
    output: Output,
    fast: FastPath,
    general: Read,
    clock: Callable[[], int] | None = None,
    spent: Callable[[int], None] | None = None,
    failed: Failed | None = None,
) -> tuple[Read, Lane | None]:
    """The stream's read function, and the lane behind it (None: none, ``general``, timed when
    given ``clock`` and ``spent``)."""
    timing = clock is not None and spent is not None
    lane: Lane
    if fast.track and fast.skip_run is not None and fast.decoder is not None:
        lane = SkipLane(path, fast.decoder, general, clock, spent, failed)
    elif fast.track and fast.text_run is not None:
        lane = TextLaneReads(path, output, fast, general, clock, spent, failed)
    else:
        return (Reads(path, general, clock, spent, failed).read if timing else general), None
    return lane.read, lane
