"""Pipeline stages between the upstream decoder and the client encoder, and what a stage offers
the fast path's text read (``TextLane``, ``PASSES_TEXT``).

Contract: sans-IO; a stage takes unified events one at a time and returns unified events;
``finish`` flushes and is idempotent. The offer is declared, never probed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

from addon.model import (
    JSON,
    Event,
    Finish,
    MessageStart,
    RawEvent,
    StreamEnd,
    StreamError,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    UsageEvent,
)
from addon.redact import Secrets
from addon.textproto.parser import TextProtocolParser
from addon.transforms.call_ids import CallIds


class TextLane(Protocol):
    """What a stage offers the fast path's text read (``addon.stream.fastpath``)."""

    def take_text(self, text: str) -> bool:
        """True when the stage took a plain text delta as ``feed`` would and passes it on
        unchanged; False (nothing done) when it must be fed the event."""
        ...

    @property
    def text_sink(self) -> Callable[[bytes], bool | None] | None:
        """None, or a function that takes a plain text as its JSON string (printable ASCII
        without a backslash, quotes included) as ``take_text`` would (False: not taken, nothing
        done); valid until the stage's next ``feed``, ``take_text`` or ``finish``."""
        ...


class _PassesText:
    """The lane of a stage whose ``feed`` returns a plain ``TextDelta`` unchanged and records
    nothing: it need not see plain text at all."""

    text_sink: None = None

    def take_text(self, text: str) -> bool:
        return True


PASSES_TEXT: TextLane = _PassesText()
"""A stage's ``text_lane`` when plain text passes it untouched (the text read leaves it out)."""

type LaneStages = tuple[tuple[int, Callable[[str], bool], TextLane], ...]
"""(stage index, ``take_text``, lane) of each stage a plain text delta must be shown to."""


def lane_stages(offers: Sequence[TextLane | None]) -> LaneStages | None:
    """The stages a plain text delta must be shown to (from each stage's ``text_lane``), or
    None: some stage must be fed every event."""
    lane: list[tuple[int, Callable[[str], bool], TextLane]] = []
    for i, offer in enumerate(offers):
        if offer is None:
            return None
        if offer is not PASSES_TEXT:
            lane.append((i, offer.take_text, offer))
    return tuple(lane)


class Stage(Protocol):
    """A step between decoder and encoder: unified events in, unified events out. It declares
    what the fast path may skip past it: ``changes_bytes`` and ``text_lane``."""

    @property
    def changes_bytes(self) -> bool:
        """True when the stage may change, or must see, an event a same-dialect stream could
        pass on as the upstream's bytes, undecoded (the decoder's ``skippable``: a plain text
        chunk nobody reads; the model's name in its envelope): one such stage, and every event
        is decoded (``keeps_bytes``). False only when such an event would leave it unchanged
        and unrecorded. A stage that does not say is taken to change them."""
        ...

    @property
    def text_lane(self) -> TextLane | None:
        """What it offers the text read (``PASSES_TEXT`` when plain text passes it untouched),
        or None: it is fed every event."""
        ...

    def feed(self, event: Event) -> list[Event]: ...
    def finish(self) -> list[Event]: ...


def keeps_bytes(stages: Sequence[Stage]) -> bool:
    """No stage ``changes_bytes``: an event nobody reads may pass as the upstream's bytes (on a
    same-dialect stream). The one place this is decided: a new stage says it itself."""
    return not any(stage.changes_bytes for stage in stages)


