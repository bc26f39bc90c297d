"""The client keys' limits in the store: one atomic step reserves a request (``reserve``: its
request slot in the ``rpm`` / ``tpm`` window, its parallel slot, its estimated tokens, its
estimated cost), one settles it after the answer (``settle``); ``renew`` keeps a live
worker's reservations; ``usage`` reads a client's window and period.

Contract: plain values (``addon.plan.limits``' ``Ask``, ``Verdict``, ``Settle``), no
mitmproxy, no logging; the calls block (one Redis round trip each; ``settle_many``: one for
every settle that waited; ``reserve_step``: none of its own, sent first in a request's
prefetch pipeline, its answer read by ``verdict``) and are made off the event loop by the shell. Two backends: ``MemoryLimits`` (one worker's own, under a lock) and
``RedisLimits`` (Lua scripts: every worker on one Redis sees one count). How the windows are
kept, and the bounds while Redis is lost: docs/deploy.md#limits-per-client-key."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from addon.config.client_keys import Limits
from addon.plan.limits import WINDOW, Ask, Limit, Settle, Verdict, period_of

if TYPE_CHECKING:
    from addon.stores.redis_backend import First, RedisBackend

PERIOD_KEPT = 35 * 86400
"""Seconds a period's spend is kept after the period ends (``scripts/usage`` reads it)."""


@dataclass(frozen=True, slots=True)
class Used:
    """A client's use now: requests and tokens in the last 60 s, requests under way, and
    spend in the period (settled plus the open reservations' estimates), nano-dollars."""

    requests: int = 0
    tokens: int = 0
    parallel: int = 0
    spent_nano: int = 0


type Held = tuple[str, str, str]
"""A reservation a live worker holds: ``(client, period, rid)``."""


class LimitsStore(Protocol):
    def reserve(self, ask: Ask) -> Verdict: ...
    def settle(self, done: Settle) -> None: ...
    def renew(self, held: list[Held], now: float, ttl: float) -> None: ...
    def usage(self, client: str, period: str, now: float) -> Used: ...


