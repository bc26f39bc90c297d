"""The client keys' limits (``rpm``, ``tpm``, ``max_parallel``, ``budget_usd`` in the client keys
file): right after the client keys addon admitted a request, one store step reserves it
(``request``) or the client gets a 429 / 402 in its dialect with one log line naming the
client key's name and the limit, never the key; when the flow is over (``response``,
``error``, after the report counted its usage) one step settles it with what the upstream
reported. A live worker renews its reservations; a dead one's expire by themselves.

What is reserved and refused is ``addon.plan.limits``'; the counts are the store's
(``addon.stores.limits``: memory, or Redis shared by every worker when ``bridge_store`` is a
Redis URL). The store steps run on the store thread (``StoreWorker.call``,
``addon.shell.store_worker``), as every other store call: never on the event loop; a reserve on
Redis goes first in the request's prefetch pipeline (``Prefetch.reserve``) and a settle to the
write queue (``StoreWorker.settle``): neither makes a round trip of its own.
docs/deploy.md#limits-per-client-key."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mitmproxy import ctx, http

from addon.config.client_keys import ClientKeys, Limits
from addon.config.routes import Route
from addon.plan.limits import (
    MAX_TTL,
    MIN_TTL,
    NANO,
    RENEW_EVERY,
    RESERVATION_TTL,
    Ask,
    CallUse,
    Given,
    Planned,
    Pricer,
    Refusal,
    Settle,
    Verdict,
    calls_used,
    plan_request,
    reserved,
    search_ask,
    search_refused,
    search_settle,
    settle_at_once,
    used_cost,
)
from addon.redact import clean
from addon.report.outcome import Count
from addon.report.usage_table import limits_pricer, limits_text
from addon.shell.notes import log, log_internal_error, set_meta
from addon.shell.option_checks import OptionChecks
from addon.stores.limits import Held, LimitsStore, MemoryLimits, RedisLimits, usage_of

if TYPE_CHECKING:
    from addon.report.metrics_labels import Booking
    from addon.shell.flows import FlowRun
    from addon.shell.metrics import Metrics
    from addon.shell.reasoning_store import ReasoningStoreLife
    from addon.shell.reporter import Report
    from addon.shell.store_worker import Prefetch


@dataclass(slots=True)
class Reservation:
    """What one admitted flow holds until it ends."""

    client: str
    limits: Limits
    route: Route
    planned: Planned
    at_once: bool = False
    """Its settle written and waited for as soon as the flow ends (a limit is near:
    ``settle_at_once``), not with the store thread's next write."""
    used: tuple[int, int, int, int] | None = None
    """Uncached input, cache read, cache write, output, as the upstream reported (or what
    was delivered); None: nothing yet."""
    model_used: str | None = None
    calls: tuple[CallUse, ...] = ()
    """The caption calls the flow needed (``captioned``): settled with it."""


