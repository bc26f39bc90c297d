"""The fallback addon: a route's ``fallback`` chain applied (``addon.plan.fallback`` decides).

Before the rewrite (``request``, on a route with a chain) the first route not cooling down is
chosen (``chosen``); the rewrite decides for it, then hands the flow here (``start``): mitmproxy
sends it to the loopback relay (``addon.shell.relay``), whose leg for the flow makes every
attempt itself — the chosen route's, then the next routes', each decided again for its route —
with connect and first-byte timeouts, and relays the first answer that does not fall back, as it
streams. When its headers reach mitmproxy (``responseheaders``, before the stream addon) the
flow gets back the request that route was sent and that route's plan, so the answer side reads
it as any. The process's cooldowns live here (a Redis store's are shared by every worker). Rules and limits: docs/routes.md ("Fallbacks").
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mitmproxy import connection, http

from addon.dialects import DIALECTS
from addon.plan import FlowPlan, Incoming, Rewrite, decide, route_for
from addon.plan.fallback import (
    Cooldowns,
    Failure,
    MemoryCooldowns,
    all_failed,
    cooldown_after,
    falls_back,
    first_route,
    next_route,
    retry_after,
)
from addon.routes import Route, fallback_chain
from addon.shell.common import (
    SECRETS,
    apply_rewrite,
    environment,
    internal_error,
    log,
    outside_proxy_hosts,
)
from addon.shell.fallback_deliver import Served, served
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.relay import TOKEN_HEADER, Relay, Relayed, whole
from addon.shell.report import Report
from addon.shell.retry import Retry
from addon.shell.settings import BridgeSettings

if TYPE_CHECKING:
    import httpx

MAX_TRACKED = 10_000
MAX_ERROR_BODY = 1024 * 1024
"""An upstream error's body is read to at most this many bytes (it is relayed whole)."""
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade",
     b"proxy-connection", b"proxy-authenticate", b"content-length"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Chosen:
    """The route a flow goes to first, its chain, and the routes skipped before it."""

    route: Route
    chain: tuple[Route, ...]
    failures: tuple[Failure, ...] = ()


@dataclass(slots=True)
class Pending:
    """A flow whose attempts the relay makes: what each needs and what they found."""

    chosen: Chosen
    incoming: Incoming
    original: http.Request
    """The client's request as it came (each next route's rewrite starts from it)."""
    attempt: Served
    """The attempt being made (first: the chosen route's, as the rewrite set it)."""
    failures: list[Failure] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)
    served: Served | None = None
    """The attempt whose answer is relayed (an answer, or the last error when all failed);
    None until then, and when no route answered at all."""
    token: str = ""


