"""The reasoning store's shared backend: Redis (or Valkey), for several workers on one store.

Contract: loaded only for a Redis ``bridge_store`` (``redis://``, ``rediss://``, ``valkey://``,
``unix://``: ``addon.config.options.parse_store_url``; the ``redis`` package is an optional extra);
no mitmproxy, no logging — what the shell must say (Redis lost,
Redis back) goes to the ``notify`` callback, on the thread of the store call that found it.
Not for Redis Cluster (the scripts name keys they build). Layout: docs/reasoning.md."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from addon.stores.base import (
    CONNECT_TIMEOUT,
    RATIOS_KEPT,
    RATIOS_TTL,
    RETRY_FIRST,
    Backend,
    Bounds,
    Notice,
    Put,
    display_url,
)
from addon.stores.redis_scripts import PREFIX, SCRIPTS
from addon.stores.redis_tls import TLSConnection

__all__ = ["PREFIX", "FetchAsk", "First", "Read", "RedisBackend"]
TIMEOUT = 0.25
"""Seconds a command waits for Redis's answer; ``CONNECT_TIMEOUT`` for a connection. A call
that runs out of either counts as Redis lost (``?socket_timeout=`` / ``?socket_connect_timeout=``
in the URL override them). Every call runs on the store thread (``addon.shell.store_worker``),
never on the event loop; short all the same: a request waits for its prefetch, and a Redis on the
same host or LAN answers in well under a millisecond (docs/speed.md)."""
RETRY_MOST = 30.0
"""Seconds between probes of a lost Redis: ``RETRY_FIRST`` first, doubling up to this."""
SECRET_RECHECK = 10.0
"""Seconds the secret read from Redis is used before it is asserted again (``SET NX`` with
it, then read): a Redis restarted empty gets back the secret the workers use, not a new one."""
EVICT_BATCH = 512
"""Index entries older than the TTL dropped per call at most (the rest on later calls)."""

type First = tuple[Script, list[str], list[object]]
"""A script call, keys, args sent first in a prefetch's pipeline (``RedisLimits.reserve_step``)."""
type Read = tuple[list[str | None], list[float | None], Any, dict[str, list[float]]]
"""What a prefetch read (``RedisBackend.fetch``)."""
type FetchAsk = tuple[list[str], list[str], First | None, Sequence[str]]
"""One request's prefetch: full store keys, cooldown names, ``first``, the ratios' keys."""

_LOST = (RedisConnectionError, RedisTimeoutError)
"""Errors that mean Redis is away (refused, reset, timed out, still loading, bad password);
any other ``RedisError`` is one command's failure: ``StoreError``."""

_LRU, _SIZES, _BYTES, _SECRET = (PREFIX + k for k in ("lru", "sizes", "bytes", "secret"))