class MemoryLimits:
    """One worker's limits (``bridge_store`` in memory or SQLite, or Redis lost): the same
    rules as the Redis scripts, under a lock (the calls come from threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window: defaultdict[str, dict[str, tuple[float, int]]] = defaultdict(dict)
        """client → rid → (when, tokens), oldest first."""
        self._parallel: defaultdict[str, dict[str, float]] = defaultdict(dict)
        """client → rid → when its slot expires."""
        self._spent: dict[tuple[str, str], int] = {}
        self._held: defaultdict[tuple[str, str], dict[str, tuple[int, float]]] = defaultdict(dict)
        """(client, period) → rid → (estimated cost, when it expires)."""

    def seed(self, known: dict[tuple[str, str], int]) -> None:
        """Each period's spend as last known from the shared store (Redis lost): this worker
        counts on from there."""
        with self._lock:
            self._spent.update(known)
            for key in known:
                self._held.pop(key, None)

    def reserve(self, ask: Ask) -> Verdict:
        with self._lock:
            now, client = ask.now, ask.client
            window = self._trim(client, now)
            parallel = self._parallel[client]
            for rid in [r for r, until in parallel.items() if until <= now]:
                del parallel[rid]
            key = (client, ask.period)
            spent: int | None = None
            settled = 0
            if ask.budget_nano is not None:
                held = self._held[key]
                for rid in [r for r, (_, until) in held.items() if until <= now]:
                    del held[rid]
                settled = self._spent.get(key, 0)
                spent = settled + sum(c for c, _ in held.values())
            if ask.rpm is not None and len(window) >= ask.rpm:
                first = next(iter(window.values()))[0]
                return Verdict(Limit.RPM, first + WINDOW - now, spent)
            if ask.tpm is not None:
                left = sum(t for _, t in window.values())
                if left >= ask.tpm:
                    wait = WINDOW
                    for when, tokens in window.values():
                        left -= tokens
                        if left < ask.tpm:
                            wait = when + WINDOW - now
                            break
                    return Verdict(Limit.TPM, wait, spent)
            if ask.max_parallel is not None and len(parallel) >= ask.max_parallel:
                return Verdict(Limit.MAX_PARALLEL, 1.0, spent)
            if ask.budget_nano is not None and spent is not None and spent >= ask.budget_nano:
                if settled >= ask.budget_nano:
                    return Verdict(Limit.BUDGET, 0.0, spent)
                return Verdict(Limit.BUDGET_HELD, 1.0, spent)
            window[ask.rid] = (now, ask.tokens)
            if ask.slot:
                parallel[ask.rid] = now + ask.ttl
            if spent is not None:
                self._held[key][ask.rid] = (ask.cost_nano, now + ask.ttl)
                spent += ask.cost_nano
            slots = len(parallel) if ask.max_parallel is not None else None
            used = sum(t for _, t in window.values()) if ask.tpm is not None else None
            return Verdict(None, 0.0, spent, slots, used)

    def _trim(self, client: str, now: float) -> dict[str, tuple[float, int]]:
        window = self._window[client]
        for rid in [r for r, (when, _) in window.items() if when <= now - WINDOW]:
            del window[rid]
        return window

    def settle(self, done: Settle) -> None:
        with self._lock:
            window = self._window.get(done.client, {})
            if done.rid in window:
                window[done.rid] = (window[done.rid][0], done.tokens)
            self._parallel.get(done.client, {}).pop(done.rid, None)
            if done.period:
                key = (done.client, done.period)
                self._held.get(key, {}).pop(done.rid, None)
                self._spent[key] = self._spent.get(key, 0) + done.cost_nano

    def renew(self, held: list[Held], now: float, ttl: float) -> None:
        with self._lock:
            for client, period, rid in held:
                parallel = self._parallel.get(client, {})
                if rid in parallel:
                    parallel[rid] = now + ttl
                costs = self._held.get((client, period), {})
                if rid in costs:
                    costs[rid] = (costs[rid][0], now + ttl)

    def usage(self, client: str, period: str, now: float) -> Used:
        with self._lock:
            window = self._trim(client, now)
            parallel = sum(1 for until in self._parallel.get(client, {}).values() if until > now)
            key = (client, period)
            held = sum(c for c, until in self._held.get(key, {}).values() if until > now)
            spent = self._spent.get(key, 0) + held if period else 0
            return Used(len(window), sum(t for _, t in window.values()), parallel, spent)


# --------------------------------------------------------------------------- Redis

# Every script reads Redis's clock (TIME): the workers' clocks need not agree. KEYS: the
# window (a sorted set rid → when, ms), its tokens (a hash rid → tokens), the parallel slots
# (a sorted set rid → expiry), the period's spend (an integer, nano-dollars), its open
# reservations (a sorted set rid → expiry) and their costs (a hash rid → nano-dollars).
_COMMON = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function drop(z, h, upto)
  while true do
    local m = redis.call('ZRANGEBYSCORE', z, '-inf', upto, 'LIMIT', 0, 500)
    if #m == 0 then return end
    redis.call('ZREM', z, unpack(m))
    if h then redis.call('HDEL', h, unpack(m)) end
  end
end
local function sum(h)
  local s = 0
  for _, v in ipairs(redis.call('HVALS', h)) do s = s + tonumber(v) end
  return s
end
"""

