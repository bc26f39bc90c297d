"""What a request reads of a store that does I/O (SQLite, Redis), fetched before ``decide`` by
the async request hook in one round trip (``addon.shell.store_worker``), and what the plan and
the stream then read and write instead of the store: no store call on the event loop.

- ``restore_keys``: every key the restore may ask of a request's history (a superset: each
  assistant turn's call ids, its text, each run of assistant turns' text, each thinking text,
  the scope's latest signature), under each scope its route chain may send it with.
- ``PrefetchedStore`` (a ``StoreView``): its secret and scoped views that answer from what was
  fetched (a key not fetched: what this process still has waiting to write, else nothing) and
  queue every ``put`` (``WriteQueue``) for the store thread; the calibrated estimate's ratios
  a token count read (``calibration``).
- ``CooldownView`` (``addon.plan.fallback.Cooldowns``): the shared cooldowns as this process
  knows them — what the prefetches read from Redis, and its own, queued to be shared.

Contract: plain values, no I/O, no mitmproxy; the event loop's thread only (the metrics' scrape
thread reads a ``CooldownView`` too: a dict read). Docs: docs/reasoning.md#the-store-thread."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from addon.model import JSON, Message, Request, Text, Thinking, ToolCall
from addon.plan.calibration import Calibration, Shared
from addon.plan.fallback import MemoryCooldowns
from addon.stores.base import StoreError
from addon.stores.reasoning import ReasoningStore, Scope, full_key, load_value
from addon.stores.write_behind import WriteQueue
from addon.transforms.reasoning_record import (
    KIND_CALL,
    KIND_LATEST,
    KIND_TEXT,
    KIND_THINKING,
    text_key,
)


def restore_keys(req: Request) -> list[tuple[str, str]]:
    """Every ``(kind, key)`` ``addon.transforms.restore`` may look up for ``req``'s history,
    in order, once each (what it asks is always among them; some it will not ask)."""
    keys: dict[tuple[str, str], None] = {}
    run: list[str] = []
    for m in (*req.messages, None):
        if m is None or m.role != "assistant":
            if run:
                keys[(KIND_TEXT, text_key("".join(run)))] = None
                run = []
            continue
        visible = _visible(m)
        run.append(visible)
        for p in m.parts:
            if isinstance(p, ToolCall):
                keys[(KIND_CALL, p.id)] = None
            elif isinstance(p, Thinking) and p.text:
                keys[(KIND_THINKING, text_key(p.text))] = None
        if visible.strip():
            keys[(KIND_TEXT, text_key(visible))] = None
    if keys:
        keys[(KIND_LATEST, "")] = None
    return list(keys)


def _visible(m: Message) -> str:
    return "".join(p.text for p in m.parts if isinstance(p, Text))


def scoped_keys(scopes: Iterable[Scope], keys: Sequence[tuple[str, str]]) -> list[str]:
    """The full store keys of ``keys`` under each scope, once each."""
    out: dict[str, None] = {}
    for scope in scopes:
        for kind, key in keys:
            out[full_key(scope, kind, key)] = None
    return list(out)


@dataclass(slots=True)
class Fetched:
    """What one request's prefetch read (on the store thread)."""

    values: dict[str, str | None] = field(default_factory=dict)
    """Full store key → its stored text (None: nothing stored)."""
    lefts: dict[str, float | None] = field(default_factory=dict)
    """Cooldown name → seconds left in Redis (None: not known there)."""
    secret: bytes | None = None
    ratios: dict[str, list[float]] = field(default_factory=dict)
    """The calibration's store key → its ratios as stored (a key missing: not read)."""


class PrefetchedStore:
    """A ``StoreView`` over what a request's prefetch read: its scoped views answer from it and
    queue their writes. ``error``: why nothing could be read (the store thread did not answer
    in time): every read raises ``StoreError`` with it, which the restore notes ("reasoning
    store unavailable") as it did for a store that failed."""

    __slots__ = ("_fetched", "_queue", "_store", "_wake", "error", "secret")

    def __init__(
        self,
        store: ReasoningStore,
        fetched: Fetched,
        queue: WriteQueue,
        secret: bytes,
        wake: Callable[[], None],
        error: str | None = None,
    ) -> None:
        self._store = store
        self._fetched = fetched
        self._queue = queue
        self._wake = wake
        """Called when a write finds the queue empty (the store thread may sleep)."""
        self.secret = secret
        self.error = error

    def scoped(self, scope: Scope) -> PrefetchedScope:
        return PrefetchedScope(self, scope)

    def read(self, key: str) -> JSON | None:
        if self.error is not None:
            raise StoreError(self.error)
        waiting = self._queue.pending(key)  # written by this process since: the newer
        if waiting is not None:
            return load_value(waiting.text)
        return load_value(self._fetched.values.get(key))

    def calibration(self, local: Calibration) -> Shared:
        """What a token count is scaled by: the store's ratios as read, this process's not yet
        written after them; ``local`` (this process's) where nothing was read."""
        read = self._fetched.ratios if self.error is None else {}
        return Shared(local, read, self._queue.pending_ratios)

    def write(self, scope: Scope, kind: str, key: str, value: JSON) -> None:
        if self._queue.put(self._store.encode(scope, kind, key, value)):
            self._wake()


class PrefetchedScope:
    """``PrefetchedStore`` bound to one scope: a ``ScopedView`` (restore reads, capture writes)."""

    __slots__ = ("_of", "scope")

    def __init__(self, of: PrefetchedStore, scope: Scope) -> None:
        self._of = of
        self.scope = scope

    def get(self, kind: str, key: str) -> JSON | None:
        return self._of.read(full_key(self.scope, kind, key))

    def get_many(self, keys: Sequence[tuple[str, str]]) -> list[JSON | None]:
        return [self.get(kind, key) for kind, key in keys]

    def put(self, kind: str, key: str, value: JSON) -> None:
        self._of.write(self.scope, kind, key, value)


class CooldownView(MemoryCooldowns):
    """The cooldowns every worker on one Redis shares, as this process knows them: what its
    requests' prefetches read (``learn``), and its own (``cool``, ``clear``) queued for the
    store thread to share. Satisfies ``addon.plan.fallback.Cooldowns``; no call reaches Redis.
    While Redis is away, its own are all it knows (each worker its own table, as before)."""

    def __init__(
        self,
        queue: WriteQueue,
        wake: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock)
        self._queue = queue
        self._wake = wake

    def cool(self, name: str, seconds: float) -> None:
        """Skip ``name`` for ``seconds`` from now (a later end already known is kept)."""
        until = self._cool_until(name, seconds)
        if until is not None and self._queue.cool(name, until):
            self._wake()

    def clear(self, name: str) -> None:
        """``name`` is no longer skipped, by any worker (once the store thread shares it)."""
        super().clear(name)
        if self._queue.cool(name, None):
            self._wake()

    def learn(self, lefts: dict[str, float | None]) -> None:
        """What a prefetch read from Redis: seconds left per name (0: none). A name this
        process changed since, not yet written, keeps this process's; None: unknown."""
        for name, left in lefts.items():
            if left is None or self._queue.cooling_pending(name):
                continue
            self._learn_left(name, left)
