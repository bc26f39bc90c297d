"""End to end: limits per client key on the team gateway as a team runs it (issue 43's done
means): ``scripts/gateway`` — HAProxy in front of two mitmdump workers — on one real
``redis-server``, driven by the official SDKs (openai, anthropic). One gateway for the module;
each test uses clients of its own in one keys file, so none sees another's counts.

- ``tpm`` and a budget refuse in both dialect families, streamed and whole: the first request
  through one worker, the next through the other (the counts are shared), and through
  HAProxy. Over ``tpm``: a 429 with ``Retry-After`` the SDKs read as their rate-limit error;
  over a budget: a 402 with ``x-should-retry: false`` they do not retry.
- 50 concurrent requests from one key through HAProxy, both families, streamed and whole:
  the spend passes the budget by at most one request's real cost, ``max_parallel`` is never
  exceeded at the upstream, the spend is exactly what was served.
- Redis stopped: the limits hold per worker, each worker says so once; started again: shared
  again.
- A worker killed (SIGKILL) holding reservations: HAProxy takes it out, its reservations expire
  by their TTL, what was answered is counted once (last: the gateway has one worker left).

Skipped, saying why, where HAProxy or redis-server is not installed."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
import redis as redis_py

from addon.plan.limits import NANO
from addon.stores.limits import keys_of
from addon.stores.redis_backend import PREFIX
from tests.e2e.gateway_run import GatewayRun, require_haproxy
from tests.e2e.harness import ScriptedUpstream
from tests.e2e.test_client_limits import REAL_COST, ROUTE_KEY, Upstream, routes_text
from tests.redis_server import RedisServer, redis_server_or_skip

TTL = 5
"""``bridge_client_limits_ttl``: seconds a dead worker's reservation outlives it."""
COMBOS = [
    ("openai", False),
    ("openai", True),
    ("anthropic", False),
    ("anthropic", True),
]
IDS = [f"{family}-{'streamed' if s else 'whole'}" for family, s in COMBOS]


def key_of(name: str) -> str:
    return f"sk-e2e-{name}-GATEWAY-LIMITS-{len(name):04d}"


CLIENTS = {
    **{f"tpm{i}": "tpm = 10" for i in range(len(COMBOS))},
    **{f"budget{i}": 'budget_usd = 0.1, budget_period = "day"' for i in range(len(COMBOS))},
    "crowd": 'max_parallel = 3, budget_usd = 3.0, budget_period = "total"',
    "lost": "rpm = 3",
    "lostbudget": 'budget_usd = 0.5, budget_period = "total"',
    "doomed": 'max_parallel = 2, budget_usd = 100.0, budget_period = "total"',
}


@dataclass
class Gateway:
    run: GatewayRun
    redis: RedisServer

    def url(self, worker: str | None = None) -> str:
        """HAProxy's base URL, or a worker's own (``w1``, ``w2``)."""
        port = self.run.port if worker is None else self.run.workers[worker][0]
        return f"http://127.0.0.1:{port}"

    def spent(self, client: str, period: str) -> int:
        raw = redis_py.Redis.from_url(self.redis.url)
        return int(raw.get(keys_of(PREFIX, client, period)[3]) or 0)

    def no_secret(self) -> str:
        log = self.run.log_text()
        assert ROUTE_KEY not in log and "Traceback" not in log
        assert not [k for k in map(key_of, CLIENTS) if k in log]
        return log


