"""Stream stage: each tool call assembled from its fragments and sent on repaired and normalized.

Contract: sans-IO, a ``Stage``, linear in the stream; a call is held from its start to its end,
then ``repair_call`` decides; a call that never ended is never delivered (a client must not run
half a call). The ordering rules: docs/tools.md#argument-repair-in-a-stream.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from addon.model import (
    JSON,
    Event,
    Finish,
    MessageStart,
    Notes,
    RawEvent,
    StreamEnd,
    StreamError,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from addon.stream.stages import PASSES_TEXT, TextLane
from addon.transforms.repair import ToolSchemas, repair_call

MAX_HELD_BYTES = 16 * 1024 * 1024
"""Default bound of what the stage holds (the processor's ``max_event_bytes``)."""
NOTE_TOO_LONG = "tool calls too long to repair: passed on as they came"
NOTE_CUT = "tool calls cut by the stream's end: not delivered"


@dataclass(slots=True)
class _Held:
    """A call held from its start to its end, to be repaired whole."""

    start: ToolCallStart
    """Its start, as it came."""
    events: list[Event] = field(default_factory=list)
    """The call's own events as they came (its start, fragments, repeated starts)."""
    fragments: list[str] = field(default_factory=list)
    """Its argument fragments so far."""
    ended: bool = False
    """It can go out: its ``ToolCallEnd`` came, or it was released without one (``cut``)."""
    cut: bool = False
    """Released before its end (a ``Finish`` or the stream's end): ``repair_call`` is told."""
    as_it_came: bool = False
    """Released unended by ``finish()``: its own events, no end, no repair."""


def _ignore(record: JSON) -> None:
    pass


class RepairStage:
    """A call of a tool in the schema map held from its ``ToolCallStart`` to its
    ``ToolCallEnd``: unchanged by ``repair_call``, its own events as they came; changed, one
    ``ToolCallStart`` with the whole new arguments and its end. Text, thinking and usage are
    never held; tool-call and raw events keep their order; past ``max_bytes`` held, it stops
    repairing for the rest of the stream."""

    text_lane: TextLane | None = PASSES_TEXT
    """Text is never held (only calls are): a plain text delta passes as it came."""
    changes_bytes = False  # only calls (never skippable)

    def __init__(
        self,
        schemas: ToolSchemas,
        notes: Notes,
        log: Callable[[JSON], None] = _ignore,
        max_bytes: int = MAX_HELD_BYTES,
    ) -> None:
        self.schemas = schemas
        self.max_bytes = max_bytes
        self._held_bytes = 0
        self._bypass = False
        """Past ``max_bytes``: nothing is held any more."""
        self.notes = notes
        self.log = log
        self._queue: deque[_Held | Event] = deque()
        """Tool-call events waiting behind the oldest held call (held calls in their place)."""
        self._open: dict[int, _Held] = {}
        """Held calls not yet ended, by index."""
        self._released: set[int] = set()
        """Indexes released before their ``ToolCallEnd``: a late end must not end them twice."""
        self.repaired = 0
        """Calls whose arguments were changed."""

    def feed(self, event: Event) -> list[Event]:
        out = self._feed(event)
        if self._held_bytes > self.max_bytes:
            return [*out, *self._give_up()]
        return out

    def _feed(self, event: Event) -> list[Event]:
        match event:
            case ToolCallStart() if event.index in self._open:
                held = self._open[event.index]
                held.events.append(event)
                if event.arguments:
                    held.fragments.append(event.arguments)
                    self._held_bytes += len(event.arguments)
                return []
            case ToolCallStart() if (
                not event.custom and not self._bypass and event.name in self.schemas
            ):
                held = _Held(event, [event])
                if event.arguments:
                    held.fragments.append(event.arguments)
                    self._held_bytes += len(event.arguments)
                self._open[event.index] = held
                self._released.discard(event.index)
                self._queue.append(held)
                return []
            case ToolCallArgsDelta() if event.index in self._open:
                held = self._open[event.index]
                held.events.append(event)
                held.fragments.append(event.delta)
                self._held_bytes += len(event.delta)
                return []
            case ToolCallEnd() if event.index in self._open:
                self._open.pop(event.index).ended = True
                return self._drain()
            case ToolCallEnd() if event.index in self._released:
                self._released.discard(event.index)
                return []
            case ToolCallStart() | ToolCallArgsDelta() | ToolCallEnd() | RawEvent():
                if isinstance(event, ToolCallStart):
                    self._released.discard(event.index)
                if self._queue:
                    self._queue.append(event)
                    self._held_bytes += _size(event)
                    return []
                return [event]
            case Finish() | StreamEnd():
                return [*self._release_all(), event]
            case MessageStart() | StreamError():
                return [*self._drop_open(), event]
        return [event]

    def finish(self) -> list[Event]:
        return self._release_all(as_they_came=True)

    def _give_up(self) -> list[Event]:
        """Too much held: everything goes out as it came, and nothing is held from now on."""
        self._bypass = True
        self.notes[NOTE_TOO_LONG] += 1
        out: list[Event] = []
        for item in self._queue:
            if isinstance(item, _Held):
                out.extend(item.events)
                if item.ended:
                    out.append(ToolCallEnd(item.start.index))
            else:
                out.append(item)
        self._queue.clear()
        self._open.clear()  # calls still open stream on: their fragments and end pass
        self._held_bytes = 0
        return out

    # ------------------------------------------------------------------ internals

    def _release_all(self, as_they_came: bool = False) -> list[Event]:
        for index, held in self._open.items():
            held.ended = held.cut = True
            held.as_it_came = as_they_came
            self._released.add(index)
        self._open.clear()
        return self._drain()

    def _drop_open(self) -> list[Event]:
        """Held calls that never ended leave the queue unsent (``NOTE_CUT``); the rest drains."""
        if self._open:
            self.notes[NOTE_CUT] += len(self._open)
            dropped = set(map(id, self._open.values()))
            self._released.update(self._open)
            self._open.clear()
            self._queue = deque(item for item in self._queue if id(item) not in dropped)
        return self._drain()

    def _drain(self) -> list[Event]:
        """Send the queue's front while it is ready: passed-through events, ended calls."""
        out: list[Event] = []
        queue = self._queue
        while queue:
            front = queue[0]
            if isinstance(front, _Held):
                if not front.ended:
                    break
                out.extend(self._emit(front))
            else:
                out.append(front)
            queue.popleft()
        if not queue:
            self._held_bytes = 0
        return out

    def _emit(self, held: _Held) -> list[Event]:
        s = held.start
        if held.as_it_came:
            return list(held.events)
        result = repair_call(
            s.name, "".join(held.fragments), self.schemas, self.notes, cut=held.cut
        )
        if result.record is not None:
            self.log(result.record)
        if not result.changed:
            return [*held.events, ToolCallEnd(s.index)]
        self.repaired += 1
        return [
            ToolCallStart(s.index, s.id, s.name, result.arguments, extra=s.extra),
            ToolCallEnd(s.index),
        ]


def _size(event: Event) -> int:
    """What a queued event holds (its arguments), roughly."""
    if isinstance(event, ToolCallArgsDelta):
        return len(event.delta)
    if isinstance(event, ToolCallStart):
        return len(event.arguments or "")
    return 64
