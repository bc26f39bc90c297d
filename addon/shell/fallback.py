"""The fallback addon: a route's ``fallback`` chain applied (``addon.plan.fallback`` decides).

Before the rewrite (``request``, on a route with a chain): routes cooling down are skipped, and
an address that has not answered lately is checked with a bounded TCP connect (mitmproxy
answers a failed connect with its own 502, which no hook can replace); the rewrite then takes
the chosen route (``chosen``). After it (``answer``, from the answers addon): a 429 / 5xx to
the first attempt, held back before anything reached the client, sends the same client
request, decided again for each next route, through the retry addon; the winner reaches the
client in its dialect (streamed framing if it asked). The process-wide cooldowns live here.
What it cannot do (the first attempt's own timeout): docs/routes.md ("Fallbacks").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from mitmproxy import http
from mitmproxy.proxy import mode_specs

from addon.dialects import DIALECTS
from addon.outcome import FlowReport
from addon.plan import FlowPlan, Incoming, Rewrite, decide, route_for, short
from addon.plan.fallback import (
    Cooldowns,
    Failure,
    all_failed,
    cooldown_after,
    falls_back,
    first_route,
    next_route,
    retry_after,
    tried_line,
)
from addon.routes import Route, fallback_chain
from addon.shell.common import (
    SECRETS,
    append_comment,
    apply_rewrite,
    environment,
    internal_error,
    json_response,
    log,
    outside_proxy_hosts,
    set_meta,
)
from addon.shell.fallback_deliver import all_failed as deliver_error
from addon.shell.fallback_deliver import deliver, note_served
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.report import Report
from addon.shell.retry import Retry, RetryAnswer
from addon.shell.runs import FlowRun
from addon.shell.settings import BridgeSettings

CHECK_AFTER = 10.0
"""An address that answered within this many seconds is not checked again before a request."""
CHECK_TIMEOUT = 3.0
"""Seconds the connect check waits for the TCP handshake."""
MAX_TRACKED = 10_000


@dataclass(frozen=True, slots=True)
class Chosen:
    """The route a flow goes to, its chain, and the routes skipped or refused before it."""

    route: Route
    chain: tuple[Route, ...]
    failures: tuple[Failure, ...] = ()


@dataclass(slots=True)
class Pending:
    """A rewritten flow whose answer may still fall back."""

    chosen: Chosen
    incoming: Incoming
    original: http.Request
    """The client's request as it came (the rewrite changes the flow's)."""
    route: Route
    failures: list[Failure] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)


type Check = Callable[[str, int, float], Awaitable[str | None]]


async def connect_check(host: str, port: int, timeout: float) -> str | None:
    """None when a TCP connection to the address opens within ``timeout``, else why not."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except TimeoutError:
        return "connect timed out"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError as e:
        return f"connection failed ({short(e.strerror or type(e).__name__)})"
    writer.close()
    with contextlib.suppress(TimeoutError, OSError):
        await asyncio.wait_for(writer.wait_closed(), 1.0)
    return None


