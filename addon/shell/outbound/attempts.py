"""The fallback addon: a route's ``fallback`` chain applied to a flow (``addon.plan.fallback`` rules).

``request`` picks the first route not cooling down; mitmproxy sends the flow to the loopback
relay, which makes each attempt and relays the first answer that does not fall back, as it
streams. A relay because mitmproxy has no first-byte timeout and cannot take a request back
once sent. Rules and limits: docs/routes.md ("Fallbacks")."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from mitmproxy import connection, http

from addon.config.routes import MAX_TIMEOUT, Route, fallback_chain
from addon.dialects import DIALECTS
from addon.plan import AnswerState, FlowPlan, Incoming, Rewrite, decide
from addon.plan.caching import secret_of
from addon.plan.fallback import (
    Cooldowns,
    Failure,
    MemoryCooldowns,
    NoAnswer,
    Reason,
    all_failed,
    cooldown_after,
    falls_back,
    first_route,
    next_route,
    retry_after,
    tried_line,
)
from addon.plan.key_errors import Blame
from addon.plan.key_pool import (
    KeyAction,
    has_pool,
    is_link,
    key_verdict,
    link_name,
    links,
    reads_error,
    revoked_mark,
)
from addon.plan.values import tenths
from addon.report.outcome import Action, Count, Outcome
from addon.shell.flows import Attempt, Attempts, FlowRun
from addon.shell.host_filter import outside_proxy_hosts
from addon.shell.notes import META_KEY, append_comment, log, log_internal_error, set_meta
from addon.shell.option_checks import environment
from addon.shell.outbound.pool_keys import PoolKeys, kept
from addon.shell.outbound.probes import KeyProbes
from addon.shell.outbound.relay import TOKEN_HEADER, Relay, Relayed, whole
from addon.shell.outbound.retry import Retry
from addon.shell.outbound.upstream_request import apply_rewrite, origin
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.reporter import Report
from addon.shell.settings import BridgeSettings
from addon.stream.decompress import make_decompressor
from addon.transforms.conversation import conversation_of

if TYPE_CHECKING:
    from addon.shell.outbound.http1 import Opened

MAX_ERROR_BODY = 1024 * 1024
"""An upstream error's body is read to at most this many bytes (it is relayed whole)."""
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade",
     b"proxy-connection", b"proxy-authenticate", b"content-length"}
)  # fmt: skip


