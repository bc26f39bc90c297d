"""The reasoning store: what clients drop and upstreams need back, kept process-wide.

Contract: plain values, stdlib only (``sqlite3``, ``threading``; ``redis`` for a Redis store,
``addon.stores.redis_backend``); no mitmproxy, no logging (the shell logs what ``StoreError`` says, and
the ``Notice`` a shared backend sends when Redis is lost or back). In memory, SQLite (WAL) or
Redis / Valkey (shared by several workers). In full: docs/reasoning.md#how-the-store-works."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from addon.config.options import StoreLocation
from addon.model import JSON
from addon.stores.base import SECRET_BYTES, Backend, Bounds, Notice, Put, StoreError
from addon.stores.files import CANNOT_PRIVATE, private_file, store_location

__all__ = [
    "CANNOT_PRIVATE",
    "Backend",
    "Bounds",
    "Notice",
    "ReasoningStore",
    "Scope",
    "ScopedStore",
    "ScopedView",
    "StoreError",
    "StoreView",
    "memory_backend",
    "private_file",
    "store_location",
]

if TYPE_CHECKING:
    from addon.stores.redis_backend import FetchAsk, First, Read, RedisBackend
    from addon.stores.sqlite_backend import SqliteBackend

DEFAULT_SIZE = 20_000
"""``bridge_store_size``: entries kept by default."""
DEFAULT_TTL = 24 * 3600.0
"""``bridge_store_ttl``: seconds a value lives without use, by default."""
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Bytes kept at most by default."""
ENTRY_OVERHEAD = 64
"""Bytes counted per entry beyond its key and value (bookkeeping), so that many tiny values
cannot slip under the bytes bound."""


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a value was captured: only requests to the same upstream and model get it back (a
    value is only returned for the scope it was put under)."""

    upstream: str
    """The upstream's identity, e.g. ``route@host`` (``Scope.of``)."""
    model: str
    """The model name as sent upstream."""

    @classmethod
    def of(cls, route: str, host: str, model: str) -> Scope:
        """The scope of a flow: its route's name, the upstream host (lower-cased) and the model."""
        return cls(f"{route}@{host.lower()}", model)


class ScopedView(Protocol):
    """What restore reads and capture writes for one flow's scope: ``ScopedStore`` (the store
    itself, in memory) or a prefetched view (``addon.stores.prefetch``: a store that does I/O)."""

    def get(self, kind: str, key: str) -> JSON | None: ...
    def get_many(self, keys: Sequence[tuple[str, str]]) -> list[JSON | None]: ...
    def put(self, kind: str, key: str, value: JSON) -> None: ...


class StoreView(Protocol):
    """What a flow's plan holds of the store (``FlowPlan.store``): its secret and its scoped
    views. ``ReasoningStore`` in memory; for SQLite and Redis a view that reads what the request
    hook prefetched and queues what it writes, so the plan makes no store call on the event
    loop (``addon.stores.prefetch``, docs/reasoning.md#the-store-thread)."""

    @property
    def secret(self) -> bytes: ...
    def scoped(self, scope: Scope) -> ScopedView: ...


@dataclass(slots=True)
class _Entry:
    text: str
    size: int
    used: float


