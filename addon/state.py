"""Process-wide state of the bridge, owned by the addon instance.

Contract: plain, bounded data; no mitmproxy. Per-flow stream state lives in
the flow's ``StreamProcessor``, not here. This holds counters (what the bridge
did since start, logged at shutdown) and the originals of rewritten bodies for
mitmweb's "cursor-bridge" content view, bounded in count and bytes.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass


class BridgeState:
    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self.originals = OriginalStore()

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] += n

    def summary(self) -> str:
        return ", ".join(f"{n} {what}" for what, n in sorted(self.counters.items()))


@dataclass(frozen=True, slots=True)
class Original:
    """What a body was before the bridge rewrote it, and what was done."""

    body: bytes
    summary: str


class OriginalStore:
    """The last rewritten bodies by (flow id, "request" | "response"); oldest dropped first."""

    def __init__(self, max_items: int = 200, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str], Original] = OrderedDict()
        self._bytes = 0

    def put(self, flow_id: str, part: str, body: bytes, summary: str) -> None:
        if len(body) > self.max_bytes:
            return
        self._drop((flow_id, part))
        self._items[(flow_id, part)] = Original(body, summary)
        self._bytes += len(body)
        while len(self._items) > self.max_items or self._bytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self._bytes -= len(old.body)

    def get(self, flow_id: str, part: str) -> Original | None:
        return self._items.get((flow_id, part))

    def _drop(self, key: tuple[str, str]) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= len(old.body)

    def __len__(self) -> int:
        return len(self._items)
