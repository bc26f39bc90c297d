"""``bridge_metrics`` on the team gateway (issue 43 point 3): ``scripts/gateway`` runs two
workers behind a real HAProxy on one real ``redis-server``, ``--set bridge_metrics=127.0.0.1:0``
gives each its own metrics port, and a real ``prometheus`` (Debian's) scrapes both. Requests
go through HAProxy with the OpenAI and Anthropic SDKs, streamed and whole, to a route with a
key pool and a fallback: Prometheus's sums equal ``scripts/usage --csv``; a key the upstream
refuses for its own fault shows as ``revoked`` in ``cursor_bridge_key_pool_keys`` on every
worker alike (the shared store: aggregate with ``max``); a 503 of the pool's upstream is one
``cursor_bridge_fallbacks_total`` and the spare route answers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.gateway_run import GatewayRun, require_haproxy
from tests.e2e.harness import JSONReply, Recorded, Reply, ScriptedUpstream, SSEReply
from tests.e2e.test_metrics import booked_usage_csv
from tests.e2e.test_shared_store import PASSWORD, store_url
from tests.e2e.test_usage_ledger import chat_answer, chat_stream
from tests.prometheus_server import PrometheusServer, prometheus_or_skip
from tests.redis_server import RedisServer, redis_server_or_skip

KEYS = {
    "CB_GM_POOL_A": "sk-gm-pool-a-0123456789abcdef",
    "CB_GM_POOL_B": "sk-gm-pool-b-0123456789abcdef",
    "CB_GM_SPARE": "sk-gm-spare-0123456789abcdef",
}
TEAM = {"alice": "sk-team-gm-alice-0123456789", "bob": "sk-team-gm-bob-9876543210"}
METRICS = re.compile(r"(w\d+) 127\.0\.0\.1:\d+ pid \d+ metrics http://(127\.0\.0\.1:\d+)/metrics")


def invalid_key() -> JSONReply:
    """OpenAI's 401 for a key it does not know: the key's own fault (revoked)."""
    body = {
        "error": {
            "message": "Incorrect API key provided: sk-gm-****cdef.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    return JSONReply(body, status=401)


def unavailable() -> JSONReply:
    return JSONReply({"error": {"message": "down", "type": "server_error", "code": None}}, 503)


class Pool:
    """The pool's OpenAI-compatible upstream: either key of the pool, else 401; answers
    queued by the test first (an error), then a chat answer as the request asks."""

    def __init__(self, server: ScriptedUpstream) -> None:
        self.server = server
        self.queued: list[Reply] = []
        server.script = self

    def __call__(self, rec: Recorded) -> Reply:
        auth = rec.headers.get("authorization", "").removeprefix("Bearer ")
        if auth not in (KEYS["CB_GM_POOL_A"], KEYS["CB_GM_POOL_B"]):
            return invalid_key()
        if self.queued:
            return self.queued.pop(0)
        return SSEReply(chat_stream()) if rec.json().get("stream") else JSONReply(chat_answer())


@pytest.fixture
def pool() -> Iterator[Pool]:
    server = ScriptedUpstream().start()
    try:
        yield Pool(server)
        assert not server.errors, server.errors
    finally:
        server.stop()


def routes(pool: Pool, spare: ScriptedUpstream) -> str:
    return f"""
[[routes]]
name = "pool"
path = "*/chat/completions"
upstream_url = "{pool.server.base_url}"
api_key_env = ["CB_GM_POOL_A", "CB_GM_POOL_B"]
fallback = ["spare"]
model_map = {{ "fast" = "gpt-4o" }}

[[routes]]
name = "claude"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_chat"
upstream_url = "{pool.server.base_url}"
api_key_env = ["CB_GM_POOL_A", "CB_GM_POOL_B"]
model_map = {{ "sonnet" = "gpt-4o-mini" }}

