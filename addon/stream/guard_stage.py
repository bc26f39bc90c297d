"""Stream stage: the loop guard judges each completed tool call of the answer.

Contract: sans-IO, a ``Stage`` fed every event; a call of the verdict's tool is held until its
``ToolCallEnd``, the same call again replaced by the terminal message as text; memory is the
held call and what queued behind it. In full: docs/tools.md#the-loop-guard-in-a-stream.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from addon.model import (
    Event,
    Finish,
    MessageStart,
    RawEvent,
    StreamEnd,
    StreamError,
    TextDelta,
    ToolCall,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from addon.transforms.loop_guard import LoopVerdict, stop_finish, terminal_message


@dataclass(slots=True)
class _Held:
    """A call of the verdict's tool, held until it can be judged."""

    start: ToolCallStart
    """Its start, as it came."""
    events: list[Event] = field(default_factory=list)
    """The call's own events as they came (its start, fragments, repeated starts)."""
    fragments: list[str] = field(default_factory=list)
    """Its argument fragments so far."""
    ended: bool = False
    """Its ``ToolCallEnd`` came: it can be judged."""


def _nothing() -> None:
    pass


class LoopGuardStage:
    """A call of the verdict's tool (``addon.transforms.loop_guard.check_loop``) held until its
    ``ToolCallEnd``: the same call again (``LoopVerdict.matches``) becomes the terminal message
    as text, another call goes out as it came. Text, thinking and usage are never held; later
    calls keep their order, renumbered densely; a ``Finish`` left without a call becomes a
    text finish."""

    text_lane: None = None
    """Every event is the guard's to see (``Stage``)."""
    changes_bytes = True  # it sees every event

    def __init__(self, verdict: LoopVerdict, on_replace: Callable[[], None] = _nothing) -> None:
        self.verdict = verdict
        self.on_replace = on_replace
        self.replaced = 0
        """Calls replaced in this stream."""
        self._queue: deque[_Held | Event] = deque()
        """Tool-call and raw events waiting behind the oldest held call (held calls in place)."""
        self._open: dict[int, _Held] = {}
        """Held calls that have not had their end, by index."""
        self._dropped: set[int] = set()
        """Indexes of this message's replaced (or dropped) calls: their late events go nowhere."""
        self._released: set[int] = set()
        """Indexes given their end by this stage: a late ``ToolCallEnd`` is dropped."""
        self._index: dict[int, int] = {}
        """Index as it came → index the client sees, for calls after a replaced one."""
        self._calls_out: set[int] = set()
        """Indexes of this message's calls that went out."""
        self._text = False
        """Text went out in this message."""
        self._told = False
        """The terminal message went out in this message."""

    def feed(self, event: Event) -> list[Event]:
        match event:
            case ToolCallStart() if event.index in self._open:
                self._add(self._open[event.index], event, event.arguments)
                return []
            case ToolCallStart() if not event.custom and event.name == self.verdict.tool:
                self._dropped.discard(event.index)
                self._released.discard(event.index)
                held = _Held(event)
                self._add(held, event, event.arguments)
                self._open[event.index] = held
                self._queue.append(held)
                return []
            case ToolCallArgsDelta() if event.index in self._open:
                self._add(self._open[event.index], event, event.delta)
                return []
            case ToolCallEnd() if event.index in self._open:
                self._open.pop(event.index).ended = True
                return self._drain()
            case ToolCallEnd() if event.index in self._released:
                self._released.discard(event.index)
                return []
            case ToolCallArgsDelta() | ToolCallEnd() if event.index in self._dropped:
                return []
            case ToolCallStart() | ToolCallArgsDelta() | ToolCallEnd() | RawEvent():
                if isinstance(event, ToolCallStart):
                    self._dropped.discard(event.index)
                    self._released.discard(event.index)
                if self._queue:
                    self._queue.append(event)
                    return []
                return self._out([event])
            case TextDelta():
                self._text = self._text or bool(event.text)
                return [event]
            case MessageStart():
                out = [*self._release_all(), event]
                self._new_message()
                return out
            case Finish():
                out = self._release_all()
                if self._told and not self._calls_out:
                    event = Finish(stop_finish(event.reason), None, event.extra)
                return [*out, event]
            case StreamEnd():
                return [*self._release_all(), event]
            case StreamError():
                return [*self._drop_open(), event]
        return [event]

    def finish(self) -> list[Event]:
        return self._release_all()

    # ------------------------------------------------------------------ internals

    def _add(self, held: _Held, event: Event, fragment: str) -> None:
        held.events.append(event)
        if fragment:
            held.fragments.append(fragment)

    def _new_message(self) -> None:
        self._dropped.clear()
        self._released.clear()
        self._index.clear()
        self._calls_out.clear()
        self._text = self._told = False

    def _release_all(self) -> list[Event]:
        """Every held call judged as it is (those without an end get one)."""
        for index, held in self._open.items():
            held.ended = True
            self._released.add(index)
        self._open.clear()
        return self._drain()

    def _drop_open(self) -> list[Event]:
        """The stream failed: held calls that never ended go nowhere; the rest goes on."""
        for index in self._open:
            self._dropped.add(index)
        open_calls = set(map(id, self._open.values()))
        self._open.clear()
        self._queue = deque(item for item in self._queue if id(item) not in open_calls)
        return self._drain()

    def _drain(self) -> list[Event]:
        """Send the queue's front while it is ready: queued events, judged calls."""
        out: list[Event] = []
        queue = self._queue
        after_replaced = False
        while queue:
            front = queue[0]
            if isinstance(front, _Held):
                if not front.ended:
                    break
                out.extend(self._judge(front))
                after_replaced = front.start.index in self._dropped
            elif isinstance(front, RawEvent) and after_replaced:
                pass  # it came while the replaced call was open: it may be part of it
            else:
                after_replaced = False
                out.extend(self._out([front]))
            queue.popleft()
        return out

    def _judge(self, held: _Held) -> list[Event]:
        s = held.start
        call = ToolCall(s.id, s.name, "".join(held.fragments))
        if not self.verdict.matches(call):
            return self._out([*held.events, ToolCallEnd(s.index)])
        self._dropped.add(s.index)
        self._released.discard(s.index)  # its late events go nowhere anyway
        self.replaced += 1
        self.on_replace()
        if self._told:
            return []
        self._told = True
        text = ("\n\n" if self._text else "") + terminal_message(self.verdict)
        self._text = True
        return [TextDelta(text)]

    def _out(self, events: list[Event]) -> list[Event]:
        """Tool-call events leaving: counted, and renumbered after a replaced call."""
        out: list[Event] = []
        for e in events:
            if isinstance(e, ToolCallStart | ToolCallArgsDelta | ToolCallEnd):
                if isinstance(e, ToolCallStart) and e.index not in self._calls_out:
                    self._calls_out.add(e.index)
                    before = sum(1 for d in self._dropped if d < e.index)
                    if before:
                        self._index[e.index] = e.index - before
                index = self._index.get(e.index)
                if index is not None:
                    e = dataclasses.replace(e, index=index)
            out.append(e)
        return out