class RedisBackend:
    """A ``Backend`` on Redis, with ``local`` (this process's memory) while Redis is away.

    Calls block, on the store thread (``addon.shell.store_worker``; never the event loop): one
    round trip each, short timeouts (``TIMEOUT``), and while Redis is away every call goes to
    ``local`` without trying the network (a circuit); a background thread probes with backoff
    and sharing resumes at the next call after it answers."""

    def __init__(
        self,
        url: str,
        local: Backend,
        notify: Callable[[Notice], None],
        *,
        retry: tuple[float, float] | None = None,
        where: str | None = None,
    ) -> None:
        """``url``: one redis-py reads (``redis://``, ``rediss://``, ``unix://``; the config
        layer's ``parse_store_url`` makes it); ``where``: the store as the user wrote it, for a
        line (``display_url(url)`` by default). Raises ``ValueError`` for a URL redis-py
        cannot read. Redis unreachable is no error: the backend starts on ``local``, says so
        once, and probes (``retry``: first and most seconds between probes; ``RETRY_FIRST``,
        ``RETRY_MOST`` by default). A ``rediss://`` whose TLS handshake fails says so."""
        self.where = where or display_url(url)
        self._password = urlsplit(url).password or ""
        tls = {"connection_class": TLSConnection} if url.lower().startswith("rediss:") else {}
        self._redis: redis.Redis = redis.Redis.from_url(
            url,
            **tls,
            socket_timeout=TIMEOUT,
            socket_connect_timeout=CONNECT_TIMEOUT,
            # One fresh try for a pooled connection Redis closed (a restart); a timeout is not
            # tried again: it would hold the event loop twice as long.
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
            protocol=2,
            max_connections=64,
        )
        self._local = local
        self._notify = notify
        self._retry = retry or (RETRY_FIRST, RETRY_MOST)
        self._scripts = {name: self._redis.register_script(text) for name, text in SCRIPTS.items()}
        self._pipes = _Pipelines(self._redis, self._scripts)
        self._state = threading.Lock()
        self._up = True
        self._back = threading.Event()
        """Set by the probe thread when Redis answers again."""
        self._closing = threading.Event()
        self._probe: threading.Thread | None = None
        self._secret: bytes | None = None
        self._secret_checked = -math.inf
        try:
            self._redis.ping()
        except _LOST as e:
            self._lose(e, "unreachable")

    @property
    def shared(self) -> bool:
        """Whether calls go to Redis now (False: to this process's memory until it is back)."""
        return self._up

    # ------------------------------------------------------------------ values

    def get(self, key: str, now: float, ttl: float) -> str | None:
        def shared() -> str | None:
            got = self._scripts["get"](keys=[_value(key), _LRU], args=[key, now, _ms(ttl)])
            if got is None:
                # Kept here while Redis was away: only this worker knows it.
                return self._local.get(key, now, ttl) if self._local.count() else None
            return bytes(got).decode("utf-8")

        return self._call(shared, lambda: self._local.get(key, now, ttl))

    def get_many(self, keys: list[str], now: float, ttl: float) -> list[str | None]:
        """One command, one round trip, whatever the number of keys."""

        def shared() -> list[str | None]:
            if not keys:
                return []
            got = self._scripts["get_many"](
                keys=[*map(_value, keys), _LRU], args=[now, _ms(ttl), *keys]
            )
            kept = self._local.count()
            return [
                bytes(value).decode("utf-8")
                if value is not None
                else (self._local.get(key, now, ttl) if kept else None)
                for key, value in zip(keys, got, strict=True)
            ]

        return self._call(shared, lambda: self._local.get_many(keys, now, ttl))

    def put(self, key: str, text: str, size: int, now: float, bounds: Bounds) -> None:
        def shared() -> None:
            args = [key, text, size, now, _ms(bounds.ttl), *_evict_args(now, bounds)]
            self._scripts["put"](keys=[_LRU, _SIZES, _BYTES, _value(key)], args=args)
            if self._local.count():
                self._local.delete(key)  # Redis's is the newer one now

        self._call(shared, lambda: self._local.put(key, text, size, now, bounds))

    def put_many(self, items: list[Put], now: float, bounds: Bounds) -> None:
        """Every value (or delete) in one pipeline: one round trip."""

        def shared() -> None:
            self._pipes.put_many(items, now, bounds)
            if self._local.count():
                for item in items:
                    self._local.delete(item.key)  # Redis's are the newer ones now

        self._call(shared, lambda: self._local.put_many(items, now, bounds))

    def fetch(self, keys: list[str], now: float, ttl: float, names: list[str],
              first: First | None = None, ratios: Sequence[str] = ()) -> Read:  # fmt: skip
        """A request's prefetch in one round trip (``fetch_many``'s one ask): ``first``'s answer
        third (the client limits' reserve; None while Redis is away), ``keys``' values, the
        seconds ``names``' cooldowns have left, ``ratios``' lists (fourth)."""
        (read,) = self.fetch_many([(keys, names, first, ratios)], now, ttl)
        if isinstance(read, Exception):
            raise read
        return read

    def fetch_many(
        self, asks: Sequence[FetchAsk], now: float, ttl: float
    ) -> list[Read | Exception]:
        """Several requests' prefetches (``fetch``'s each) in ONE pipeline: one round trip for
        the requests that waited together on the store thread (``StoreWorker``); an ask whose
        own reads Redis refused gets the error."""

        def shared() -> list[Read | Exception]:
            reads = self._pipes.fetch_many(asks, now, ttl)
            if not self._local.count():
                return reads
            return [
                read
                if isinstance(read, Exception)
                else _filled(self._local, ask[0], read, now, ttl)
                for ask, read in zip(asks, reads, strict=True)
            ]

        def local() -> list[Read | Exception]:
            return [
                (self._local.get_many(keys, now, ttl), [None] * len(names), None, {})
                for keys, names, _, _ in asks
            ]

        return self._call(shared, local)

    def add_ratios(self, lessons: dict[str, list[float]]) -> None:
        """The calibration's lessons in one pipeline, each list's last ``RATIOS_KEPT`` kept
        (``RPUSH``, ``LTRIM``); nothing while Redis is away (this process's count meanwhile)."""

        def shared() -> None:
            pipe = self._redis.pipeline(transaction=False)
            for key, ratios in lessons.items():
                pipe.rpush(_ratios(key), *map(repr, ratios))
                pipe.ltrim(_ratios(key), -RATIOS_KEPT, -1)
                pipe.pexpire(_ratios(key), _ms(RATIOS_TTL))
            _raised(pipe.execute(raise_on_error=False))

        if lessons:
            self._call(shared, lambda: None)

    def cool_many(self, cools: list[tuple[str, float | None]]) -> None:
        """Cooldowns shared in one pipeline: ``(name, seconds left)`` cools (a later end
        already set is kept), ``(name, None)`` clears. Nothing while Redis is away (each
        worker's own table holds them meanwhile)."""
        if cools:
            self._call(lambda: self._pipes.cool_many(cools), lambda: None)

    def delete(self, key: str) -> None:
        def shared() -> None:
            self._scripts["delete"](keys=[_LRU, _SIZES, _BYTES], args=[key])
            self._local.delete(key)

        self._call(shared, lambda: self._local.delete(key))

    def evict(self, now: float, bounds: Bounds) -> None:
        def shared() -> None:
            self._scripts["evict"](keys=[_LRU, _SIZES, _BYTES], args=_evict_args(now, bounds))
            self._local.evict(now, bounds)

        self._call(shared, lambda: self._local.evict(now, bounds))

    def count(self) -> int:
        return self._call(lambda: int(self._redis.zcard(_LRU)), self._local.count)

    def size(self) -> int:
        return self._call(lambda: int(self._redis.get(_BYTES) or 0), self._local.size)

    def clear(self) -> None:
        def shared() -> None:
            for keys in _batches(self._redis.scan_iter(match=f"{PREFIX}r:*", count=500)):
                self._redis.delete(*keys)
            self._redis.delete(_LRU, _SIZES, _BYTES)
            self._local.clear()

        self._call(shared, self._local.clear)

    def secret(self) -> bytes:
        """Redis's (the first worker to ask makes it); this process's while Redis is away."""
        fresh = time.monotonic() - self._secret_checked < SECRET_RECHECK
        if self._up and self._secret is not None and fresh:
            return self._secret

        def shared() -> bytes:
            # What this worker used so far: a Redis that restarted empty gets it back.
            mine = self._secret or self._local.secret()
            pipe = self._redis.pipeline(transaction=False)
            pipe.set(_SECRET, mine, nx=True)
            pipe.get(_SECRET)
            _, value = pipe.execute()
            self._secret, self._secret_checked = bytes(value), time.monotonic()
            return self._secret

        return self._call(shared, self._local.secret)

    def close(self) -> None:
        self._closing.set()
        probe = self._probe
        if probe is not None:
            probe.join(timeout=2 * CONNECT_TIMEOUT + 1)
        self._redis.close()
        self._local.close()

    # ------------------------------------------------------------------ for the others

    @property
    def client(self) -> redis.Redis:
        """The pooled client (the usage ledger's counters), to be used inside ``call``."""
        return self._redis

    def call[T](self, shared: Callable[[], T], local: Callable[[], T]) -> T:
        """``shared()`` while Redis answers, ``local()`` while it is away (the same rules and
        notices as the store's own calls)."""
        return self._call(shared, local)

    # ------------------------------------------------------------------ Redis lost and back

    def _call[T](self, shared: Callable[[], T], local: Callable[[], T]) -> T:
        """``shared()`` while Redis answers; ``local()`` while it is away (and for the call
        that finds it away)."""
        if not self._up:
            if not self._back.is_set():
                return local()
            self._resume()
        try:
            return shared()
        except _LOST as e:
            self._lose(e, "lost")
            return local()

    def _lose(self, error: RedisError, how: str) -> None:
        """Redis is away: one notice, calls go to memory, a thread probes until it is back."""
        with self._state:
            if not self._up and self._probe is not None:
                return
            self._up = False
            self._back.clear()
            self._probe = threading.Thread(
                target=self._wait_for_redis, name="cursor-bridge-redis-probe", daemon=True
            )
            self._probe.start()
        first, most = self._retry
        self._notify(
            Notice(
                f"reasoning store: Redis at {self.where} {how} ({self._why(error)}): values "
                f"stay in this process's memory until it is back (tried again every "
                f"{first:g}-{most:g} s)",
                warning=True,
            )
        )

    def _resume(self) -> None:
        with self._state:
            if self._up:
                return
            self._up = True
            self._probe = None
            self._secret_checked = -math.inf  # asserted again: Redis may have restarted empty
        self._notify(
            Notice(f"reasoning store: Redis at {self.where} is back: values shared again", False)
        )

    def _wait_for_redis(self) -> None:
        """The probe thread: PING with backoff until Redis answers, or the store closes."""
        delay, most = self._retry
        while not self._closing.wait(delay):
            try:
                self._redis.ping()
            except RedisError:
                delay = min(delay * 2, most)
                continue
            self._back.set()
            return

    def _why(self, error: Exception) -> str:
        text = str(error) or type(error).__name__
        if len(self._password) >= 3:
            text = text.replace(self._password, "***")
        return text


