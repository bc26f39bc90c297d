"""Process-wide state of the bridge, owned by the addon instance.

Contract: plain, bounded data; no mitmproxy. Per-flow stream state lives in the flow's
``StreamProcessor``, not here. This holds counters and the originals of rewritten bodies for
mitmweb's "cursor-bridge" content view."""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from addon.dialects.base import Framing
from addon.redact import Secrets
from addon.report.outcome import Count, stats_text


class BridgeState:
    """Counters (what the bridge did since start: ``bridge.stats`` and the shutdown line) and
    the originals of rewritten bodies, with what the view needs to show them (route,
    dialects, decisions), bounded in count and bytes."""

    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self.originals = OriginalStore()
        self.started = time.monotonic()

    def count(self, what: Count, n: int = 1) -> None:
        """Add ``n`` to one of the named counters (``Count``; a free string is refused, so a
        misspelt name fails where it is written, not in ``bridge.stats``)."""
        if not isinstance(what, Count):
            raise TypeError(f"not a counter: {what!r} (addon.report.outcome.Count names them)")
        self.counters[what.value] += n

    def add(self, counts: Mapping[str, int]) -> None:
        self.counters.update(counts)

    def summary(self) -> str:
        return stats_text(self.counters, time.monotonic() - self.started)


@dataclass(frozen=True, slots=True)
class AnswerInfo:
    """How to read a kept answer: who wrote it and how it was framed, and for whom."""

    upstream: str
    upstream_framing: Framing
    client: str
    client_framing: Framing
    stream: bool
    cut: bool = False
    """Only the first bytes of the upstream's stream were kept."""


@dataclass(frozen=True, slots=True)
class Original:
    """What a body was before the bridge rewrote it, and what was done."""

    body: bytes
    summary: str
    facts: tuple[tuple[str, str], ...] = ()
    """Route, dialects, stream or whole … as ``(name, value)``."""
    decisions: tuple[str, ...] = ()
    answer: AnswerInfo | None = None
    """For a response: how to read its body and the client's."""
    attempts: tuple[tuple[str, bytes], ...] = ()
    """For a request: what each later attempt sent the upstream (a staged retry, a retry for
    a required tool call), as ``(what it was, the body sent)``, in order."""
    secrets: Secrets = field(default_factory=Secrets, repr=False)
    """The flow's credential values: the view redacts them from all it shows (this body and
    the flow's own) when it renders."""

    @property
    def size(self) -> int:
        return len(self.body) + sum(len(body) for _, body in self.attempts)


class KeptBytes:
    """The first ``limit`` bytes of a body, and whether that is all of it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.whole = True

    def extend(self, chunks: Sequence[bytes]) -> None:
        for chunk in chunks:
            room = self.limit - len(self.data)
            if len(chunk) > room:
                self.whole = False
                self.data += chunk[:room]
            else:
                self.data += chunk


class OriginalStore:
    """The last rewritten bodies by (flow id, "request" | "response"); oldest dropped first."""

    def __init__(self, max_items: int = 200, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str], Original] = OrderedDict()
        self._bytes = 0

    def put(self, flow_id: str, part: str, original: Original) -> None:
        size = original.size
        self._drop((flow_id, part))  # a new version too big to keep leaves no stale one
        if size > self.max_bytes:
            return
        self._items[(flow_id, part)] = original
        self._bytes += size
        while len(self._items) > self.max_items or self._bytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self._bytes -= old.size

    def add_attempt(self, flow_id: str, label: str, body: bytes) -> None:
        """One more attempt at a kept request (nothing when its original is gone)."""
        found = self._items.get((flow_id, "request"))
        if found is not None:
            self.put(flow_id, "request", replace(found, attempts=(*found.attempts, (label, body))))

    def get(self, flow_id: str, part: str) -> Original | None:
        return self._items.get((flow_id, part))

    def _drop(self, key: tuple[str, str]) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old.size

    def __len__(self) -> int:
        return len(self._items)