class Fallbacks:
    name = "cursor_bridge_fallback"

    def __init__(
        self,
        settings: BridgeSettings,
        report: Report,
        retry: Retry | None,
        store: ReasoningStoreLife,
        clock: Callable[[], float] = time.time,
        check: Check = connect_check,
    ) -> None:
        self._settings = settings
        self.report = report
        self.retry = retry
        self._store = store
        self.cooldowns = Cooldowns(clock)
        self._clock = clock
        self.check = check
        """The connect check (a test replaces it)."""
        self._answered: OrderedDict[tuple[str, int], float] = OrderedDict()
        self._chosen: OrderedDict[str, Chosen] = OrderedDict()
        self._pending: OrderedDict[str, Pending] = OrderedDict()

    # ------------------------------------------------------------------ before the rewrite

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """For a flow on a route with a chain, a coroutine mitmproxy awaits before the Kiro
        and rewrite addons: it picks the route (``chosen``)."""
        if flow.response is not None or flow.error is not None or not flow.live:
            return None
        try:
            req = flow.request
            settings = self._settings.settings
            body = req.get_content(strict=False) or b""
            if not any(r.fallback for r in settings.routes):
                return None
            route = route_for(settings, req.method, req.host, req.path, body)
            if route is None or not route.fallback or outside_proxy_hosts(flow):
                return None
            chain = fallback_chain(route, settings.routes)
        except Exception as e:
            internal_error("cursor-bridge: fallback", e)
            return None
        return self._choose(flow, chain)

    async def _choose(self, flow: http.HTTPFlow, chain: tuple[Route, ...]) -> None:
        try:
            route, skipped = first_route(chain, self.cooldowns)
            failures = [Failure(r.name, "skipped", self.cooldowns.left(r.name)) for r in skipped]
            direct = not isinstance(flow.client_conn.proxy_mode, mode_specs.UpstreamMode)
            while direct:
                address = _address(flow, route)
                if self._answered_lately(address):
                    break
                why = await self.check(*address, CHECK_TIMEOUT)
                if why is None:
                    self._keep(self._answered, address, self._clock())
                    break
                cool = cooldown_after(route, None, None)
                self.cooldowns.cool(route.name, cool or 0)
                failures.append(Failure(route.name, why, cool))
                log.info("cursor-bridge [%s]: upstream %s: falling back", route.name, why)
                nxt = next_route(chain, [f.route for f in failures], self.cooldowns)
                if nxt is None:
                    self._refuse(flow, route, tuple(failures))
                    return
                route = nxt
            self._keep(self._chosen, flow.id, Chosen(route, chain, tuple(failures)))
        except Exception as e:
            internal_error("cursor-bridge: fallback", e)

    def _answered_lately(self, address: tuple[str, int]) -> bool:
        when = self._answered.get(address)
        return when is not None and self._clock() - when < CHECK_AFTER

    def _refuse(self, flow: http.HTTPFlow, route: Route, failures: tuple[Failure, ...]) -> None:
        """No route of the chain can be reached: the client's 502/504, in its dialect."""
        status, body = all_failed(DIALECTS[route.client], failures)
        flow.response = json_response(status, body)
        tried = tried_line(failures)
        append_comment(flow, f"cursor-bridge [{route.name}]: no upstream reachable; tried: {tried}")
        set_meta(
            flow,
            {
                "route": route.name,
                "action": "rejected",
                "fallback": {"served_by": None, "tried": [f.describe() for f in failures]},
            },
        )
        self.report.state.count("rejected")
        report = FlowReport(
            route.name,
            "rejected",
            client=route.client,
            upstream=route.upstream,
            reason=f"answered {status}: no upstream reachable",
            fields={"tried": tried},
        )
        self.report.close(flow, report, line=True)

    def chosen(self, flow_id: str) -> Chosen | None:
        """The route picked for this flow (once); None: the matched route, as without a chain."""
        return self._chosen.pop(flow_id, None)

    def start(
        self, flow: http.HTTPFlow, chosen: Chosen, incoming: Incoming, original: http.Request
    ) -> None:
        """The rewrite sent the flow to ``chosen.route``: its answer may fall back. Routes
        skipped or refused before it are said now (they stay said if it answers)."""
        pending = Pending(chosen, incoming, original, chosen.route, list(chosen.failures))
        pending.tried = [f.route for f in chosen.failures] + [chosen.route.name]
        self._keep(self._pending, flow.id, pending)
        run = self.report.runs.get(flow.id)
        if chosen.failures and run is not None and run.plan is not None:
            note_served(flow, run, run.plan, flow.request, chosen.failures)

    # ------------------------------------------------------------------ the answer

    def holds(self, flow_id: str, status: int) -> bool:
        """Whether this answer's status falls back: it must not stream to the client."""
        return flow_id in self._pending and falls_back(status)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.id in self._pending:
            self._keep(self._answered, (flow.request.host, flow.request.port), self._clock())

    def forget(self, flow_id: str) -> None:
        """The flow's answer is settled (the answers addon calls this after ``answer``)."""
        self._pending.pop(flow_id, None)
        self._chosen.pop(flow_id, None)

    def error(self, flow: http.HTTPFlow) -> None:
        self.forget(flow.id)

    async def answer(self, flow: http.HTTPFlow, run: FlowRun, resp: http.Response) -> bool:
        """A 429 / 5xx to the first attempt of a flow with a chain: the next routes asked in
        turn. True when the client's answer is set (a route's answer, or the error)."""
        pending = self._pending.get(flow.id)
        if pending is None or self.retry is None or not falls_back(resp.status_code):
            return False
        self._failed(pending, resp.status_code, resp.headers.get("retry-after"))
        last: tuple[RetryAnswer, FlowPlan] | None = None
        settings, env = self._settings.settings, environment()
        secrets = SECRETS.get(flow.id)
        chain = pending.chosen.chain
        while (route := next_route(chain, pending.tried, self.cooldowns)) is not None:
            pending.tried.append(route.name)
            pending.route = route
            decision = decide(
                settings, route, pending.incoming, env, store=self._store.store, secrets=secrets
            )
            if not isinstance(decision, Rewrite):
                pending.failures.append(Failure(route.name, "request not sendable there"))
                continue
            request = pending.original.copy()
            apply_rewrite(request, pending.incoming, decision)
            self.report.attempt(flow, f"fallback to {route.name}", decision.body)
            self.report.retried(run, "fallback")
            got = await self.retry.attempt(flow, request, route.timeout)
            if isinstance(got, str):
                cool = cooldown_after(route, None, None)
                self.cooldowns.cool(route.name, cool or 0)
                pending.failures.append(Failure(route.name, got, cool))
                continue
            self._keep(self._answered, (request.host, request.port), self._clock())
            if falls_back(got.status):
                self._failed(pending, got.status, got.retry_after)
                last = (got, decision.plan)
                continue
            deliver(self.report, flow, run, decision.plan, got, tuple(pending.failures), request)
            return True
        deliver_error(self.report, flow, run, last, tuple(pending.failures))
        return True

    def _failed(self, pending: Pending, status: int, header: str | None) -> None:
        route = pending.route
        wait = retry_after(header, self._clock())
        cool = cooldown_after(route, status, wait)
        if cool:
            self.cooldowns.cool(route.name, cool)
        pending.failures.append(Failure(route.name, f"HTTP {status}", cool))
        log.info(
            "cursor-bridge [%s]: upstream answered HTTP %d: falling back%s",
            route.name,
            status,
            f" (cooling down {cool:.0f} s)" if cool else "",
        )

    @staticmethod
    def _keep[K, T](table: OrderedDict[K, T], key: K, value: T) -> None:
        table[key] = value
        while len(table) > MAX_TRACKED:
            table.popitem(last=False)


def _address(flow: http.HTTPFlow, route: Route) -> tuple[str, int]:
    """Where mitmproxy will connect for this route: its ``upstream_url``, else the request's."""
    target = route.target
    if target is not None:
        return target.host, target.port
    return flow.request.host, flow.request.port