class _Memory:
    """An ``OrderedDict`` in least-recently-used order: the front is the oldest use, so expired
    entries are at the front too (the TTL slides with use)."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self._secret = secrets.token_bytes(SECRET_BYTES)

    def secret(self) -> bytes:
        return self._secret

    def get(self, key: str, now: float, ttl: float) -> str | None:
        entry = self._items.get(key)
        if entry is None:
            return None
        if ttl > 0 and now - entry.used >= ttl:
            self._drop(key)
            return None
        entry.used = now
        self._items.move_to_end(key)
        return entry.text

    def get_many(self, keys: list[str], now: float, ttl: float) -> list[str | None]:
        return [self.get(k, now, ttl) for k in keys]

    def put(self, key: str, text: str, size: int, now: float, bounds: Bounds) -> None:
        self._drop(key)
        self._items[key] = _Entry(text, size, now)
        self._bytes += size
        self.evict(now, bounds)

    def put_many(self, items: list[Put], now: float, bounds: Bounds) -> None:
        for item in items:
            if item.text is None:
                self._drop(item.key)
            else:
                self._drop(item.key)
                self._items[item.key] = _Entry(item.text, item.size, now)
                self._bytes += item.size
        self.evict(now, bounds)

    def evict(self, now: float, bounds: Bounds) -> None:
        items, ttl = self._items, bounds.ttl
        while items:
            key, entry = next(iter(items.items()))
            expired = ttl > 0 and now - entry.used >= ttl
            if not (expired or len(items) > bounds.max_entries or self._bytes > bounds.max_bytes):
                break
            self._drop(key)

    def delete(self, key: str) -> None:
        self._drop(key)

    def _drop(self, key: str) -> None:
        entry = self._items.pop(key, None)
        if entry is not None:
            self._bytes -= entry.size

    def count(self) -> int:
        return len(self._items)

    def size(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._items.clear()
        self._bytes = 0

    def close(self) -> None:
        pass


def memory_backend() -> Backend:
    """A backend in this process's memory (what a Redis backend keeps while Redis is away)."""
    return _Memory()


