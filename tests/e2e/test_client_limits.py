"""End to end: limits per client key (``bridge_client_keys``: ``rpm``, ``max_parallel``,
``budget_usd``) through real mitmdump workers, driven by the official SDKs.

- ``rpm``: the request past the limit gets a 429 with ``Retry-After`` in its own dialect, read
  by the openai and anthropic SDKs as their rate-limit error, streamed and whole; the log line
  names the client key's name and the limit, never a key.
- Two workers on one real ``redis-server``, 50 concurrent requests from one key: the spend
  passes the budget by at most one request's real cost, ``max_parallel`` is never exceeded
  at the upstream; a budget's refusal is a 402 the SDKs do not retry.
- A worker killed while it holds reservations: they expire by themselves (the TTL), and what
  it spent is counted once."""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import redis as redis_py

from addon.plan.limits import NANO
from addon.stores.limits import keys_of
from addon.stores.redis_backend import PREFIX
from tests.e2e.harness import Proxy, Recorded, Reply, ScriptedUpstream
from tests.real.clients.loop import answer
from tests.redis_server import RedisServer, redis_server_or_skip

ROUTE_KEY = "sk-e2e-route-LIMITS-0001"
ALICE = "sk-e2e-alice-LIMITS-0002"
PRICE = 10_000.0
"""US dollars per million tokens, input and output alike: one scripted answer (10 input, 5
output tokens) costs $0.15."""
REAL_COST = 15 * PRICE / 1e6


def routes_text() -> str:
    return f"""
[[routes]]
name = "chat"
path = "*/chat/completions"
api_key_env = "CB_E2E_ROUTE_KEY"
price = {{ input = {PRICE}, output = {PRICE} }}
reserve_max_output = 64

[[routes]]
name = "messages"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"
api_key_env = "CB_E2E_ROUTE_KEY"
price = {{ input = {PRICE}, output = {PRICE} }}
"""


class Upstream:
    """Answers in the request's dialect (10 input, 5 output tokens reported), after
    ``hold`` seconds; counts the requests under way at once."""

    def __init__(self, hold: float = 0.0) -> None:
        self.hold = hold
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.served = 0

    def __call__(self, rec: Recorded) -> Reply:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(self.hold)
            body = rec.json()
            dialect = "anthropic" if rec.path.endswith("/messages") else "openai_chat"
            with self._lock:
                self.served += 1
            return answer(dialect, bool(body.get("stream")), "hello")
        finally:
            with self._lock:
                self.now -= 1


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], tuple[Path, Path]]:
    monkeypatch.setenv("CB_E2E_ROUTE_KEY", ROUTE_KEY)

    def write(limits: str) -> tuple[Path, Path]:
        routes, keys = tmp_path / "routes.toml", tmp_path / "keys.toml"
        routes.write_text(routes_text())
        keys.write_text(f'alice = {{ key = "{ALICE}", {limits} }}\n')
        return routes, keys

    return write


def no_secret(proxy: Proxy) -> str:
    log = proxy.log_text()
    assert ALICE not in log and ROUTE_KEY not in log
    assert "Traceback" not in log
    return log