class Fallbacks:
    """The chain's addon; the relay's leg makes each attempt (``Retry.open``)."""

    name = "cursor_bridge_fallback"

    def __init__(
        self,
        settings: BridgeSettings,
        report: Report,
        retry: Retry | None,
        store: ReasoningStoreLife,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self.report = report
        """Counts the attempts and keeps what each sent, for the view."""
        self._flows = report.flows
        """Each flow's chain is its record's ``chain``."""
        self.retry = retry
        """Makes each attempt (``Retry.open``); None: no chain is applied."""
        self._store = store
        self.local_cooldowns = MemoryCooldowns(clock)
        """The process's: until when each route is skipped (without a Redis store)."""
        self._clock = clock
        self.relay = Relay(self._flows.take_leg)
        """Started with the first chain; a token's leg is its flow record's."""
        self.keys = PoolKeys(settings, KeyProbes(lambda: self.retry, environment), self)
        """A pool's keys refused, probed and rechecked (``addon.shell.outbound.pool_keys``)."""

    async def running(self) -> None:
        """The relay started with the proxy: the rewrite hook sends streams there (``send``)."""
        if self.retry is not None:
            try:
                await self.relay.start()
            except Exception as e:  # no relay: plain routes' flows go by mitmproxy as before
                log_internal_error("cursor-bridge: relay", e)

    @property
    def cooldowns(self) -> Cooldowns:
        """The store's, shared by every worker on it (Redis), else this process's."""
        store = self._store.store
        return (store.cooldowns if store is not None else None) or self.local_cooldowns

    # ------------------------------------------------------------------ before the rewrite

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """For a flow on a route with a chain, a coroutine mitmproxy awaits before the Kiro
        and rewrite addons: the relay started, the first route picked (the record's chain).
        The rewrite addon then writes the flow's request for it and calls ``start``."""
        if flow.response is not None or flow.error is not None or not flow.live:
            return None
        try:
            settings = self._settings.settings
            if self.retry is None or not any(_relayed(r) for r in settings.routes):
                return None
            found = self._flows.route_match(flow, settings)
            view, route = found.view, found.route
            if route is None or not _relayed(route) or outside_proxy_hosts(flow):
                return None
            chain = fallback_chain(route, settings.routes)
            if has_pool(chain):  # each key a link, the conversation's own first
                decoded = view.decoded(route.client)
                conversation = conversation_of(decoded.request) if decoded else ""
                chain = links(chain, secret_of(self._store.store), conversation)
        except Exception as e:
            log_internal_error("cursor-bridge: fallback", e)
            return None
        return self._choose(flow, chain)

    async def _choose(self, flow: http.HTTPFlow, chain: tuple[Route, ...]) -> None:
        try:
            await self.relay.start()
            route, skipped = first_route(chain, self.cooldowns)
            failures = [self._skipped(r) for r in skipped]
            if route is None:  # every key of the pool cools down, and nothing else is left
                self.keys.all_cooling(self.report, flow, chain, failures)
                return
            tried = [link_name(r) for r in skipped]
            attempts = Attempts(route, chain, flow.request.copy(), failures, tried)
            self._flows.open(flow.id).chain = attempts
        except Exception as e:  # no relay: the flow goes to its matched route, without a chain
            log_internal_error("cursor-bridge: fallback", e)

    def start(
        self, flow: http.HTTPFlow, chain: Attempts, incoming: Incoming, plan: FlowPlan
    ) -> None:
        """The rewrite set the flow's request for ``chain.route``: mitmproxy now sends it to
        the relay, where the flow's leg makes the attempts."""
        chain.incoming = incoming
        chain.attempt = Attempt(chain.route, plan, flow.request.copy())
        chain.token = self._flows.new_token(flow.id)
        chain.leg = lambda: self._leg(flow, chain)
        _to_relay(flow, chain.token, self.relay.port)

    def send(
        self, flow: http.HTTPFlow, chain: Attempts | None, r: Route, inc: Incoming, plan: FlowPlan
    ) -> None:
        """The rewritten flow handed to the relay: its chain's attempts (``start``); or, one
        upstream path (docs/architecture.md), a flow of a route without a chain, streamed or
        whole, as a chain of one attempt that never falls back (``_plain``: no cooldown, no
        first-byte timeout but the longest a route may set, any status relayed as it came)."""
        if chain is not None:
            self.start(flow, chain, inc, plan)
        elif self.retry is not None and self.relay.port:
            sent = flow.request.copy()  # one copy: a chain of one writes no next request
            one = Attempts(r, (r,), sent, [], [], inc, Attempt(r, plan, sent))
            one.token = self._flows.new_token(flow.id)
            one.leg = lambda: self._leg(flow, one)
            self._flows.open(flow.id).chain = one
            _to_relay(flow, one.token, self.relay.port)

    # ------------------------------------------------------------------ the relay's leg

    async def _leg(self, flow: http.HTTPFlow, chain: Attempts) -> Relayed:
        """The attempts, in chain order, until one answers with neither 429 nor 5xx."""
        try:
            return await self._attempts(flow, chain)
        except Exception as e:
            name = chain.attempt.route.name if chain.attempt else chain.route.name
            log_internal_error(f"cursor-bridge [{name}]: fallback", e)
            chain.failures.append(Failure(name, Reason.INTERNAL_ERROR))
            return self._unreachable(chain)

    async def _attempts(self, flow: http.HTTPFlow, chain: Attempts) -> Relayed:
        assert self.retry is not None
        last: Relayed | None = None
        attempt = chain.attempt
        if attempt is not None and _plain(chain):  # its one attempt, as mitmproxy's would be
            chain.tried.append(attempt.route.name)
            got = await self.retry.open(flow, attempt.request, MAX_TIMEOUT)
            if isinstance(got, NoAnswer):
                chain.failures.append(Failure(attempt.route.name, got.reason, got.detail))
                return self._unreachable(chain)
            chain.served = attempt
            return self._streamed(flow, got)
        while attempt is not None:
            chain.attempt, route = attempt, attempt.route
            chain.tried.append(link_name(route))
            got = await self.retry.open(flow, attempt.request, route.timeout)
            answered = not isinstance(got, NoAnswer)
            if not isinstance(got, NoAnswer) and 200 <= got.status_code < 300:
                got = await _started(got, route.timeout)
            if isinstance(got, NoAnswer):
                cool = cooldown_after(route, None, None)
                if answered:  # its body broke off: that link cools, a pool's next key answers
                    self.cooldowns.cool(link_name(route), cool or 0)
                else:
                    self._cool(chain, route, cool or 0)
                chain.failures.append(Failure(link_name(route), got.reason, got.detail, cool))
                log.info("cursor-bridge [%s]: upstream %s: falling back", route.name, got.detail)
            elif falls_back(got.status_code) or reads_error(route, got.status_code):
                error, body = await _read_error(got, route.timeout)
                chain.served = attempt
                status = got.status_code
                revoked = any(f.revoked for f in chain.failures)
                verdict = key_verdict(route, status, _decoded(body, got), revoked)
                probed = ""
                if verdict is not None and verdict.judgement.blame is Blame.UNKNOWN:
                    verdict, probed = await self.keys.probed(flow, attempt, verdict, revoked)
                if verdict is not None and verdict.action is not KeyAction.ANSWER:
                    last = error
                    self.keys.refused(
                        chain, route, status, verdict, self.keys.target(flow, attempt)
                    )
                elif verdict is not None or not falls_back(status):
                    if verdict is not None:
                        kept(route, status, verdict, probed)
                    return error  # the request's own: the client's answer, nothing cools
                else:
                    last = error
                    self._failed(chain, route, status, got.header("retry-after"))
            else:
                chain.served = attempt
                return self._streamed(flow, got)
            attempt = self._next(flow, chain)
        return last if last is not None else self._unreachable(chain)

    def _streamed(self, flow: http.HTTPFlow, got: Opened) -> Relayed:
        """The answer relayed as it comes, its body's data as one chunk per upstream read
        (``Wire.passed_to``), cut after ``bridge_stream_idle_timeout`` seconds of silence; a
        body that breaks off is ended cleanly, its cause in the flow's record (``cut``)."""
        got.watch(self._settings.settings.stream_idle)
        cut = functools.partial(self._flows.cut, flow.id)
        passed = got.rechunked_to if got.framing in ("chunked", "length") else None
        return Relayed(
            got.status_code, got.reason, _headers(got), got.aiter_raw(), got.aclose, passed, cut
        )

    def _next(self, flow: http.HTTPFlow, chain: Attempts) -> Attempt | None:
        """The next route's attempt: the client's request decided again for it; None when no
        route of the chain is left."""
        settings, env = self._settings.settings, environment()
        assert chain.incoming is not None
        while True:
            route, passed = next_route(chain.chain, chain.tried, self.cooldowns)
            for skipped in passed:  # cooling down (or revoked): named in the tried line
                chain.tried.append(link_name(skipped))
                chain.failures.append(self._skipped(skipped))
            if route is None:
                return None
            decision = decide(
                settings,
                route,
                chain.incoming,
                env,
                store=self._store.store,
                secrets=self._flows.secrets(flow.id),
            )
            if isinstance(decision, Rewrite):
                request = chain.original.copy()
                apply_rewrite(request, chain.incoming, decision)
                self.report.attempt(flow, f"fallback to {route.name}", decision.body)
                self.report.retried(self._flows.run(flow.id), "fallback")
                # The client key's name goes with the flow to every route it is sent to.
                named = chain.attempt.plan.client_name if chain.attempt is not None else ""
                plan = dataclasses.replace(decision.plan, client_name=named)
                return Attempt(route, plan, request)
            chain.tried.append(link_name(route))
            chain.failures.append(Failure(link_name(route), Reason.NOT_SENDABLE))

    def _unreachable(self, chain: Attempts) -> Relayed:
        """No route answered at all: the client's 502 / 504 in its dialect, naming them."""
        chain.served = None
        client = DIALECTS[chain.route.client]
        status, body = all_failed(client, tuple(chain.failures))
        return whole(status, [(b"content-type", b"application/json")], body)

    def _skipped(self, route: Route) -> Failure:
        """A route or key passed over because it cools down (or, a key, was revoked)."""
        name = link_name(route)
        if is_link(route) and (left := self.cooldowns.left(revoked_mark(name))) > 0:
            return Failure(name, Reason.SKIPPED, f"revoked, tried again in {tenths(left)} s")
        return Failure(name, Reason.SKIPPED, cooling=self.cooldowns.left(name))

    def _cool(self, chain: Attempts, route: Route, seconds: float) -> None:
        """The route cools down; a key of a pool failing for its upstream's sake (no answer,
        a 5xx): every key of that route, which all reach the same upstream."""
        if not is_link(route):
            self.cooldowns.cool(route.name, seconds)
            return
        for other in chain.chain:
            if other.name == route.name and is_link(other):
                self.cooldowns.cool(link_name(other), seconds)

    def _failed(self, chain: Attempts, route: Route, status: int, header: str | None) -> None:
        wait = retry_after(header, self._clock())
        cool = cooldown_after(route, status, wait)
        if cool and status == 429:
            self.cooldowns.cool(link_name(route), cool)  # a key's own limit: that key only
        elif cool:
            self._cool(chain, route, cool)
        failure = Failure(link_name(route), Reason.ANSWERED_FAILURE, f"HTTP {status}", cool)
        chain.failures.append(failure)
        log.info(
            "cursor-bridge [%s]: upstream answered HTTP %d: falling back%s",
            route.name,
            status,
            f" (cooling down {tenths(cool)} s)" if cool else "",
        )

    # ------------------------------------------------------------------ the answer

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """The relay's answer came: the flow gets back the request its serving route was
        sent (address, headers, body: what the view shows) and that route's plan, and what was
        tried is said."""
        chain = self._started(flow.id)
        if chain is None or chain.attempt is None:
            return
        try:
            _back(flow, (chain.served or chain.attempt).request)
            if _plain(chain) and chain.served is not None:
                return  # a plain route's answer: read as mitmproxy's own would be
            run = self._flows.run(flow.id)
            if run is not None and flow.response is not None:
                _deliver(self.report, flow, run, chain.served, tuple(chain.failures))
        except Exception as e:
            log_internal_error("cursor-bridge: fallback", e)

    def error(self, flow: http.HTTPFlow) -> None:
        """The flow ended before its answer: it shows the request it was to send again."""
        chain = self._started(flow.id)
        sent_to_relay = flow.request.headers.get(TOKEN_HEADER) is not None
        if chain is not None and chain.attempt is not None and sent_to_relay:
            _back(flow, chain.attempt.request)

    def _started(self, flow_id: str) -> Attempts | None:
        """The flow's chain once its attempts started (handed to the relay)."""
        record = self._flows.get(flow_id)
        chain = record.chain if record is not None else None
        return chain if chain is not None and chain.attempt is not None else None

    async def done(self) -> None:
        await self.keys.done()
        await self.relay.stop()


def _relayed(route: Route) -> bool:
    """Whether the route's flows go through the relay: a ``fallback`` chain or a key pool."""
    return bool(route.fallback or route.key_pool)


def _plain(chain: Attempts) -> bool:
    """A plain route's chain of one (``Fallbacks.send``): nothing to fall back to."""
    return chain.chain == (chain.route,) and not _relayed(chain.route)


def _to_relay(flow: http.HTTPFlow, token: str, port: int) -> None:
    """The flow's request pointed at the relay: plain HTTP to 127.0.0.1, never through an
    upstream proxy, only the token, the Host its view shows and the client's ``Connection``
    (no key, no body). mitmproxy reads the client's connection's fate from this very request
    object once the answer is sent (``Connection: close``, RFC 9112 §9.6): it must stay."""
    req = flow.request
    host = req.host_header
    connection_header = req.headers.get_all("connection")
    req.scheme, req.host, req.port = "http", "127.0.0.1", port
    req.headers = http.Headers([(b"host", (host or "127.0.0.1").encode("idna"))])
    if connection_header:
        req.headers["connection"] = ", ".join(connection_header)
    req.headers[TOKEN_HEADER] = token
    req.content = b""
    flow.server_conn = connection.Server(address=None)


def _back(flow: http.HTTPFlow, sent: http.Request) -> None:
    """The flow's request as it was sent upstream, with the relay leg's timestamps."""
    req = sent.copy()
    req.timestamp_start = flow.request.timestamp_start
    req.timestamp_end = flow.request.timestamp_end
    flow.request = req


def _headers(got: Opened) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in got.headers if k.lower() not in _HOP_BY_HOP]


