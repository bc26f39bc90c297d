"""Limits per client key: the plan (``addon.plan.limits``: estimate, periods, refusals read by
the official SDKs) and the stores (``addon.stores.limits``: the memory backend, and the Redis
scripts on a real ``redis-server``, held to the same rules)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import anthropic
import httpx
import openai
import pytest

from addon.config.client_keys import Limits
from addon.config.options import Settings
from addon.config.routes import Route, TokenPrice
from addon.dialects import ANTHROPIC, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES
from addon.plan.limits import (
    NANO,
    Ask,
    CallUse,
    Estimate,
    Given,
    Limit,
    Planned,
    Refusal,
    Settle,
    Verdict,
    ask_for,
    calls_used,
    estimate,
    nano,
    output_cap,
    period_of,
    plan_request,
    refusal,
    reserved,
    search_ask,
    search_refused,
    search_settle,
    used_cost,
)
from addon.plan.routing import match_request
from addon.stores import redis_backend
from addon.stores.base import Notice
from addon.stores.limits import LimitsStore, MemoryLimits, RedisLimits, keys_of
from addon.stores.reasoning import memory_backend
from tests.redis_server import RedisServer, redis_server_or_skip

ROUTE = Route("r", reserve_max_output=1000)
PRICED = Route("p", price=TokenPrice(input=1.0, output=10.0), reserve_max_output=1000)


def table(model: str, prompt: int, read: int, write: int, out: int) -> float | None:
    """A price table that knows one model: $2 / $20 per million."""
    if model != "known":
        return None
    return (2 * (prompt + read + write) + 20 * out) / 1e6


# --------------------------------------------------------------------------- the plan


def test_the_output_cap_is_clamped_to_reserve_max_output() -> None:
    assert output_cap(64000, ROUTE) == 1000
    assert output_cap(200, ROUTE) == 200
    assert output_cap(None, ROUTE) == 1000 and output_cap(0, ROUTE) == 1000


def test_the_estimate_prices_by_the_table_then_the_routes_price_and_never_free() -> None:
    budget = Limits(budget_usd=1.0, budget_period="day")
    known = estimate(budget, ROUTE, "known", 1000, 64000, table)
    assert known == (Estimate(1000, 1000, (2 * 1000 + 20 * 1000) * NANO // 10**6), "known")
    by_route = estimate(budget, PRICED, "mine", 1000, 500, table)
    assert by_route == (Estimate(1000, 500, (1000 + 10 * 500) * NANO // 10**6), "mine")
    assert estimate(budget, ROUTE, "mine", 1000, 500, table) == (None, "mine")  # no price
    assert estimate(budget, ROUTE, "mine", 1000, 500, None) == (None, "mine")
    # the model priced is the one sent upstream
    mapped = Route("m", model_map=(("claude-*", "known"),), reserve_max_output=1000)
    assert estimate(budget, mapped, "claude-x", 10, 10, table)[1] == "known"
    # without a budget nothing is priced, and nothing is refused for it
    assert estimate(Limits(rpm=5), ROUTE, "mine", 1000, 500, None) == (
        Estimate(1000, 500, 0),
        "mine",
    )


def test_periods_are_utc_days_weeks_from_monday_calendar_months_and_total() -> None:
    sunday = datetime(2026, 12, 6, 23, 59, tzinfo=UTC).timestamp()
    assert period_of("day", sunday) == (
        "day:2026-12-06",
        datetime(2026, 12, 7, tzinfo=UTC).timestamp(),
    )
    assert period_of("week", sunday) == (
        "week:2026-11-30",
        datetime(2026, 12, 7, tzinfo=UTC).timestamp(),
    )
    monday = datetime(2026, 12, 7, 0, 0, 1, tzinfo=UTC).timestamp()
    assert period_of("week", monday)[0] == "week:2026-12-07"
    assert period_of("month", sunday) == (
        "month:2026-12",
        datetime(2027, 1, 1, tzinfo=UTC).timestamp(),
    )
    assert period_of("total", sunday) == ("total", None)


def test_the_settled_cost_is_what_was_used_or_the_reservation_never_nothing() -> None:
    budget = Limits(budget_usd=1.0, budget_period="total")
    reserved = Estimate(10, 10, 777)
    assert used_cost(budget, ROUTE, "known", table, (100, 0, 0, 10), reserved) == 400 * 1000
    assert used_cost(budget, ROUTE, "gone", table, (100, 0, 0, 10), reserved) == 777
    assert used_cost(Limits(rpm=1), ROUTE, "known", table, (100, 0, 0, 10), reserved) == 0


def _status_error(status: int, body: bytes, headers: dict[str, str]) -> httpx.Response:
    request = httpx.Request("POST", "http://127.0.0.1/v1/x")
    return httpx.Response(status, content=body, headers=headers, request=request)


def test_a_rate_refusal_is_a_429_with_retry_after_in_each_dialect() -> None:
    limits = Limits(rpm=60)
    for client in (OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC, GEMINI):
        route = Route("r", client=client, path="*", upstream=client)
        r = refusal(route, "alice", limits, Verdict(Limit.RPM, 12.2), "m")
        assert r.status == 429 and ("retry-after", "13") in r.headers
        assert "client key 'alice' is over its rpm limit (60 requests per minute)" in r.message
        assert "alice" in r.body.decode() and r.limit is Limit.RPM
    r = refusal(ROUTE, "a", Limits(max_parallel=2), Verdict(Limit.MAX_PARALLEL, 0.0), "m")
    assert ("retry-after", "1") in r.headers  # at least one second


def test_the_sdks_read_a_rate_refusal_as_their_rate_limit_error() -> None:
    anth = Route("a", client=ANTHROPIC, upstream=ANTHROPIC, path="*/v1/messages")
    r = refusal(anth, "alice", Limits(tpm=10), Verdict(Limit.TPM, 3.0), "m")
    err = anthropic.Anthropic(api_key="x")._make_status_error(
        "x", body=json.loads(r.body), response=_status_error(r.status, r.body, dict(r.headers))
    )
    assert isinstance(err, anthropic.RateLimitError)
    assert err.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    r = refusal(ROUTE, "alice", Limits(rpm=1), Verdict(Limit.RPM, 3.0), "m")
    err2 = openai.OpenAI(api_key="x")._make_status_error(
        "x", body=json.loads(r.body)["error"], response=_status_error(429, r.body, {})
    )
    assert isinstance(err2, openai.RateLimitError) and err2.code == "rate_limit_exceeded"


def test_a_budget_refusal_is_a_402_the_sdks_do_not_retry() -> None:
    limits = Limits(budget_usd=5.0, budget_period="day")
    anth = Route("a", client=ANTHROPIC, upstream=ANTHROPIC, path="*/v1/messages")
    r = refusal(anth, "bob", limits, Verdict(Limit.BUDGET), "m")
    assert r.status == 402 and ("x-should-retry", "false") in r.headers
    assert "client key 'bob' has spent its budget ($5 per day, UTC)" in r.message
    assert json.loads(r.body)["error"]["type"] == "billing_error"
    response = _status_error(402, r.body, dict(r.headers))
    assert not anthropic.Anthropic(api_key="x")._should_retry(response)
    assert not openai.OpenAI(api_key="x")._should_retry(response)
    body = json.loads(refusal(ROUTE, "bob", limits, Verdict(Limit.BUDGET), "m").body)
    assert body["error"]["code"] == "insufficient_quota"
    total = refusal(
        ROUTE, "bob", Limits(budget_usd=1, budget_period="total"), Verdict(Limit.BUDGET), "m"
    )
    assert "($1 in total)" in total.message


def test_a_budget_held_by_requests_under_way_is_a_429_to_wait_on() -> None:
    limits = Limits(budget_usd=5.0, budget_period="day")
    r = refusal(ROUTE, "bob", limits, Verdict(Limit.BUDGET_HELD, 1.0), "m")
    assert r.status == 429 and ("retry-after", "1") in r.headers
    assert "over its budget limit ($5, with its requests under way)" in r.message


def test_an_unpriced_model_is_refused_saying_so() -> None:
    limits = Limits(budget_usd=5.0, budget_period="day")
    r = refusal(ROUTE, "bob", limits, Verdict(Limit.UNPRICED), "my-model")
    assert r.status == 402 and r.limit is Limit.UNPRICED
    assert "the model 'my-model' has no price" in r.message
    assert "route 'r' sets no price" in r.message and "never counted as free" in r.message


def test_plan_request_reads_the_flows_route_match_and_counts_only_its_chat_request() -> None:
    """``plan_request`` takes plain values — the flow record's client, route and limits
    (``Given``) and the request's ``RouteMatch`` — and decides: the route's chat request is
    reserved (input as counted, output capped), a token count or a model list is not
    counted, a model nothing prices on a key with a budget is refused with the flow's
    metadata and line; ``reserved`` turns the store's verdict into the refusal."""
    chat = Route(
        "msgs",
        client=ANTHROPIC,
        upstream=ANTHROPIC,
        path="*/v1/messages*",
        api_key_env="K",
        price=TokenPrice(input=1.0, output=10.0),
        reserve_max_output=100,
    )
    s = Settings(routes=(chat,))
    body = json.dumps(
        {"model": "m", "max_tokens": 5000, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    limits = Limits(rpm=5, budget_usd=1.0, budget_period="total")
    given = Given("alice", limits, chat, "flow-1", 1_000.0)
    matched = match_request(s, "POST", "h", "/v1/messages?beta=true", body)
    assert matched.route is chat
    planned = plan_request(given, matched)
    assert isinstance(planned, Planned)
    assert planned.estimate.output_tokens == 100 and planned.estimate.input_tokens > 0
    assert planned.ask.rid == "flow-1" and planned.ask.rpm == 5 and planned.ask.period == "total"
    assert planned.ask.cost_nano == round((planned.estimate.input_tokens + 1000) * 1000)
    counted = match_request(s, "POST", "h", "/v1/messages/count_tokens", body)
    assert counted.counted is not None and plan_request(given, counted) is None
    other = Route("other", client=ANTHROPIC, path="*/v1/messages*")
    assert plan_request(Given("alice", limits, other, "f", 1.0), matched) is None
    assert reserved(given, matched, planned, Verdict(spent_nano=0)) is None
    refused = reserved(given, matched, planned, Verdict(Limit.RPM, 30.0))
    assert isinstance(refused, Refusal) and refused.status == 429
    assert refused.meta["limit"] == "rpm" and refused.meta["action"] == "rejected"
    assert refused.line is not None
    line = refused.line.line()
    assert "client_name=alice" in line and "limit=rpm" in line
    assert 'request="POST /v1/messages"' in line  # the path without its query
    unpriced = Route("u", client=ANTHROPIC, upstream=ANTHROPIC, path="*/v1/messages*")
    s2 = Settings(routes=(unpriced,))
    got = plan_request(
        Given("bob", limits, unpriced, "f2", 1.0),
        match_request(s2, "POST", "h", "/v1/messages", body),
    )
    assert isinstance(got, Refusal) and got.status == 402 and got.limit is Limit.UNPRICED
    assert got.meta["limit"] == "unpriced" and "never counted as free" in got.meta["error"]


# --------------------------------------------------------------------------- the stores


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(redis_server_or_skip()) as s:
        yield s


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[LimitsStore]:
    if request.param == "memory":
        yield MemoryLimits()
        return
    server: RedisServer = request.getfixturevalue("server")
    import redis

    redis.Redis.from_url(server.url).flushdb()
    backend = redis_backend.RedisBackend(server.url, memory_backend(), lambda _: None)
    yield RedisLimits(backend)
    backend.close()


def ask(rid: str, now: float, **kw: object) -> Ask:
    base = dict(
        client="alice",
        rid=rid,
        now=now,
        rpm=None,
        tpm=None,
        max_parallel=None,
        budget_nano=None,
        period="",
        period_end=None,
        tokens=10,
        cost_nano=0,
    )
    base.update(kw)
    return Ask(**base)  # type: ignore[arg-type]


def test_rpm_refuses_the_request_past_the_limit_and_says_when_to_come_back(
    store: LimitsStore,
) -> None:
    for i in range(3):
        assert store.reserve(ask(f"r{i}", 1000.0, rpm=3)).admitted
    refused = store.reserve(ask("r3", 1000.0, rpm=3))
    assert refused.limit is Limit.RPM and 0 < refused.retry_after <= 60
    assert store.usage("alice", "", 1000.0).requests == 3
    other = store.reserve(ask("b0", 1000.0, rpm=3, client="bob"))
    assert other.admitted  # another client's window is its own


def test_tpm_counts_the_reserved_tokens_then_what_was_used(store: LimitsStore) -> None:
    assert store.reserve(ask("a", 1.0, tpm=100, tokens=90)).admitted
    assert store.reserve(ask("b", 1.0, tpm=100, tokens=90)).admitted  # under 100 when asked
    assert store.reserve(ask("c", 1.0, tpm=100, tokens=1)).limit is Limit.TPM
    store.settle(Settle("alice", "a", 2.0, "", None, tokens=5, cost_nano=0))
    store.settle(Settle("alice", "b", 2.0, "", None, tokens=5, cost_nano=0))
    assert store.usage("alice", "", 2.0).tokens == 10
    assert store.reserve(ask("d", 2.0, tpm=100, tokens=1)).admitted


def test_max_parallel_holds_and_a_settle_frees_the_slot(store: LimitsStore) -> None:
    assert store.reserve(ask("a", 1.0, max_parallel=2)).admitted
    assert store.reserve(ask("b", 1.0, max_parallel=2)).admitted
    assert store.reserve(ask("c", 1.0, max_parallel=2)).limit is Limit.MAX_PARALLEL
    assert store.usage("alice", "", 1.0).parallel == 2
    store.settle(Settle("alice", "a", 1.5, "", None, 10, 0))
    assert store.reserve(ask("c", 1.5, max_parallel=2)).admitted


def test_an_admission_says_the_slots_and_tokens_held_with_it(store: LimitsStore) -> None:
    """What ``settle_at_once`` reads: the parallel slots and the ``tpm`` window's tokens with
    the admitted request (None for a limit the key does not set)."""
    first = store.reserve(ask("a", 1.0, max_parallel=3, tpm=1000, tokens=40))
    assert (first.parallel, first.tokens) == (1, 40)
    second = store.reserve(ask("b", 1.0, max_parallel=3, tpm=1000, tokens=60))
    assert (second.parallel, second.tokens) == (2, 100)
    bare = store.reserve(ask("c", 1.0))
    assert (bare.parallel, bare.tokens) == (None, None)


def test_a_budget_admits_while_some_is_left_and_counts_each_settle_once(
    store: LimitsStore,
) -> None:
    b = dict(budget_nano=1000, period="day:x", cost_nano=400)
    first = store.reserve(ask("a", 1.0, **b))
    assert first.admitted and first.spent_nano == 400
    assert store.reserve(ask("b", 1.0, **b)).spent_nano == 800
    assert store.reserve(ask("c", 1.0, **b)).spent_nano == 1200  # 800 < 1000: admitted
    held = store.reserve(ask("d", 1.0, **b))  # nothing settled yet: wait, it may be cheaper
    assert held.limit is Limit.BUDGET_HELD and held.retry_after == 1.0
    for rid in "abc":
        store.settle(Settle("alice", rid, 2.0, "day:x", None, 10, 300))
    assert store.usage("alice", "day:x", 2.0).spent_nano == 900
    assert store.reserve(ask("e", 2.0, **b)).admitted  # 900 < 1000
    store.settle(Settle("alice", "e", 2.0, "day:x", None, 10, 300))
    assert store.reserve(ask("f", 2.0, **b)).limit is Limit.BUDGET
    assert store.usage("alice", "day:x", 2.0).spent_nano == 1200
    assert store.reserve(ask("g", 2.0, **{**b, "period": "day:y"})).admitted  # a new period


def test_a_budget_of_zero_admits_nothing(store: LimitsStore) -> None:
    assert store.reserve(ask("a", 1.0, budget_nano=0, period="total")).limit is Limit.BUDGET


def test_memory_reservations_expire_by_themselves_and_renew_while_held() -> None:
    store = MemoryLimits()
    b = dict(budget_nano=1000, period="total", cost_nano=1000, max_parallel=1, ttl=10.0)
    assert store.reserve(ask("a", 0.0, **b)).admitted
    assert store.reserve(ask("b", 5.0, **b)).limit is Limit.MAX_PARALLEL
    store.renew([("alice", "total", "a")], 8.0, 10.0)  # held until 18
    assert store.reserve(ask("b", 15.0, **b)).limit is Limit.MAX_PARALLEL
    verdict = store.reserve(ask("b", 18.5, **b))  # a died: its slot and its cost are gone
    assert verdict.admitted and verdict.spent_nano == 1000
    store.settle(Settle("alice", "a", 19.0, "total", None, 10, 0))  # late, counted once: 0
    assert store.usage("alice", "total", 19.0).spent_nano == 1000


def test_the_memory_store_holds_max_parallel_under_threads() -> None:
    store = MemoryLimits()
    admitted: list[str] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        if store.reserve(ask(f"r{i}", 1.0, max_parallel=3)).admitted:
            with lock:
                admitted.append(f"r{i}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(admitted) == 3


def test_redis_reservations_expire_on_redis_clock(server: RedisServer) -> None:
    import time

    import redis

    raw = redis.Redis.from_url(server.url)
    raw.flushdb()
    backend = redis_backend.RedisBackend(server.url, memory_backend(), lambda _: None)
    try:
        store = RedisLimits(backend)
        b = dict(budget_nano=1000, period="total", cost_nano=1000, max_parallel=1, ttl=0.3)
        assert store.reserve(ask("a", 0.0, **b)).admitted
        assert store.reserve(ask("b", 0.0, **b)).limit is Limit.MAX_PARALLEL
        keys = keys_of(redis_backend.PREFIX, "alice", "total")
        assert raw.zcard(keys[2]) == 1 and raw.hget(keys[5], "a") == b"1000"
        deadline = time.monotonic() + 5
        while not store.reserve(ask("b", 0.0, **b)).admitted:
            assert time.monotonic() < deadline, "the dead reservation never expired"
            time.sleep(0.05)
        assert store.usage("alice", "total", 0.0).spent_nano == 1000  # b's estimate only
    finally:
        backend.close()


def test_redis_lost_budgets_count_on_locally_and_are_added_when_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(redis_backend, "RETRY_FIRST", 0.05)
    monkeypatch.setattr(redis_backend, "RETRY_MOST", 0.2)
    notices: list[Notice] = []
    with RedisServer(redis_server_or_skip()) as server:
        backend = redis_backend.RedisBackend(server.url, memory_backend(), notices.append)
        try:
            store = RedisLimits(backend)
            b = dict(budget_nano=1000, period="total", cost_nano=300)
            assert store.reserve(ask("a", 0.0, **b)).admitted
            store.settle(Settle("alice", "a", 0.0, "total", None, 10, 600))
            server.stop()
            # Redis lost: this worker counts on from the 600 Redis last said
            assert store.reserve(ask("b", 0.0, **b)).admitted
            store.settle(Settle("alice", "b", 0.0, "total", None, 10, 300))
            assert store.reserve(ask("c", 0.0, **b)).spent_nano == 1200  # 900 < 1000
            store.settle(Settle("alice", "c", 0.0, "total", None, 10, 300))
            assert store.reserve(ask("x", 0.0, **b)).limit is Limit.BUDGET
            assert backend.shared is False  # counted locally, from what Redis said last
            assert store.usage("alice", "total", 0.0).spent_nano == 1200
            assert backend.shared is False and any(n.warning for n in notices)
            server.start()
            _wait(lambda: backend._back.is_set())
            # back (restarted empty): b's and c's 600 settled meanwhile go to Redis with the
            # next settle, once
            assert store.reserve(ask("d", 0.0, **{**b, "budget_nano": 10_000})).admitted
            store.settle(Settle("alice", "d", 0.0, "total", None, 10, 100))
            assert store.usage("alice", "total", 0.0).spent_nano == 700
            store.settle(Settle("alice", "e", 0.0, "total", None, 10, 0))
            assert store.usage("alice", "total", 0.0).spent_nano == 700
        finally:
            backend.close()


def _wait(cond: Callable[[], bool]) -> None:
    import time

    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_ask_for_puts_the_budget_in_its_period() -> None:
    limits = Limits(rpm=5, budget_usd=0.5, budget_period="day")
    sunday = datetime(2026, 12, 6, 12, tzinfo=UTC).timestamp()
    a = ask_for("alice", "f1", limits, Estimate(10, 20, 99), sunday)
    assert (a.rpm, a.budget_nano, a.period, a.tokens, a.cost_nano) == (
        5,
        NANO // 2,
        "day:2026-12-06",
        30,
        99,
    )
    plain = ask_for("alice", "f1", Limits(rpm=5), Estimate(10, 20, 99), sunday)
    assert plain.budget_nano is None and plain.period == "" and plain.cost_nano == 0


# --------------------------------------------------------------------------- what is shown


def test_the_limits_table_shows_use_limits_and_what_remains() -> None:
    from addon.report.usage_table import limits_text
    from addon.stores.limits import Used

    rows = [
        ("alice", Limits(60, 1000, 4, 20.0, "month"), "month:2026-12", Used(3, 250, 1, 5 * NANO)),
        ("bob", Limits(rpm=5), "", Used(1, 10, 0, 0)),
    ]
    text = limits_text(rows)
    head, _, alice, bob, _ = text.splitlines()
    assert head.split() == [
        "client",
        "rpm",
        "tpm",
        "parallel",
        "budget_period",
        "spent_usd",
        "budget_usd",
        "remaining_usd",
    ]
    assert alice.split() == [
        "alice",
        "3/60",
        "250/1000",
        "1/4",
        "month:2026-12",
        "5.0000",
        "20",
        "15.0000",
    ]
    assert bob.split() == ["bob", "1/5", "10/-", "0/-", "-"]
    assert limits_text([]) == "(no client key has a limit)"


def test_scripts_usage_shows_each_keys_limits_from_redis(tmp_path: object) -> None:
    import subprocess
    import sys
    import time
    from pathlib import Path

    from addon.plan.limits import period_of

    folder = Path(str(tmp_path))
    keys = folder / "keys.toml"
    keys.write_text(
        'alice = { env = "NOT_SET_ANYWHERE", rpm = 10, budget_usd = 2.0, budget_period = "day" }\n'
    )
    with RedisServer(redis_server_or_skip()) as server:
        backend = redis_backend.RedisBackend(server.url, memory_backend(), lambda _: None)
        try:
            store = RedisLimits(backend)
            period, end = period_of("day", time.time())
            one = ask(
                "a", time.time(), rpm=10, budget_nano=2 * NANO, period=period, cost_nano=NANO // 2
            )
            assert store.reserve(one).admitted
            store.settle(Settle("alice", "a", time.time(), period, end, 10, NANO // 4))
        finally:
            backend.close()
        done = subprocess.run(
            [sys.executable, "scripts/usage.py", "--store", server.url, "--client-keys", str(keys)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    row = next(x for x in done.stdout.splitlines() if x.startswith("alice"))
    assert row.split() == ["alice", "1/10", "10/-", "0/-", period, "0.2500", "2", "1.7500"]


# --------------------------------------------------------------------------- a flow's own calls


def test_a_search_asks_one_request_of_the_rpm_window_and_its_price_of_the_budget() -> None:
    """A search the bridge runs for a flow (``search_ask``): one request in the ``rpm`` window,
    no tokens, no parallel slot (its flow holds one), the backend's price in the budget; a key
    with neither an ``rpm`` nor a budget counts nothing."""
    limits = Limits(rpm=5, tpm=100, max_parallel=1, budget_usd=2.0, budget_period="day")
    a = search_ask("alice", "s1", limits, 0.01, 86400.0 * 3)
    assert a is not None
    assert (a.rpm, a.tpm, a.max_parallel, a.tokens, a.slot) == (5, None, None, 0, False)
    assert a.budget_nano == 2 * NANO and a.cost_nano == NANO // 100 and a.period == "day:1970-01-04"
    free = search_ask("alice", "s2", Limits(rpm=5), 0.0, 1.0)
    assert free is not None and (free.budget_nano, free.cost_nano) == (None, 0)
    assert search_ask("alice", "s3", Limits(tpm=100, max_parallel=2), 0.01, 1.0) is None


def test_a_refused_search_is_its_dialects_error_code_and_a_settle_spends_only_what_ran() -> None:
    assert search_refused(Verdict()) is None
    assert search_refused(Verdict(Limit.RPM, 3.0)) == "too_many_requests"
    assert search_refused(Verdict(Limit.BUDGET_HELD, 1.0)) == "too_many_requests"
    assert search_refused(Verdict(Limit.BUDGET)) == "unavailable"
    a = search_ask("alice", "s1", Limits(budget_usd=1.0, budget_period="total"), 0.5, 1.0)
    assert a is not None
    ran, failed = search_settle(a, 2.0, True), search_settle(a, 2.0, False)
    assert (ran.rid, ran.tokens, ran.cost_nano, ran.period) == ("s1", 0, NANO // 2, "total")
    assert failed.cost_nano == 0


def test_caption_calls_settle_their_tokens_and_their_vision_routes_price() -> None:
    """A flow's caption calls (``calls_used``): every token of each, priced as its vision
    route's request (the table, else the route's ``price``); a key without a budget counts
    the tokens only."""
    calls = (
        CallUse(PRICED, "looker-1", (85, 0, 0, 9)),  # $1 / $10 per million: 85 + 90 µ$
        CallUse(ROUTE, "known", (1000, 0, 0, 100)),  # the table: $2 / $20 per million
    )
    budget = Limits(budget_usd=1.0, budget_period="total")
    tokens, cost = calls_used(budget, table, calls)
    assert tokens == 85 + 9 + 1000 + 100
    assert cost == nano(175 / 1e6) + nano(4000 / 1e6)
    assert calls_used(Limits(tpm=10_000), table, calls) == (tokens, 0)


def test_a_search_takes_no_parallel_slot_and_counts_in_rpm_and_budget(store: LimitsStore) -> None:
    """On both stores: the flow's reservation holds its parallel slot; a search inside it is
    admitted beside it, takes a request of the ``rpm`` window (the next request is refused),
    and its price is spent once settled; a spent budget refuses the next search."""
    b = dict(budget_nano=1000, period="total")
    assert store.reserve(ask("flow", 1.0, rpm=3, max_parallel=1, **b)).admitted
    limits = Limits(rpm=3, max_parallel=1, budget_usd=1000 / NANO, budget_period="total")
    s1 = search_ask("alice", "s1", limits, 600 / NANO, 1.0)
    assert s1 is not None
    assert store.reserve(s1).admitted
    assert store.usage("alice", "total", 1.0).parallel == 1  # the flow's only
    store.settle(search_settle(s1, 1.5, True))
    assert store.usage("alice", "total", 1.5).spent_nano == 600
    s2 = search_ask("alice", "s2", limits, 600 / NANO, 1.5)
    assert s2 is not None
    assert store.reserve(s2).admitted  # 600 < 1000 when asked
    store.settle(search_settle(s2, 1.6, True))
    s3 = search_ask("alice", "s3", limits, 600 / NANO, 1.6)
    assert s3 is not None
    assert store.reserve(s3).limit is Limit.RPM  # the flow and two searches: 3 requests
    s4 = search_ask("bob", "s4", Limits(budget_usd=1000 / NANO, budget_period="total"), 0, 1.6)
    assert s4 is not None and store.reserve(s4).admitted  # bob's own
    assert store.usage("alice", "total", 1.6).requests == 3


def test_an_image_turn_whose_vision_route_nothing_prices_is_refused_on_a_budget() -> None:
    """A text-only route's image turn on a key with a budget: its caption calls are paid too,
    so a vision model no price table and no vision route ``price`` prices is refused (402,
    ``unpriced``, naming the vision route and its model); priced, or no image, it is
    reserved; a key without a budget is never refused for it."""
    text = Route(
        "text",
        client=ANTHROPIC,
        path="*/v1/messages*",
        price=TokenPrice(input=1.0, output=1.0),
        images=False,
        vision="eyes",
    )
    eyes = Route("eyes", path="/vision-only/*", model_map=(("*", "looker-1"),))
    priced_eyes = Route(
        "eyes", path="/vision-only/*", model_map=(("*", "looker-1"),), price=TokenPrice(1.0, 1.0)
    )
    s = Settings(routes=(text, eyes))
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}  # fmt: skip
    content = [{"type": "text", "text": "colour?"}, image]
    body = json.dumps(
        {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": content}]}
    ).encode()
    matched = match_request(s, "POST", "h", "/v1/messages", body)
    budget = Limits(budget_usd=1.0, budget_period="total")
    got = plan_request(Given("alice", budget, text, "f", 1.0, vision=eyes), matched)
    assert isinstance(got, Refusal) and got.status == 402 and got.limit is Limit.UNPRICED
    assert "the model 'looker-1' has no price" in got.message
    assert "route 'eyes' sets no price" in got.message
    assert isinstance(
        plan_request(Given("alice", budget, text, "f", 1.0, vision=priced_eyes), matched), Planned
    )
    rated = Limits(rpm=5)
    assert isinstance(
        plan_request(Given("alice", rated, text, "f", 1.0, vision=eyes), matched), Planned
    )
    plain = json.dumps(
        {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    no_image = match_request(s, "POST", "h", "/v1/messages", plain)
    assert isinstance(
        plan_request(Given("alice", budget, text, "f", 1.0, vision=eyes), no_image), Planned
    )
