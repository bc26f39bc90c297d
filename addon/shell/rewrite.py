"""The request addon: ``plan.decide`` on a routed chat request, and its decision applied: left
alone (``Pass``), answered by the bridge in the client's dialect (``Reject``), or rewritten for
the upstream — body, path, query, headers (``Rewrite``). A bug of ours still answers the client
(``plan.internal_error``). Headers are never logged nor copied anywhere: they carry the keys.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable

from mitmproxy import http

from addon.config.routes import Route
from addon.plan import (
    Decision,
    Incoming,
    Writes,
    decide,
    flow_secrets,
    internal_error,
    short,
    writes_for,
)
from addon.redact import clean
from addon.report.counters import Original
from addon.report.outcome import FlowReport
from addon.shell.flows import FlowRecord, new_run
from addon.shell.headers import header_map
from addon.shell.kiro_auth import KiroAuth
from addon.shell.notes import log, log_internal_error, write_notes
from addon.shell.option_checks import environment
from addon.shell.outbound.attempts import Fallbacks
from addon.shell.outbound.upstream_request import place
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.reporter import Report, plan_facts
from addon.shell.settings import BridgeSettings


class RewriteRequest:
    name = "cursor_bridge_request"

    def __init__(
        self,
        settings: BridgeSettings,
        store: ReasoningStoreLife,
        report: Report,
        kiro: KiroAuth | None = None,
        fallbacks: Fallbacks | None = None,
    ) -> None:
        self._settings = settings
        self.fallbacks = fallbacks
        """Picks the route of a flow whose route has a ``fallback`` chain (its ``request`` hook
        runs before ours) and, once the flow is rewritten for it, sends it to its relay."""
        self._store = store
        self.report = report
        self.kiro = kiro
        """Reads the Kiro token file of a route (its ``request`` hook runs before ours)."""

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """The decision (``_decided``), applied: the request, or the bridge's answer; the
        comment and the metadata; a rewrite's run and its attempts (a whole answer's: a
        coroutine mitmproxy awaits, ``Fallbacks.send``), else the flow's line."""
        if flow.response is not None or flow.error is not None or not flow.live:
            return None
        started = time.perf_counter_ns()
        decided = self._decided(flow)
        if decided is None:
            return None
        record, w, incoming, route = decided
        try:
            # Everything that could fail is done: the flow is changed only from here on.
            if w is None:
                self.report.flows.end(flow.id)  # not this bridge's flow after all
                return None
            req = flow.request
            if w.body is not None:
                req.content = w.body
            if w.wire is not None and incoming is not None:
                place(req, incoming, w.wire, *w.extra)
            if w.answer is not None:
                status, body = w.answer
                flow.response = http.Response.make(
                    status, body, {"content-type": "application/json"}
                )
            self.report.state.count(w.count)
            ran = None
            if w.plan is not None:  # a rewrite's run starts: what its line and the view say
                plan = w.plan
                run = record.run = new_run(plan)
                ran = run.report
                # Where the answer comes from, in the log line, the metadata and the view: the
                # upstream's address (never its path: a path may carry a key) and the model sent.
                run.report.fields.update(w.fields)
                if self.report.keep_originals:
                    facts = (*plan_facts(plan), *w.facts)
                    original = Original(w.original, "request", facts, w.decisions)
                    self.report.keep(flow.id, "request", original)
                if self._settings.settings.debug:
                    log.debug("%s: upstream path %s", plan.label, clean(w.wire_path, 300))
                    for line in w.decisions:
                        log.debug("%s: request: %s", plan.label, clean(line, 500))
            write_notes(flow, record.secrets, w.lines, w.meta)
            if ran is not None and w.plan is not None and incoming is not None:
                sent = None
                if self.fallbacks is not None:  # the attempts: the relay's, or here (whole)
                    sent = self.fallbacks.send(flow, record.chain, route, incoming, w.plan)
                ran.spent_ns += time.perf_counter_ns() - started
                return sent
            assert w.outcome is not None
            # The flow's one line, in the format of every outcome (``FlowReport.line``).
            report = FlowReport(
                route.name,
                w.outcome,
                client=route.client,
                upstream=route.upstream,
                spent_ns=time.perf_counter_ns() - started,
                reason=w.reason,
                fields={"request": f"{short(req.method)} {short(req.path)}"},
            )
            self.report.close(flow, report, line=True)
        except Exception as e:
            log_internal_error(f"cursor-bridge [{route.name}]: request", e)
        return None

    def _decided(
        self, flow: http.HTTPFlow
    ) -> tuple[FlowRecord, Writes | None, Incoming | None, Route] | None:
        """The flow's decision, and what to write for it (``writes_for``); None: not a flow of
        a route (or the bridge failed before it knew one). Nothing is written on the flow."""
        route, incoming = None, None
        settings = self._settings.settings
        flows = self.report.flows
        req = flow.request
        record = flows.open(flow.id)
        address = (req.scheme, req.host, req.port)
        try:
            headers = header_map(req.headers)
            matched = flows.route_match(flow, settings)
            if matched.outside:
                record.match = None  # not the bridge's: what an addon before matched let go
                return None
            record.match = None  # its last reader: the body's decode let go
            route, view = matched.route, matched.view
            if route is None:
                return None
            chain = record.chain  # the fallback addon's pick, if any
            if chain is not None:
                route = chain.route
            incoming = Incoming(req.method, req.host, req.path, headers, view.body, req.port)
            creds = self.kiro.take(flow.id, route) if self.kiro is not None else None
            env = environment()
            routes = chain.chain if chain else (route,)
            secrets = flow_secrets(incoming, env, creds, route, routes)
            flows.add_secrets(flow.id, secrets)  # before any line about this flow is written
            decision: Decision = decide(
                settings,
                route,
                incoming,
                env,
                creds,
                store=flows.default_store_view()
                if record.store_view is None
                else record.store_view,
                secrets=secrets,
                view=view,
                captions=record.captions,
            )
            return (
                record,
                writes_for(decision, incoming, address, record.client_name),
                incoming,
                route,
            )
        except Exception as e:
            if route is None:
                log_internal_error("cursor-bridge: request", e)
                return None
            log_internal_error(f"cursor-bridge [{route.name}]: request", e)
            failed = internal_error(route, e)
            return (
                record,
                writes_for(failed, incoming, address, record.client_name),
                incoming,
                route,
            )