class TextToolStage:
    """Turns the model's text into text, thinking and tool calls with a ``TextProtocolParser``.

    The parser is flushed before the upstream's ``Finish`` (or ``StreamEnd``, or a
    ``StreamError``: a cut stream's unfinished call is text, as at a clean end) goes on, and
    ``Finish`` says ``tool_calls`` when the text held at least one call.

    Calls the upstream made natively (Kiro keeps its tools and may still write text calls) pass
    through beside the parsed ones; the two are numbered apart (``_renumber``: one sequence in
    the order the calls start, which leaves either kind alone unchanged), so that a client never
    sees two calls under one index.
    """

    changes_bytes = True  # the text becomes text, thinking and calls

    def __init__(self, parser: TextProtocolParser) -> None:
        self.parser = parser
        self.text_lane: TextLane | None = parser
        """Plain text the parser passes on as it is (``TextProtocolParser.take_text``), and
        its ``text_sink``."""
        self._flushed = False
        self._indexes: dict[tuple[bool, int], int] = {}
        """(parsed, index as it came) → the index the client sees."""

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, TextDelta):
            return self._renumber(self.parser.feed(event.text), parsed=True)
        if isinstance(event, Finish):
            out = self.finish()
            if self.parser.calls and event.reason != "tool_calls":
                return [*out, Finish("tool_calls", raw="tool_calls")]
            return [*out, event]
        if isinstance(event, StreamEnd | StreamError):
            # A cut or failed stream too: what the parser holds goes out before the error (an
            # unfinished call as the text it was: text, never a call a client can run).
            return [*self.finish(), event]
        if isinstance(event, ToolCallStart | ToolCallArgsDelta | ToolCallEnd):
            return self._renumber([event], parsed=False)
        return [event]

    def finish(self) -> list[Event]:
        if self._flushed:
            return []
        self._flushed = True
        return self._renumber(self.parser.finish(), parsed=True)

    def _renumber(self, events: list[Event], parsed: bool) -> list[Event]:
        out: list[Event] = []
        for e in events:
            if isinstance(e, ToolCallStart | ToolCallArgsDelta | ToolCallEnd):
                key = (parsed, e.index)
                index = self._indexes.get(key)
                if index is None:
                    index = self._indexes[key] = len(self._indexes)
                if index != e.index:
                    e = dataclasses.replace(e, index=index)
            out.append(e)
        return out


class CallIdStage:
    """A call whose id the conversation already holds, or an earlier call of the answer had,
    starts under a fresh one (``addon.transforms.call_ids``). First of the stages: the
    reasoning store, repair and the loop guard see the id the client will send back. Only
    ``ToolCallStart`` carries the id (the other call events name the index); text passes.
    Being first, it also hands each usage the upstream reported to ``usage`` (the flow's
    report: ``AnswerState.saw_usage``), unchanged."""

    text_lane: TextLane | None = PASSES_TEXT
    changes_bytes = False  # only a call's start (never skippable) and the usage it hands on

    def __init__(
        self,
        history: frozenset[str],
        renamed: Callable[[], None],
        usage: Callable[[Usage], None] | None = None,
    ) -> None:
        self._ids = CallIds(history)
        self._renamed = renamed
        self._usage = usage

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, ToolCallStart):
            new = self._ids.fresh(event.id)
            if new != event.id:
                self._renamed()
                return [dataclasses.replace(event, id=new)]
        elif type(event) is UsageEvent and self._usage is not None:
            self._usage(event.usage)
        return [event]

    def finish(self) -> list[Event]:
        return []


class HideThinkingStage:
    """Drops reasoning (``bridge_thinking_output=hidden``)."""

    text_lane: TextLane | None = PASSES_TEXT
    changes_bytes = True  # as the plan had it: raw passing off with it

    def feed(self, event: Event) -> list[Event]:
        return [] if isinstance(event, ThinkingDelta) else [event]

    def finish(self) -> list[Event]:
        return []


ENVELOPE_MODEL_KEYS = ("model", "modelVersion")
"""Where a dialect's stream envelope names the model (Gemini: ``modelVersion``)."""