def chat(proxy: Proxy, stream: bool, retries: int = 0) -> str:
    client = openai.OpenAI(
        base_url=f"{proxy.base_url}/v1", api_key=ALICE, max_retries=retries, timeout=30
    )
    messages: Any = [{"role": "user", "content": "hi"}]
    if not stream:
        done = client.chat.completions.create(model="m", messages=messages, max_tokens=50)
        return done.choices[0].message.content or ""
    chunks = client.chat.completions.create(
        model="m", messages=messages, max_tokens=50, stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def messages(proxy: Proxy, stream: bool) -> str:
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key=ALICE, max_retries=0, timeout=30)
    ask: Any = [{"role": "user", "content": "hi"}]
    if not stream:
        m = client.messages.create(model="m", max_tokens=50, messages=ask)
        return "".join(b.text for b in m.content if b.type == "text")
    with client.messages.stream(model="m", max_tokens=50, messages=ask) as s:
        return "".join(s.text_stream)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_rpm_refuses_with_429_and_retry_after_in_both_dialect_families(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    files: Callable[[str], tuple[Path, Path]],
    stream: bool,
) -> None:
    routes, keys = files("rpm = 2")
    upstream.script = Upstream()
    proxy = start_proxy(bridge_routes=str(routes), bridge_client_keys=str(keys))
    assert chat(proxy, stream) == "hello"
    assert messages(proxy, stream) == "hello"
    with pytest.raises(openai.RateLimitError) as err:
        chat(proxy, stream)
    wait = int(err.value.response.headers["retry-after"])
    assert 1 <= wait <= 60
    assert err.value.code == "rate_limit_exceeded"
    assert "client key 'alice' is over its rpm limit (2 requests per minute)" in str(err.value)
    with pytest.raises(anthropic.RateLimitError) as aerr:
        messages(proxy, stream)
    assert 1 <= int(aerr.value.response.headers["retry-after"]) <= 60
    assert aerr.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert len(upstream.requests) == 2  # the refused ones never went upstream
    log = no_secret(proxy)
    refused = [x for x in log.splitlines() if "over its rpm limit" in x]
    assert len(refused) == 2 and all("alice" in x and "outcome=rejected" in x for x in refused)


def spent(server: RedisServer, period: str) -> int:
    raw = redis_py.Redis.from_url(server.url)
    return int(raw.get(keys_of(PREFIX, "alice", period)[3]) or 0)


def test_two_workers_50_concurrent_requests_keep_the_budget_and_max_parallel(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    files: Callable[[str], tuple[Path, Path]],
) -> None:
    """Each answer stays within its reservation (input estimated + 50 output tokens reserved,
    15 tokens reported): the spend may pass $3 by one answer's real cost at most. The SDK
    retries a 429 (``max_parallel``) after its ``Retry-After``; a 402 never."""
    routes, keys = files('max_parallel = 3, budget_usd = 3.0, budget_period = "total"')
    service = upstream.script = Upstream(hold=0.3)
    with RedisServer(redis_server_or_skip()) as server:
        options = dict(bridge_routes=str(routes), bridge_client_keys=str(keys))
        # A loaded test machine may answer later than the default 0.25 s, which counts as
        # Redis lost (limits per worker, as docs/deploy.md says): not what this test is about.
        store = f"{server.url}?socket_timeout=5"
        workers = [start_proxy(bridge_store=store, **options) for _ in range(2)]

        def one(i: int) -> str:
            try:
                return chat(workers[i % 2], stream=bool(i % 3 == 0), retries=20)
            except openai.RateLimitError as e:
                assert e.response.headers["retry-after"] == "1"
                return "429"
            except openai.APIStatusError as e:
                assert e.status_code == 402, e
                assert e.response.headers["x-should-retry"] == "false"
                assert e.code == "insufficient_quota"
                return "402"

        with ThreadPoolExecutor(50) as pool:
            results = list(pool.map(one, range(50)))
        served = results.count("hello")
        assert served == service.served == len(upstream.requests)
        assert served + results.count("429") + results.count("402") == 50
        assert 2 <= service.most <= 3, f"{service.most} requests at once upstream"
        total = spent(server, "total")
        assert total == round(served * REAL_COST * NANO)
        assert served * REAL_COST <= 3.0 + REAL_COST
        assert served >= 3.0 / REAL_COST - 1  # the budget stopped them, not the parallel limit
        # spent: every later request is refused 402, which the SDK does not retry
        while spent(server, "total") < 3 * NANO:
            chat(workers[0], stream=False)
        before = len(upstream.requests)
        with pytest.raises(openai.APIStatusError) as err:
            chat(workers[1], stream=False, retries=3)
        assert err.value.status_code == 402 and len(upstream.requests) == before
        assert "client key 'alice' has spent its budget ($3 in total)" in str(err.value)
        for w in workers:
            no_secret(w)