# ARGV: rid, rpm, tpm, max_parallel (0: none), budget (-1: none), tokens, cost, ttl ms, takes
# a parallel slot ('1'/'0': a search inside a flow does not).
# Returns {limit ('' admitted), retry after ms, spend after the step (-1: no budget)}, and
# admitted: {…, parallel slots held (-1: no max_parallel), the window's tokens (-1: no tpm)}.
_RESERVE = (
    _COMMON
    + """
local rid, rpm, tpm, most = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local budget, tokens, cost, ttl = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
drop(KEYS[1], KEYS[2], now - 60000)
drop(KEYS[3], false, now)
local spent, settled = -1, 0
if budget >= 0 then
  drop(KEYS[5], KEYS[6], now)
  settled = tonumber(redis.call('GET', KEYS[4]) or '0')
  spent = settled + sum(KEYS[6])
end
if rpm > 0 and redis.call('ZCARD', KEYS[1]) >= rpm then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {'rpm', tonumber(first[2]) + 60000 - now, spent}
end
if tpm > 0 then
  local left = sum(KEYS[2])
  if left >= tpm then
    local wait = 60000
    local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
    for i = 1, #entries, 2 do
      left = left - tonumber(redis.call('HGET', KEYS[2], entries[i]) or '0')
      if left < tpm then
        wait = tonumber(entries[i + 1]) + 60000 - now
        break
      end
    end
    return {'tpm', wait, spent}
  end
end
if most > 0 and redis.call('ZCARD', KEYS[3]) >= most then
  return {'max_parallel', 1000, spent}
end
if budget >= 0 and spent >= budget then
  if settled >= budget then return {'budget', 0, spent} end
  return {'budget_held', 1000, spent}
end
redis.call('ZADD', KEYS[1], now, rid)
redis.call('HSET', KEYS[2], rid, tokens)
redis.call('PEXPIRE', KEYS[1], 60000 + ttl)
redis.call('PEXPIRE', KEYS[2], 60000 + ttl)
if ARGV[9] ~= '0' then
  redis.call('ZADD', KEYS[3], now + ttl, rid)
  redis.call('PEXPIRE', KEYS[3], 2 * ttl)
end
if budget >= 0 then
  redis.call('ZADD', KEYS[5], now + ttl, rid)
  redis.call('HSET', KEYS[6], rid, cost)
  redis.call('PEXPIRE', KEYS[5], 2 * ttl)
  redis.call('PEXPIRE', KEYS[6], 2 * ttl)
  spent = spent + cost
end
local held, used = -1, -1
if most > 0 then held = redis.call('ZCARD', KEYS[3]) end
if tpm > 0 then used = sum(KEYS[2]) end
return {'', 0, spent, held, used}
"""
)

# ARGV: rid, tokens, cost, has a period ('1'/'0'), the spend's expiry (unix s, 0: none),
# cost owed from while Redis was lost (added once, with this step). Returns {the settled
# spend, it plus the period's open reservations} ({0, 0}: no period).
_SETTLE = (
    _COMMON
    + """
local rid = ARGV[1]
if redis.call('ZSCORE', KEYS[1], rid) then redis.call('HSET', KEYS[2], rid, ARGV[2]) end
redis.call('ZREM', KEYS[3], rid)
if ARGV[4] ~= '1' then return {0, 0} end
redis.call('ZREM', KEYS[5], rid)
redis.call('HDEL', KEYS[6], rid)
local spent = redis.call('INCRBY', KEYS[4], tonumber(ARGV[3]) + tonumber(ARGV[6]))
if tonumber(ARGV[5]) > 0 then redis.call('EXPIREAT', KEYS[4], ARGV[5]) end
drop(KEYS[5], KEYS[6], now)
return {spent, spent + sum(KEYS[6])}
"""
)

# KEYS: pairs (parallel slots, open reservations) of each reservation; ARGV: ttl ms, then
# the rids. A slot or a reservation still there gets ``ttl`` more; one gone stays gone.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV do
  local rid = ARGV[i]
  for _, k in ipairs({KEYS[2 * i - 3], KEYS[2 * i - 2]}) do
    if redis.call('ZSCORE', k, rid) then redis.call('ZADD', k, 'XX', now + ttl, rid) end
  end
end
return 0
"""

# ARGV: has a period ('1'/'0'). Returns {requests, tokens, parallel, spend}.
_USAGE = (
    _COMMON
    + """
