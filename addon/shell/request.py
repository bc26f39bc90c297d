"""The request addon: ``plan.decide`` on a routed chat request, and its decision applied.

A decision leaves the flow (``Pass``), answers it ourselves with an error in the
client's dialect (``Reject``), or sets the upstream request: body, path, query,
headers (``Rewrite``). Headers are never logged nor copied into ``flow.metadata``:
they carry the user's API keys. mitmproxy's ``allow_hosts`` / ``ignore_hosts`` bind
the bridge too. A bug of ours still answers the client (``plan.internal_error``).
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

from mitmproxy import http

from addon.dialects.base import WireRequest
from addon.outcome import FlowReport
from addon.plan import (
    Decision,
    Incoming,
    Pass,
    Reject,
    RequestView,
    Rewrite,
    decide,
    internal_error,
    route_for,
    short,
)
from addon.redact import clean
from addon.shell.common import (
    SECRETS,
    append_comment,
    environment,
    header_map,
    json_response,
    log,
    outside_proxy_hosts,
    replace_headers,
    set_meta,
)
from addon.shell.common import internal_error as log_internal_error
from addon.shell.kiro_auth import KiroAuth
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.report import Report, comment, decision_lines, plan_facts
from addon.shell.settings import BridgeSettings
from addon.state import Original
from addon.wire import secret_values


class RewriteRequest:
    name = "cursor_bridge_request"

    def __init__(
        self,
        settings: BridgeSettings,
        store: ReasoningStoreLife,
        report: Report,
        kiro: KiroAuth | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self.report = report
        self.kiro = kiro
        """Reads the Kiro token file of a route (its ``request`` hook runs before ours)."""

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.error is not None or not flow.live:
            return
        started = time.perf_counter_ns()
        route, incoming = None, None
        settings = self._settings.settings
        try:
            req = flow.request
            body = req.get_content(strict=False) or b""
            view = RequestView(body, req.path)
            route = route_for(settings, req.method, req.host, req.path, view)
            if route is None or outside_proxy_hosts(flow):
                return
            incoming = Incoming(
                req.method, req.host, req.path, header_map(req.headers), body, req.port
            )
            creds = self.kiro.take(flow.id) if self.kiro is not None else None
            env = environment()
            route_key = creds.key if creds else env.get(route.api_key_env or "")
            secrets = secret_values(incoming.headers, incoming.query, route_key)
            SECRETS.add(flow.id, secrets)  # before any line about this flow is written
            decision: Decision = decide(
                settings,
                route,
                incoming,
                env,
                creds,
                store=self._store.store,
                secrets=secrets,
                view=view,
            )
            if isinstance(decision, Rewrite):
                # Everything that could fail is done: the flow is changed only from here on.
                report = self._rewrite(flow, incoming, decision)
                report.spent_ns += time.perf_counter_ns() - started
                return
        except Exception as e:
            if route is None:
                log_internal_error("cursor-bridge: request", e)
                return
            log_internal_error(f"cursor-bridge [{route.name}]: request", e)
            decision = internal_error(route, e)
        try:
            match decision:
                case Pass(reason=None):
                    SECRETS.drop(flow.id)
                    return
                case Pass():
                    self._passthrough(flow, decision, incoming)
                    outcome, reason = "fallback", f"passed through: {short(decision.reason or '')}"
                case Reject():
                    self._reject(flow, decision)
                    outcome = "rejected"
                    reason = f"answered {decision.status}: {short(decision.message)}"
            # The flow's one line, in the format of every outcome (``FlowReport.line``).
            report = FlowReport(
                route.name,
                outcome,
                client=route.client,
                upstream=route.upstream,
                spent_ns=time.perf_counter_ns() - started,
                reason=reason,
                fields={"request": f"{short(flow.request.method)} {short(flow.request.path)}"},
            )
            self.report.close(flow, report, line=True)
        except Exception as e:
            log_internal_error(f"cursor-bridge [{route.name}]: request", e)

    def _rewrite(self, flow: http.HTTPFlow, incoming: Incoming, d: Rewrite) -> FlowReport:
        req, wire, plan = flow.request, d.wire, d.plan
        if d.body is not incoming.body:  # else the client's bytes go on as they came
            req.content = d.body
        _place(req, incoming, wire, ("accept-encoding", "identity"))
        run = self.report.runs.start(flow.id, plan)
        self.report.state.count("requests rewritten")
        decisions = decision_lines(plan.request_notes)
        if self.report.keep_originals:
            facts = (*plan_facts(plan), ("upstream path", clean(wire.path, 300)))
            self.report.keep(flow.id, "request", Original(d.original, "request", facts, decisions))
        comment(flow, plan.label, decisions or ("no changes needed",))
        set_meta(flow, plan.meta())
        if self._settings.settings.debug:
            log.debug("%s: upstream path %s", plan.label, clean(wire.path, 300))
            for line in decisions:
                log.debug("%s: request: %s", plan.label, clean(line, 500))
        return run.report

    def _reject(self, flow: http.HTTPFlow, d: Reject) -> None:
        """Answer the client ourselves, in its dialect; the upstream is not called."""
        label = f"cursor-bridge [{d.route.name}]"
        self.report.state.count("rejected")
        flow.response = json_response(d.status, d.body)
        append_comment(flow, f"{label}: answered {d.status}: {short(d.message)}")
        set_meta(flow, {"route": d.route.name, "action": "rejected", "error": short(d.message)})

    def _passthrough(self, flow: http.HTTPFlow, d: Pass, incoming: Incoming | None) -> None:
        assert d.route is not None and d.reason is not None
        if d.wire is not None and incoming is not None:
            _place(flow.request, incoming, d.wire)
        label = f"cursor-bridge [{d.route.name}]"
        self.report.state.count("passed through")
        reason = short(d.reason)
        append_comment(flow, f"{label}: passed through: {reason}")
        set_meta(flow, {"route": d.route.name, "action": "passthrough", "reason": reason})


def _place(
    req: http.Request, incoming: Incoming, wire: WireRequest, *extra: tuple[str, str]
) -> None:
    """The upstream request's path, query, address and headers, as ``wire`` says."""
    if (wire.path, wire.query) != (incoming.bare_path, incoming.query):
        # surrogateescape: bytes of the client's query that are not UTF-8 go back as sent
        query = urlencode(wire.query, encoding="utf-8", errors="surrogateescape")
        req.path = wire.path + (f"?{query}" if wire.query else "")
    if wire.origin is not None:
        # A route's upstream_url: mitmproxy connects there (TLS verified as for any upstream,
        # SNI the new host) and the Host header / :authority follow the host.
        req.scheme, req.host, req.port = wire.origin
    replace_headers(req.headers, wire.drop_headers, (*wire.set_headers, *extra))