async def _read_error(got: Opened, timeout: float) -> tuple[Relayed, bytes]:
    """An error answer read whole (to ``MAX_ERROR_BODY``, within the route's ``timeout``), to
    relay if no later route answers; and its body's bytes as they came."""
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
    return whole(got.status_code, _headers(got), bytes(body)), bytes(body)


async def _started(got: Opened, timeout: float) -> Opened | NoAnswer:
    """A 2xx answer once its body's first bytes came; its body ended (any way) before any,
    or none came within the route's ``timeout``: nothing reached the client, the attempt
    failed (the next route or key answers)."""
    cause = await got.started(timeout)
    if cause is None:
        return got
    await got.aclose()
    why = f"HTTP {got.status_code}, its body ended before its first byte ({cause})"
    return NoAnswer(Reason.TIMED_OUT if cause == "upstream_idle" else Reason.UNREACHABLE, why)


def _decoded(body: bytes, got: Opened) -> bytes:
    """An error body without its ``Content-Encoding`` (as it came when it cannot be undone),
    for the key's verdict."""
    try:
        undo = make_decompressor(got.header("content-encoding"))
        return body if undo is None else undo.feed(body) + undo.finish()
    except ValueError:
        return body


# ---------------------------------------------------------------------- what the flow says


def _deliver(
    report: Report,
    flow: http.HTTPFlow,
    run: FlowRun,
    by: Attempt | None,
    failures: tuple[Failure, ...],
) -> None:
    """The flow's run and notes for the relayed answer: ``by`` served it — read with its plan
    — or, when every route failed, its answer is the last upstream error; None: no route
    answered, the answer is the bridge's own error in the client's dialect."""
    assert flow.response is not None
    if by is None:
        _unreachable(report, flow, run, failures)
        return
    if run.plan is not by.plan:
        run.plan, run.answer = by.plan, AnswerState.of(by.plan)
        run.report.notes = run.answer.notes
    status = flow.response.status_code
    failed = {f.route for f in failures if f.reason is not Reason.SKIPPED}
    if link_name(by.route) in failed:  # the last error relayed: every route failed
        _all_failed(report, flow, run, by.plan, failures)
    elif failures:
        _served(flow, run, by.plan, flow.request, failures)
        if all(f.reason is Reason.SKIPPED for f in failures):
            return  # routes cooling down were passed over: nothing fell back on this flow
        report.state.count(Count.FALLBACKS_ANSWERED)
        log.info(
            "%s: fallback answered HTTP %d; tried: %s",
            by.plan.label,
            status,
            tried_line(failures),
        )