class ReasoningStore:
    """Opaque JSON objects under ``(scope, kind, key)``, bounded by ``max_entries`` (LRU),
    ``max_bytes`` and a sliding ``ttl``; thread-safe. One for the life of the addon, shared by
    every flow; ``restore`` and ``capture`` see one scope of it (``ScopedStore``)."""

    def __init__(
        self,
        path: str = "",
        *,
        max_entries: int = DEFAULT_SIZE,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.time,
        notify: Callable[[Notice], None] | None = None,
    ) -> None:
        """``path``: a ``bridge_store`` value (``parse_store_url``): empty (memory), a file
        (SQLite, made 0600) or a Redis URL. ``notify`` hears what a Redis store has to say
        (Redis lost, back) and an SQLite file others could read made 0600. Raises
        ``ValueError`` for a negative bound and ``StoreError`` for a value no store reads, a
        file SQLite cannot open (a missing directory, not a database), a URL redis-py cannot
        read, or no ``redis`` package. A Redis that does not answer is no error: the store
        starts in memory, says so through ``notify`` and shares again when Redis answers."""
        if max_entries < 0 or max_bytes < 0 or ttl < 0:
            raise ValueError("the reasoning store's size, bytes and ttl must not be negative")
        self.path = path
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl = float(ttl)
        self._clock = clock
        self._last = float("-inf")
        self._lock = threading.Lock()
        self._closed = False
        self._db_errors: tuple[type[Exception], ...] = ()
        """What the backend raises when its database fails (SQLite's, Redis's; none in memory)."""
        self._redis: RedisBackend | None = None
        self._sqlite: SqliteBackend | None = None  # the calibration's ratios have a table there
        location = store_location(path)
        self.where = f"SQLite file {path}" if path else "memory"
        """Where the values are, for a log line (a Redis URL without its password)."""
        tell = notify or (lambda _: None)
        backend: Backend
        if location.kind == "redis":
            self._redis, self._db_errors = _open_redis(location, tell)
            backend = self._redis
            self.where = f"Redis {self._redis.where}"
        elif location.kind == "sqlite":
            self._sqlite, self._db_errors = _open_sqlite(location, path, tell)
            backend = self._sqlite
        else:
            backend = _Memory()
        self._backend = backend
        with self._lock:
            self._guard(lambda: backend.evict(clock(), self._bounds))

    def _open_redis(self, at: StoreLocation, notify: Callable[[Notice], None]) -> RedisBackend:
        try:
            import redis

            from addon.stores.redis_backend import RedisBackend
        except ImportError:
            raise StoreError(
                "a Redis store needs the redis package: pip install 'cursor-bridge[redis]'"
            ) from None
        self._db_errors = (redis.RedisError,)
        try:
            return RedisBackend(at.target, _Memory(), notify, where=at.shown)
        except (ValueError, TypeError) as e:  # TypeError: a query parameter redis-py lacks
            raise StoreError(f"{at.shown} is not a Redis URL redis-py reads: {e}") from e
        except redis.RedisError as e:  # it answered, but not as Redis does
            raise StoreError(f"cannot open the reasoning store {at.shown}: {e}") from e

    @property
    def secret(self) -> bytes:
        """Random bytes that live as long as the store (in memory: the process; SQLite: the
        file; Redis: the server, so every worker on it shares them), never sent anywhere: what
        makes the values the bridge derives per conversation (the ``invoke`` trigger, a
        ``prompt_cache_key``) the same on every turn yet unguessable. Raises ``StoreError``."""
        with self._lock:
            self._check_open()
            return self._guard(self._backend.secret)

    @property
    def redis(self) -> RedisBackend | None:
        """The Redis backend (the usage ledger shares its connection); None: not Redis."""
        return self._redis

    @property
    def _bounds(self) -> Bounds:
        return Bounds(self.max_entries, self.max_bytes, self.ttl)

    # ------------------------------------------------------------------ values

    def get(self, scope: Scope, kind: str, key: str) -> JSON | None:
        """The value put under exactly this scope, kind and key, or None (never stored, expired,
        evicted). A hit counts as a use (LRU order, TTL). Raises ``StoreError``."""
        k = _key(scope, kind, key)
        with self._lock:
            self._check_open()
            now = self._now()
            text = self._guard(lambda: self._backend.get(k, now, self.ttl))
        return _load(text)

    def get_many(self, scope: Scope, keys: Sequence[tuple[str, str]]) -> list[JSON | None]:
        """``get`` of each ``(kind, key)``, in order, in one call to the backend (one round
        trip to Redis). Raises ``StoreError``."""
        ks = [_key(scope, kind, key) for kind, key in keys]
        with self._lock:
            self._check_open()
            now = self._now()
            texts = self._guard(lambda: self._backend.get_many(ks, now, self.ttl))
        return [_load(text) for text in texts]

    def put(self, scope: Scope, kind: str, key: str, value: JSON) -> None:
        """Keep ``value`` (a JSON object), replacing what was under that key; then enforce the
        bounds. Raises ``StoreError``, and ``TypeError`` / ``ValueError`` for a value that is
        not strict JSON."""
        k = _key(scope, kind, key)
        text, size = _dump(value)
        size += len(k) + ENTRY_OVERHEAD
        with self._lock:
            self._check_open()
            backend = self._backend
            if self.max_entries == 0 or size > self.max_bytes:
                # Not kept: nor is what was under that key (it no longer says what the
                # upstream sent last).
                self._guard(lambda: backend.delete(k))
                return
            now = self._now()

            bounds = self._bounds
            self._guard(lambda: backend.put(k, text, size, now, bounds))

    # ------------------------------------------------------------------ the store thread's

    def encode(self, scope: Scope, kind: str, key: str, value: JSON) -> Put:
        """What ``put`` would write, as a value for ``put_many`` (a ``Put`` whose ``text`` is
        None: the key's value is deleted, as ``put`` does for a value past the bounds). Plain
        values, no backend call: a hook may make it. Raises as ``put`` does for bad JSON."""
        k = _key(scope, kind, key)
        text, size = _dump(value)
        size += len(k) + ENTRY_OVERHEAD
        if self.max_entries == 0 or size > self.max_bytes:
            return Put(k, None, size)
        return Put(k, text, size)

    def put_many(self, items: list[Put]) -> None:
        """Every ``encode``d value in one call to the backend (one SQLite transaction, one
        Redis pipeline), then the bounds. Raises ``StoreError``."""
        if not items:
            return
        with self._lock:
            self._check_open()
            now, bounds, backend = self._now(), self._bounds, self._backend
            self._guard(lambda: backend.put_many(items, now, bounds))

    def fetch(
        self, keys: list[str], names: list[str]
    ) -> tuple[list[str | None], list[float | None]]:
        """A request's prefetch (``addon.shell.store_worker``): the values under full store
        keys (``encode``'s) as stored text, and the seconds each cooldown ``names`` has left —
        Redis: in one pipelined round trip; None for a cooldown this store does not keep (not
        Redis, or Redis away: this process's table says). Raises ``StoreError``."""
        values, lefts, _, _ = self.fetch_with(keys, names, None)
        return values, lefts

    def fetch_with(
        self, keys: list[str], names: list[str], first: First | None, ratios: Sequence[str] = ()
    ) -> tuple[list[str | None], list[float | None], Any, dict[str, list[float]]]:
        """``fetch``, with ``first`` (a script call: the client limits' reserve) sent first
        in the same Redis pipeline; its answer third (None: not sent: not Redis, or Redis
        away; an exception: its error); fourth the calibrated estimate's ratios under each of
        ``ratios`` (``store_key``s; a key missing: not read: Redis away, a store in memory)."""
        (read,) = self.fetch_many([(keys, names, first, ratios)])
        if isinstance(read, StoreError):
            raise read
        return read

    def fetch_many(self, asks: Sequence[FetchAsk]) -> list[Read | StoreError]:
        """Several requests' ``fetch_with`` at once: on Redis in one pipeline (one round trip
        for the requests that waited together on the store thread); an ask's own error its
        ``StoreError``, a failed call every ask's."""
        with self._lock:
            try:
                self._check_open()
                now = self._now()
                if (shared := self._redis) is None:
                    return [self._read_here(now, k, n, r) for k, n, _, r in asks]
                reads = self._guard(lambda: shared.fetch_many(asks, now, self.ttl))
            except StoreError as e:
                return [e] * len(asks)
        return [
            StoreError(f"reasoning store ({self.where}): {r}") if isinstance(r, Exception) else r
            for r in reads
        ]

    def _read_here(
        self, now: float, keys: list[str], names: list[str], ratios: Sequence[str]
    ) -> Read | StoreError:
        """``fetch_with`` of a store in memory or SQLite (no cooldowns kept, no ``first``)."""
        sqlite = self._sqlite
        try:
            values = self._guard(lambda: self._backend.get_many(keys, now, self.ttl))
            read = self._guard(lambda: sqlite.ratios(list(ratios))) if sqlite and ratios else {}
        except StoreError as e:
            return e
        return values, [None] * len(names), None, read

    def add_ratios(self, lessons: dict[str, list[float]]) -> None:
        """The calibrated estimate's lessons (``store_key`` → ratios, oldest first) kept (SQLite,
        Redis; in memory the process's ``Calibration`` is all). Raises ``StoreError``."""
        if not lessons:
            return
        with self._lock:
            self._check_open()
            shared = self._redis or self._sqlite
            if shared is not None:
                self._guard(lambda: shared.add_ratios(lessons))

    def scoped(self, scope: Scope) -> ScopedStore:
        """A view bound to ``scope``: what capture writes to and restore reads from."""
        return ScopedStore(self, scope)

    # ------------------------------------------------------------------ upkeep

    def __len__(self) -> int:
        with self._lock:
            return self._guard(self._backend.count)

    @property
    def bytes(self) -> int:
        """The sizes of the values kept, as the bytes bound counts them."""
        with self._lock:
            return self._guard(self._backend.size)

    def expire(self) -> None:
        """Drop what has expired now (``put`` does it anyway; for a periodic tidy-up)."""
        with self._lock:
            self._check_open()
            now = self._now()
            bounds = self._bounds
            self._guard(lambda: self._backend.evict(now, bounds))

    def rebound(self, max_entries: int, ttl: float) -> None:
        """New bounds for what is kept (options changed while running): nothing is lost but
        what the new bounds drop."""
        if max_entries < 0 or ttl < 0:
            raise ValueError("the reasoning store's size and ttl must not be negative")
        with self._lock:
            self.max_entries, self.ttl = max_entries, float(ttl)
        self.expire()

    def clear(self) -> None:
        with self._lock:
            self._check_open()
            self._guard(self._backend.clear)

    def close(self) -> None:
        """Release the file (idempotent). Later use raises ``StoreError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._backend.close()
            except self._db_errors as e:
                raise StoreError(f"cannot close the reasoning store: {e}") from e

    def describe(self) -> str:
        """One line for the log: where, how full, the bounds (a Redis URL without its password)."""
        ttl = f"{self.ttl:g} s" if self.ttl else "no expiry"
        away = ""
        if self._redis is not None and not self._redis.shared:
            away = " (unreachable: in this process's memory until it is back)"
        return (
            f"reasoning store in {self.where}{away}: {len(self)} of {self.max_entries} "
            f"entries, {self.bytes} of {self.max_bytes} bytes, ttl {ttl}"
        )

    def _now(self) -> float:
        """The clock, never going back (uses must stay in time order: the in-memory LRU
        order is also the expiry order). Under the lock."""
        now = max(self._clock(), self._last)
        self._last = now
        return now

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the reasoning store is closed")

    def _guard[T](self, op: Callable[[], T]) -> T:
        try:
            return op()
        except self._db_errors as e:
            raise StoreError(f"reasoning store ({self.where}): {e}") from e


def _open_redis(
    at: StoreLocation, notify: Callable[[Notice], None]
) -> tuple[RedisBackend, tuple[type[Exception], ...]]:
    """A Redis store's backend, and the errors that mean its database failed."""
    try:
        import redis

        from addon.stores.redis_backend import RedisBackend
    except ImportError:
        raise StoreError(
            "a Redis store needs the redis package: pip install 'cursor-bridge[redis]'"
        ) from None
    try:
        return RedisBackend(at.target, _Memory(), notify, where=at.shown), (redis.RedisError,)
    except (ValueError, TypeError) as e:  # TypeError: a query parameter redis-py lacks
        raise StoreError(f"{at.shown} is not a Redis URL redis-py reads: {e}") from e
    except redis.RedisError as e:  # it answered, but not as Redis does
        raise StoreError(f"cannot open the reasoning store {at.shown}: {e}") from e