def test_a_worker_killed_holding_reservations_frees_them_by_its_ttl(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    files: Callable[[str], tuple[Path, Path]],
) -> None:
    routes, keys = files('max_parallel = 2, budget_usd = 100.0, budget_period = "day"')
    service = upstream.script = Upstream(hold=2.0)
    with RedisServer(redis_server_or_skip()) as server:
        options = dict(
            bridge_routes=str(routes), bridge_client_keys=str(keys), bridge_store=server.url
        )
        doomed = start_proxy(bridge_client_limits_ttl=3, **options)
        other = start_proxy(bridge_client_limits_ttl=3, **options)
        with ThreadPoolExecutor(2) as pool:
            held = [pool.submit(chat, doomed, False) for _ in range(2)]
            deadline = time.monotonic() + 10
            while service.now < 2:
                assert time.monotonic() < deadline, "the two requests never reached upstream"
                time.sleep(0.02)
            proc = doomed._proc
            assert proc is not None
            proc.send_signal(signal.SIGKILL)  # holding two reservations
            proc.wait(10)
            for f in held:
                with pytest.raises(openai.APIConnectionError):
                    f.result(timeout=30)
        with pytest.raises(openai.RateLimitError):
            chat(other, stream=False)  # both slots still held by the dead worker
        service.hold = 0.0
        deadline = time.monotonic() + 15
        while True:  # the TTL (3 s) frees them; no renewal comes from the dead worker
            try:
                assert chat(other, stream=False) == "hello"
                break
            except openai.RateLimitError:
                assert time.monotonic() < deadline, "the dead worker's reservations never expired"
                time.sleep(0.25)
        period = [k.decode() for k in redis_py.Redis.from_url(server.url).keys("*:spent")]
        assert len(period) == 1
        # only the request that was answered is counted: the killed ones' estimates expired
        raw = redis_py.Redis.from_url(server.url)
        assert int(raw.get(period[0]) or 0) == round(REAL_COST * NANO)
        no_secret(other)


def test_the_metrics_count_refusals_and_the_budget_left(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    files: Callable[[str], tuple[Path, Path]],
) -> None:
    import httpx

    from tests.e2e.harness import free_port

    routes, keys = files('rpm = 1, budget_usd = 1.0, budget_period = "total"')
    upstream.script = Upstream()
    port = free_port()
    proxy = start_proxy(
        bridge_routes=str(routes), bridge_client_keys=str(keys), bridge_metrics=f"127.0.0.1:{port}"
    )
    proxy.wait_for_log(f"metrics at http://127.0.0.1:{port}/metrics")
    assert chat(proxy, stream=True) == "hello"
    with pytest.raises(openai.RateLimitError):
        chat(proxy, stream=False)
    deadline = time.monotonic() + 10
    while True:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        left = [x for x in text.splitlines() if x.startswith("cursor_bridge_budget_remaining_usd{")]
        if left and left[0].endswith(f" {1.0 - REAL_COST}"):
            break
        assert time.monotonic() < deadline, left
        time.sleep(0.1)
    assert 'cursor_bridge_limited_total{client="alice",limit="rpm"} 1.0' in text
    assert left == [f'cursor_bridge_budget_remaining_usd{{client="alice"}} {1.0 - REAL_COST}']
    no_secret(proxy)