class ClientLimits(OptionChecks):
    name = "cursor_bridge_client_limits"

    def __init__(
        self,
        keys: Callable[[], ClientKeys | None],
        report: Report,
        store: ReasoningStoreLife,
        metrics: Metrics | None = None,
        price: Pricer | None = None,
        routes: Callable[[], Sequence[Route]] = tuple,
    ) -> None:
        self._keys = keys
        self._routes = routes
        """The routes in use (a text-only route's ``vision`` route is priced with it)."""
        """The client keys in use (the client keys addon's)."""
        self._report = report
        self._store_life = store
        self._metrics = metrics
        self._price = price
        self._priced = price is not None
        self._memory = MemoryLimits()
        self._redis: RedisLimits | None = None
        self._held: dict[str, Reservation] = {}
        """Flow id → its reservation, until the flow is over."""
        self._renewing: asyncio.Task[None] | None = None
        self._ttl = RESERVATION_TTL
        """``bridge_client_limits_ttl`` (declared by the client keys addon)."""
        self.settling = Settling(self)
        """Its ``response`` / ``error`` hooks, placed after the report's."""
        self.prefetch: Prefetch | None = None
        """The store's prefetch hook (``make_addons``): a reserve on Redis goes in its
        pipeline."""

    # ------------------------------------------------------------------ the store

    @property
    def store(self) -> LimitsStore:
        """Redis's (the reasoning store's connection) when ``bridge_store`` is a Redis URL,
        else this worker's memory."""
        store = self._store_life.store
        backend = store.redis if store is not None else None
        if backend is None:
            return self._memory
        if self._redis is None or self._redis.backend is not backend:
            self._redis = RedisLimits(backend)
        return self._redis

    def pricer(self) -> Pricer | None:
        if not self._priced:
            self._price, self._priced = limits_pricer(), True
        return self._price

    def configure(self, updated: set[str]) -> None:
        if "bridge_client_limits_ttl" not in updated:
            return
        ttl = float(ctx.options.bridge_client_limits_ttl)
        if not MIN_TTL <= ttl <= MAX_TTL:
            self.refuse(
                f"bridge_client_limits_ttl: seconds from {MIN_TTL:g} to {MAX_TTL:g} (got {ttl:g})"
            )
            return
        self._ttl = ttl

    def running(self) -> None:
        super().running()
        with contextlib.suppress(RuntimeError):  # no loop: a test's addon
            self._renewing = asyncio.get_running_loop().create_task(self._renew())

    def done(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
            self._renewing = None

    async def _renew(self) -> None:
        """Every third of the TTL: the reservations of this worker's live flows renewed."""
        while True:
            await asyncio.sleep(self._ttl * RENEW_EVERY)
            held: list[Held] = [
                (r.client, r.planned.ask.period, r.planned.ask.rid) for r in self._held.values()
            ]
            if held:
                try:
                    await self._store_life.worker.call(
                        self.store.renew, held, time.time(), self._ttl
                    )
                except Exception as e:
                    log.warning("cursor-bridge: client limits not renewed: %s", clean(e, 300))

    # ------------------------------------------------------------------ hooks

    async def request(self, flow: http.HTTPFlow) -> None:
        """An admitted request of a client key with limits: reserved, or refused. What it
        reserves and what a refusal says are ``addon.plan.limits``' (``plan_request``,
        ``reserved``), from plain values: the flow's record (the client, its route, the
        request's ``RouteMatch``); whether, the store's (one step on the store thread). Here
        it is applied: the reservation held, or the refusal answered, noted and counted."""
        if flow.response is not None or flow.error is not None or not flow.live:
            return
        keys = self._keys()
        record = self._report.flows.get(flow.id)
        if keys is None or record is None or record.client_name is None:
            return
        route, matched = record.client_route, record.match
        limits = keys.limits_of(record.client_name)
        if route is None or matched is None or not limits:
            return
        started = time.perf_counter_ns()
        price = self.pricer() if limits.budget_usd is not None else None
        vision = _vision_of(route, self._routes) if limits.budget_usd is not None else None
        given = Given(
            record.client_name, limits, route, flow.id, time.time(), self._ttl, price, vision
        )
        try:
            planned = plan_request(given, matched)
            if isinstance(planned, Planned):
                verdict = await self._reserve(flow, planned.ask)
                self._budget_left(given.client, limits, verdict)
                refused = reserved(given, matched, planned, verdict)
                if refused is None:
                    at_once = settle_at_once(planned.ask, verdict)
                    self._held[flow.id] = Reservation(
                        given.client, limits, route, planned, at_once=at_once
                    )
                    return
                planned = refused
        except Exception as e:  # the store failed: the request goes on, unlimited, said once
            log_internal_error(f"cursor-bridge [{route.name}]: client limits", e)
            return
        if planned is not None:
            self._refuse(flow, planned, given.client, started)

    async def _reserve(self, flow: http.HTTPFlow, ask: Ask) -> Verdict:
        """One step on the store thread; on Redis, in the request's prefetch pipeline (one
        round trip before ``decide`` for both: ``Prefetch.reserve``)."""
        store = self.store
        if isinstance(store, RedisLimits) and self.prefetch is not None:
            return await self.prefetch.reserve(flow, store, ask)
        return await self._store_life.worker.call(store.reserve, ask)

    def _refuse(self, flow: http.HTTPFlow, refused: Refusal, client: str, started: int) -> None:
        """The refusal answered, its metadata, counters and one log line (never the key)."""
        try:
            headers = {"content-type": "application/json", **dict(refused.headers)}
            flow.response = http.Response.make(refused.status, refused.body, headers)
            set_meta(flow, refused.meta)
            if self._metrics is not None:
                self._metrics.limited(client, refused.limit.value)
            self._report.state.count(Count.REJECTED)
            if refused.line is not None:
                refused.line.spent_ns = time.perf_counter_ns() - started
                self._report.close(flow, refused.line, line=True)
        except Exception as e:
            log_internal_error("cursor-bridge: client limits", e)

    def flow_over(self, flow_id: str, run: FlowRun, booking: Booking | None) -> None:
        """The report counted a flow's usage (``UsageCounting.count``): what to settle with.
        No usage reported on a 2xx answer (a cut stream): the input as reserved and the
        output as the events delivered (upstreams stream about a token per event)."""
        held = self._held.get(flow_id)
        if held is None:
            return
        if booking is not None and run.answer.usage is not None:
            t = booking.tokens
            held.used = (t.input, t.cache_read, t.cache_write, t.output)
            held.model_used = booking.key.model
        elif booking is not None:
            p = run.answer.processor
            out = p.events_in if p is not None else 0
            held.used = (held.planned.estimate.input_tokens, 0, 0, out)
            held.model_used = booking.key.model

    async def settle(self, flow_id: str) -> None:
        """The flow's reservation settled (``Settling``: after the report counted it)."""
        held = self._held.pop(flow_id, None)
        if held is None:
            return
        used = held.used or (0, 0, 0, 0)
        model = held.model_used or held.planned.model
        cost = (
            used_cost(held.limits, held.route, model, self.pricer(), used, held.planned.estimate)
            if held.used is not None
            else 0
        )
        tokens = sum(used)
        if held.calls:  # its caption calls: their tokens and cost with its own
            more, priced = calls_used(held.limits, self.pricer(), held.calls)
            tokens, cost = tokens + more, cost + priced
        a = held.planned.ask
        done = Settle(held.client, a.rid, time.time(), a.period, a.period_end, tokens, cost)
        store = self.store
        if isinstance(store, RedisLimits):
            await self._settle_queued(store, held, done)
            return
        try:
            await self._store_life.worker.call(store.settle, done)
            if a.budget_nano is not None and self._metrics is not None and self._metrics.on:
                # the remaining-budget gauge only: no store round trip without bridge_metrics
                used_now = await self._store_life.worker.call(
                    self.store.usage, held.client, a.period, done.now
                )
                self._budget_left(held.client, held.limits, Verdict(spent_nano=used_now.spent_nano))
        except Exception as e:
            log.warning(
                "cursor-bridge: client limits: %s not settled: %s",
                clean(held.client, 100),
                clean(e, 300),
            )

    async def _settle_queued(self, store: RedisLimits, held: Reservation, done: Settle) -> None:
        """On Redis: the settle goes with the store thread's next write, no round trip of its
        own; written and waited for at once when a limit is near (``held.at_once``)."""
        written = self._store_life.worker.settle(store, done, now=held.at_once)
        metrics = self._metrics
        if held.planned.ask.budget_nano is not None and metrics is not None and metrics.on:
            client, limits = held.client, held.limits

            def told(f: concurrent.futures.Future[int | None]) -> None:
                spent = f.result()
                if spent is not None:
                    self._budget_left(client, limits, Verdict(spent_nano=spent))

            written.add_done_callback(told)
        if held.at_once:
            await asyncio.wrap_future(written)

    # ------------------------------------------------------------------ a flow's own calls

    def captioned(self, flow_id: str, calls: Sequence[CallUse]) -> None:
        """The caption calls a flow needed (``addon.shell.captions``): their tokens and cost
        settle with the flow's reservation (``tpm``, budget); a flow without one counts none."""
        held = self._held.get(flow_id)
        if held is not None and calls:
            held.calls = (*held.calls, *calls)

    async def search(self, label: str, client: str | None, price: float) -> Ask | str | None:
        """A web search about to run for a flow of ``client`` (``Searches.run``): one request
        of the key's ``rpm`` and ``price`` of its budget, reserved by one store step (a key
        without either: None). Admitted: the reservation, for ``searched``; refused: the
        search's error code, one log line naming the key's name and the limit, the metric."""
        keys = self._keys()
        limits = keys.limits_of(client) if keys is not None and client else None
        if not client or not limits:
            return None
        ask = search_ask(
            client, f"search-{uuid.uuid4().hex}", limits, price, time.time(), self._ttl
        )
        if ask is None:
            return None
        store = self.store
        try:
            verdict = await self._store_life.worker.call(store.reserve, ask)
        except Exception as e:  # the store failed: the search runs, as a request would
            log.warning("cursor-bridge: client limits: search not counted: %s", clean(e, 300))
            return None
        self._budget_left(client, limits, verdict)
        code = search_refused(verdict)
        if code is None:
            return ask
        limit = verdict.limit.value if verdict.limit is not None else "rpm"
        log.info(
            "%s: web search refused: client key %r is over its %s limit (%s)",
            label,
            clean(client, 100),
            limit,
            code,
        )
        if self._metrics is not None:
            self._metrics.limited(client, limit)
        return code

    async def searched(self, ask: Ask, ran: bool) -> None:
        """A search's reservation settled: its price spent when it ran (``search_settle``),
        written and waited for before the answer goes on (the answer's next search reads it:
        a spent budget refuses it, not a price still held)."""
        done = search_settle(ask, time.time(), ran)
        store = self.store
        try:
            if isinstance(store, RedisLimits):
                await asyncio.wrap_future(self._store_life.worker.settle(store, done, now=True))
            else:
                await self._store_life.worker.call(store.settle, done)
        except Exception as e:
            log.warning("cursor-bridge: client limits: search not settled: %s", clean(e, 300))

    def _budget_left(self, client: str, limits: Limits, verdict: Verdict) -> None:
        if self._metrics is None or limits.budget_usd is None or verdict.spent_nano is None:
            return
        self._metrics.budget_left(client, limits.budget_usd - verdict.spent_nano / NANO)

    # ------------------------------------------------------------------ for bridge.usage

    def limits_text(self) -> str:
        """Each client key's limits, use and what remains (``bridge.usage``: a command, one
        store read per key)."""
        keys = self._keys()
        if keys is None:
            return "(no bridge_client_keys)"
        return limits_text(usage_of(self.store, keys.limits, time.time()))


def _vision_of(route: Route, routes: Callable[[], Sequence[Route]]) -> Route | None:
    """The route that captions ``route``'s images (``images = false``, ``vision``), if any."""
    if route.images is not False or not route.vision:
        return None
    return next((r for r in routes() if r.name == route.vision), None)


class Settling:
    """After the report and the usage ledger (``response``, ``error``): the flow's
    reservation settled with what the ledger counted."""

    name = "cursor_bridge_client_limits_settle"

    def __init__(self, limits: ClientLimits) -> None:
        self._limits = limits

    async def response(self, flow: http.HTTPFlow) -> None:
        await self._limits.settle(flow.id)

    async def error(self, flow: http.HTTPFlow) -> None:
        await self._limits.settle(flow.id)