class _Pipelines:
    """The backend's pipelined commands: one pipeline (not a transaction) each, one round
    trip; the Lua scripts by ``EVALSHA``, loaded (``SCRIPT LOAD``) for a Redis that does not
    know them yet (first use, a restart): then only what it refused sent again."""

    def __init__(self, client: redis.Redis, scripts: dict[str, Script]) -> None:
        self._client = client
        self._scripts = scripts

    def put_many(self, items: list[Put], now: float, bounds: Bounds) -> None:
        ttl, evict = _ms(bounds.ttl), _evict_args(now, bounds)

        def build(pipe: redis.client.Pipeline) -> None:
            for item in items:
                if item.text is None:
                    self._eval(pipe, "delete", [_LRU, _SIZES, _BYTES], [item.key])
                else:
                    args = [item.key, item.text, item.size, now, ttl, *evict]
                    self._eval(pipe, "put", [_LRU, _SIZES, _BYTES, _value(item.key)], args)

        _raised(self._run(build))

    def fetch_many(
        self, asks: Sequence[FetchAsk], now: float, ttl: float
    ) -> list[Read | Exception]:
        """Each ask's ``fetch``, all in one pipeline (one round trip); an ask whose own reads
        failed gets the error (its ``first``'s answer, a refused reserve's too, kept as it
        came)."""

        def build(pipe: redis.client.Pipeline) -> None:
            for keys, names, first, ratios in asks:
                if first is not None:
                    script, first_keys, first_args = first
                    pipe.evalsha(script.sha, len(first_keys), *first_keys, *first_args)  # type: ignore[arg-type]
                if keys:
                    self._eval(pipe, "get_many", [*map(_value, keys), _LRU], [now, _ms(ttl), *keys])
                for key in ratios:
                    pipe.lrange(_ratios(key), 0, -1)
                for name in names:
                    pipe.pttl(_cool(name))

        extra = list({id(a[2][0]): a[2][0] for a in asks if a[2] is not None}.values())
        sent = sum((f is not None) + bool(k) + len(r) + len(n) for k, n, f, r in asks)
        got = self._run(build, extra) if sent else []
        reads: list[Read | Exception] = []
        at = 0
        for keys, names, first, ratios in asks:
            answer = got[at] if first is not None else None
            at += first is not None
            mine = got[at : at + bool(keys) + len(ratios) + len(names)]
            at += len(mine)
            error = next((a for a in mine if isinstance(a, Exception)), None)
            if error is not None:
                reads.append(error)
                continue
            rest = mine[1:] if keys else mine
            values = (
                [bytes(v).decode("utf-8") if v is not None else None for v in mine[0]]
                if keys
                else []
            )
            read = {k: [float(r) for r in rs] for k, rs in zip(ratios, rest, strict=False)}
            lefts: list[float | None] = [max(0, int(ms)) / 1000 for ms in rest[len(ratios) :]]
            reads.append((values, lefts, answer, read))
        return reads

    def cool_many(self, cools: list[tuple[str, float | None]]) -> None:
        def build(pipe: redis.client.Pipeline) -> None:
            for name, seconds in cools:
                if seconds is None:
                    pipe.delete(_cool(name))
                elif seconds > 0:
                    self._eval(pipe, "cool", [_cool(name)], [math.ceil(seconds * 1000)])

        _raised(self._run(build))

    def _eval(
        self, pipe: redis.client.Pipeline, name: str, keys: list[str], args: Sequence[object]
    ) -> None:
        pipe.evalsha(self._scripts[name].sha, len(keys), *keys, *args)  # type: ignore[arg-type]

    def _run(
        self, build: Callable[[redis.client.Pipeline], None], extra: Sequence[Script] = ()
    ) -> list[Any]:
        """Each command's answer (or error); ``NOSCRIPT``: only the refused ones sent again."""
        pipe = self._client.pipeline(transaction=False)
        build(pipe)
        stack = list(pipe.command_stack)
        got = list(pipe.execute(raise_on_error=False))
        refused = [i for i, answer in enumerate(got) if isinstance(answer, NoScriptError)]
        if not refused:
            return got
        for script in (*self._scripts.values(), *extra):
            self._client.script_load(script.script)
        again = self._client.pipeline(transaction=False)
        for i in refused:
            args, options = stack[i]
            again.execute_command(*args, **options)  # type: ignore[no-untyped-call]
        for i, answer in zip(refused, again.execute(raise_on_error=False), strict=True):
            got[i] = answer
        return got