class Fallbacks:
    name = "cursor_bridge_fallback"

    def __init__(
        self,
        settings: BridgeSettings,
        report: Report,
        retry: Retry | None,
        store: ReasoningStoreLife,
        clock: Callable[[], float] = time.time,
        relay: Relay | None = None,
    ) -> None:
        self._settings = settings
        self.report = report
        self.retry = retry
        self._store = store
        self.local_cooldowns = MemoryCooldowns(clock)
        self._clock = clock
        self.relay = relay or Relay()
        self._chosen: OrderedDict[str, Chosen] = OrderedDict()
        self._pending: OrderedDict[str, Pending] = OrderedDict()

    @property
    def cooldowns(self) -> Cooldowns:
        """The store's, shared by every worker on it (Redis), else this process's."""
        store = self._store.store
        return (store.cooldowns if store is not None else None) or self.local_cooldowns

    # ------------------------------------------------------------------ before the rewrite

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """For a flow on a route with a chain, a coroutine mitmproxy awaits before the Kiro
        and rewrite addons: the relay started, the first route picked (``chosen``)."""
        if flow.response is not None or flow.error is not None or not flow.live:
            return None
        try:
            req = flow.request
            settings = self._settings.settings
            if self.retry is None or not any(r.fallback for r in settings.routes):
                return None
            body = req.get_content(strict=False) or b""
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
            await self.relay.start()
            route, skipped = first_route(chain, self.cooldowns)
            failures = tuple(
                Failure(r.name, "skipped", self.cooldowns.left(r.name)) for r in skipped
            )
            self._keep(self._chosen, flow.id, Chosen(route, chain, failures))
        except Exception as e:  # no relay: the flow goes to its matched route, without a chain
            internal_error("cursor-bridge: fallback", e)

    def chosen(self, flow_id: str) -> Chosen | None:
        """The route picked for this flow (once); None: the matched route, as without a chain."""
        return self._chosen.pop(flow_id, None)

    def start(
        self,
        flow: http.HTTPFlow,
        chosen: Chosen,
        incoming: Incoming,
        original: http.Request,
        plan: FlowPlan,
    ) -> None:
        """The rewrite set the flow's request for ``chosen.route``: mitmproxy now sends it to
        the relay, where the flow's leg makes the attempts."""
        first = Served(chosen.route, plan, flow.request.copy())
        pending = Pending(chosen, incoming, original, first, list(chosen.failures))
        pending.tried = [f.route for f in chosen.failures]
        pending.token = self.relay.add(lambda: self._leg(flow, pending))
        self._keep(self._pending, flow.id, pending)
        _to_relay(flow, pending.token, self.relay.port)

    # ------------------------------------------------------------------ the relay's leg

    async def _leg(self, flow: http.HTTPFlow, pending: Pending) -> Relayed:
        """The attempts, in chain order, until one answers with neither 429 nor 5xx."""
        try:
            return await self._attempts(flow, pending)
        except Exception as e:
            internal_error(f"cursor-bridge [{pending.attempt.route.name}]: fallback", e)
            pending.failures.append(Failure(pending.attempt.route.name, "internal error"))
            return self._unreachable(pending)

    async def _attempts(self, flow: http.HTTPFlow, pending: Pending) -> Relayed:
        assert self.retry is not None
        last: Relayed | None = None
        attempt: Served | None = pending.attempt
        while attempt is not None:
            pending.attempt, route = attempt, attempt.route
            pending.tried.append(route.name)
            got = await self.retry.open(flow, attempt.request, route.timeout)
            if isinstance(got, str):
                cool = cooldown_after(route, None, None)
                self.cooldowns.cool(route.name, cool or 0)
                pending.failures.append(Failure(route.name, got, cool))
                log.info("cursor-bridge [%s]: upstream %s: falling back", route.name, got)
            elif falls_back(got.status_code):
                last = await _read_error(got, route.timeout)
                pending.served = attempt
                self._failed(pending, route, got.status_code, got.headers.get("retry-after"))
            else:
                pending.served = attempt
                return _streamed(got)
            attempt = self._next(flow, pending)
        return last if last is not None else self._unreachable(pending)

    def _next(self, flow: http.HTTPFlow, pending: Pending) -> Served | None:
        """The next route's attempt: the client's request decided again for it; None when no
        route of the chain is left."""
        settings, env = self._settings.settings, environment()
        chain = pending.chosen.chain
        while (route := next_route(chain, pending.tried, self.cooldowns)) is not None:
            decision = decide(
                settings,
                route,
                pending.incoming,
                env,
                store=self._store.store,
                secrets=SECRETS.get(flow.id),
            )
            if isinstance(decision, Rewrite):
                request = pending.original.copy()
                apply_rewrite(request, pending.incoming, decision)
                self.report.attempt(flow, f"fallback to {route.name}", decision.body)
                self.report.retried(self.report.runs.get(flow.id), "fallback")
                return Served(route, decision.plan, request)
            pending.tried.append(route.name)
            pending.failures.append(Failure(route.name, "request not sendable there"))
        return None

    def _unreachable(self, pending: Pending) -> Relayed:
        """No route answered at all: the client's 502 / 504 in its dialect, naming them."""
        pending.served = None
        client = DIALECTS[pending.chosen.route.client]
        status, body = all_failed(client, tuple(pending.failures))
        return whole(status, [(b"content-type", b"application/json")], body)

    def _failed(self, pending: Pending, route: Route, status: int, header: str | None) -> None:
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

    # ------------------------------------------------------------------ the answer

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """The relay's answer came: the flow gets back the request its serving route was
        sent (address, headers, body: what the view shows) and that route's plan."""
        pending = self._pending.get(flow.id)
        if pending is None:
            return
        try:
            _back(flow, (pending.served or pending.attempt).request)
            served(self.report, flow, pending.served, tuple(pending.failures))
        except Exception as e:
            internal_error("cursor-bridge: fallback", e)

    def error(self, flow: http.HTTPFlow) -> None:
        pending = self._pending.get(flow.id)
        if pending is not None and flow.request.headers.get(TOKEN_HEADER) is not None:
            _back(flow, pending.attempt.request)
        self.forget(flow.id)

    def forget(self, flow_id: str) -> None:
        """The flow's answer is settled (the answers addon calls this after ``answer``)."""
        pending = self._pending.pop(flow_id, None)
        if pending is not None:
            self.relay.drop(pending.token)
        self._chosen.pop(flow_id, None)

    async def done(self) -> None:
        await self.relay.stop()

    @staticmethod
    def _keep[K, T](table: OrderedDict[K, T], key: K, value: T) -> None:
        table[key] = value
        while len(table) > MAX_TRACKED:
            table.popitem(last=False)


def _to_relay(flow: http.HTTPFlow, token: str, port: int) -> None:
    """The flow's request pointed at the relay: plain HTTP to 127.0.0.1, never through an
    upstream proxy, only the token and the Host its view shows (no key, no body)."""
    req = flow.request
    host = req.host_header
    req.scheme, req.host, req.port = "http", "127.0.0.1", port
    req.headers = http.Headers([(b"host", (host or "127.0.0.1").encode("idna"))])
    req.headers[TOKEN_HEADER] = token
    req.content = b""
    flow.server_conn = connection.Server(address=None)


def _back(flow: http.HTTPFlow, sent: http.Request) -> None:
    """The flow's request as it was sent upstream, with the relay leg's timestamps."""
    req = sent.copy()
    req.timestamp_start = flow.request.timestamp_start
    req.timestamp_end = flow.request.timestamp_end
    flow.request = req


def _headers(got: httpx.Response) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in got.headers.raw if k.lower() not in _HOP_BY_HOP]


def _streamed(got: httpx.Response) -> Relayed:
    """The answer relayed as it comes (raw: still content-encoded; its length kept)."""
    headers = _headers(got)
    length = got.headers.get("content-length")
    if length is not None and "transfer-encoding" not in got.headers:
        headers.append((b"content-length", length.encode("latin-1")))
    reason = got.reason_phrase.encode("latin-1", "replace")
    return Relayed(got.status_code, reason, headers, got.aiter_raw(), got.aclose)


async def _read_error(got: httpx.Response, timeout: float) -> Relayed:
    """An error answer read whole (to ``MAX_ERROR_BODY``, within the route's ``timeout``), to
    relay if no later route answers."""
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in got.aiter_raw():
                body += chunk
                if len(body) >= MAX_ERROR_BODY:
                    break
    except Exception as e:  # what came is enough to say the error
        log.debug("cursor-bridge: fallback: error body cut (%s)", type(e).__name__)
    finally:
        await got.aclose()
    return whole(got.status_code, _headers(got), bytes(body))
