"""A streamed answer whose web searches the bridge runs, live (issue 44 point 1;
docs/tools.md#web-search), sans-IO: the relay's leg (``addon.shell.outbound.search_leg``) relays
the upstream's stream, and when the model called the bridge's ``web_search`` function tool it
runs the searches, writes ONE marker event (``marker``: the flow's nonce and what the searches
found) and relays its next upstream call, streamed, on the same body. ``SearchCalls`` is the
upstream decoder as the stream processor reads that body with: what the client must not see is
held — every tool call of a body until the body's end (a body followed by a marker loses its
calls, as the whole path's ``fed_back`` does), the body's ending (finish, usage, end) — the
marker shows the searches in the client's dialect's own shape (``SearchShape``: the whole path's
encoders) and moves the processor (``SECOND_CALL``, ``addon.stream.states``), and the last body
ends the answer with the usage of every call added up. A marker without the flow's nonce (an
upstream's forgery) is dropped."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from addon.dialects.base import DecoderFastPath, StreamDecoder
from addon.dialects.searches import Found, Searched, SearchShape, summed
from addon.jsonio import dumpb, loads
from addon.model import (
    Event,
    Finish,
    MessageStart,
    Opaque,
    Response,
    StreamEnd,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    UsageEvent,
)
from addon.stream.sse import EventDecoder, LineDecoder, SSEEvent
from addon.stream.whole import response_from_events

MARKER = "cursor-bridge.web_search"
"""The SSE event name of the leg's marker."""

_RAW_INDEX = 1_000_000
"""Where the indexes of the search items the marker shows start (the encoders map them to
their own: apart from any index an upstream gives)."""


def marker(nonce: str, searched: Sequence[Searched]) -> bytes:
    """The leg's marker event: the searches of one round, under the flow's nonce. Blank lines
    first: an upstream body that ended inside an event does not swallow it."""
    data = {
        "nonce": nonce,
        "searched": [
            {
                "call_id": s.call_id,
                "query": s.query,
                "error": s.error,
                "results": [dataclasses.asdict(f) for f in s.results],
            }
            for s in searched
        ],
    }
    return b"\n\nevent: " + MARKER.encode() + b"\ndata: " + dumpb(data) + b"\n\n"


def read_marker(data: str, nonce: str) -> tuple[Searched, ...] | None:
    """The searches a marker carries; None when it is not the flow's (no nonce, another one,
    not readable)."""
    try:
        got = loads(data)
        if not isinstance(got, dict) or not nonce or got.get("nonce") != nonce:
            return None
        return tuple(
            Searched(
                str(s["call_id"]),
                str(s["query"]),
                tuple(Found(**f) for f in s["results"]),
                s["error"],
            )
            for s in got["searched"]
        )
    except (ValueError, KeyError, TypeError):
        return None


type _Call = ToolCallStart | ToolCallArgsDelta | ToolCallEnd


@dataclass(slots=True)
class _Body:
    """What one upstream body's stream holds back until its end or the marker after it."""

    calls: list[_Call] = field(default_factory=list)
    searches: set[int] = field(default_factory=set)
    """Unified indexes of its calls of the bridge's search tool."""
    ending: list[Event] = field(default_factory=list)
    usage: Usage | None = None

    def copy(self) -> _Body:
        return _Body(list(self.calls), set(self.searches), list(self.ending), self.usage)


type Moves = tuple[Callable[[], None], Callable[[], None]]
"""The processor's ``second_call`` and ``second_call_ended``."""


