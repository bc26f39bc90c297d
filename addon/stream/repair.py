"""Stream stage: each tool call assembled from its fragments and sent on repaired and normalized.

Arguments can only be repaired once they are whole, so a call of a tool in the schema map
(``addon.transforms.repair.ToolSchemas``, the request's own function tools) is held from its
``ToolCallStart`` to its ``ToolCallEnd``; then ``repair_call`` decides:

- nothing to change → the call's own events go out as they came (start, every fragment with
  its wire extras, end): a same-dialect client gets its bytes back;
- changed → ``ToolCallStart(index, id, name, arguments=<the whole new JSON>, extra=<the
  start's extra>)`` and ``ToolCallEnd(index)``; the wire extras of the fragments go with them.
  Every client encoder takes a call whose arguments all arrive on its start.

The log record of a call (``RepairResult.record``: still invalid, alias collisions, unreadable,
cut) is handed to ``log`` as it is released; notes are counted by ``repair_call``.

What passes at once: calls of tools not in the map and custom (freeform) calls — untouched —
when no held call is before them, and text, thinking and usage always: text and reasoning are
never held back by a call.

Ordering guarantee:

- tool-call events and ``RawEvent``s leave in the order they arrived: while a held call is
  open, the events of later calls (held or passed-through ones, and fragments of calls that
  started earlier and are not held) and raw events queue behind it, and go out as soon as it
  is released. So the client sees its calls in the upstream's order, each whole or streamed
  as it was. Raw events are kept in place because they may belong to the call (a gateway's
  chunk with an empty fragment, which a same-dialect encoder re-sends verbatim: sent before
  the call's start it would open the call without its id and name);
- text, thinking and usage go out the moment they arrive. Text or thinking that arrives while
  a call is held therefore goes out *before* that call (the only reordering this stage makes;
  the client encoders close and open blocks/items accordingly);
- ``Finish`` and ``StreamEnd`` (the upstream said the answer is over) first release every
  held call (an unended one — an answer cut at its token limit — is repaired as *cut*, and
  gets its ``ToolCallEnd``) and whatever queued behind it, then go out: a stream's end always
  follows its calls. A late ``ToolCallEnd`` of a call released that way is dropped (it has had
  its end);
- ``StreamError`` (the stream was cut, or failed) and ``MessageStart`` (the upstream started
  over) drop every held call that never ended — never delivered, not even in part: a call
  that never ended must never reach a client as one it can run (``NOTE_CUT`` counts them) —
  and release what queued behind it, then go out. Calls that ended go out as usual;
- ``finish()`` (the stream ended without any of those: the processor gives the rest of a
  same-dialect stream back raw after it) releases ended calls as usual and unended ones as
  they came, without an end and unrepaired (the raw bytes after them may continue them); it
  is idempotent.

A repeated ``ToolCallStart`` for the index of an open held call counts as a fragment of it (its
``arguments``), as the client encoders treat a repeated start.

Memory is bounded: what the stage holds (held calls' fragments and the tool-call events
queued behind them) never grows past ``max_bytes``. Past it the stage stops repairing for the
rest of the stream: every held call goes out as it came (its events in order, its end if it
had one), calls still open stream on unheld, and a note says so.

Contract: sans-IO, the ``Stage`` protocol of ``addon.stream.processor``; cost linear in the
size of the stream (fragments are kept in a list and joined once).
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
from addon.stream.fastpath import PASSES_TEXT, TextLane
from addon.transforms.repair import ToolSchemas, repair_call

MAX_HELD_BYTES = 16 * 1024 * 1024
"""Default bound of what the stage holds (the processor's ``max_event_bytes``)."""
NOTE_TOO_LONG = "tool calls too long to repair: passed on as they came"
NOTE_CUT = "tool calls cut by the stream's end: not delivered"


@dataclass(slots=True)
class _Held:
    start: ToolCallStart
    events: list[Event] = field(default_factory=list)
    """The call's own events as they came (its start, fragments, repeated starts)."""
    fragments: list[str] = field(default_factory=list)
    ended: bool = False
    cut: bool = False
    as_it_came: bool = False
    """Released unended by ``finish()``: its own events, no end, no repair."""


def _ignore(record: JSON) -> None:
    pass


class RepairStage:
    text_lane: TextLane | None = PASSES_TEXT
    """Text is never held (only calls are): a plain text delta passes as it came."""

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
