"""The client limits' Redis round trips (issue 43 point 1): what a flow learns at its end — its
reservation's settle — goes to the store thread's write queue, no round trip of its own on
the hooks' path; the settles that waited are written together in one pipeline (one round
trip), at once when a parallel slot they free may be waited for. Counted on a real
``redis-server``: every command or pipeline redis-py sends is one round trip."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import redis
import redis.connection

from addon.config.client_keys import Limits
from addon.config.options import Settings
from addon.config.routes import Route, TokenPrice
from addon.dialects import ANTHROPIC
from addon.plan.limits import (
    NANO,
    Given,
    Planned,
    Settle,
    Verdict,
    plan_request,
    settle_at_once,
)
from addon.plan.routing import match_request
from addon.shell.client_limits import ClientLimits, Reservation
from addon.shell.store_worker import StoreWorker
from addon.stores.limits import RedisLimits, keys_of
from addon.stores.reasoning import memory_backend
from addon.stores.redis_backend import PREFIX, RedisBackend
from tests.redis_server import RedisServer, redis_server_or_skip

ROUTE = Route(
    "msgs",
    client=ANTHROPIC,
    upstream=ANTHROPIC,
    path="*/v1/messages*",
    api_key_env="K",
    price=TokenPrice(input=1.0, output=10.0),
    reserve_max_output=100,
)
BODY = json.dumps(
    {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
).encode()
USED = (10, 0, 0, 5)
"""Input, cache read, cache write, output: what each flow's upstream reported."""
COST_NANO = round((10 * 1.0 + 5 * 10.0) * 1000)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(redis_server_or_skip()) as s:
        yield s


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread of every round trip redis-py makes (one send per command or pipeline)."""
    seen: list[str] = []
    send = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        seen.append(threading.current_thread().name)
        send(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    return seen


def held_flows(
    server: RedisServer, limits: Limits, n: int, gauge: list[float] | None = None
) -> tuple[ClientLimits, StoreWorker, RedisBackend]:
    """A ``ClientLimits`` on a real Redis whose ``n`` flows were reserved and answered."""
    redis.Redis.from_url(server.url).flushdb()
    backend = RedisBackend(server.url, memory_backend(), lambda _: None)
    worker = StoreWorker(flush_every=60.0)  # no timed write in these tests: only ``now`` or the end
    life = SimpleNamespace(store=SimpleNamespace(redis=backend), worker=worker)
    metrics = None
    if gauge is not None:
        metrics = SimpleNamespace(on=True, budget_left=lambda _c, usd: gauge.append(usd))
    client_limits = ClientLimits(lambda: None, None, life, metrics)  # type: ignore[arg-type]
    store = client_limits.store
    assert isinstance(store, RedisLimits)
    matched = match_request(Settings(routes=(ROUTE,)), "POST", "h", "/v1/messages", BODY)
    store.settle(Settle("bob", "warm", time.time(), "", None, 0, 0))  # the script known to Redis
    for i in range(n):
        planned = plan_request(Given("alice", limits, ROUTE, f"f{i}", time.time()), matched)
        assert isinstance(planned, Planned)
        verdict = store.reserve(planned.ask)
        assert verdict.admitted
        client_limits._held[f"f{i}"] = Reservation(
            "alice", limits, ROUTE, planned, settle_at_once(planned.ask, verdict), USED, "m"
        )
    return client_limits, worker, backend


def test_settles_make_no_round_trip_on_the_hooks_path_and_one_together(
    server: RedisServer, trips: list[str]
) -> None:
    limits = Limits(budget_usd=1.0, budget_period="total")
    client_limits, worker, backend = held_flows(server, limits, 5)
    raw = redis.Redis.from_url(server.url)
    spent, held, hcost = (keys_of(PREFIX, "alice", "total")[i] for i in (3, 4, 5))
    raw.ping()  # its own connection's handshake made: its round trips are the main thread's
    trips.clear()

    async def flows_end() -> None:
        for i in range(5):
            await client_limits.settle(f"f{i}")

    asyncio.run(flows_end())
    assert trips == []  # before: one round trip per flow on the hooks' path
    assert raw.zcard(held) == 5  # the reservations still count until written
    worker.close()  # the end (mitmproxy's ``done``): what waits is written
    on_store_thread = [t for t in trips if t != "MainThread"]
    assert on_store_thread == ["cursor-bridge-store"]  # five settles, one pipeline
    assert int(raw.get(spent) or 0) == 5 * COST_NANO  # each settled once
    assert raw.zcard(held) == 0 and raw.hlen(hcost) == 0
    backend.close()


def test_a_settle_near_a_limit_is_written_and_waited_for_at_once(
    server: RedisServer, trips: list[str]
) -> None:
    """Two of ``max_parallel = 2`` held: the next request would wait for a slot, so the
    settle that frees one is written before the flow's hook returns (as before the queue);
    far from every limit, the settle waits for the next write."""
    limits = Limits(max_parallel=2, budget_usd=1.0, budget_period="total")
    gauge: list[float] = []
    client_limits, worker, backend = held_flows(server, limits, 2, gauge)
    assert [h.at_once for h in client_limits._held.values()] == [True, True]
    raw = redis.Redis.from_url(server.url)
    par, spent = (keys_of(PREFIX, "alice", "total")[i] for i in (2, 3))
    raw.script_flush()  # a Redis that restarted: the settle script is loaded again
    asyncio.run(client_limits.settle("f0"))
    assert raw.zcard(par) == 1 and int(raw.get(spent) or 0) == COST_NANO
    f1 = client_limits._held["f1"].planned.ask.cost_nano
    assert gauge == [1.0 - (COST_NANO + f1) / NANO]  # settled + held, as the gauge says
    worker.close()
    backend.close()

    far = Limits(max_parallel=10, tpm=1_000_000, budget_usd=1.0, budget_period="total")
    client_limits, worker, backend = held_flows(server, far, 2)
    assert [h.at_once for h in client_limits._held.values()] == [False, False]
    asyncio.run(client_limits.settle("f0"))
    assert raw.zcard(par) == 2  # waits for the next write (at most a second; here: the end)
    worker.close()
    assert raw.zcard(par) == 1 and int(raw.get(spent) or 0) == COST_NANO
    backend.close()


def test_a_limit_is_near_when_one_more_request_like_it_would_be_refused() -> None:
    matched = match_request(Settings(routes=(ROUTE,)), "POST", "h", "/v1/messages", BODY)
    lim = Limits(max_parallel=3, tpm=10_000, budget_usd=1.0, budget_period="total")
    planned = plan_request(Given("alice", lim, ROUTE, "f", 1.0), matched)
    assert isinstance(planned, Planned)
    a = planned.ask
    far = Verdict(spent_nano=0, parallel=1, tokens=a.tokens)
    assert not settle_at_once(a, far)
    assert settle_at_once(a, replace(far, parallel=2))  # the last slot: the next one waits
    assert settle_at_once(a, replace(far, tokens=10_000 - a.tokens))
    assert settle_at_once(a, replace(far, spent_nano=NANO - a.cost_nano))
    assert not settle_at_once(a, replace(far, spent_nano=NANO - 2 * a.cost_nano))
