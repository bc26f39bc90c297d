"""``bridge_metrics`` end to end: real mitmdump workers on one real ``redis-server`` before a
scripted upstream that reports known usage, scraped by a real ``prometheus`` (Debian's) on its
own loopback port; the query API's sums equal ``scripts/usage --csv``'s for the same flows,
every panel of docs/grafana-dashboard.json parses and returns, label values stay bounded (a
5,000-character model is ``other``, a request without a client key ``anonymous``), and
``/metrics`` is never served on the proxy's own listener."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from addon.report.usage_table import genai_prices
from tests.e2e.harness import JSONReply, Proxy, ScriptedUpstream, SSEReply, free_port
from tests.e2e.route_tables import chat_route, vision_route
from tests.e2e.test_shared_store import PASSWORD, store_url
from tests.e2e.test_usage_ledger import USAGE, chat_answer, chat_stream
from tests.prometheus_server import PrometheusServer, prometheus_or_skip
from tests.redis_server import RedisServer, redis_server_or_skip

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
ROUTE_KEY = "sk-e2e-metrics-route-key-0123456789"
ROUTES = """
[[routes]]
name = "keyed"
path = "/keyed/v1/chat/completions"
api_key_env = "CB_E2E_METRICS_KEY"
model_map = { "fast" = "gpt-4o" }

[[routes]]
name = "claude"
path = "/claude/v1/messages"
client = "anthropic"
upstream = "openai_chat"
upstream_path = "/claude/v1/chat/completions"
api_key_env = "CB_E2E_METRICS_KEY"
model_map = { "sonnet" = "gpt-4o-mini" }
"""
TEAM = {"alice": "sk-team-alice-0123456789abcdef", "bob": "sk-team-bob-fedcba9876543210"}
LONG_MODEL = "m" * 5000
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "1h", "$__interval": "15s"}


def scrape(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


def booked_usage_csv(
    url: str, by: str, requests: int, timeout: float = 15.0
) -> list[dict[str, str]]:
    """``usage_csv`` once the ledger holds ``requests`` requests: a worker on a shared store
    writes its ledger rows from the store thread's queue, within a second of the flow (the
    metrics count it at once), so a scrape may see a flow the ledger has yet to get."""
    deadline = time.monotonic() + timeout
    while True:
        rows = usage_csv(url, by)
        if sum(int(r["requests"]) for r in rows) >= requests or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def usage_csv(url: str, by: str) -> list[dict[str, str]]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/usage.py"), "--store", url, "--csv", "--by", by],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return list(csv.DictReader(io.StringIO(out)))


def panel_queries() -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` of every target of the committed dashboard, Grafana's
    variables replaced by what Grafana would put there."""
    found = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(name, value)
            found.append((panel["title"], expr))
    return found