class SearchCalls:
    """The upstream's stream decoder for a body that may hold several upstream calls (a
    ``StreamDecoder``): each body read by a fresh decoder (``new``), its events shown to the
    client but for what is held (``_Body``); ``name``: the search tool's; ``origin``: the
    client's dialect; ``ran``: told the searches run so far (the usage ledger's)."""

    fast_path: DecoderFastPath | None = None
    """None: every event is read here (the marker must be seen)."""

    def __init__(
        self,
        new: Callable[[], StreamDecoder],
        name: str,
        nonce: str,
        shape: SearchShape,
        origin: str,
        ran: Callable[[int], None],
    ) -> None:
        self._new, self._name, self._nonce = new, name, nonce
        self._shape, self._origin, self._ran = shape, origin, ran
        self._inner = new()
        self._body = _Body()
        self._usages: list[Usage | None] = []
        """The usage of each body before the last."""
        self._searched: list[Searched] = []
        self._shown: list[Opaque] = []
        self._started = False
        self._waiting = False
        self.moves: Moves | None = None
        """The processor's moves (set once it is built)."""
        self.forged = 0
        """Marker events without the flow's nonce, dropped."""

    def feed(self, data: str, event: str | None) -> list[Event]:
        if event == MARKER:
            searched = read_marker(data, self._nonce)
            if searched is None:
                self.forged += 1
                return []
            return self._next_call(searched)
        return self._through(self._inner.feed(data, event), self._body)

    def finish(self) -> list[Event]:
        """The answer's end: the last body's calls but the searches (numbered from 0), its
        finish (``stop`` where only searches were called), the usage of every call."""
        body = self._body.copy()  # ``finish`` may be asked more than once (``ended``)
        out = self._through(self._inner.finish(), body)
        kept = [c for c in body.calls if c.index not in body.searches]
        numbers: dict[int, int] = {}
        for call in kept:
            if isinstance(call, ToolCallStart):
                numbers.setdefault(call.index, len(numbers))
        out += [dataclasses.replace(c, index=numbers[c.index]) for c in kept if c.index in numbers]
        for e in body.ending:
            if isinstance(e, Finish) and body.searches and not numbers:
                e = dataclasses.replace(e, reason="stop", raw=None)
            if isinstance(e, StreamEnd):
                out += self._usage(body)
            out.append(e)
        if not any(isinstance(e, StreamEnd) for e in body.ending):
            out += self._usage(body)
        return out

    # ------------------------------------------------------------------ internals

    def _through(self, events: list[Event], body: _Body) -> list[Event]:
        """What of ``events`` the client gets now; the rest held in ``body``."""
        out: list[Event] = []
        for e in events:
            match e:
                case MessageStart():
                    if not self._started:  # a later call's start: the same message goes on
                        self._started = True
                        out.append(e)
                case ToolCallStart():
                    if e.name == self._name:
                        body.searches.add(e.index)
                    body.calls.append(e)
                case ToolCallArgsDelta() | ToolCallEnd():
                    body.calls.append(e)
                case UsageEvent():
                    body.usage = e.usage if body.usage is None else body.usage.then(e.usage)
                case Finish():
                    body.ending.append(e)
                case StreamEnd():
                    body.ending.append(e)
                    if body.searches and body is self._body and not self._waiting:
                        self._waiting = self._move(0)
                case _:
                    out.append(e)
        return out

    def _next_call(self, searched: Sequence[Searched]) -> list[Event]:
        """The leg's marker: the body before it ends (its calls and ending dropped, its usage
        kept), the searches shown, the next body read by a fresh decoder."""
        out = self._through(self._inner.finish(), self._body)
        self._usages.append(self._body.usage)
        self._body = _Body()
        self._inner = self._new()
        if not self._waiting:
            self._move(0)
        self._waiting = False
        self._move(1)
        self._searched += searched
        self._ran(sum(1 for s in self._searched if s.error is None))
        shown = self._shape.answer(Response(self._origin, None, None, (), None), self._searched)
        for part in shown.parts:
            if isinstance(part, Opaque) and part not in self._shown:
                self._shown.append(part)
                out += self._shape.events(part, _RAW_INDEX + len(self._shown))
        return out

    def _usage(self, body: _Body) -> list[Event]:
        """The usage of every call: the earlier bodies' and ``body``'s, added up; with
        searches, in the client's shape (Anthropic's ``server_tool_use``)."""
        usage = summed([*self._usages, body.usage]) if self._usages else body.usage
        if usage is None:
            return []
        if self._searched:
            last = Response(self._origin, None, None, (), None, usage=usage)
            usage = self._shape.answer(last, self._searched).usage or usage
        return [UsageEvent(usage)]

    def _move(self, which: int) -> bool:
        if self.moves is None:
            return False
        self.moves[which]()
        return True


class Heard:
    """What the relay's leg hears of one upstream body as it passes (sans-IO): its SSE events
    through the upstream's decoder, read at the body's end as one ``Response`` (``answer``):
    whether the model called the search tool, and with what."""

    def __init__(self, decoder: StreamDecoder, origin: str) -> None:
        self._lines = LineDecoder()
        self._events = EventDecoder()
        self._decoder = decoder
        self._origin = origin
        self._got: list[Event] = []

    def feed(self, chunk: bytes) -> None:
        for line, _ in self._lines.feed(chunk):
            self._line(line)

    def answer(self) -> Response | None:
        """The body's answer; None when it carried an error or could not be read."""
        for line, _ in self._lines.finish():
            self._line(line)
        self._decoded(self._events.finish())
        try:
            self._got += self._decoder.finish()
            return response_from_events(self._got, self._origin)
        except Exception:  # an error event, an unreadable end: no search to run
            return None

    def _line(self, line: str) -> None:
        item = self._events.feed_line(line)
        if isinstance(item, SSEEvent):
            self._decoded(item)

    def _decoded(self, item: SSEEvent | None) -> None:
        if item is None:
            return
        with contextlib.suppress(Exception):  # skipped, as the client's reader skips it
            self._got += self._decoder.feed(item.data, item.event)