[[routes]]
name = "spare"
path = "/spare/v1/chat/completions"
upstream_url = "{spare.base_url}"
api_key_env = "CB_GM_SPARE"
model_map = {{ "fast" = "gpt-4o" }}
"""


def ask(port: int, n: int) -> None:
    """Request ``n`` through HAProxy: alice or bob, OpenAI or Anthropic SDK, whole or streamed."""
    name, stream = ("alice", "bob")[n % 2], n % 4 >= 2
    base = f"http://127.0.0.1:{port}"
    messages: Any = [{"role": "user", "content": f"hello {n}"}]
    if n % 3:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key=TEAM[name], max_retries=0, timeout=30)
        if stream:
            chunks = client.chat.completions.create(model="fast", messages=messages, stream=True)
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hi"
        else:
            got = client.chat.completions.create(model="fast", messages=messages)
            assert got.choices[0].message.content == "hi"
        return
    claude = anthropic.Anthropic(base_url=base, api_key=TEAM[name], max_retries=0, timeout=30)
    if stream:
        with claude.messages.stream(model="sonnet", max_tokens=50, messages=messages) as events:
            assert events.get_final_text() == "hi"
    else:
        got = claude.messages.create(model="sonnet", max_tokens=50, messages=messages)
        assert got.content[0].type == "text"


def test_two_workers_behind_haproxy_scraped_by_prometheus(
    upstream: ScriptedUpstream,
    pool: Pool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_haproxy()
    prometheus = prometheus_or_skip()
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "routes.toml").write_text(routes(pool, upstream))
    (tmp_path / "clients.toml").write_text("".join(f'{n} = "{k}"\n' for n, k in TEAM.items()))
    upstream.script = lambda rec: (  # the spare route's upstream
        SSEReply(chat_stream()) if rec.json().get("stream") else JSONReply(chat_answer())
    )
    with RedisServer(redis_server_or_skip(), extra=("--requirepass", PASSWORD)) as redis:
        url = store_url(redis)
        options = [
            "--set",
            f"bridge_routes={tmp_path / 'routes.toml'}",
            "--set",
            f"bridge_client_keys={tmp_path / 'clients.toml'}",
            "--set",
            f"bridge_store={url}",
            "--set",
            "bridge_metrics=127.0.0.1:0",
        ]
        with GatewayRun(upstream.port, workers=2, options=options) as gateway:
            try:
                scraped = dict(METRICS.findall(gateway.log_text()))
                assert set(scraped) == {"w1", "w2"}, gateway.log_text()[-2000:]
                assert len(set(scraped.values())) == 2
                with PrometheusServer(prometheus, list(scraped.values())) as prom:
                    prom.wait_for('count(up{job="cursor-bridge"} == 1)', 2)
                    _check(gateway, pool, upstream, prom, url)
            finally:
                print(f"----- scripts/gateway's output -----\n{gateway.log_text()[-8000:]}")
            log = gateway.log_text()
            assert "Traceback" not in log
            assert not [s for s in (PASSWORD, *KEYS.values(), *TEAM.values()) if s in log]


def _check(
    gateway: GatewayRun, pool: Pool, spare: ScriptedUpstream, prom: PrometheusServer, url: str
) -> None:
    # Twelve requests at once over HAProxy: both workers serve.
    with ThreadPoolExecutor(6) as threads:
        list(threads.map(lambda n: ask(gateway.port, n), range(12)))
    prom.wait_for("sum(cursor_bridge_requests_total)", 12)
    per_worker = prom.vector("sum by (instance) (cursor_bridge_requests_total)")
    assert len(per_worker) == 2 and all(v > 0 for _, v in per_worker), per_worker

    # A key refused for its own fault: revoked on the shared store, seen by both workers.
    pool.queued.append(invalid_key())
    ask(gateway.port, 1)
    prom.wait_for('count(cursor_bridge_key_pool_keys{route="pool",state="revoked"} == 1)', 2)
    assert prom.value('max(cursor_bridge_key_pool_keys{route="pool",state="ready"})') == 1
    prom.wait_for('sum(cursor_bridge_fallbacks_total{reason="key_refused"})', 1)

    # The pool's upstream down: one fallback, the spare route answers.
    before = len(spare.requests)
    pool.queued.append(unavailable())
    ask(gateway.port, 2)
    assert len(spare.requests) == before + 1
    prom.wait_for('sum(cursor_bridge_fallbacks_total{reason="answered_failure"})', 1)

    # Every request the ledger counts, Prometheus counts alike (per client and kind).
    prom.wait_for("sum(cursor_bridge_requests_total)", 14)
    rows = booked_usage_csv(url, "client,route", 14)
    assert sum(int(r["requests"]) for r in rows) == 14
    for row in rows:
        for kind in ("input", "output", "cache_read", "reasoning"):
            got = prom.value(
                f'sum(cursor_bridge_tokens_total{{client="{row["client"]}",'
                f'route="{row["route"]}",kind="{kind}"}})'
            )
            assert got == float(row[kind]), (row, kind, got)
    requests = prom.vector("sum by (client) (cursor_bridge_requests_total)")
    assert sum(v for _, v in requests) == 14 and {m["client"] for m, _ in requests} == {
        "alice",
        "bob",
    }