def test_prometheus_sums_equal_scripts_usage_for_two_workers(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two workers on one Redis, each with its own metrics port, scraped by a real Prometheus:
    alice's and bob's requests (OpenAI and Anthropic SDKs, streamed and whole) over both
    workers, and one upstream error; Prometheus's sums by client and kind (and cost) equal
    ``scripts/usage --csv``'s; every dashboard panel's query parses and returns."""
    prometheus = prometheus_or_skip()
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    keys = tmp_path / "clients.toml"
    keys.write_text("".join(f'{name} = "{key}"\n' for name, key in TEAM.items()))
    monkeypatch.setenv("CB_E2E_METRICS_KEY", ROUTE_KEY)
    with RedisServer(redis_server_or_skip(), extra=("--requirepass", PASSWORD)) as redis:
        url = store_url(redis)
        ports = [free_port(), free_port()]
        workers = [
            start_proxy(
                bridge_routes=str(routes),
                bridge_store=url,
                bridge_client_keys=str(keys),
                bridge_metrics=f"127.0.0.1:{port}",
            )
            for port in ports
        ]
        for w, port in zip(workers, ports, strict=True):
            assert port != w.port
            w.wait_for_log(f"metrics at http://127.0.0.1:{port}/metrics")
        with PrometheusServer(prometheus, [f"127.0.0.1:{p}" for p in ports]) as prom:
            prom.wait_for('count(up{job="cursor-bridge"} == 1)', 2)
            answered = 0
            for n in range(8):
                worker, name, stream = workers[n % 2], ("alice", "bob")[n // 4], n % 4 >= 2
                messages: Any = [{"role": "user", "content": "hello"}]
                if n % 4 in (0, 2):
                    client = openai.OpenAI(
                        base_url=f"{worker.base_url}/keyed/v1",
                        api_key=TEAM[name],
                        max_retries=0,
                        timeout=15,
                    )
                    if stream:
                        upstream.enqueue(SSEReply(chat_stream(), seed=n))
                        with client.chat.completions.create(
                            model="fast", messages=messages, stream=True
                        ) as chunks:
                            assert "".join(
                                c.choices[0].delta.content or "" for c in chunks if c.choices
                            )
                    else:
                        upstream.enqueue(JSONReply(chat_answer()))
                        client.chat.completions.create(model="fast", messages=messages)
                else:
                    claude = anthropic.Anthropic(
                        base_url=f"{worker.base_url}/claude",
                        api_key=TEAM[name],
                        max_retries=0,
                        timeout=15,
                    )
                    if stream:
                        upstream.enqueue(SSEReply(chat_stream(), seed=n))
                        with claude.messages.stream(
                            model="sonnet", max_tokens=100, messages=messages
                        ) as events:
                            assert events.get_final_text() == "hi"
                    else:
                        upstream.enqueue(JSONReply(chat_answer()))
                        got = claude.messages.create(
                            model="sonnet", max_tokens=100, messages=messages
                        )
                        assert got.content[0].type == "text"
                answered += 1
            # One upstream error: counted as a request and an upstream error, not as usage.
            upstream.enqueue(
                JSONReply(
                    {"error": {"message": "boom", "type": "server_error", "code": None}},
                    status=500,
                )
            )
            with pytest.raises(openai.InternalServerError):
                openai.OpenAI(
                    base_url=f"{workers[0].base_url}/keyed/v1",
                    api_key=TEAM["alice"],
                    max_retries=0,
                    timeout=15,
                ).chat.completions.create(model="fast", messages=[{"role": "user", "content": "x"}])

            prom.wait_for("sum(cursor_bridge_requests_total)", answered + 1)
            # Both workers served: each one's own series reached Prometheus.
            per_worker = prom.vector("sum by (instance) (cursor_bridge_requests_total)")
            assert len(per_worker) == 2 and all(v > 0 for _, v in per_worker)
            prom.wait_for('sum(cursor_bridge_upstream_errors_total{status="500"})', 1)

            rows = booked_usage_csv(url, "client,route", answered)
            assert sum(int(r["requests"]) for r in rows) == answered
            for row in rows:
                for kind in ("input", "output", "cache_read", "cache_write", "reasoning"):
                    got = prom.value(
                        f'sum(cursor_bridge_tokens_total{{client="{row["client"]}",'
                        f'route="{row["route"]}",kind="{kind}"}})'
                    )
                    assert got == float(row[kind]), (row, kind, got)
            by_client = {r["client"]: r for r in usage_csv(url, "client")}
            assert set(by_client) == {"alice", "bob"}
            requests = prom.vector("sum by (client) (cursor_bridge_requests_total)")
            # The ledger's 4 each, and alice's upstream error (a request, no usage).
            assert {m["client"]: v for m, v in requests} == {"alice": 5, "bob": 4}
            if genai_prices() is not None:
                for name, row in by_client.items():
                    assert row["cost_usd"], row  # gpt-4o and gpt-4o-mini are priced
                    got = prom.value(f'sum(cursor_bridge_cost_usd_total{{client="{name}"}})')
                    assert got is not None
                    assert abs(Decimal(repr(got)) - Decimal(row["cost_usd"])) < Decimal("1e-8")
            models = {m["model"] for m, _ in prom.vector("cursor_bridge_tokens_total")}
            assert models == {"gpt-4o", "gpt-4o-mini"}
            assert prom.value("sum(cursor_bridge_first_token_seconds_count)") == answered

            time.sleep(2.5)  # two more scrapes: rate() over the panels' window has samples
            empty_allowed = {"Budget remaining", "Requests refused", "Key pool", "Fallbacks"}
            for title, expr in panel_queries():
                answer = prom.query(expr)
                assert answer["status"] == "success", (title, expr, answer)
                if not any(title.startswith(e) for e in empty_allowed):
                    assert answer["data"]["result"], (title, expr)
        for w in workers:
            log = w.log_text()
            assert "Traceback" not in log
            assert not [s for s in (ROUTE_KEY, PASSWORD, *TEAM.values()) if s in log]


def test_labels_stay_bounded_and_metrics_are_not_on_the_proxys_listener(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 5,000-character model becomes ``model="other"``, a request without a client key
    ``client="anonymous"``; the usage still counts in full. ``GET /metrics`` on the proxy's
    own listener is the upstream's to answer (reverse mode), never the bridge's Prometheus
    text; the metrics port is another listener."""
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    monkeypatch.setenv("CB_E2E_METRICS_KEY", ROUTE_KEY)
    port = free_port()
    p = start_proxy(bridge_routes=str(routes), bridge_metrics=f"127.0.0.1:{port}")
    p.wait_for_log(f"metrics at http://127.0.0.1:{port}/metrics")
    client = openai.OpenAI(
        base_url=f"{p.base_url}/keyed/v1", api_key="client-own-key", max_retries=0, timeout=15
    )
    upstream.enqueue(JSONReply(chat_answer()))
    client.chat.completions.create(model=LONG_MODEL, messages=[{"role": "user", "content": "x"}])
    upstream.enqueue(JSONReply(chat_answer()))
    client.chat.completions.create(model="fast", messages=[{"role": "user", "content": "x"}])

    deadline = time.monotonic() + 10
    while "cursor_bridge_requests_total{" not in (text := scrape(port)):
        assert time.monotonic() < deadline, text
        time.sleep(0.05)
    time.sleep(0.3)
    text = scrape(port)
    assert LONG_MODEL[:100] not in text
    assert 'model="other"' in text and 'model="gpt-4o"' in text
    series = [line for line in text.splitlines() if line.startswith("cursor_bridge_")]
    assert all(len(line) < 400 for line in series)
    tokens = [
        line
        for line in series
        if line.startswith("cursor_bridge_tokens_total{") and 'kind="output"' in line
    ]
    assert tokens and all('client="anonymous"' in line for line in tokens)
    assert sum(float(line.rsplit(" ", 1)[1]) for line in tokens) == 2 * USAGE["completion_tokens"]
    assert "# TYPE cursor_bridge_key_pool_keys gauge" in text
    assert "cursor_bridge_repairs_total" in text and "cursor_bridge_limited_total" in text

    upstream.enqueue(JSONReply({"upstream": "its own /metrics"}))
    got = httpx.get(f"{p.base_url}/metrics", timeout=10)
    assert got.json() == {"upstream": "its own /metrics"}
    assert upstream.requests[-1].path == "/metrics"
    assert "cursor_bridge_" not in got.text
    assert "Traceback" not in p.log_text()


def search_and_vision(searxng: str, vision: int) -> str:
    """A searching route; a text-only route captioned by the vision route "eyes"."""
    key_env, to_gpt = "CB_E2E_METRICS_KEY", 'model_map = { "claude-*" = "gpt-4o" }'
    return "".join(
        [
            chat_route(
                "search", key_env, to_gpt, f'search = {{ url = "{searxng}", price = 0.01 }}'
            ),
            chat_route("text", key_env, to_gpt, "images = false", 'vision = "eyes"'),
            vision_route(
                "eyes", "/vision-only/*", vision, key_env, 'model_map = { "*" = "gpt-4o-mini" }'
            ),
        ]
    )


def metric_sums(text: str, name: str, by: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    """``/metrics``' samples of ``name`` summed by the labels ``by``."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                key = tuple(s.labels[b] for b in by)
                out[key] = out.get(key, 0.0) + s.value
    return out


def test_metrics_equal_the_ledger_for_a_searching_and_a_captioned_flow(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bridge's own calls in the metrics as in the ledger: alice's Claude Code web search
    (whole and streamed) on a chat upstream, run by the bridge on a (scripted) SearXNG, and
    bob's image turn on a text-only route, captioned by the vision route. ``/metrics`` sums
    by route and client — requests, tokens by kind, cost, searches — equal the usage ledger's
    rows for the same flows: the searches under the searching route
    (``cursor_bridge_searches_total``), the caption call under the vision route (outcome
    ``caption``)."""
    from addon.stores.ledger import open_ledger
    from tests.e2e.searching import DOCS, GITHUB, chat_model, claude_search, results
    from tests.e2e.test_text_tools import openai_json
    from tests.e2e.test_vision import CAPTION, captioning, image_question, png_source, recorded_png
    from tests.searxng_server import ScriptedSearxng

    monkeypatch.setenv("CB_E2E_METRICS_KEY", ROUTE_KEY)
    keys = tmp_path / "clients.toml"
    keys.write_text("".join(f'{name} = "{key}"\n' for name, key in TEAM.items()))
    store = tmp_path / "store.db"
    port = free_port()
    with ScriptedSearxng(results(DOCS, GITHUB)) as searxng, ScriptedUpstream() as vision:
        vision.script = captioning
        routes = tmp_path / "routes.toml"
        routes.write_text(search_and_vision(searxng.base_url, vision.port))
        p = start_proxy(
            bridge_routes=str(routes),
            bridge_store=str(store),
            bridge_client_keys=str(keys),
            bridge_metrics=f"127.0.0.1:{port}",
        )
        p.wait_for_log(f"metrics at http://127.0.0.1:{port}/metrics")
        upstream.script = lambda rec: (
            chat_model(rec) if rec.json().get("tools") else JSONReply(openai_json("It is red."))
        )

        def claude(name: str, route: str) -> anthropic.Anthropic:
            return anthropic.Anthropic(
                base_url=f"{p.base_url}/{route}", api_key=TEAM[name], max_retries=0, timeout=20
            )

        tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
        whole, streamed = (
            claude_search(claude("alice", "search"), stream, tool, max_tokens=200)
            for stream in (False, True)
        )
        for got in (whole, streamed):
            assert got.usage.server_tool_use is not None
            assert got.usage.server_tool_use.web_search_requests == 1
        assert len(searxng.requests) == 2

        image = image_question(png_source(recorded_png()))
        seen = claude("bob", "text").messages.create(
            model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": image}]
        )
        assert seen.content[0].type == "text"
        assert len(vision.requests) == 1
        assert CAPTION in upstream.requests[-1].body.decode()

        ledger = open_ledger(str(store))
        try:
            deadline = time.monotonic() + 15
            while sum(t.requests for t in ledger.rows().values()) < 4:
                assert time.monotonic() < deadline, ledger.rows()
                time.sleep(0.1)
            rows = list(ledger.rows().items())
        finally:
            ledger.close()
        text = scrape(port)

    booked: dict[tuple[str, str], Any] = {}
    for key, tokens in rows:
        k = (key.route, key.client or "anonymous")
        booked[k] = booked[k] + tokens if k in booked else tokens
    assert set(booked) == {("search", "alice"), ("text", "bob"), ("eyes", "bob")}
    assert booked[("search", "alice")].searches == 2
    assert booked[("eyes", "bob")].input == 85 and booked[("eyes", "bob")].output == 9
    requests = metric_sums(text, "cursor_bridge_requests_total", ("route", "client"))
    assert requests == {k: float(t.requests) for k, t in booked.items()}
    outcomes = metric_sums(text, "cursor_bridge_requests_total", ("route", "outcome"))
    assert outcomes[("eyes", "caption")] == 1
    searches = metric_sums(text, "cursor_bridge_searches_total", ("route", "client"))
    assert searches == {k: float(t.searches) for k, t in booked.items() if t.searches}
    tokens = metric_sums(text, "cursor_bridge_tokens_total", ("route", "client", "kind"))
    for (route, client), t in booked.items():
        for kind in ("input", "output", "cache_read", "cache_write", "reasoning"):
            assert tokens[(route, client, kind)] == getattr(t, kind), (route, client, kind)
    price = genai_prices()
    if price is not None:
        cost = metric_sums(text, "cursor_bridge_cost_usd_total", ("route", "client"))
        by_row: dict[tuple[str, str], Decimal] = {}
        for key, t in rows:
            k = (key.route, key.client or "anonymous")
            by_row[k] = by_row.get(k, Decimal(0)) + (price(key.model, key.day, t) or Decimal(0))
        assert set(cost) == set(by_row)
        for k, usd in by_row.items():
            assert usd > 0, k  # gpt-4o and gpt-4o-mini are priced
            assert abs(Decimal(repr(cost[k])) - usd) < Decimal("1e-8"), (k, cost[k], usd)
    log = p.log_text()
    assert "Traceback" not in log
    assert not [s for s in (ROUTE_KEY, *TEAM.values()) if s in log]
