"""The metrics addon: ``bridge_metrics=HOST:PORT`` serves Prometheus text at ``/metrics`` with
``prometheus_client``, on a listener of its own (never the proxy's).

Why a thread: ``prometheus_client.start_http_server`` serves from a daemon thread of its own
(a small WSGI server), so a scrape never runs on mitmproxy's event loop, and what is read at
scrape time — the key pools' states from the cooldowns store (on a shared store a Redis round
trip per key, made by the store thread while the scrape waits), the bridge's own counters — costs the proxy's flows nothing. An ASGI app on the event
loop would need an ASGI server besides, and would put those reads on the loop. The flows'
counts are added on the loop (``UsageCounting.count`` → ``flow_over``): each is a few
increments under prometheus_client's own lock.

What each metric means, its labels and how to aggregate it: docs/deploy.md#metrics. What
counts and under which labels is ``addon.report.metrics_labels`` (plain values)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from mitmproxy import ctx, http

from addon.config.options import METRICS_OPTIONS, ConfigError, MetricsAddress, parse_metrics_address
from addon.plan.key_pool import link_name
from addon.redact import clean
from addon.report.counters import BridgeState
from addon.report.metrics_labels import (
    Booking,
    FlowCounts,
    LabelBounds,
    bridge_counters,
    call_counts,
    flow_counts,
    key_pool_states,
)
from addon.report.outcome import FlowReport
from addon.report.usage_table import Price, genai_prices
from addon.shell.flows import FlowRun, Flows
from addon.shell.notes import log, log_internal_error
from addon.shell.option_checks import OptionChecks, add_options
from addon.shell.settings import BridgeSettings

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from addon.plan.fallback import Failure

PREFIX = "cursor_bridge_"
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600)
"""Seconds: a model may think for minutes before its first token, a stream last many more."""
MAX_PENDING = 10_000
"""Flows whose first token's time is held until they end, at most (oldest dropped)."""


