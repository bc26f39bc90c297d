"""The reasoning store's shared vocabulary: its error, its notices, its bounds and the
``Backend`` interface that memory, SQLite and Redis implement (``addon.stores.reasoning``,
``addon.stores.redis_backend``). Stdlib only; here so that the backends need not import the store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

CONNECT_TIMEOUT = 0.5
"""Seconds a connection to Redis may take (``addon.stores.redis_backend``); also how long a
request waits for its prefetch at most (``addon.shell.store_worker``)."""
RETRY_FIRST = 1.0
"""Seconds before a lost Redis is probed first (then doubling); also how long no request
waits for a store that did not answer in time (the store thread's circuit)."""
SECRET_BYTES = 32
"""Length of the store's secret (``ReasoningStore.secret``)."""
RATIOS_KEPT = 16
"""The calibrated estimate's ratios kept per route and model (``addon.plan.calibration``), in
memory and in a store: the last ones."""
RATIOS_TTL = 30 * 24 * 3600.0
"""Seconds a route and model's ratios live in Redis after its last lesson."""


class StoreError(Exception):
    """The store could not be opened, read or written (SQLite, Redis); the message says why."""


@dataclass(frozen=True, slots=True)
class Notice:
    """What a shared store has to say that is no call's error: Redis lost (``warning``), back."""

    text: str
    warning: bool


@dataclass(frozen=True, slots=True)
class Bounds:
    """What a store keeps at most (docs/reasoning.md#the-store)."""

    max_entries: int
    max_bytes: int
    ttl: float
    """Seconds a value lives without use; 0: no expiry."""


@dataclass(frozen=True, slots=True)
class Put:
    """A reasoning value to write under its full store key (``ReasoningStore.encode``);
    ``text`` None: the key's value is deleted (a value past the store's bounds)."""

    key: str
    text: str | None
    size: int


class Backend(Protocol):
    """Where a ``ReasoningStore`` keeps its values (memory, SQLite, Redis), called under the
    store's lock; ``now`` is the store's clock. ``put`` keeps a value and then enforces the
    bounds, as ``evict`` does alone; ``put_many`` many puts (and deletes) at once, in one
    transaction (SQLite) or one pipeline (Redis), then the bounds."""

    def get(self, key: str, now: float, ttl: float) -> str | None: ...
    def get_many(self, keys: list[str], now: float, ttl: float) -> list[str | None]: ...
    def put(self, key: str, text: str, size: int, now: float, bounds: Bounds) -> None: ...
    def put_many(self, items: list[Put], now: float, bounds: Bounds) -> None: ...
    def delete(self, key: str) -> None: ...
    def evict(self, now: float, bounds: Bounds) -> None: ...
    def count(self) -> int: ...
    def size(self) -> int: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...
    def secret(self) -> bytes: ...


def display_url(url: str) -> str:
    """A store URL to show: its password (and query, which may hold one) left out."""
    try:
        parts = urlsplit(url)
        where = parts.netloc.rpartition("@")[2]
        user = parts.username
        password = parts.password
    except ValueError:
        return f"{url.partition(':')[0][:20]}://?"
    if password is not None:
        where = f"{user or ''}:***@{where}"
    elif user:
        where = f"{user}@{where}"
    return f"{parts.scheme}://{where}{parts.path}"
