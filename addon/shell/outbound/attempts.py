"""The fallback addon: a route's ``fallback`` chain applied to a flow (``addon.plan.fallback`` rules).

``request`` picks the first route not cooling down; a stream's flow mitmproxy sends to the
loopback relay, whose leg makes each attempt and relays the first answer that does not fall
back, as it streams; a whole answer's leg runs in the request hook (``_whole``). A relay because mitmproxy has no first-byte timeout and cannot take a request back
once sent. Rules and limits: docs/routes.md ("Fallbacks")."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import TYPE_CHECKING

from mitmproxy import connection, http
from mitmproxy.connection import ConnectionState

from addon.config.routes import MAX_TIMEOUT, Route, fallback_chain
from addon.dialects import DIALECTS
from addon.plan import AnswerState, FlowPlan, Incoming, Rewrite, decide
from addon.plan.failed_attempt import (
    Attempted,
    Step,
    Verdict,
    empty_body,
    every_key_out,
    is_error,
    no_answer,
    skipped,
)
from addon.plan.fallback import (
    Cooldowns,
    Failure,
    MemoryCooldowns,
    NoAnswer,
    Reason,
    all_failed,
    first_route,
    next_route,
    told,
)
from addon.plan.key_pool import has_pool, link_name, links
from addon.report.outcome import Count
from addon.shell.flows import Attempt, Attempts, Flows
from addon.shell.host_filter import outside_proxy_hosts
from addon.shell.notes import add_notes, log, log_internal_error
from addon.shell.option_checks import environment
from addon.shell.outbound.pool_keys import LEVELS, PoolKeys
from addon.shell.outbound.probes import KeyProbes, Target
from addon.shell.outbound.relay import TOKEN_HEADER, BodyCut, Relay, Relayed, whole
from addon.shell.outbound.retry import Retry
from addon.shell.outbound.search_leg import SearchLeg
from addon.shell.outbound.searxng import Searches
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
        searches: Searches | None = None,
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
        self.search_leg = SearchLeg(retry, searches or Searches()) if retry is not None else None
        """A streaming client's web searches run between streamed calls (``search_leg``)."""
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
        return self._store.cooldowns or self.local_cooldowns

    # ------------------------------------------------------------------ before the rewrite

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """A flow on a route with a chain: the first route not cooling down picked before the
        Kiro and rewrite addons (the record's chain; the rewrite then calls ``start``), or
        every key of a pool out: answered as ``every_key_out`` says. The relay not started
        (it failed with the proxy): a coroutine that starts it first."""
        if flow.response is not None or flow.error is not None or not flow.live:
            return None
        try:
            if not self.relay.port and self.retry is not None:
                return self._relay_then(flow)
            req = flow.request
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
                chain = links(chain, self._store.secret, conversation)
            first, passed = first_route(chain, self.cooldowns)
            failures = [skipped(r, self.cooldowns) for r in passed]
            if first is not None:
                tried = [link_name(r) for r in passed]
                attempts = Attempts(first, chain, req.copy(), failures, tried)
                self._flows.open(flow.id).chain = attempts
                return None
            out = every_key_out(DIALECTS[route.client], chain, self.cooldowns, tuple(failures))
            headers = {"content-type": "application/json", **out.headers}
            flow.response = http.Response.make(out.status, out.body, headers)
            add_notes(flow, out.comment, out.meta, merge=False)
            self.report.state.count(Count.REJECTED)
            self.report.close(flow, out.report, line=True)
        except Exception as e:  # the flow goes to its matched route, without a chain
            log_internal_error("cursor-bridge: fallback", e)
        return None

    async def _relay_then(self, flow: http.HTTPFlow) -> None:
        """The relay started (it did not start with the proxy), then the flow's chain."""
        if not any(_relayed(r) for r in self._settings.settings.routes):
            return  # no chain: a plain route's flow goes by mitmproxy (``send``)
        try:
            await self.relay.start()
        except Exception as e:  # no relay: the flow goes to its matched route, without a chain
            log_internal_error("cursor-bridge: fallback", e)
            return
        if self.relay.port:
            self.request(flow)

    def start(
        self, flow: http.HTTPFlow, chain: Attempts, incoming: Incoming, plan: FlowPlan
    ) -> Awaitable[None] | None:
        """The rewrite set the flow's request for ``chain.route``: its attempts (``_go``)."""
        chain.incoming = incoming
        chain.attempt = Attempt(chain.route, plan, flow.request.copy())
        return self._go(flow, chain, plan)

    def send(
        self, flow: http.HTTPFlow, chain: Attempts | None, r: Route, inc: Incoming, plan: FlowPlan
    ) -> Awaitable[None] | None:
        """The rewritten flow's attempts: its chain's (``start``); or, one upstream path
        (docs/architecture.md), a flow of a route without a chain, streamed or whole, as a
        chain of one attempt that never falls back (``_plain``: no cooldown, no first-byte
        timeout but the longest a route may set, any status relayed as it came)."""
        if chain is not None:
            return self.start(flow, chain, inc, plan)
        if self.retry is not None and self.relay.port:
            sent = flow.request.copy()  # one copy: a chain of one writes no next request
            one = Attempts(r, (r,), sent, [], [], inc, Attempt(r, plan, sent))
            self._flows.open(flow.id).chain = one
            return self._go(flow, one, plan)
        return None

    def _go(self, flow: http.HTTPFlow, chain: Attempts, plan: FlowPlan) -> Awaitable[None] | None:
        """A stream: mitmproxy sends the flow to the relay; a whole answer: ``_whole``."""
        chain.token = self._flows.new_token(flow.id)
        chain.leg = lambda: self._leg(flow, chain)
        if plan.stream:
            _to_relay(flow, chain.token, self.relay.port)
            return None
        return _whole(flow, chain, self._flows, self.relay.port)

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
            return _answer(self, flow, attempt, got, MAX_TIMEOUT)
        while attempt is not None:
            chain.attempt, route = attempt, attempt.route
            chain.tried.append(link_name(route))
            got = await self.retry.open(flow, attempt.request, route.timeout)
            opened = not isinstance(got, NoAnswer)
            if not isinstance(got, NoAnswer) and 200 <= got.status_code < 300:
                got = await _started(got, route.timeout)
            if isinstance(got, NoAnswer):  # a body that broke off (opened): that link cools
                self._apply(chain, no_answer(Attempted(route, chain.chain), got, opened))
            elif is_error(route, got.status_code):
                error, body = await _read_error(got, route.timeout)
                chain.served = attempt
                target = self.keys.target(flow, attempt)
                facts = Attempted(
                    route,
                    chain.chain,
                    revoked_already=any(f.revoked for f in chain.failures),
                    probe=target.probe if target is not None else None,
                    recheck=self._settings.settings.key_recheck,
                    shared=self.cooldowns is not self.local_cooldowns,  # a Redis store's table
                )
                now, headers = self._clock(), _header_map(got)
                verdict = await self.keys.judged(
                    facts, got.status_code, headers, _decoded(body, got), now, target
                )
                self._apply(chain, verdict, target)
                if verdict.step is Step.ANSWER:
                    return error  # the request's own: the client's answer, nothing cools
                last = error
            else:
                chain.served = attempt
                return _answer(self, flow, attempt, got, route.timeout)
            attempt = self._next(flow, chain)
        return last if last is not None else self._unreachable(chain)

    def _apply(self, chain: Attempts, verdict: Verdict, target: Target | None = None) -> None:
        """A failed attempt's verdict applied: cooldowns, the key's recheck, failure, line."""
        for entry in verdict.cool:
            self.cooldowns.cool(entry.name, entry.seconds)
        if verdict.recheck and target is not None and chain.attempt is not None:
            self.keys.recheck(chain.attempt.route, target)
        if verdict.failure is not None:
            chain.failures.append(verdict.failure)
        if verdict.line is not None:
            log.log(LEVELS[verdict.line.level], "%s", verdict.line.text)

    def _next(self, flow: http.HTTPFlow, chain: Attempts) -> Attempt | None:
        """The next route's attempt: the client's request decided again for it; None when no
        route of the chain is left."""
        settings, env = self._settings.settings, environment()
        assert chain.incoming is not None
        while True:
            route, passed = next_route(chain.chain, chain.tried, self.cooldowns)
            for passed_over in passed:  # cooling down (or revoked): named in the tried line
                chain.tried.append(link_name(passed_over))
                chain.failures.append(skipped(passed_over, self.cooldowns))
            if route is None:
                return None
            decision = decide(
                settings,
                route,
                chain.incoming,
                env,
                store=self._flows.store_view(flow.id),
                secrets=self._flows.secrets(flow.id),
                captions=self._flows.captions(flow.id),
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
            if run is None or flow.response is None:
                return
            by = chain.served  # None: no route answered, the answer is the bridge's 502 / 504
            if by is not None and run.plan is not by.plan:  # read with the serving route's plan
                run.plan, run.answer = by.plan, AnswerState.of(by.plan)
                run.report.notes = run.answer.notes
            url = origin(by.request) if by is not None else ""
            status, failures = flow.response.status_code, tuple(chain.failures)
            said = told(by.plan if by else None, status, url, failures, run.report.route)
            if said is None:
                return
            add_notes(flow, said.comment, said.meta, merge=True)
            said.edit.apply(run.report)
            if said.passed:
                run.plan = None  # the body is the client's already: passed on as it is
                self.report.state.count(Count.REJECTED)
            if said.fell_back:
                self.report.state.count(Count.FALLBACKS_ANSWERED)
            if said.line is not None:
                log.log(LEVELS[said.line.level], "%s", said.line.text)
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


def _answer(
    fallbacks: Fallbacks, flow: http.HTTPFlow, attempt: Attempt, got: Opened, timeout: float
) -> Relayed:
    """The answer relayed as it comes (``_streamed``); a web search run live: with its next
    calls (``SearchLeg``, each within ``timeout``)."""
    idle, flows = fallbacks._settings.settings.stream_idle, fallbacks._flows
    relayed = _streamed(got, idle, flows, flow.id)
    if fallbacks.search_leg is None:
        return relayed
    streamed = functools.partial(_streamed, idle=idle, flows=flows, flow_id=flow.id)
    return fallbacks.search_leg.relayed(flow, attempt, relayed, timeout, streamed)


def _streamed(got: Opened, idle: float, flows: Flows, flow_id: str) -> Relayed:
    """The answer relayed as it comes, its body's data as one chunk per upstream read
    (``Wire.passed_to``), cut after ``idle`` seconds of silence
    (``bridge_stream_idle_timeout``); a body that breaks off is ended cleanly, its cause in
    the flow's record (``Flows.cut``)."""
    got.watch(idle)
    cut = functools.partial(flows.cut, flow_id)
    passed = got.rechunked_to if got.framing in ("chunked", "length") else None
    return Relayed(
        got.status_code, got.reason, _headers(got), got.aiter_raw(), got.aclose, passed, cut
    )


async def _whole(flow: http.HTTPFlow, chain: Attempts, flows: Flows, port: int) -> None:
    """A whole answer's attempts made here, in the request hook: the leg's answer read whole
    is the flow's response, so mitmproxy opens no connection (it runs the ``responseheaders``
    and ``response`` hooks for a response set by an addon). The client hung up meanwhile: the
    attempts are cancelled and the flow killed (nothing is sent). An answer
    that streams though the client asked for none (SSE) goes by the relay as before: its
    reader is ``flow.response.stream``, which mitmproxy runs only for a body it reads."""
    leg = flows.take_leg(chain.token)
    if leg is None:
        return
    task = asyncio.ensure_future(_read_whole(leg(), functools.partial(flows.cut, flow.id)))
    try:
        while not (await asyncio.wait({task}, timeout=HANG_UP_POLL))[0]:
            if not flow.client_conn.state & ConnectionState.CAN_READ:
                await _cancelled(task)
                if flow.killable:
                    flow.kill()  # type: ignore[no-untyped-call]  # the client is gone
                return
    finally:
        if not task.done():
            await _cancelled(task)
    got, body = task.result()
    if body is None:  # a stream: the relay writes it, the flow's reader reads it
        chain.leg = functools.partial(_ready, got)
        _to_relay(flow, chain.token, port)
        return
    headers = http.Headers([*got.headers, (b"content-length", b"%d" % len(body))])
    reason = got.reason or _reason(got.status)
    flow.response = http.Response(
        b"HTTP/1.1", got.status, reason, headers, body, None, time.time(), time.time()
    )


HANG_UP_POLL = 0.25
"""Seconds between two looks at the client's connection while a whole answer's attempts run
(mitmproxy tells the hook nothing of a client that hangs up)."""


async def _read_whole(
    leg: Awaitable[Relayed], cut: Callable[[str], None]
) -> tuple[Relayed, bytes | None]:
    """The leg's answer and its body read whole (None: an event stream, still to read). A body
    that breaks off is what came, its cause the flow's (``cut``), as the relay does."""
    got = await leg
    if (_header(got.headers, b"content-type") or b"").lower().startswith(b"text/event-stream"):
        return got, None
    body = bytearray()
    try:
        async for piece in got.body:
            body += piece
    except BodyCut as e:
        (got.cut or cut)(e.cause)
    except Exception as e:  # the upstream's body failed mid-way: it is cut off
        log.info("cursor-bridge: fallback: answer cut off (%s)", type(e).__name__)
        (got.cut or cut)("upstream_cut")
    finally:
        await got.close()
    return got, bytes(body)


async def _ready(got: Relayed) -> Relayed:
    return got


async def _cancelled(task: asyncio.Future[tuple[Relayed, bytes | None]]) -> None:
    """The attempts stopped; an answer that came meanwhile let go."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        got, _ = await task
        await got.close()


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    return next((v for k, v in headers if k.lower() == name), None)


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


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
    return empty_body(got.status_code, cause)


def _decoded(body: bytes, got: Opened) -> bytes:
    """An error body without its ``Content-Encoding`` (as it came when it cannot be undone),
    for the key's verdict."""
    try:
        undo = make_decompressor(got.header("content-encoding"))
        return body if undo is None else undo.feed(body) + undo.finish()
    except ValueError:
        return body


def _header_map(got: Opened) -> dict[str, str]:
    """An answer's headers as a plain map: names lower-cased, the first of a repeated name."""
    out: dict[str, str] = {}
    for key, value in got.headers:
        out.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
    return out