class AnswerModelStage:
    """The answer names ``model`` (the client's) instead of the upstream's: a route's
    ``model_map`` sent another name. The events that carry it: ``MessageStart`` (its model,
    its envelope), and on a same-dialect route the wire fields kept in ``Finish.extra`` and
    ``RawEvent.data`` (Responses repeats the response object, model included)."""

    text_lane: TextLane | None = PASSES_TEXT
    changes_bytes = True  # every chunk's envelope names the model

    def __init__(self, model: str) -> None:
        self.model = model

    def feed(self, event: Event) -> list[Event]:
        match event:
            case MessageStart():
                envelope = with_model(event.envelope, self.model)
                extra = with_model(event.extra, self.model)
                return [
                    dataclasses.replace(event, model=self.model, envelope=envelope, extra=extra)
                ]
            case Finish():
                return [dataclasses.replace(event, extra=with_model(event.extra, self.model))]
            case RawEvent():
                return [dataclasses.replace(event, data=with_model(event.data, self.model))]
        return [event]

    def finish(self) -> list[Event]:
        return []


def with_model(fields: JSON, model: str, depth: int = 3) -> JSON:
    """``fields`` with every ``ENVELOPE_MODEL_KEYS`` value that is a string, in it and in the
    objects it holds (``depth`` levels), set to ``model``; the same object when none is."""
    out: JSON | None = None
    for k, v in fields.items():
        new = v
        if k in ENVELOPE_MODEL_KEYS and isinstance(v, str):
            new = model
        elif depth > 1 and isinstance(v, dict):
            new = with_model(v, model, depth - 1)
        if new is not v:
            out = dict(fields) if out is None else out
            out[k] = new
    return fields if out is None else out


class TrailingSignatureStage:
    """A signature-only reasoning delta after the answer's text or calls is not passed on,
    unless a call starts right after it (the rule: ``addon.transforms.signatures``). Such a
    delta is held until the next event says which; the capture stage, before this one, has
    it for the store either way. For clients of another dialect than the upstream's."""

    changes_bytes = False  # only signature deltas (never skippable)

    def __init__(self) -> None:
        self._seen = False
        """Visible content (text or a call) went by."""
        self._thinking = False
        """The last event was reasoning text: a signature then signs that reasoning (an
        Anthropic upstream's interleaved thinking ends with its ``signature_delta``)."""
        self._held: ThinkingDelta | None = None
        self.text_lane: TextLane | None = self
        """Its own ``take_text`` (no ``text_sink``)."""

    text_sink: None = None

    def take_text(self, text: str) -> bool:
        """Plain text, for the text lane: passed on unchanged while nothing is held."""
        if self._held is not None:
            return False
        self._seen = self._seen or bool(text)
        self._thinking = False
        return True

    def feed(self, event: Event) -> list[Event]:
        if (
            isinstance(event, ThinkingDelta)
            and not event.text
            and event.signature
            and self._seen
            and not self._thinking
        ):
            self._held = event  # a later one replaces it: only one can precede a call
            return []
        held, self._held = self._held, None
        if isinstance(event, ThinkingDelta | TextDelta | ToolCallStart):
            # (Events the client sees no content in, a usage or a raw event, change nothing.)
            self._thinking = isinstance(event, ThinkingDelta) and bool(event.text)
        if isinstance(event, ToolCallStart):
            self._seen = True
            return [event] if held is None else [held, event]
        if isinstance(event, TextDelta) and event.text:
            self._seen = True
        return [event]

    def finish(self) -> list[Event]:
        self._held = None
        return []


class RedactErrorStage:
    """The message of an error that ends the stream, with the flow's credential values
    redacted (an upstream that echoes the client's key): the client of another dialect gets
    an error event the bridge writes. Only that event is touched; text passes as it is."""

    text_lane: TextLane | None = PASSES_TEXT
    changes_bytes = False  # only an error (never skippable)

    def __init__(self, secrets: Secrets) -> None:
        self._secrets = secrets

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, StreamError):
            message = self._secrets(event.message)
            if message != event.message:
                return [dataclasses.replace(event, message=message)]
        return [event]

    def finish(self) -> list[Event]:
        return []
