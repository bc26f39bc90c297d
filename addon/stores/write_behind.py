"""What the stream callable and the hooks learn for a store that does I/O (SQLite, Redis), held
until the store thread writes it (``addon.shell.store_worker``): reasoning values to keep, the
usage ledger's rows, the fallbacks' cooldowns, the calibrated estimate's lessons. The hooks only add here (a lock and a dict);
the store thread takes it all at once (``take``): as soon as it is free when a reasoning value
or a cooldown waits (another worker may need it for the conversation's next turn) or a settle
frees a parallel slot (``urgent``), else at most a second after the first row, settle or
lesson waits, and at the end.

Contract: stdlib and the ledger's value types only; thread-safe (the event loop adds, the store
thread takes); bounded: ``MAX_PUTS`` values and ``MAX_PUT_BYTES`` bytes (past them the oldest
value waiting is dropped, and counted), the ledger's rows as ``MemoryCounters`` bounds them,
one cooldown per name, one settle per flow under way (never dropped: money), ``RATIOS_KEPT``
lessons of ``MAX_RATIO_KEYS`` routes and models. What a process killed before a write loses: docs/reasoning.md#the-store-thread."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from addon.stores.base import RATIOS_KEPT, Put
from addon.stores.ledger import LedgerKey, MemoryCounters, Rows, Tokens

if TYPE_CHECKING:
    from addon.plan.limits import Settle

MAX_PUTS = 20_000
"""Reasoning values waiting at most (the store thread writes them at most a second later)."""
MAX_PUT_BYTES = 32 * 1024 * 1024
"""Their bytes at most."""
MAX_RATIO_KEYS = 1024
"""Routes and models whose calibration ratios wait at most (the oldest dropped past it)."""
FLUSH_EVERY = 1.0
"""Seconds between two writes of what waits, at most once each (``addon.shell.store_worker``)."""


class Settles(Protocol):
    """Where a settle goes (``addon.stores.limits``' ``RedisLimits``): each in order, in one
    round trip; the spend after each (settled plus held, nano-dollars), None: not known."""

    def settle_many(self, done: list[Settle]) -> list[int | None]: ...


type Settling = tuple[Settles, Settle, Callable[[int | None], None] | None]
"""A settle waiting: its store, the step, and who to tell once written (the spend after it;
None: not known, or not written)."""


@dataclass(slots=True)
class Batch:
    """What ``take`` handed over: the store thread writes each kind in one pipeline."""

    puts: list[Put] = field(default_factory=list)
    rows: Rows = field(default_factory=dict)
    cools: dict[str, float | None] = field(default_factory=dict)
    """Cooldown name → the wall-clock second it ends (``time.time``), None: cleared."""
    settles: list[Settling] = field(default_factory=list)
    """The client limits' settles, in the order the flows ended."""
    ratios: dict[str, list[float]] = field(default_factory=dict)
    """The calibrated estimate's lessons: its store key → ratios, oldest first."""

    def __bool__(self) -> bool:
        return bool(self.puts or self.rows or self.cools or self.settles or self.ratios)


class WriteQueue:
    """The writes waiting for the store thread (see the module docstring)."""

    def __init__(self, max_puts: int = MAX_PUTS, max_bytes: int = MAX_PUT_BYTES) -> None:
        self._lock = threading.Lock()
        self._puts: OrderedDict[str, Put] = OrderedDict()
        self._bytes = 0
        self._rows = MemoryCounters()
        self._cools: dict[str, float | None] = {}
        self._settles: list[Settling] = []
        self._ratios: OrderedDict[str, list[float]] = OrderedDict()
        self._max_puts, self._max_bytes = max_puts, max_bytes
        self.dropped = 0
        """Values dropped unwritten because too many waited (the store thread too slow)."""

    def put(self, item: Put) -> bool:
        """Keep ``item`` for the next write (a newer value of a key replaces the older one).
        Returns whether no value nor cooldown waited before (the store thread is to be woken
        to write at once: ``StoreWorker.wake_now``)."""
        with self._lock:
            was_empty = not (self._puts or self._cools)
            old = self._puts.pop(item.key, None)
            if old is not None:
                self._bytes -= old.size
            self._puts[item.key] = item
            self._bytes += item.size
            while len(self._puts) > self._max_puts or (
                self._bytes > self._max_bytes and len(self._puts) > 1
            ):
                _, gone = self._puts.popitem(last=False)
                self._bytes -= gone.size
                self.dropped += 1
            return was_empty

    def count(self, key: LedgerKey, tokens: Tokens) -> bool:
        """Add a flow's usage to the rows waiting (added up by row). Returns whether nothing
        waited before (the store thread may sleep: ``StoreWorker.wake``)."""
        with self._lock:
            was_empty = self._empty()
            self._rows.add(key, tokens)
            return was_empty

    def cool(self, name: str, until: float | None) -> bool:
        """A cooldown to share: ending at ``until`` (``time.time``), or cleared (None). As
        ``put`` returns."""
        with self._lock:
            was_empty = not (self._puts or self._cools)
            self._cools[name] = until
            return was_empty

    def settle(
        self, store: Settles, done: Settle, after: Callable[[int | None], None] | None = None
    ) -> bool:
        """A flow's reservation to settle (``addon.shell.client_limits``); ``after``: told
        once written (``Settling``). As ``count`` returns."""
        with self._lock:
            was_empty = self._empty()
            self._settles.append((store, done, after))
            return was_empty

    def learn(self, key: str, ratio: float) -> bool:
        """A calibration lesson to share (``addon.plan.calibration``; ``key``: its
        ``store_key``). As ``count`` returns."""
        with self._lock:
            was_empty = self._empty()
            kept = self._ratios.pop(key, [])
            self._ratios[key] = [*kept, ratio][-RATIOS_KEPT:]
            while len(self._ratios) > MAX_RATIO_KEYS:
                self._ratios.popitem(last=False)
            return was_empty

    def pending_ratios(self, key: str) -> list[float]:
        """The lessons of ``key`` waiting to be written (newer than the store's), oldest first."""
        with self._lock:
            return list(self._ratios.get(key, ()))

    def pending(self, key: str) -> Put | None:
        """The value waiting under a full store key, if one does (newer than the store's)."""
        with self._lock:
            return self._puts.get(key)

    def cooling_pending(self, name: str) -> bool:
        """Whether a cooldown of ``name`` waits to be written (this process's is the newer)."""
        with self._lock:
            return name in self._cools

    def take(self) -> Batch:
        """Everything waiting, and none kept."""
        with self._lock:
            batch = Batch(
                list(self._puts.values()),
                self._rows.take(),
                self._cools,
                self._settles,
                dict(self._ratios),
            )
            self._puts, self._bytes, self._cools, self._settles = OrderedDict(), 0, {}, []
            self._ratios = OrderedDict()
            return batch

    def give_back(self, batch: Batch) -> None:
        """A batch the store could not write kept for the next try (newer values win)."""
        with self._lock:
            for item in batch.puts:
                if item.key not in self._puts:
                    self._puts[item.key] = item
                    self._puts.move_to_end(item.key, last=False)
                    self._bytes += item.size
            for key, tokens in batch.rows.items():
                self._rows.add(key, tokens)
            for name, until in batch.cools.items():
                self._cools.setdefault(name, until)

    def __len__(self) -> int:
        with self._lock:
            waiting = len(self._puts) + len(self._rows) + len(self._cools) + len(self._settles)
            return waiting + len(self._ratios)

    def _empty(self) -> bool:
        return not (self._puts or len(self._rows) or self._cools or self._settles or self._ratios)
