"""Stream stage: calls of wrapped custom tools back as custom calls carrying their raw input.

An upstream without custom (freeform) tools got them as function tools with one string parameter
``input`` (``addon.transforms.custom_tools.wrap_custom_tools``); its calls stream as JSON argument
fragments such as ``{"input": "*** Begin`` … ``Patch\\n…"}``. The raw text can only be recovered
once the whole JSON is there, so this stage holds such a call back:

- a ``ToolCallStart`` whose name is one of the wrapped names (and that is not already custom)
  is held with its argument fragments (kept as a list, joined once: linear cost) until its
  ``ToolCallEnd``; then it goes out as one ``ToolCallStart(index, id, name, arguments=<raw
  input>, extra=<the start's extra>, custom=True)`` followed by ``ToolCallEnd(index)``. Wire
  extras that rode on argument fragments are dropped with them;
- everything else (text, thinking, other calls, usage, raw events) passes through at once; it
  is never held back by a held call;
- a ``Finish`` or ``StreamEnd`` that arrives while calls are still held (no ``ToolCallEnd``:
  an answer cut at its token limit) first releases them, unwrapped as far as possible, each
  with its end;
- a ``StreamError`` (the stream was cut, or failed) drops the calls still held: a call that
  never ended must never reach a client as one it can run (half a patch applied is worse than
  none); ``finish()`` (the stream ended without any of those) does the same and is
  idempotent.

How the raw input is read from the arguments (leniently, never losing text):
``addon.transforms.custom_tools.unwrap_custom_input``.

Contract: sans-IO, the ``Stage`` protocol of ``addon.stream.processor``.
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
from addon.stream.fastpath import PASSES_TEXT, TextLane
from addon.transforms.custom_tools import unwrap_custom_input


@dataclass(slots=True)
class _Held:
    start: ToolCallStart
    fragments: list[str] = field(default_factory=list)


class CustomToolStage:
    text_lane: TextLane | None = PASSES_TEXT
    """Only calls are held: a plain text delta passes as it came."""

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