class BridgeMetrics:
    """The registry: every metric of docs/deploy.md#metrics (the flows' counts, the gauges of
    the limits' work, the collector read at scrape time). prometheus_client is imported here,
    when ``bridge_metrics`` is first set: a proxy without metrics never loads it."""

    def __init__(self, scraped: ScrapeTime | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            PREFIX + "requests",
            "Routed requests by how they ended (outcome: rewritten, repaired, retried, "
            "not_rewritten, loop_guard, rejected), and a vision route's caption calls "
            "(outcome: caption).",
            ("route", "client", "upstream", "model", "outcome"),
            registry=r,
        )
        self.tokens = Counter(
            PREFIX + "tokens",
            "Tokens of answered requests, as the usage ledger counts them (kind: input = "
            "uncached prompt, output (reasoning included), cache_read, cache_write, reasoning).",
            ("route", "model", "client", "kind"),
            registry=r,
        )
        self.cost = Counter(
            PREFIX + "cost_usd",
            "Cost in US dollars of answered requests, at the usage ledger's prices "
            "(genai-prices); a model without a price adds nothing.",
            ("route", "model", "client"),
            registry=r,
        )
        self.searches = Counter(
            PREFIX + "searches",
            "Web searches the bridge ran for answers (the usage ledger's searches column).",
            ("route", "client"),
            registry=r,
        )
        self.upstream_errors = Counter(
            PREFIX + "upstream_errors",
            "Error answers of upstreams by status (unreachable, timeout: no answer).",
            ("route", "status"),
            registry=r,
        )
        self.fallbacks = Counter(
            PREFIX + "fallbacks",
            "Routes of a fallback chain (or keys of a pool) that gave no answer, by why.",
            ("route", "reason"),
            registry=r,
        )
        self.limited = Counter(
            PREFIX + "limited",
            "Requests refused by a client key's limit (rpm, tpm, max_parallel, budget).",
            ("client", "limit"),
            registry=r,
        )
        self.budget_remaining = Gauge(
            PREFIX + "budget_remaining_usd",
            "What a client key may still spend in its budget period; every worker reports "
            "the shared value alike: aggregate with max.",
            ("client",),
            registry=r,
        )
        self.first_token = Histogram(
            PREFIX + "first_token_seconds",
            "From the request to the first bytes of a 2xx answer the client got.",
            ("route",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.request_seconds = Histogram(
            PREFIX + "request_seconds",
            "From the request to the end of its answer.",
            ("route",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        if scraped is not None:
            r.register(scraped)


class ScrapeTime:
    """What is read when Prometheus scrapes (on the server's thread): the key pools' states
    from the cooldowns store and the bridge's own counters (``bridge.stats``)."""

    def __init__(
        self,
        state: BridgeState,
        settings: BridgeSettings,
        cooldowns: Callable[[], Callable[[str], bool]],
    ) -> None:
        self._state = state
        self._settings = settings
        self._cooldowns = cooldowns

    def describe(self) -> list[Any]:
        return []  # read at each scrape only: nothing is collected at registration

    def collect(self) -> Iterator[Any]:
        """A prometheus_client collector's ``collect``."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        counters = self._counters()
        for name, value in bridge_counters(counters):
            yield CounterMetricFamily(
                PREFIX + name, f"The bridge's '{name}' counter (bridge.stats).", value=value
            )
        pool = GaugeMetricFamily(
            PREFIX + "key_pool_keys",
            "Keys of each route's key pool by state (ready, cooling, revoked), from the "
            "cooldowns store (shared by every worker on a Redis store).",
            labels=("route", "state"),
        )
        try:
            cooling = self._cooldowns()
            for route, state, n in key_pool_states(self._settings.settings.routes, cooling):
                pool.add_metric((route, state), n)
        except Exception as e:  # a scrape says what it can
            log.warning("cursor-bridge: metrics: key pools not read: %s", clean(e, 300))
        yield pool

    def _counters(self) -> dict[str, int]:
        # The loop may add a counter meanwhile: a dict copy is one step under the GIL, and
        # tried again should it still see the dict change.
        for _ in range(3):
            try:
                return dict(self._state.counters)
            except RuntimeError:
                continue
        return {}


class Metrics(OptionChecks):
    """``bridge_metrics``: the server's life, and each flow's counts (``flow_over``)."""

    name = "cursor_bridge_metrics"

    def __init__(
        self,
        state: BridgeState,
        settings: BridgeSettings,
        flows: Flows,
        cooldowns: Callable[[], Callable[[str], bool]],
        price: Callable[[], Price | None] = genai_prices,
    ) -> None:
        self._settings = settings
        self._flows = flows
        self._scraped = ScrapeTime(state, settings, cooldowns)
        self.metrics: BridgeMetrics | None = None
        """Made when ``bridge_metrics`` is first set."""
        self._price_source = price
        self._price: Price | None = None
        self._priced = False
        self.address: MetricsAddress | None = None
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._first: OrderedDict[str, float] = OrderedDict()
        """Flow id → when its client got the first bytes of a 2xx stream."""
        self.first_token_clock = FirstTokenClock(self)

    @property
    def on(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        return self._server.server_port if self._server is not None else 0

    # ------------------------------------------------------------------ hooks

    def load(self, loader: Any) -> None:
        add_options(loader, METRICS_OPTIONS)

    def configure(self, updated: set[str]) -> None:
        if "bridge_metrics" not in updated:
            return
        try:
            address = parse_metrics_address(ctx.options.bridge_metrics)
        except ConfigError as e:
            self.refuse(str(e))
            return
        if address == self.address and (address is None or self.on):
            return
        self.done()
        self.address = address
        if address is None:
            return
        from prometheus_client import start_http_server

        if self.metrics is None:
            self.metrics = BridgeMetrics(self._scraped)
        try:
            server, thread = start_http_server(
                address.port, addr=address.host, registry=self.metrics.registry
            )
        except OSError as e:
            self.refuse(f"bridge_metrics: cannot listen on {address.host}:{address.port}: {e}")
            self.address = None
            return
        self._server, self._thread = server, thread
        where = f"[{address.host}]" if ":" in address.host else address.host
        log.info("cursor-bridge: metrics at http://%s:%d/metrics", where, server.server_port)
        if not address.loopback:
            log.warning(
                "cursor-bridge: metrics served on %s, not a loopback address: anyone who "
                "reaches it reads the routes', models' and client keys' names and the spend",
                address.host,
            )

    def done(self) -> None:
        server, self._server, self._thread = self._server, None, None
        if server is not None:
            server.shutdown()
            server.server_close()

    # ------------------------------------------------------------------ a client key's limits

    def limited(self, client: str, limit: str) -> None:
        """A request refused by a client key's limit (``addon.shell.client_limits``)."""
        if self.on and self.metrics is not None:
            self.metrics.limited.labels(client, limit).inc()

    def budget_left(self, client: str, usd: float) -> None:
        """What a client key may still spend in its period, as the store said last."""
        if self.on and self.metrics is not None:
            self.metrics.budget_remaining.labels(client).set(usd)

    # ------------------------------------------------------------------ a flow's counts

    def first_bytes(self, flow_id: str) -> None:
        if flow_id not in self._first:
            self._first[flow_id] = time.time()
            while len(self._first) > MAX_PENDING:
                self._first.popitem(last=False)

    def flow_over(
        self,
        flow: http.HTTPFlow | None,
        run: FlowRun,
        report: FlowReport,
        booking: Booking | None,
    ) -> None:
        """A routed flow is over (``Report.close`` → ``UsageCounting.count``, with the same
        ``booking`` the usage ledger counts): its counts added. Never the flow's failure."""
        first = self._first.pop(flow.id, None) if flow is not None else None
        if not self.on or self.metrics is None:
            return
        try:
            self._count(self.metrics, flow, run, report, booking, first)
        except Exception as e:
            log_internal_error(f"cursor-bridge [{report.route}]: metrics", e)

    def _count(
        self,
        m: BridgeMetrics,
        flow: http.HTTPFlow | None,
        run: FlowRun,
        report: FlowReport,
        booking: Booking | None,
        first: float | None,
    ) -> None:
        settings = self._settings.settings
        bounds = LabelBounds(settings.routes, settings.models)
        plan = run.plan
        model = booking.key.model if booking is not None else None
        if model is None and plan is not None and plan.unified is not None:
            model = plan.unified.model
        client = booking.key.client if booking is not None else None
        if client is None:
            named = report.fields.get("client_name")
            client = named if isinstance(named, str) else None
        failures: Sequence[Failure] = ()
        served: str | None = None
        record = self._flows.get(flow.id) if flow is not None else None
        if record is not None and record.chain is not None:
            failures = tuple(record.chain.failures)
            if record.chain.served is not None:
                served = link_name(record.chain.served.route)
        counts = flow_counts(
            bounds,
            report,
            model=model,
            client=client,
            booking=booking,
            cost=self._cost(booking),
            failures=failures,
            served=served,
        )
        _requests(m, counts, booking is not None)
        if booking is not None and booking.tokens.searches:
            m.searches.labels(counts.route, counts.client).inc(booking.tokens.searches)
        for route, status in counts.upstream_errors:
            m.upstream_errors.labels(route, status).inc()
        for route, reason in counts.fallbacks:
            m.fallbacks.labels(route, reason).inc()
        if flow is None:
            return
        started = flow.request.timestamp_start
        resp = flow.response
        end = (resp.timestamp_end if resp is not None else None) or time.time()
        m.request_seconds.labels(counts.route).observe(max(0.0, end - started))
        if resp is not None and 200 <= resp.status_code < 300 and booking is not None:
            if first is None:  # a whole answer (or a stream passed on as it came): its head
                first = resp.timestamp_start if resp.stream else (resp.timestamp_end or end)
            m.first_token.labels(counts.route).observe(max(0.0, first - started))

    def call_over(self, booking: Booking, upstream: str) -> None:
        """A caption call the bridge made for a flow (``UsageCounting.book_call``, with the
        ``booking`` the usage ledger counts): a request, its tokens and cost under the vision
        route. Never the flow's failure."""
        if not self.on or self.metrics is None:
            return
        try:
            settings = self._settings.settings
            bounds = LabelBounds(settings.routes, settings.models)
            counts = call_counts(bounds, booking, upstream, self._cost(booking))
            _requests(self.metrics, counts, True)
        except Exception as e:
            log_internal_error(f"cursor-bridge [{booking.key.route}]: metrics", e)

    def _cost(self, booking: Booking | None) -> Any:
        if booking is None:
            return None
        if not self._priced:
            self._price, self._priced = self._price_source(), True
        if self._price is None:
            return None
        return self._price(booking.key.model, booking.key.day, booking.tokens)


def _requests(m: BridgeMetrics, counts: FlowCounts, booked: bool) -> None:
    """A request's counts: the request, its tokens, its cost (``booked``: the ledger counts it,
    so its cost series exists, at 0 for a model without a price: a panel sums what is there)."""
    m.requests.labels(
        counts.route, counts.client, counts.upstream, counts.model, counts.outcome
    ).inc()
    for kind, n in counts.tokens:
        m.tokens.labels(counts.route, counts.model, counts.client, kind).inc(n)
    if counts.cost is not None:
        m.cost.labels(counts.route, counts.model, counts.client).inc(float(counts.cost))
    elif booked:
        m.cost.labels(counts.route, counts.model, counts.client).inc(0)


class FirstTokenClock:
    """After the stream attach and the redaction addons (``responseheaders``): a 2xx stream's
    callable noted when it first gives the client bytes, then put back as it was (mitmproxy
    reads ``flow.response.stream`` at each read), so later reads cost nothing."""

    name = "cursor_bridge_metrics_first_token"

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        resp = flow.response
        if not self._metrics.on or resp is None or not callable(resp.stream):
            return
        if not 200 <= resp.status_code < 300 or self._metrics._flows.run(flow.id) is None:
            return
        read = resp.stream
        note = self._metrics.first_bytes

        def first(data: bytes) -> Any:
            out = read(data)
            if isinstance(out, bytes | bytearray):
                given = bool(out)
            else:
                out = list(out)
                given = any(out)
            if given:
                note(flow.id)
                if resp.stream is first:
                    resp.stream = read
            return out

        resp.stream = first
