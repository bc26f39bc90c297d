"""Process-wide state of the bridge, owned by the addon instance.

Contract: plain, bounded data; no mitmproxy. Per-flow state lives in the
flow's ``StreamProcessor``, not here. Today this holds counters (what the
bridge did since start, logged at shutdown); the thought-signature store joins
it when signature repair lands.
"""

from __future__ import annotations

from collections import Counter


class BridgeState:
    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] += n

    def summary(self) -> str:
        return ", ".join(f"{n} {what}" for what, n in sorted(self.counters.items()))