def _open_sqlite(
    at: StoreLocation, path: str, tell: Callable[[Notice], None]
) -> tuple[SqliteBackend, tuple[type[Exception], ...]]:
    """An SQLite store's backend (its file made its owner's only), and its errors."""
    import sqlite3

    if changed := private_file(at.target):
        tell(Notice(f"reasoning store: {changed}", changed.endswith(CANNOT_PRIVATE)))
    from addon.stores.sqlite_backend import SqliteBackend

    try:
        return SqliteBackend(at.target), (sqlite3.Error,)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open the reasoning store {path!r}: {e}") from e


class ScopedStore:
    """``ReasoningStore`` bound to one scope: ``get(kind, key)`` / ``put(kind, key, value)``,
    and ``get_many`` for many keys at once. Satisfies ``addon.transforms.restore.BatchLookup``
    and ``addon.stream.capture.Sink``."""

    __slots__ = ("scope", "store")

    def __init__(self, store: ReasoningStore, scope: Scope) -> None:
        self.store = store
        self.scope = scope

    def get(self, kind: str, key: str) -> JSON | None:
        return self.store.get(self.scope, kind, key)

    def get_many(self, keys: Sequence[tuple[str, str]]) -> list[JSON | None]:
        return self.store.get_many(self.scope, keys)

    def put(self, kind: str, key: str, value: JSON) -> None:
        self.store.put(self.scope, kind, key, value)


def full_key(scope: Scope, kind: str, key: str) -> str:
    """The one string a value is stored under (``_key``), for a prefetch's keys."""
    return _key(scope, kind, key)


def load_value(text: str | None) -> JSON | None:
    """A stored value read back (``_load``): a JSON object, else nothing."""
    return _load(text)


def _key(scope: Scope, kind: str, key: str) -> str:
    """One string for scope, kind and key: a JSON array (unambiguous whatever they hold; ASCII,
    so that a lone surrogate in a model name cannot break SQLite's UTF-8)."""
    return json.dumps([scope.upstream, scope.model, kind, key], separators=(",", ":"))


def _load(text: str | None) -> JSON | None:
    """A stored value read back: a JSON object, else nothing."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _dump(value: JSON) -> tuple[str, int]:
    """``value`` as JSON text and its size in UTF-8; text with a lone surrogate (from a ``\\ud83d``
    escape in the input) cannot be UTF-8 and is kept with ASCII escapes instead."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text, len(text.encode("utf-8"))
    except UnicodeEncodeError:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
        return text, len(text)