def _served(
    flow: http.HTTPFlow,
    run: FlowRun,
    plan: FlowPlan,
    request: http.Request,
    failures: tuple[Failure, ...],
) -> None:
    """The route that served the flow and every route tried before it, with why: the flow's
    comment, ``flow.metadata`` and log line (names, address, model, statuses: no secret)."""
    url = origin(request)
    model = plan.unified.model if plan.unified is not None else ""
    tried = tried_line(failures)
    append_comment(
        flow,
        f"{plan.label}: served by {link_name(plan.route)} ({url}, model {model or '?'}); "
        f"tried: {tried}",
    )
    served = link_name(plan.route)  # a key of a pool: route#KEYNAME
    _meta(
        flow,
        plan.meta(),
        {"served_by": served, "upstream_url": url, "model": model, "tried": failures},
    )
    line = run.report
    line.route, line.upstream = plan.route.name, plan.upstream.name
    line.fields["upstream_url"] = url
    if model:
        line.fields["model"] = model
    line.fields["tried"] = tried
    if plan.route.key_pool and plan.route.key_env:
        line.fields["key"] = plan.route.key_env  # the key that served it: its name
    else:
        line.fields.pop("key", None)


def _all_failed(
    report: Report, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, failures: tuple[Failure, ...]
) -> None:
    """Every route of the chain failed: the client gets the last upstream error the relay got
    (re-shaped for its dialect by the answers addon, as any upstream error)."""
    line = f"no route answered; tried: {tried_line(failures)}"
    append_comment(flow, f"{plan.label}: {line}")
    log.warning("%s: %s", plan.label, line)
    _meta(flow, {}, {"served_by": None, "tried": failures})
    run.report.route, run.report.upstream = plan.route.name, plan.upstream.name
    run.report.fields["tried"] = tried_line(failures)
    report.not_rewritten(run, line)