def _filled(local: Backend, keys: list[str], read: Read, now: float, ttl: float) -> Read:
    """What Redis missed, from this process's memory (values kept while Redis was away)."""
    got, lefts, answer, ratios = read
    values = [
        v if v is not None else local.get(k, now, ttl) for k, v in zip(keys, got, strict=True)
    ]
    return values, lefts, answer, ratios


def _raised(got: list[Any]) -> None:
    for answer in got:
        if isinstance(answer, Exception):
            raise answer


def _value(key: str) -> str:
    return f"{PREFIX}r:{key}"


def _cool(name: str) -> str:
    return f"{PREFIX}cool:{name}"


def _ratios(key: str) -> str:
    return f"{PREFIX}calib:{key}"


def _ms(seconds: float) -> int:
    """A TTL in milliseconds for ``PX`` (0: no expiry; never 0 for a positive TTL)."""
    return max(1, math.ceil(seconds * 1000)) if seconds > 0 else 0


def _evict_args(now: float, bounds: Bounds) -> list[str | int]:
    cutoff = repr(now - bounds.ttl) if bounds.ttl > 0 else ""
    return [cutoff, bounds.max_entries, bounds.max_bytes, EVICT_BATCH]


def _batches(keys: Iterable[bytes], n: int = 500) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for key in keys:
        batch.append(key)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch
