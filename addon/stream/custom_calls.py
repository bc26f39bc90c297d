"""Stream stage: calls of wrapped custom tools back as custom calls carrying their raw input.

Contract: sans-IO, a ``Stage``; a wrapped call is held until its ``ToolCallEnd`` and goes out as
one ``ToolCallStart(custom=True)`` and its end, everything else at once: the raw text can only
be read once the JSON ``{"input": …}`` is whole (docs/tools.md#custom-tools-in-a-stream).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from addon.model import (
    Event,
    Finish,
    StreamEnd,
    StreamError,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from addon.stream.stages import PASSES_TEXT, TextLane
from addon.transforms.custom_tools import unwrap_custom_input


@dataclass(slots=True)
class _Held:
    """A wrapped custom call held until its end."""

    start: ToolCallStart
    """Its start, as it came."""
    fragments: list[str] = field(default_factory=list)
    """Its argument fragments so far (``{"input": …}`` in pieces)."""


class CustomToolStage:
    """Calls of the ``names`` tools held whole and given back as custom calls with their raw
    input; a ``Finish`` / ``StreamEnd`` releases held calls, a ``StreamError`` or ``finish()``
    drops them."""

    text_lane: TextLane | None = PASSES_TEXT
    """Only calls are held: a plain text delta passes as it came."""
    changes_bytes = True  # as the plan had it: raw passing off with it

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self._held: dict[int, _Held] = {}
        self._released: set[int] = set()
        """Indexes released before their ``ToolCallEnd``: a late end must not end them twice."""

    def feed(self, event: Event) -> list[Event]:
        match event:
            case ToolCallStart() if event.name in self.names and not event.custom:
                held = _Held(event)
                if event.arguments:
                    held.fragments.append(event.arguments)
                out = self._release(event.index) if event.index in self._held else []
                self._held[event.index] = held
                self._released.discard(event.index)
                return out
            case ToolCallArgsDelta() if event.index in self._held:
                self._held[event.index].fragments.append(event.delta)
                return []
            case ToolCallEnd() if event.index in self._held:
                return self._release(event.index)
            case ToolCallEnd() if event.index in self._released:
                self._released.discard(event.index)
                return []
            case Finish() | StreamEnd():
                return [*self._release_all(), event]
            case StreamError():
                self._drop_all()
                return [event]
        return [event]

    def finish(self) -> list[Event]:
        self._drop_all()
        return []

    def _drop_all(self) -> None:
        """Calls still held never ended: not delivered (a late end of one is ignored)."""
        self._released.update(self._held)
        self._held.clear()

    def _release_all(self) -> list[Event]:
        out: list[Event] = []
        for index in list(self._held):
            self._released.add(index)
            out.extend(self._release(index))
        return out

    def _release(self, index: int) -> list[Event]:
        held = self._held.pop(index)
        s = held.start
        raw = unwrap_custom_input("".join(held.fragments))
        return [
            ToolCallStart(s.index, s.id, s.name, raw, extra=s.extra, custom=True),
            ToolCallEnd(index),
        ]