def _unreachable(
    report: Report, flow: http.HTTPFlow, run: FlowRun, failures: tuple[Failure, ...]
) -> None:
    """No route of the chain could be reached: the relay answered the client's 502 / 504."""
    assert flow.response is not None
    last = failures[-1].route if failures else run.report.route
    tried = tried_line(failures)
    append_comment(flow, f"cursor-bridge [{last}]: no upstream reachable; tried: {tried}")
    _meta(
        flow,
        {"route": last, "action": Action.REJECTED.value},
        {"served_by": None, "tried": failures},
    )
    run.plan = None  # the body is the client's already: passed on as it is
    report.state.count(Count.REJECTED)
    r = run.report
    r.route, r.outcome, r.mode = last, Outcome.REJECTED, ""
    r.reason = f"answered {flow.response.status_code}: no upstream reachable"
    r.fields = {"tried": tried}


def _meta(flow: http.HTTPFlow, base: dict[str, object], fallback: dict[str, object]) -> None:
    meta = flow.metadata.get(META_KEY)
    out = dict(meta) if isinstance(meta, dict) else {}
    out.update(base)
    tried = fallback.get("tried", ())
    assert isinstance(tried, tuple)
    out["fallback"] = {**fallback, "tried": [f.describe() for f in tried]}
    set_meta(flow, out)
