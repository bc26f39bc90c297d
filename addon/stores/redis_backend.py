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
from addon.stores.redis_tls import TLSConnection

PREFIX = "cursor-bridge:"
"""Every key the bridge writes starts with this (one Redis db may hold other things too)."""
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

_LOST = (RedisConnectionError, RedisTimeoutError)
"""Errors that mean Redis is away (refused, reset, timed out, still loading, bad password);
any other ``RedisError`` is one command's failure: ``StoreError``."""

# Layout under ``PREFIX`` (db from the URL): ``r:<key>`` the value (``PX`` = the TTL, renewed
# on every use: Redis's own expiry is the sliding TTL); ``lru`` a sorted set of keys by last
# use and ``sizes`` / ``bytes`` their sizes and their sum, kept by the Lua scripts below (atomic
# across workers) that enforce ``max_entries`` (least recently used first) and ``max_bytes``;
# ``secret`` the store's secret (``SET NX``: the first worker makes it, the others read it);
# ``cool:<route>`` a fallback cooldown (``PX`` = its length); ``calib:<route and model>`` a list
# of the calibrated estimate's last ratios (``RATIOS_TTL`` after its last lesson). In full:
# docs/reasoning.md#the-redis-backend.

# KEYS: value, lru. ARGV: key, now, ttl in ms (0: none). Reading renews the TTL and the use.
_GET = """
local v
if tonumber(ARGV[3]) > 0 then
  v = redis.call('GETEX', KEYS[1], 'PX', ARGV[3])
else
  v = redis.call('GET', KEYS[1])
end
if v then
  redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[1])
end
return v
"""

# KEYS: the values, then lru. ARGV: now, ttl in ms, then the keys. As _GET for each key, in one
# command: one round trip, and redis-py packs one command, not one per key.
_GET_MANY = """
local lru, now, ttl = KEYS[#KEYS], ARGV[1], tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS - 1 do
  local v
  if ttl > 0 then
    v = redis.call('GETEX', KEYS[i], 'PX', ARGV[2])
  else
    v = redis.call('GET', KEYS[i])
  end
  if v then
    redis.call('ZADD', lru, 'XX', now, ARGV[i + 2])
  end
  out[i] = v or false
end
return out
"""

# Shared by the scripts that drop entries. KEYS[1..3]: lru, sizes, bytes.
_DROP = f"""
local function drop(member)
  redis.call('DEL', '{PREFIX}r:' .. member)
  redis.call('ZREM', KEYS[1], member)
  local size = redis.call('HGET', KEYS[2], member)
  if size then
    redis.call('HDEL', KEYS[2], member)
    redis.call('DECRBY', KEYS[3], size)
  end
end
"""

# ARGV (from ARGV[base]): cutoff ('' : no TTL), max_entries, max_bytes, batch.
_EVICT = """
local function evict(base)
  local cutoff, most, most_bytes = ARGV[base], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  if cutoff ~= '' then
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, ARGV[base + 3])) do
      drop(m)
    end
  end
  while true do
    local n = redis.call('ZCARD', KEYS[1])
    local b = tonumber(redis.call('GET', KEYS[3]) or '0')
    if n <= most and b <= most_bytes then return end
    if n == 0 then
      redis.call('SET', KEYS[3], 0)
      return
    end
    local k = 1
    if n > most then k = math.min(n - most, 512) end
    for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, k - 1)) do
      drop(m)
    end
  end
end
"""

# KEYS: lru, sizes, bytes, value. ARGV: key, text, size, now, ttl ms, then evict's.
_PUT = (
    _DROP
    + _EVICT
    + """
if tonumber(ARGV[5]) > 0 then
  redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[5])
else
  redis.call('SET', KEYS[4], ARGV[2])
end
local old = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('INCRBY', KEYS[3], tonumber(ARGV[3]) - (tonumber(old) or 0))
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
evict(6)
"""
)

# KEYS: lru, sizes, bytes. ARGV: evict's.
_EVICT_ONLY = _DROP + _EVICT + "evict(1)\n"

# KEYS: lru, sizes, bytes. ARGV: key.
_DELETE = _DROP + "drop(ARGV[1])\n"

# KEYS: cooldown. ARGV: ms. A later end already set is kept.
_COOL = """
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
"""

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
        self._scripts = {
            name: self._redis.register_script(text)
            for name, text in (
                ("get", _GET),
                ("get_many", _GET_MANY),
                ("put", _PUT),
                ("evict", _EVICT_ONLY),
                ("delete", _DELETE),
                ("cool", _COOL),
            )
        }
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
        """A request's prefetch in one pipeline (one round trip): ``first`` (a script call:
        the client limits' reserve; its answer third, an exception its error, None while
        Redis is away), ``get_many`` of ``keys``, each cooldown of ``names``' seconds left,
        the calibration's ratios under each of ``ratios`` (fourth). While Redis is away:
        ``local``'s values, None for every cooldown, no ratios (this process's count)."""

        def shared() -> Read:
            got, lefts, answer, read = self._pipes.fetch(keys, now, ttl, names, first, ratios)
            kept = self._local.count()
            values = [
                v if v is not None else (self._local.get(k, now, ttl) if kept else None)
                for k, v in zip(keys, got, strict=True)
            ]
            return values, list[float | None](lefts), answer, read

        def local() -> Read:
            return self._local.get_many(keys, now, ttl), [None] * len(names), None, {}

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

    def fetch(self, keys: list[str], now: float, ttl: float, names: list[str],
              first: First | None, ratios: Sequence[str]) -> Read:  # fmt: skip
        """``first``'s answer as it came, the values, the seconds left, the ratios read."""

        def build(pipe: redis.client.Pipeline) -> None:
            if first is not None:
                script, first_keys, first_args = first
                pipe.evalsha(script.sha, len(first_keys), *first_keys, *first_args)  # type: ignore[arg-type]
            if keys:
                self._eval(pipe, "get_many", [*map(_value, keys), _LRU], [now, _ms(ttl), *keys])
            for key in ratios:
                pipe.lrange(_ratios(key), 0, -1)
            for name in names:
                pipe.pttl(_cool(name))

        extra = [first[0]] if first is not None else []
        got = self._run(build, extra) if keys or names or ratios or first is not None else []
        answer = got.pop(0) if first is not None else None
        _raised(got)
        at = 1 if keys else 0
        values = [bytes(v).decode("utf-8") if v is not None else None for v in got[0]] if at else []
        read = {k: [float(r) for r in rs] for k, rs in zip(ratios, got[at:], strict=False)}
        lefts: list[float | None] = [max(0, int(ms)) / 1000 for ms in got[at + len(ratios) :]]
        return values, lefts, answer, read

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
