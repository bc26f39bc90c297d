"""The fast path: every shortcut a read of an SSE body may take past the general way
(``addon.stream.processor``), each to the same bytes, counts and records.

Contract: the read routes are rows of the processor's one table (``processor.ROWS``: what a
read does in each state); ``route`` gives the stream's (None: none), ``Reader`` is the stream's
one read function, ``Runs.take`` reads the whole events a general read completes. Each route is
switched off with ``fast=False`` (``FastPath.of``); why they are built so: docs/speed.md."""

# The routes, in the order a read meets them; a read none takes goes the general way.
# ``FastPath.of`` says which a stream may take, once, from what its codecs and stages declare
# (``DecoderFastPath``, ``EncoderFastPath``, each stage's ``text_lane`` and ``changes_bytes``).
#
# route       the read it takes             when                      the same output, because
# ----------  ----------------------------  ------------------------  -----------------------------
# skip read   whole events, each exactly    BETWEEN events; a client  such an event is skippable:
# (SkipRead)  the decoder's plain_frame     of the upstream's         the general way passes it as
#                                           dialect, no stage that    its bytes too
#                                           changes_bytes (raw_ok),
#                                           SSE both ways, no
#                                           decompressor
#
# text read   whole events, each exactly    BETWEEN events;           each is one TextDelta of its
# (TextRead)  the decoder's text_frame: a   coalesce (another         text, and the general way
#             plain string goes undecoded   dialect, a text           joins the texts of events read
#             to the one stage that must    protocol), SSE in, no     together (join_runs); stages
#             see it (text_sink) and into   decompressor              that only pass text are left
#             the encoder's frame (_sunk),                            out (PASSES_TEXT), the others'
#             other text is read and shown                            take_text / text_sink and the
#             to the stages (_text)                                   encoder's text_sse/text_frame
#                                                                     do what their feed does
#
# skip run    the whole events a general    as the skip read, where   as the skip read
# (Runs)      read completes, all           those events start
#             skippable (skippable_run)
#
# text run    the whole events a general    as the text read, where   as the text read
# (Runs)      read completes, all plain     those events start
#             text (text_run)
#
# Not a route: a read of whole one-line events (simple_events) is read at once by the general
# way itself, with the switch off too (with coalesce their texts are joined: that is the rule).
#
# Words: a *read route* takes a whole read (a ``Route``: the table's ``BETWEEN`` row), the
# general way the rest; a *run* takes the whole events inside a general read; a stage's *text
# lane* (``stages.TextLane``) is what it offers the text read and the text run.

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from addon.dialects.base import DecoderFastPath, EncoderFastPath
from addon.dialects.framed import PLAIN_ASCII, UNQUOTED, framed_texts, unquoted_run
from addon.jsonio import REFUSED, fast_loads
from addon.stream.output import Output
from addon.stream.reading import Failure
from addon.stream.stages import LaneStages, Stage, TextLane, keeps_bytes, lane_stages

TIMED_READS = 64
"""A stream's first reads, each timed…"""
SAMPLE_EVERY = 16
"""…then one read in this many (a power of two), counted for all of them."""

type Read = Callable[[bytes], list[bytes]]
type Route = SkipRead | TextRead
"""A fast route: its ``read`` is what the processor's table does with a read ``BETWEEN``
events (its ``general`` on a read it does not take); its counts add to the processor's."""
type Failed = Callable[[bytes, Exception], list[bytes]]
"""The shell's handler of a bug of ours in a read (the chunk, the exception)."""
type Settle = Callable[[Failure], list[bytes]]
"""The processor's answer to what a route found wrong (a stage or the encoder failed)."""