drop(KEYS[1], KEYS[2], now - 60000)
drop(KEYS[3], false, now)
local spent = 0
if ARGV[1] == '1' then
  drop(KEYS[5], KEYS[6], now)
  spent = tonumber(redis.call('GET', KEYS[4]) or '0') + sum(KEYS[6])
end
return {redis.call('ZCARD', KEYS[1]), sum(KEYS[2]), redis.call('ZCARD', KEYS[3]), spent}
"""
)


def keys_of(prefix: str, client: str, period: str) -> list[str]:
    """A client's keys (``_COMMON``'s order); the name quoted: no ``:`` of its own."""
    base = f"{prefix}limits:{quote(client, safe='')}:"
    budget = f"{base}b:{period or '-'}:"
    return [
        base + "win",
        base + "wtok",
        base + "par",
        budget + "spent",
        budget + "held",
        budget + "hcost",
    ]


class RedisLimits:
    """Every worker's limits in one Redis (the reasoning store's connection): each step one
    script, atomic. While Redis is away (``RedisBackend.call`` says so), this worker's
    ``MemoryLimits`` answers: rates and parallel slots per worker; each budget from the
    spend last known from Redis, counted on locally (docs: the bound). What this worker
    settled meanwhile is added to Redis with its next settle of that period."""

    def __init__(self, backend: RedisBackend) -> None:
        from addon.stores.redis_backend import PREFIX

        self._backend = backend
        self._prefix = PREFIX
        client = backend.client
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)
        self._renew = client.register_script(_RENEW)
        self._usage = client.register_script(_USAGE)
        self.local = MemoryLimits()
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str], int] = {}
        """Each period's spend as Redis last said (for ``local`` while Redis is lost)."""
        self._owed: dict[tuple[str, str], int] = {}
        """Cost this worker settled while Redis was lost, per period: not in Redis yet."""
        self._seeded = False

    @property
    def backend(self) -> RedisBackend:
        return self._backend

    def _local(self) -> MemoryLimits:
        with self._lock:
            if not self._seeded:
                self._seeded = True
                self.local.seed(dict(self._known))
        return self.local

    def _shared(self) -> None:
        with self._lock:
            self._seeded = False

    def reserve(self, ask: Ask) -> Verdict:
        def shared() -> Verdict:
            _, keys, args = self.reserve_step(ask)
            return self._verdict(ask, self._reserve(keys=keys, args=args))  # type: ignore[arg-type]

        return self._backend.call(shared, lambda: self._local().reserve(ask))

    def reserve_step(self, ask: Ask) -> First:
        """The reserve as a script call another pipeline sends first (the request's
        prefetch: ``RedisBackend.fetch``); its answer to ``verdict``."""
        return (
            self._reserve,
            keys_of(self._prefix, ask.client, ask.period),
            [
                ask.rid,
                ask.rpm or 0,
                ask.tpm or 0,
                ask.max_parallel or 0,
                -1 if ask.budget_nano is None else ask.budget_nano,
                ask.tokens,
                ask.cost_nano,
                int(ask.ttl * 1000),
                "1" if ask.slot else "0",
            ],
        )

    def verdict(self, ask: Ask, got: Any) -> Verdict:
        """What ``reserve_step``'s answer says: None (not sent: Redis away) → reserved by
        this worker's memory, as ``reserve`` does then; an exception: raised."""
        if got is None:
            return self._local().reserve(ask)
        if isinstance(got, Exception):
            raise got
        return self._verdict(ask, got)

    def _verdict(self, ask: Ask, got: Any) -> Verdict:
        self._shared()
        name, wait_ms, spent = _text(got[0]), int(got[1]), int(got[2])
        if spent >= 0:
            with self._lock:
                key = (ask.client, ask.period)
                self._known[key] = spent + self._owed.get(key, 0)
        held, used = (int(got[3]), int(got[4])) if len(got) > 4 else (-1, -1)
        return Verdict(
            Limit(name) if name else None,
            wait_ms / 1000,
            None if spent < 0 else spent,
            None if held < 0 else held,
            None if used < 0 else used,
        )

    def settle(self, done: Settle) -> None:
        self.settle_many([done])

    def settle_many(self, done: list[Settle]) -> list[int | None]:
        """Each settle in order, in one pipeline (one round trip; the store thread's write of
        what waited, ``addon.stores.write_behind``). Returns each period's spend after its
        settle, settled plus held (None: no period, or Redis away)."""
        if not done:
            return []

        def shared() -> list[int | None]:
            with self._lock:
                owed = {(d.client, d.period): 0 for d in done if d.period}
                for key in owed:
                    owed[key] = self._owed.pop(key, 0)
            try:
                got = self._settle_pipelined(done, dict(owed))
            except Exception:
                with self._lock:
                    for key, n in owed.items():
                        self._owed[key] = self._owed.get(key, 0) + n
                raise
            self._shared()
            out: list[int | None] = []
            for d, (settled, spent) in zip(done, got, strict=True):
                if not d.period:
                    out.append(None)
                    continue
                with self._lock:
                    self._known[(d.client, d.period)] = int(settled)
                out.append(int(spent))
            return out

        def local() -> list[int | None]:
            for d in done:
                self._local().settle(d)
                if d.period:
                    with self._lock:
                        key = (d.client, d.period)
                        self._owed[key] = self._owed.get(key, 0) + d.cost_nano
            return [None] * len(done)

        return self._backend.call(shared, local)

    def _settle_pipelined(self, done: list[Settle], owed: dict[tuple[str, str], int]) -> list[Any]:
        """The settle script once per settle, by ``EVALSHA`` in one pipeline (not a
        transaction); loaded first (``SCRIPT LOAD``) for a Redis that does not know it."""
        from redis.exceptions import NoScriptError

        client = self._backend.client
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=False)
            first = dict(owed)  # what is owed goes with the period's first settle
            for d in done:
                end = 0 if d.period_end is None else int(d.period_end) + PERIOD_KEPT
                keys = keys_of(self._prefix, d.client, d.period)
                has = "1" if d.period else "0"
                args = [d.rid, d.tokens, d.cost_nano, has, end, first.pop((d.client, d.period), 0)]
                pipe.evalsha(self._settle.sha, len(keys), *keys, *args)  # type: ignore[arg-type]
            try:
                return list(pipe.execute())
            except NoScriptError:
                if attempt == 2:
                    raise
                client.script_load(_SETTLE)
        raise AssertionError("unreachable")

    def renew(self, held: list[Held], now: float, ttl: float) -> None:
        if not held:
            return

        def shared() -> None:
            keys: list[str] = []
            for client, period, _ in held:
                k = keys_of(self._prefix, client, period)
                keys += [k[2], k[4]]
            self._renew(keys=keys, args=[int(ttl * 1000), *(rid for _, _, rid in held)])

        self._backend.call(shared, lambda: self._local().renew(held, now, ttl))

    def usage(self, client: str, period: str, now: float) -> Used:
        def shared() -> Used:
            got = self._usage(
                keys=keys_of(self._prefix, client, period), args=["1" if period else "0"]
            )
            owed = self._owed.get((client, period), 0)
            return Used(int(got[0]), int(got[1]), int(got[2]), int(got[3]) + owed)

        return self._backend.call(shared, lambda: self._local().usage(client, period, now))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def usage_of(
    store: LimitsStore, limits: tuple[tuple[str, Limits], ...], now: float
) -> list[tuple[str, Limits, str, Used]]:
    """Each client key with limits: its limits, its budget period's name and its use now."""
    out = []
    for name, lim in limits:
        period = ""
        if lim.budget_usd is not None and lim.budget_period is not None:
            period = period_of(lim.budget_period, now)[0]
        out.append((name, lim, period, store.usage(name, period, now)))
    return out
