"""The client's side of a stream: unified events through the stages and the client's encoder,
then its framing (SSE, or one JSON array: ``JsonArrayWriter``).

Contract: sans-IO; every method returns the client's bytes as parts, ``out`` joins them into at
most one (never an empty ``bytes``) and counts it; ``end`` and ``end_with`` close the stages,
the encoder and the framing. One object per stream, so that every path writes through it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from addon.dialects.base import StreamEncoder
from addon.model import Event, StreamError, TextDelta, ThinkingDelta
from addon.stream.framing import JsonArrayWriter
from addon.stream.sse import encode_pairs
from addon.stream.stages import LaneStages, Stage


class Output:
    """Stages, encoder and framing writer of one stream (``StreamProcessor``'s client side)."""

    def __init__(
        self,
        stages: Sequence[Stage],
        encoder: StreamEncoder,
        writer: JsonArrayWriter | None,
        text_sse: Callable[[str | None, bytes | None], bytes | None] | None = None,
        lane: LaneStages | None = None,
        errored: Callable[[StreamError], None] | None = None,
    ) -> None:
        self.stages = tuple(stages)
        self.encoder = encoder
        self.writer = writer
        """The JSON-array writer of a client that reads one (None: SSE)."""
        self.frame = encode_pairs if writer is None else writer.pairs
        self._text_sse = text_sse
        """The encoder's ``text_sse`` where a fast route may use it (SSE out), else None."""
        self._lane = lane
        """The stages a plain text delta must be shown to (None: every stage is fed it)."""
        self._errored = errored
        """Told of each error event the encoder writes (the processor's ``ERROR`` input)."""
        self.bytes_out = 0
        """Bytes written to the client through ``out``, ``written`` and ``lane_text``."""

    def out(self, parts: Sequence[bytes]) -> list[bytes]:
        data = b"".join(parts)
        if not data:
            return []
        self.bytes_out += len(data)
        return [data]

    def through(self, events: list[Event]) -> list[bytes]:
        """Unified events through the stages, then the client's encoder: its framed bytes."""
        for stage in self.stages:
            events = feed_all(stage, events)
        return self.encode(events)

    def encode(self, events: Iterable[Event]) -> list[bytes]:
        out: list[bytes] = []
        feed, frame, sse = self.encoder.feed, self.frame, self._text_sse
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
            if type(event) is StreamError and self._errored is not None:
                self._errored(event)
            pairs = feed(event)
            if pairs:
                out.extend(frame(pairs))
        return out

    def end(self, events: list[Event]) -> list[bytes]:
        """The body ended (``events``: what the decoder's ``finish`` said): flush the stages
        and the encoder; close the framing."""
        for stage in self.stages:
            events = feed_all(stage, events) + stage.finish()
        out = self.encode(events)
        out.extend(self.frame(self.encoder.finish()))
        if self.writer is not None:
            out.append(self.writer.close())
        return out

    def end_with(self, error: StreamError) -> list[bytes]:
        """The client's stream ends with ``error`` (``end_stages``), the encoder and the
        framing closed after it."""
        out = self.encode(self.end_stages(error))
        out += self.frame(self.encoder.finish())
        if self.writer is not None:
            out.append(self.writer.close())
        return out

    def end_stages(self, error: StreamError) -> list[Event]:
        """The stages' ending for a stream that fails: ``error`` through every stage, each
        finished after it (as ``end`` does with a decoder's error), so that a stage lets out
        what it holds before the error and drops what must not reach a client (a tool call
        that never ended). A stage that fails here costs what it held, never the error."""
        events: list[Event] = [error]
        try:
            for stage in self.stages:
                events = feed_all(stage, events) + stage.finish()
        except Exception:  # already failing: the error event is what matters
            return [error]
        return events

    def drain(self) -> list[bytes]:
        """What stages still hold (e.g. text the parser kept back), before the raw rest."""
        out: list[bytes] = []
        try:
            for i, stage in enumerate(self.stages):
                events = stage.finish()
                for later in self.stages[i + 1 :]:
                    events = feed_all(later, events)
                out.extend(self.encode(events))
        except Exception:  # already failing: keep what could be drained
            pass
        return out

    def lane_text(self, text: str, taken: int = 0, quoted: bytes | None = None) -> list[bytes]:
        """A plain text delta (not empty) shown to the stages of the text lane (any number), or
        fed to the ones that must see it, then written. ``taken``: how many of the lane's
        stages took it already; ``quoted``: its JSON string, when the caller has it (plain)."""
        lane = self._lane
        if lane is None:
            return self.out(self.through([TextDelta(text)]))
        for at, take, _ in lane[taken:]:
            if not take(text):
                # This stage must see the event: it and the ones after it are fed it (the
                # ones before took the text and passed it on as it was).
                events: list[Event] = [TextDelta(text)]
                for stage in self.stages[at:]:
                    events = feed_all(stage, events)
                return self.out(self.encode(events))
        return self.written(text, quoted)

    def written(self, text: str, quoted: bytes | None = None) -> list[bytes]:
        """A plain text delta (not empty) the stages passed, through the encoder."""
        sse = self._text_sse
        if sse is not None and (data := sse(text, quoted)) is not None:
            self.bytes_out += len(data)
            return [data]
        pairs = self.encoder.feed(TextDelta(text))
        return self.out(self.frame(pairs)) if pairs else []


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


def feed_all(stage: Stage, events: list[Event]) -> list[Event]:
    out: list[Event] = []
    for event in events:
        out.extend(stage.feed(event))
    return out


def cut_message(cause: str) -> str:
    """What the client's error says of a body the upstream broke off with ``cause``."""
    how = {
        "upstream_reset": "reset the connection",
        "upstream_idle": "sent nothing for too long",
        "search_call_failed": "failed the call with the web search's results",
    }
    what = how.get(cause, "closed the connection")
    return f"cursor-bridge: the upstream {what} before the stream's end ({cause})"