@dataclass(frozen=True, slots=True)
class FastPath:
    """What one stream's fast path may take, fixed when the stream starts (``FastPath.of``)."""

    skippable: Callable[[str], bool] | None = None
    """An event nobody reads goes out as the upstream's bytes (``raw_ok``: same dialect, SSE
    both ways, no stage changes events); the general way uses it too, switch off or on."""
    skip_run: Callable[[bytes], int] | None = None
    """How many whole events a read holds when nobody reads any of them, else 0."""
    text_run: Callable[[bytes], tuple[str, int] | None] | None = None
    """A read of whole plain text events: their text joined and how many (``coalesce``)."""
    decoder: DecoderFastPath | None = None
    """The decoder's offer (its frames), when a run is set."""
    stages: LaneStages | None = None
    """The stages a plain text must be shown to (None: some stage must see every event)."""
    encoder: EncoderFastPath | None = None
    """The encoder's offer (SSE out)."""
    text_sse: Callable[[str | None, bytes | None], bytes | None] | None = None
    """The encoder's ``text_sse`` (SSE out)."""
    track: bool = False
    """A read of whole events at an event boundary may take a read route (a run is set and no
    decompressor changes the bytes)."""

    @classmethod
    def of(
        cls,
        decoder: DecoderFastPath | None,
        encoder: EncoderFastPath | None,
        stages: Sequence[Stage],
        *,
        fast: bool,
        raw_ok: bool,
        coalesce: bool,
        sse_in: bool,
        sse_out: bool,
        raw_bytes: bool,
    ) -> FastPath:
        """From what the decoder, the encoder and each stage offer (its ``text_lane``) and
        declare (``changes_bytes``); with ``fast`` False only what the general way uses
        (``skippable``). ``raw_ok``: the caller lets an event nobody reads pass as the
        upstream's bytes (a same-dialect stream), which it then does unless a stage
        ``changes_bytes``; ``raw_bytes``: no decompressor."""
        raw_ok = raw_ok and keeps_bytes(stages)
        skippable = (
            decoder.skippable if decoder is not None and raw_ok and sse_in and sse_out else None
        )
        if not fast:
            return cls(skippable=skippable)
        skip_run = decoder.skippable_run if decoder is not None and skippable is not None else None
        text_run = (
            decoder.text_run
            if decoder is not None and skippable is None and sse_in and coalesce
            else None
        )
        offer = encoder if sse_out else None
        runs = skip_run is not None or text_run is not None
        return cls(
            skippable,
            skip_run,
            text_run,
            decoder if runs else None,
            lane_stages([stage.text_lane for stage in stages]),
            offer,
            offer.text_sse if offer is not None else None,
            runs and raw_bytes,
        )


def _no_clock() -> int:
    return 0


def _no_time(ns: int) -> None:
    pass


def _no_text(text: str | None, quoted: bytes | None) -> bytes | None:
    return None


def _no_text_sink(quoted: bytes) -> None:
    pass


class _Nobody:
    """No stage must see a plain text: a ``text_sink`` that takes every text, records nothing."""

    text_sink = staticmethod(_no_text_sink)

    def take_text(self, text: str) -> bool:
        return True


NOBODY: TextLane = _Nobody()
"""The keeper of a text no stage must see."""


def _json_value(raw: bytes) -> object:
    """The JSON value of ``raw``, or None when it is not JSON."""
    try:
        return fast_loads(raw)
    except REFUSED:
        return None


class Reader:
    """The stream's one read function (``read``, the processor's ``feed``): each read goes to
    ``route``, the read the processor's table names for its state (``processor.ROWS``: the
    stream's fast route ``BETWEEN`` events, else the general way), set by the processor as its
    state moves. Timed when given ``clock`` and ``spent`` (a stream's first reads each, then one
    in ``SAMPLE_EVERY``); a bug of ours goes to ``failed`` (never a traceback in the proxy;
    without ``failed`` it is raised)."""

    def __init__(self, route: Read) -> None:
        self.route = route
        """What a read does in the stream's state (set by the processor on each move)."""
        self._timing = False
        self._now: Callable[[], int] = _no_clock
        self._add: Callable[[int], None] = _no_time
        self._failed: Failed | None = None
        self._reads = 0
        self._mask = 0
        """0 while every read is timed, then ``SAMPLE_EVERY - 1``."""

    def configure(
        self,
        clock: Callable[[], int] | None,
        spent: Callable[[int], None] | None,
        failed: Failed | None,
    ) -> None:
        """The shell's clock, where the time goes, and its handler of a bug of ours."""
        self._timing = clock is not None and spent is not None
        self._now = clock or _no_clock
        self._add = spent or _no_time
        self._failed = failed
        self._reads = 0
        self._mask = 0

    def read(self, chunk: bytes) -> list[bytes]:
        try:
            if self._timing:
                self._reads += 1
                if not self._reads & self._mask or not chunk:
                    started = self._now()
                    out = self.route(chunk)
                    self._add(
                        (self._now() - started) * (SAMPLE_EVERY if self._mask and chunk else 1)
                    )
                    if self._reads >= TIMED_READS:
                        self._mask = SAMPLE_EVERY - 1
                    return out
            return self.route(chunk)
        except Exception as e:  # a bug of ours: never a traceback in the proxy
            if self._failed is None:
                raise
            return self._failed(chunk, e)