def test_a_cut_stream_settles_what_was_delivered(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    files: Callable[[str], tuple[Path, Path]],
) -> None:
    """The upstream breaks its stream off before its usage (issue 42): the reservation is
    settled with the input as reserved and the output delivered, not left to expire."""
    from tests.e2e.harness import SSEReply
    from tests.real.clients.loop import chat_sse

    routes, keys = files('max_parallel = 1, budget_usd = 100.0, budget_period = "total"')
    body = chat_sse("word " * 200)
    events = [e for e in body.split(b"\n\n") if e.strip()]
    upstream.script = lambda rec: SSEReply(b"\n\n".join(events[:-5]) + b"\n\n", abort=True)
    with RedisServer(redis_server_or_skip()) as server:
        proxy = start_proxy(
            bridge_routes=str(routes), bridge_client_keys=str(keys), bridge_store=server.url
        )
        with pytest.raises(openai.APIError):
            chat(proxy, stream=True)
        raw = redis_py.Redis.from_url(server.url)
        k = keys_of(PREFIX, "alice", "total")
        deadline = time.monotonic() + 10
        while not raw.get(k[3]):
            assert time.monotonic() < deadline, "the cut stream was never settled"
            time.sleep(0.05)
        cost = int(raw.get(k[3]) or 0)
        delivered_most = round((20 + len(events)) * PRICE / 1e6 * NANO)  # "hi" + an event each
        assert 0 < cost <= delivered_most
        assert raw.zcard(k[2]) == 0 and raw.zcard(k[4]) == 0  # slot and reservation let go
        upstream.script = Upstream()
        assert chat(proxy, stream=False) == "hello"  # max_parallel = 1: the slot is free
        no_secret(proxy)


def test_limits_are_read_again_when_the_keys_file_changes(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    files: Callable[[str], tuple[Path, Path]],
) -> None:
    routes, keys = files("max_parallel = 5")
    upstream.script = Upstream()
    proxy = start_proxy(bridge_routes=str(routes), bridge_client_keys=str(keys))
    for _ in range(3):
        assert chat(proxy, stream=False) == "hello"
    keys.write_text(f'alice = "{ALICE}"\n[defaults]\nrpm = 4\n')  # now 4 a minute, all told
    assert chat(proxy, stream=False) == "hello"  # 4 in the window: the 3 before count
    with pytest.raises(openai.RateLimitError):
        chat(proxy, stream=False)
    keys.write_text(f'alice = "{ALICE}"\n[defaults]\nalice2 = "x"\n')  # a bad file: kept
    with pytest.raises(openai.RateLimitError):
        chat(proxy, stream=False)
    log = no_secret(proxy)
    assert "line 3: [defaults] holds only limits" in log


def test_redis_lost_limits_hold_per_worker_and_are_shared_again_when_back(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    files: Callable[[str], tuple[Path, Path]],
) -> None:
    routes, keys = files('rpm = 2, budget_usd = 100.0, budget_period = "day"')
    upstream.script = Upstream()
    with RedisServer(redis_server_or_skip()) as server:
        options = dict(
            bridge_routes=str(routes), bridge_client_keys=str(keys), bridge_store=server.url
        )
        one, two = start_proxy(**options), start_proxy(**options)
        assert chat(one, stream=False) == "hello"
        assert chat(two, stream=False) == "hello"
        with pytest.raises(openai.RateLimitError):
            chat(one, stream=False)  # shared: 2 a minute across both workers
        server.stop()
        # lost: each worker counts on its own (its own window starts empty)
        assert chat(one, stream=False) == "hello"
        assert chat(one, stream=False) == "hello"
        with pytest.raises(openai.RateLimitError):
            chat(one, stream=False)
        assert len(re.findall(r"Redis at \S+ lost", one.log_text())) == 1  # one warning
        server.start()
        # back: one's local window is full for a minute, so its first request admitted is
        # one its store's probe found Redis for: it lands in the restarted (empty) Redis
        deadline = time.monotonic() + 40
        while True:
            try:
                assert chat(one, stream=False) == "hello"
                break
            except openai.RateLimitError:
                assert time.monotonic() < deadline, "Redis never came back"
                time.sleep(0.5)
        assert "is back" in one.log_text()
        # shared again: two, which never lost Redis, admits one more of the 2
        window = keys_of(PREFIX, "alice", "")[0]
        assert redis_py.Redis.from_url(server.url).zcard(window) == 1
        served = 0
        for _ in range(3):
            with contextlib.suppress(openai.RateLimitError):
                chat(two, stream=False)
                served += 1
        assert served == 1
        for w in (one, two):
            no_secret(w)
