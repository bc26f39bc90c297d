"""The fallback addon: a route's ``fallback`` chain applied to a flow (``addon.plan.fallback`` rules).

``request`` picks the first route not cooling down; mitmproxy sends the flow to the loopback
relay, which makes each attempt and relays the first answer that does not fall back, as it
streams. A relay because mitmproxy has no first-byte timeout and cannot take a request back
once sent. Rules and limits: docs/routes.md ("Fallbacks")."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from mitmproxy import connection, http

from addon.dialects import DIALECTS
from addon.outcome import Action, Count, FlowReport, Outcome
from addon.plan import AnswerState, FlowPlan, Incoming, Rewrite, decide, route_for
from addon.plan.caching import secret_of
from addon.plan.conditions import RequestView
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
    KeyVerdict,
    all_cooling,
    has_pool,
    is_link,
    key_verdict,
    link_name,
    links,
    reads_error,
    revoked_mark,
)
from addon.plan.key_probe import (
    PROBED_FOR,
    RECHECK_HOLD,
    ProbeResult,
    probe_for,
    probe_timeout,
    probed_mark,
    probed_verdict,
)
from addon.plan.values import tenths
from addon.routes import Route, fallback_chain
from addon.shell.flows import Attempt, Attempts, FlowRun
from addon.shell.host_filter import outside_proxy_hosts
from addon.shell.key_probe import KeyProbes, Target
from addon.shell.notes import META_KEY, append_comment, log, log_internal_error, set_meta
from addon.shell.options import environment
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.relay import TOKEN_HEADER, Relay, Relayed, whole
from addon.shell.report import Report
from addon.shell.retry import Retry, upstream_proxy
from addon.shell.settings import BridgeSettings
from addon.shell.upstream_request import apply_rewrite, origin
from addon.stream.decompress import make_decompressor
from addon.transforms.conversation import conversation_of

if TYPE_CHECKING:
    from addon.shell.wire import Opened

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
        self.probes = KeyProbes(lambda: self.retry, environment)
        """The keys' probes (``addon.plan.key_probe``): one per key at a time, and the
        rechecks of the keys this worker revoked."""

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
            req = flow.request
            settings = self._settings.settings
            if self.retry is None or not any(_relayed(r) for r in settings.routes):
                return None
            body = req.get_content(strict=False) or b""
            view = RequestView(body, req.path)
            route = route_for(settings, req.method, req.host, req.path, view)
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
                self._all_keys_cooling(flow, chain, failures)
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
        while attempt is not None:
            chain.attempt, route = attempt, attempt.route
            chain.tried.append(link_name(route))
            got = await self.retry.open(flow, attempt.request, route.timeout)
            if isinstance(got, NoAnswer):
                cool = cooldown_after(route, None, None)
                self._cool(chain, route, cool or 0)
                chain.failures.append(Failure(link_name(route), got.reason, got.detail, cool))
                log.info("cursor-bridge [%s]: upstream %s: falling back", route.name, got.detail)
            elif falls_back(got.status_code) or reads_error(route, got.status_code):
                error, body = await _read_error(got, route.timeout)
                chain.served = attempt
                status = got.status_code
                revoked = any(f.revoked for f in chain.failures)
                verdict = key_verdict(route, status, _plain(body, got), revoked)
                probed = ""
                if verdict is not None and verdict.judgement.blame is Blame.UNKNOWN:
                    verdict, probed = await self._probed(flow, attempt, verdict, revoked)
                if verdict is not None and verdict.action is not KeyAction.ANSWER:
                    last = error
                    self._refused(chain, route, status, verdict, self._target(flow, attempt))
                elif verdict is not None or not falls_back(status):
                    if verdict is not None:
                        _kept(route, status, verdict, probed)
                    return error  # the request's own: the client's answer, nothing cools
                else:
                    last = error
                    self._failed(chain, route, status, got.header("retry-after"))
            else:
                chain.served = attempt
                return _streamed(got)
            attempt = self._next(flow, chain)
        return last if last is not None else self._unreachable(chain)

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

    def _all_keys_cooling(
        self, flow: http.HTTPFlow, chain: tuple[Route, ...], failures: list[Failure]
    ) -> None:
        """Every key of the pool cools down (or was revoked) and no other route is left: the
        client's 429 in its dialect, ``Retry-After`` the earliest end of the cooldowns."""
        route = chain[0]
        wait = min(self.cooldowns.left(link_name(r)) for r in chain)
        every_revoked = all(self.cooldowns.cooling(revoked_mark(link_name(r))) for r in chain)
        status, headers, body = all_cooling(DIALECTS[route.client], wait, every_revoked)
        flow.response = http.Response.make(
            status, body, {"content-type": "application/json", **headers}
        )
        tried = tried_line(failures)
        label = f"cursor-bridge [{route.name}]"
        why = "every key cooling down" if status == 429 else "every key refused"
        append_comment(flow, f"{label}: answered {status}: {why}; tried: {tried}")
        set_meta(flow, {"route": route.name, "action": Action.REJECTED.value})
        self.report.state.count(Count.REJECTED)
        line = FlowReport(
            route.name,
            Outcome.REJECTED,
            client=route.client,
            upstream=route.upstream,
            reason=f"answered {status}: {why}"
            + (f" (Retry-After {headers['retry-after']})" if headers else ""),
            fields={"tried": tried},
        )
        self.report.close(flow, line, line=True)

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

    # ------------------------------------------------------------------ a key's probe

    def _target(self, flow: http.HTTPFlow, attempt: Attempt) -> Target | None:
        """Where the probe of ``attempt``'s key goes (the origin its request went to), or
        None: no probe known for its route, or not a key of a pool."""
        route, sent = attempt.route, attempt.request
        probe = probe_for(route, sent.path, sent.host) if is_link(route) else None
        if probe is None or route.key_env is None:
            return None
        via = upstream_proxy(flow)
        timeout = probe_timeout(route)
        return Target(probe, sent.scheme, sent.host, sent.port, via, route.key_env, timeout)

    async def _probed(
        self, flow: http.HTTPFlow, attempt: Attempt, verdict: KeyVerdict, revoked: bool
    ) -> tuple[KeyVerdict, str]:
        """A 401 / 403 of a key the table does not name: the key's probe says whether it is
        the key's (revoked, as for a key's error) or not (answered); and the words the info
        line gives for what the probe said ("" none sent). A probe that accepted the key or
        proved nothing is remembered by every worker for ``PROBED_FOR``: not sent again."""
        target = self._target(flow, attempt)
        if target is None:
            return verdict, ""
        name = link_name(attempt.route)
        label = target.probe.label
        if self.cooldowns.cooling(probed_mark(name)):
            return verdict, f"its probe {label} was asked a moment ago"
        result = await self.probes.probe(name, target)
        if result is not ProbeResult.REFUSED:
            self.cooldowns.cool(probed_mark(name), PROBED_FOR)
            return verdict, f"its probe {label} {result.value}"
        return probed_verdict(verdict, target.probe, result, revoked), ""

    def _recheck(self, route: Route, target: Target) -> None:
        """The revoked key's recheck after ``bridge_key_recheck``: its probe. Accepted: back
        at once for every worker (no client's request spent on it); refused: revoked again;
        proved nothing: back, the next request that asks for it is the recheck."""
        name, recheck = link_name(route), self._settings.settings.key_recheck

        async def check() -> float | None:
            result = await self.probes.probe(name, target)
            label = f"cursor-bridge [{route.name}]: key {route.key_env}"
            if result is ProbeResult.REFUSED:
                again = self._settings.settings.key_recheck
                self.cooldowns.cool(name, again + RECHECK_HOLD)
                self.cooldowns.cool(revoked_mark(name), again + RECHECK_HOLD)
                log.warning(
                    "%s still refused by its probe %s: left out for %s s more, then probed "
                    "again (bridge_key_recheck)",
                    label,
                    target.probe.label,
                    tenths(again),
                )
                return again
            self.cooldowns.clear(name)
            self.cooldowns.clear(revoked_mark(name))
            if result is ProbeResult.ACCEPTED:
                log.info("%s accepted by its probe %s: back in the pool", label, target.probe.label)
            else:
                log.info(
                    "%s: its probe %s proves nothing: back in the pool, the next request that "
                    "asks for it is its recheck",
                    label,
                    target.probe.label,
                )
            return None

        self.probes.recheck(name, recheck, check)

    # ------------------------------------------------------------------ a key refused

    def _refused(
        self,
        chain: Attempts,
        route: Route,
        status: int,
        verdict: KeyVerdict,
        target: Target | None,
    ) -> None:
        """A key of a pool answered an error that is its own fault: revoked for
        ``bridge_key_recheck`` (every worker on a Redis store), unless this request revoked
        one already; the next link is tried either way. With a probe known (``target``) the
        recheck is the probe, made by this worker; the key stays out until it is done."""
        recheck = self._settings.settings.key_recheck
        name = link_name(route)
        revoke = verdict.action is KeyAction.REVOKE
        if revoke:
            hold = recheck + (RECHECK_HOLD if target is not None else 0.0)
            self.cooldowns.cool(name, hold)
            self.cooldowns.cool(revoked_mark(name), hold)
            if target is not None:
                self._recheck(route, target)
        detail = verdict.detail(status, recheck)
        chain.failures.append(Failure(name, Reason.KEY_REFUSED, detail, revoked=revoke))
        judged = verdict.judgement
        why = f"HTTP {status} {judged.why}" + (f", {judged.provider}" if judged.provider else "")
        if not revoke:
            log.warning(
                "cursor-bridge [%s]: key %s refused (%s): not left out, this request left out "
                "a key already; trying the next",
                route.name,
                route.key_env,
                why,
            )
            return
        shared = self.cooldowns is not self.local_cooldowns  # a Redis store's table
        then = f"probed with {target.probe.label}" if target is not None else "tried again"
        log.warning(
            "cursor-bridge [%s]: key %s refused (%s): left out for %s s by %s, then %s "
            "(bridge_key_recheck)",
            route.name,
            route.key_env,
            why,
            tenths(recheck),
            "every worker" if shared else "this process",
            then,
        )

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
        await self.probes.done()
        await self.relay.stop()