class SkipRead:
    """The skip read (a row of the processor's table, ``BETWEEN`` events): whole events each
    shaped as the decoder's ``plain_frame`` (a plain text chunk nobody reads) pass as their
    bytes, undecoded; several in one read too (``unquoted_run``). Any other read goes the
    general way (``general``)."""

    def __init__(self, decoder: DecoderFastPath, general: Read) -> None:
        self._decoder = decoder
        self.general = general
        self.events_in = 0
        self.bytes_in = 0

    @property
    def bytes_out(self) -> int:
        return self.bytes_in

    @property
    def skipped_decoding(self) -> int:
        return self.events_in

    def read(self, chunk: bytes) -> list[bytes]:
        if (frame := self._decoder.plain_frame) is not None:
            head, tail = frame
            start = len(head)
            n = len(chunk)
            end = n - len(tail)
            if end >= start and chunk.startswith(head) and chunk.endswith(tail):
                if UNQUOTED(chunk, start, end) is not None:
                    k = 1
                else:  # several events in one read (a burst, or a busy proxy)
                    k = unquoted_run(chunk, head, tail)
                if k:
                    self.events_in += k
                    self.bytes_in += n
                    return [chunk]
        return self.general(chunk)


class TextRead:
    """The text read (a row of the processor's table, ``BETWEEN`` events): whole events each
    shaped as the decoder's ``text_frame`` are one text delta. A plain string (printable ASCII,
    no backslash) is never decoded: where one stage at most must see it (``inline``) it goes to
    that stage's ``text_sink`` and into the encoder's ``text_frame`` (or ``text_sse``); any
    other text is read by msgspec and shown to the stages that must see it
    (``Output.lane_text``: any number of them), then written. A stage or the encoder that fails
    goes to ``settle``; any other read goes the general way (``general``)."""

    def __init__(self, output: Output, fast: FastPath, settle: Settle, general: Read) -> None:
        assert fast.decoder is not None
        self._framed = fast.decoder
        self._output = output
        self._settle = settle
        self.general = general
        lane = fast.stages
        alone = lane is not None and len(lane) <= 1  # at most one stage must see a plain text
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
        if (frame := self._framed.text_frame) is not None:
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
                        string = None  # written anew: as without the route
                if string is None:
                    if type(value) is str:
                        return self._text(chunk, count, value, None)
                elif (
                    self._inline
                    and len(string) > 2
                    and (sink := self._keeper.text_sink) is not None
                    and sink(string) is not False
                ):
                    return self._sunk(chunk, count, string)
                else:
                    return self._text(chunk, count, string[1:-1].decode("ascii"), string)
        return self.general(chunk)

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
            return self._settle(Failure(f"{type(e).__name__}: {e}", chunk))

    def _text(self, chunk: bytes, count: int, value: str, quoted: bytes | None) -> list[bytes]:
        """A text (``quoted``: its JSON string, when plain) shown to the stages that must see
        it, then written."""
        self.events_in += count
        self.bytes_in += len(chunk)
        try:
            return self._output.lane_text(value, 0, quoted) if value else []
        except Exception as e:
            return self._settle(Failure(f"{type(e).__name__}: {e}", chunk))


class Runs:
    """The skip run and the text run: the whole events a general read completes, read at once
    (``take``), for the general way's SSE reader."""

    def __init__(self, output: Output, fast: FastPath) -> None:
        self._output = output
        self._skip_run = fast.skip_run
        self._text_run = fast.text_run
        self.events_in = 0
        self.skipped_decoding = 0

    def take(self, whole: bytes) -> list[bytes] | Failure | None:
        """The client's bytes for ``whole`` (nothing but whole events, the first starting at
        its first byte) when a run takes it; None when none does (nothing done)."""
        if self._skip_run is not None and (n := self._skip_run(whole)):
            # Nothing in it anybody reads: the events go on as they came.
            self.events_in += n
            self.skipped_decoding += n
            return self._output.out([whole])
        if self._text_run is not None and (run := self._text_run(whole)) is not None:
            text, n = run  # (the decoder learned its text frame from an event it read)
            self.events_in += n
            if not text:
                return []
            try:
                return self._output.lane_text(text)
            except Exception as e:
                return Failure(f"{type(e).__name__}: {e}", whole)
        return None


def runs(output: Output, fast: FastPath) -> Runs | None:
    """The runs a stream may take (None: none)."""
    if fast.skip_run is None and fast.text_run is None:
        return None
    return Runs(output, fast)


def route(output: Output, fast: FastPath, settle: Settle, general: Read) -> Route | None:
    """The stream's fast route, the read its table's ``BETWEEN`` row takes (None: none, every
    read goes the general way): the skip read where nothing is decoded, the text read where
    plain text is written undecoded."""
    if fast.track and fast.skip_run is not None and fast.decoder is not None:
        return SkipRead(fast.decoder, general)
    if fast.track and fast.text_run is not None:
        return TextRead(output, fast, settle, general)
    return None