@pytest.fixture(scope="module")
def gateway(
    _upstream_server: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    require_haproxy()
    tmp = tmp_path_factory.mktemp("gateway-limits")
    routes, keys = tmp / "routes.toml", tmp / "keys.toml"
    routes.write_text(routes_text())
    keys.write_text(
        "".join(f'{n} = {{ key = "{key_of(n)}", {lim} }}\n' for n, lim in CLIENTS.items())
    )
    old = os.environ.get("CB_E2E_ROUTE_KEY")
    os.environ["CB_E2E_ROUTE_KEY"] = ROUTE_KEY  # the workers' environment
    try:
        with RedisServer(redis_server_or_skip()) as server:
            options = [
                *("--set", f"bridge_routes={routes}"),
                *("--set", f"bridge_client_keys={keys}"),
                # A loaded test machine may answer later than the default 0.25 s, which
                # counts as Redis lost (limits per worker): here Redis is lost only when stopped.
                *("--set", f"bridge_store={server.url}?socket_timeout=5"),
                *("--set", f"bridge_client_limits_ttl={TTL}"),
            ]
            with GatewayRun(_upstream_server.port, workers=2, options=options) as run:
                yield Gateway(run, server)
                # Shown only when a test failed (pytest's captured output of the teardown).
                print(f"----- scripts/gateway's output -----\n{run.log_text()[-8000:]}")
    finally:
        if old is None:
            os.environ.pop("CB_E2E_ROUTE_KEY", None)
        else:
            os.environ["CB_E2E_ROUTE_KEY"] = old


def ask(url: str, client: str, family: str, stream: bool, retries: int = 0) -> str:
    """One request of ``client`` in its family's SDK; the answer's text."""
    if family == "anthropic":
        a = anthropic.Anthropic(
            base_url=url, api_key=key_of(client), max_retries=retries, timeout=30
        )
        msgs: Any = [{"role": "user", "content": "hi"}]
        if not stream:
            m = a.messages.create(model="m", max_tokens=50, messages=msgs)
            return "".join(b.text for b in m.content if b.type == "text")
        with a.messages.stream(model="m", max_tokens=50, messages=msgs) as s:
            return "".join(s.text_stream)
    o = openai.OpenAI(base_url=f"{url}/v1", api_key=key_of(client), max_retries=retries, timeout=30)
    messages: Any = [{"role": "user", "content": "hi"}]
    if not stream:
        done = o.chat.completions.create(model="m", messages=messages, max_tokens=50)
        return done.choices[0].message.content or ""
    chunks = o.chat.completions.create(model="m", messages=messages, max_tokens=50, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def until(what: str, check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def refusal_lines(gateway: Gateway, client: str, limit: str) -> list[str]:
    return [
        x
        for x in gateway.run.log_text().splitlines()
        if "outcome=rejected" in x and f"client_name={client}" in x and f"limit={limit}" in x
    ]


@pytest.mark.parametrize(("family", "stream"), COMBOS, ids=IDS)
def test_tpm_refuses_with_429_and_retry_after_across_workers(
    gateway: Gateway, upstream: ScriptedUpstream, family: str, stream: bool
) -> None:
    """``tpm = 10``: the first request (10 input, 5 output tokens settled) is admitted by one
    worker; the window holds 15 tokens, so the other worker refuses the next, and so does
    HAProxy's choice."""
    client = f"tpm{COMBOS.index((family, stream))}"
    upstream.script = Upstream()
    assert ask(gateway.url("w1"), client, family, stream) == "hello"
    rate_error = anthropic.RateLimitError if family == "anthropic" else openai.RateLimitError
    for url in (gateway.url("w2"), gateway.url()):
        with pytest.raises(rate_error) as err:
            ask(url, client, family, stream)
        assert 1 <= int(err.value.response.headers["retry-after"]) <= 60
        assert f"client key '{client}' is over its tpm limit (10 tokens per minute)" in str(
            err.value
        )
    assert len(upstream.requests) == 1  # the refused ones never went upstream
    until("no refusal line", lambda: len(refusal_lines(gateway, client, "tpm")) == 2)
    gateway.no_secret()


@pytest.mark.parametrize(("family", "stream"), COMBOS, ids=IDS)
def test_a_spent_budget_is_a_402_the_sdks_do_not_retry_across_workers(
    gateway: Gateway, upstream: ScriptedUpstream, family: str, stream: bool
) -> None:
    """``budget_usd = 0.1`` a day: one answer costs $0.15; once it is settled, the other
    worker and HAProxy refuse every request with a 402 (``x-should-retry: false``), which
    the SDKs (3 retries allowed) do not send again."""
    client = f"budget{COMBOS.index((family, stream))}"
    period = f"day:{time.strftime('%Y-%m-%d', time.gmtime())}"
    upstream.script = Upstream()
    assert ask(gateway.url("w1"), client, family, stream) == "hello"
    until("the answer was never settled", lambda: gateway.spent(client, period) > 0)
    assert gateway.spent(client, period) == round(REAL_COST * NANO)
    for url in (gateway.url("w2"), gateway.url()):
        with pytest.raises(
            anthropic.APIStatusError if family == "anthropic" else openai.APIStatusError
        ) as err:
            ask(url, client, family, stream, retries=3)
        assert err.value.status_code == 402
        assert err.value.response.headers["x-should-retry"] == "false"
        assert f"client key '{client}' has spent its budget ($0.1 per day, UTC)" in str(err.value)
    assert len(upstream.requests) == 1  # neither refusal was sent again, nor upstream
    until("no refusal line", lambda: len(refusal_lines(gateway, client, "budget")) == 2)
    gateway.no_secret()


def test_50_concurrent_requests_through_haproxy_keep_the_budget_and_max_parallel(
    gateway: Gateway, upstream: ScriptedUpstream
) -> None:
    """Both families, streamed and whole, 50 at once through HAProxy (both workers): each
    answer stays within its reservation, so the spend passes $3 by one answer's real cost at
    most, and never more than 3 run upstream at once. The SDKs retry a 429 (the parallel
    limit, or the budget held by requests under way) after its ``Retry-After``; a 402 never."""
    service = upstream.script = Upstream(hold=0.3)

    def one(i: int) -> str:
        family, stream = COMBOS[i % len(COMBOS)]
        try:
            return ask(gateway.url(), "crowd", family, stream, retries=20)
        except (openai.RateLimitError, anthropic.RateLimitError) as e:
            assert e.response.headers["retry-after"] == "1"
            return "429"
        except (openai.APIStatusError, anthropic.APIStatusError) as e:
            assert e.status_code == 402, e
            assert e.response.headers["x-should-retry"] == "false"
            return "402"

    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(one, range(50)))
    served = results.count("hello")
    assert served == service.served == len(upstream.requests)
    assert served + results.count("429") + results.count("402") == 50
    assert 2 <= service.most <= 3, f"{service.most} requests at once upstream"
    until(
        "the last answers were never settled",
        lambda: gateway.spent("crowd", "total") >= served * round(REAL_COST * NANO),
    )
    total = gateway.spent("crowd", "total")
    assert total == served * round(REAL_COST * NANO)  # each answer counted once
    assert served * REAL_COST <= 3.0 + REAL_COST
    assert served >= 3.0 / REAL_COST - 1  # the budget stopped them, not the parallel limit
    workers = {
        w for w in ("w1", "w2") if any("client_name=crowd" in x for x in gateway.run.lines_of(w))
    }
    assert workers == {"w1", "w2"}  # HAProxy shared them out
    gateway.no_secret()


def test_redis_stopped_limits_hold_per_worker_and_are_shared_again_when_back(
    gateway: Gateway, upstream: ScriptedUpstream
) -> None:
    """Redis stopped: each worker counts on its own and says so once. ``rpm = 3``: each
    worker's window starts empty, 3 more each. ``budget_usd = 0.5``: each worker counts on
    from the spend Redis last told it and refuses once it alone has spent the rest (one
    request past it at most). Started again: both count in Redis again."""
    upstream.script = Upstream()
    cost = round(REAL_COST * NANO)
    assert ask(gateway.url("w1"), "lost", "openai", False) == "hello"
    known = {}
    for w in ("w1", "w2"):  # each worker's last word from Redis: the spend after its answer
        assert ask(gateway.url(w), "lostbudget", "anthropic", False) == "hello"
        known[w] = gateway.spent("lostbudget", "total")
    assert known == {"w1": cost, "w2": 2 * cost}
    gateway.redis.stop()
    try:
        for w in ("w1", "w2"):  # 3 a minute on each worker now
            for _ in range(3):
                assert ask(gateway.url(w), "lost", "anthropic", False) == "hello"
            with pytest.raises(anthropic.RateLimitError):
                ask(gateway.url(w), "lost", "anthropic", False)
        for w in ("w1", "w2"):
            admitted = 0
            with pytest.raises(openai.APIStatusError) as err:
                for _ in range(10):
                    ask(gateway.url(w), "lostbudget", "openai", False, retries=2)
                    admitted += 1
            assert err.value.status_code == 402
            rest = round(0.5 * NANO) - known[w]
            assert admitted == -(-rest // cost), (w, admitted)  # the rest, one past it at most
    finally:
        gateway.redis.start()
    for w in ("w1", "w2"):
        lost = [x for x in gateway.run.lines_of(w) if re.search(r"Redis at \S+ lost", x)]
        assert len(lost) == 1, lost  # one warning per worker
    # Back: each worker's local window is full for a minute, so the first request a worker
    # admits is one its store's probe found Redis for: it lands in the restarted Redis.
    for w in ("w1", "w2"):
        deadline = time.monotonic() + 40
        while True:
            try:
                assert ask(gateway.url(w), "lost", "openai", True) == "hello"
                break
            except openai.RateLimitError:
                assert time.monotonic() < deadline, f"{w}: Redis never came back"
                time.sleep(0.5)
        assert any("is back" in x for x in gateway.run.lines_of(w))
    window = keys_of(PREFIX, "lost", "")[0]
    assert redis_py.Redis.from_url(gateway.redis.url).zcard(window) == 2
    # shared again: one more of the 3, through either worker
    assert ask(gateway.url(), "lost", "openai", False) == "hello"
    for url in (gateway.url("w1"), gateway.url("w2")):
        with pytest.raises(openai.RateLimitError):
            ask(url, "lost", "openai", False)
    gateway.no_secret()


def test_a_worker_killed_holding_reservations_frees_them_by_their_ttl(
    gateway: Gateway, upstream: ScriptedUpstream
) -> None:
    """Two requests held upstream through w1 (``max_parallel = 2``), w1 killed: HAProxy takes
    it out; the two slots stay held until their TTL, then free; only what was answered is
    spent (the killed requests' estimates expired, nothing counted twice). Last in the module:
    the gateway has one worker left."""
    service = upstream.script = Upstream(hold=3.0)
    victim, survivor = "w1", "w2"
    with ThreadPoolExecutor(2) as pool:
        held = [
            pool.submit(ask, gateway.url(victim), "doomed", f, False)
            for f in ("openai", "anthropic")
        ]
        until("the two requests never reached upstream", lambda: service.now >= 2)
        os.kill(gateway.run.workers[victim][1], signal.SIGKILL)
        for f in held:
            with pytest.raises((openai.APIConnectionError, anthropic.APIConnectionError)):
                f.result(timeout=30)
    service.hold = 0.0
    with pytest.raises(openai.RateLimitError):  # both slots still held by the dead worker
        ask(gateway.url(survivor), "doomed", "openai", False)
    gateway.run.wait_for_log(rf"Server workers/{victim} is DOWN", timeout=20)
    deadline = time.monotonic() + 5 * TTL
    while True:  # the TTL frees them; no renewal comes from the dead worker
        try:
            assert ask(gateway.url(), "doomed", "anthropic", True) == "hello"
            break
        except anthropic.RateLimitError:
            assert time.monotonic() < deadline, "the dead worker's reservations never expired"
            time.sleep(0.25)
    until("the answer was never settled", lambda: gateway.spent("doomed", "total") > 0)
    time.sleep(0.5)  # a second count of anything would land now
    assert gateway.spent("doomed", "total") == round(REAL_COST * NANO)
    raw = redis_py.Redis.from_url(gateway.redis.url)
    k = keys_of(PREFIX, "doomed", "total")
    secs, micros = raw.time()
    now_ms = secs * 1000 + micros // 1000  # the scripts' clock: Redis's own
    # no live slot and no open reservation left (the dead one's, expired, wait to be dropped)
    assert raw.zcount(k[2], now_ms + 1, "+inf") == 0
    assert raw.zcount(k[4], now_ms + 1, "+inf") == 0
    assert any("client_name=doomed" in x for x in gateway.run.lines_of(survivor))
    gateway.no_secret()
