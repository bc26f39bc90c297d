"""The client limits' Redis round trips (issue 43 point 1): what a flow learns at its end — its
reservation's settle — goes to the store thread's write queue, no round trip of its own on
the hooks' path; the settles that waited are written together in one pipeline (one round
trip), at once when a parallel slot they free may be waited for. Counted on a real
``redis-server``: every command or pipeline redis-py sends is one round trip."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
import redis.connection
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

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
from addon.shell.addons import Addons, make_addons
from addon.shell.client_limits import ClientLimits, Reservation
from addon.shell.store_worker import StoreWorker
from addon.stores import limits as limits_scripts
from addon.stores.limits import RedisLimits, keys_of
from addon.stores.reasoning import memory_backend
from addon.stores.redis_backend import PREFIX, RedisBackend
from tests.redis_server import RedisServer, redis_server_or_skip
from tests.unit.shell.started import started

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


ALICE = "sk-alice-0123456789abcdef"
KEYED = '[[routes]]\nname = "keyed"\npath = "*/chat/completions"\napi_key_env = "CB_ROUTE_KEY"\n'


@pytest.fixture
def gateway(
    server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Addons]:
    """The bridge's addons on a Redis store, a client key ``alice`` with ``max_parallel = 3``."""
    redis.Redis.from_url(server.url).flushdb()
    monkeypatch.setenv("CB_ROUTE_KEY", "sk-route-0123456789")
    routes, keys = tmp_path / "routes.toml", tmp_path / "keys.toml"
    routes.write_text(KEYED)
    keys.write_text(f'alice = {{ key = "{ALICE}", max_parallel = 3, rpm = 100 }}\n')
    b = make_addons()
    with taddons.context(*b.all) as tctx:
        tctx.configure(b.settings, bridge_routes=str(routes))
        tctx.configure(b.store, bridge_store=server.url)
        tctx.configure(b.client_keys, bridge_client_keys=str(keys))
        started(b.all)
        yield b
        b.store.done()


def keyed_flow(history: bool = False) -> http.HTTPFlow:
    """A request of ``alice``'s; ``history``: a later turn (the prefetch reads its reasoning
    values: the ``get_many`` script goes in its pipeline too)."""
    turns = [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "go"}]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}, *turns[: 2 * history]]}
    req = tutils.treq(
        host="api.example.com",
        port=443,
        scheme=b"https",
        method=b"POST",
        path=b"/v1/chat/completions",
        headers=http.Headers(
            ((b"content-type", b"application/json"), (b"authorization", f"Bearer {ALICE}".encode()))
        ),
        content=json.dumps(body).encode(),
    )
    return tflow.tflow(req=req)


def until_decide(b: Addons, flow: http.HTTPFlow) -> None:
    """Every request hook that runs before the fallbacks pick a route and ``decide`` runs,
    in mitmproxy's order, awaited as mitmproxy awaits them."""

    async def hooks() -> None:
        for addon in b.all[: b.all.index(b.fallbacks)]:
            hook = getattr(addon, "request", None)
            if hook is not None:
                waits = hook(flow)
                if inspect.isawaitable(waits):
                    await waits

    asyncio.run(hooks())


def test_a_request_with_limits_on_redis_makes_one_round_trip_before_decide(
    gateway: Addons, server: RedisServer, trips: list[str]
) -> None:
    """The reserve goes first in the prefetch's pipeline: one round trip for the reservation,
    the cooldowns and the reasoning values (before: the reserve's, then the prefetch's)."""
    b = gateway
    par = keys_of(PREFIX, "alice", "")[2]
    raw = redis.Redis.from_url(server.url)
    raw.ping()
    warm = keyed_flow()  # the scripts known to Redis, the store's secret read
    until_decide(b, warm)
    assert warm.response is None
    trips.clear()
    flow = keyed_flow()
    until_decide(b, flow)
    assert flow.response is None  # admitted
    assert trips == ["cursor-bridge-store"]  # one round trip, off the hooks' thread
    record = b.report.flows.get(flow.id)
    assert record is not None and record.store_view is not None  # the prefetch's, kept
    assert raw.zcard(par) == 2  # both flows hold their parallel slot: each reserved once


def test_a_redis_that_forgot_its_scripts_reserves_once(
    gateway: Addons, server: RedisServer, trips: list[str]
) -> None:
    """``SCRIPT FLUSH`` (a Redis restarted) between requests, then the reserve's script alone
    loaded again (as a reserve sent on its own loads it): the next request's pipeline runs the
    reserve and is refused the reasoning values' script. Only what Redis refused is sent
    again once the scripts are loaded: the reserve is not run twice (a second run counts the
    first: the third of ``max_parallel = 3`` refused against itself)."""
    b = gateway
    par, win = (keys_of(PREFIX, "alice", "")[i] for i in (2, 0))
    raw = redis.Redis.from_url(server.url)
    for _ in range(2):
        f = keyed_flow(history=True)
        until_decide(b, f)
        assert f.response is None
    raw.script_flush()
    raw.script_load(limits_scripts._RESERVE)
    third = keyed_flow(history=True)
    until_decide(b, third)
    assert third.response is None, third.response and third.response.get_text()
    assert raw.zcard(par) == 3 and raw.zcard(win) == 3  # each flow reserved once
    record = b.report.flows.get(third.id)
    assert record is not None and record.store_view is not None
    assert record.store_view.error is None  # type: ignore[attr-defined]  # the values read
    fourth = keyed_flow(history=True)
    until_decide(b, fourth)  # the limit holds: no slot left for a fourth
    assert fourth.response is not None and fourth.response.status_code == 429
    assert raw.zcard(par) == 3


def test_requests_that_wait_together_share_one_round_trip(
    gateway: Addons, server: RedisServer, trips: list[str]
) -> None:
    """Prefetches queued together on the store thread (requests that came at once, the
    thread busy meanwhile) go in one pipeline: one round trip for all of them, each flow
    reading its own reservation and values (before: one round trip each)."""
    b = gateway
    par = keys_of(PREFIX, "alice", "")[2]
    raw = redis.Redis.from_url(server.url)
    warm = keyed_flow(history=True)  # the scripts known to Redis, the store's secret read
    until_decide(b, warm)
    worker = b.store.worker
    busy, free = threading.Event(), threading.Event()

    def hold() -> None:
        busy.set()
        assert free.wait(10)

    held = worker.submit(hold)
    assert busy.wait(10)
    trips.clear()
    flows = [keyed_flow(history=True) for _ in range(2)]

    async def both() -> None:
        async def one(flow: http.HTTPFlow) -> None:
            for addon in b.all[: b.all.index(b.fallbacks)]:
                hook = getattr(addon, "request", None)
                waits = hook(flow) if hook is not None else None
                if inspect.isawaitable(waits):
                    await waits

        tasks = [asyncio.ensure_future(one(f)) for f in flows]
        for _ in range(200):  # both prefetches queued behind the held job (bounded)
            if worker._jobs.qsize() >= 2:
                break
            await asyncio.sleep(0.01)
        free.set()
        await asyncio.gather(*tasks)

    asyncio.run(both())
    held.result(10)
    assert trips == ["cursor-bridge-store"]  # one pipeline for both requests
    for flow in flows:
        assert flow.response is None  # each admitted by its own reserve
        record = b.report.flows.get(flow.id)
        assert record is not None and record.store_view is not None
    assert raw.zcard(par) == 3  # the warm flow's slot and one for each