def _relayed(route: Route) -> bool:
    """Whether the route's flows go through the relay: a ``fallback`` chain or a key pool."""
    return bool(route.fallback or route.key_pool)


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


def _streamed(got: Opened) -> Relayed:
    """The answer relayed as it comes: its body's bytes passed on as the upstream framed them
    (chunked, or its length kept); a body that ends with the connection is framed again."""
    headers = _headers(got)
    length = got.header("content-length")
    if got.framing == "length" and length is not None:
        headers.append((b"content-length", length.encode("latin-1")))
    passed = got.passed_to if got.framing in ("chunked", "length") else None
    return Relayed(got.status_code, got.reason, headers, got.aiter_raw(), got.aclose, passed)


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


def _plain(body: bytes, got: Opened) -> bytes:
    """An error body without its ``Content-Encoding`` (as it came when it cannot be undone),
    for the key's verdict."""
    try:
        undo = make_decompressor(got.header("content-encoding"))
        return body if undo is None else undo.feed(body) + undo.finish()
    except ValueError:
        return body


def _kept(route: Route, status: int, verdict: KeyVerdict, probed: str) -> None:
    """A 401 / 403 of a key of a pool that is the request's own (or not known to be the
    key's): the client gets it, no key is left out; one line says so (``probed``: what the
    key's probe said, "" none was sent)."""
    judged = verdict.judgement
    if judged.why:
        why = f"the request's own ({judged.why}, {judged.provider})"
    else:
        why = "not known to be the key's fault" + (f" ({probed})" if probed else "")
    log.info(
        "cursor-bridge [%s]: key %s answered HTTP %d, %s: answered, no key left out",
        route.name,
        route.key_env,
        status,
        why,
    )


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
