"""The request addon: ``plan.decide`` on a routed chat request, and its decision applied: left
alone (``Pass``), answered by the bridge in the client's dialect (``Reject``), or rewritten for
the upstream — body, path, query, headers (``Rewrite``). A bug of ours still answers the client
(``plan.internal_error``). Headers are never logged nor copied anywhere: they carry the keys.
"""

from __future__ import annotations

import dataclasses
import time

from mitmproxy import http

from addon.plan import (
    Decision,
    Incoming,
    Pass,
    Reject,
    Rewrite,
    decide,
    flow_secrets,
    internal_error,
    short,
)
from addon.redact import clean
from addon.report.counters import Original
from addon.report.outcome import Action, Count, FlowReport, Outcome
from addon.shell.headers import header_map, json_response
from addon.shell.host_filter import outside_proxy_hosts
from addon.shell.kiro_auth import KiroAuth
from addon.shell.notes import append_comment, log, log_internal_error, set_meta
from addon.shell.option_checks import environment
from addon.shell.outbound.attempts import Fallbacks
from addon.shell.outbound.upstream_request import apply_rewrite, origin, place
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.reporter import Report, comment, decision_lines, plan_facts
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

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.error is not None or not flow.live:
            return
        started = time.perf_counter_ns()
        route, incoming = None, None
        settings = self._settings.settings
        try:
            req = flow.request
            flows = self.report.flows
            matched = flows.route_match(flow, settings)
            flows.open(flow.id).match = None  # its last reader: the body's decode let go
            route, view = matched.route, matched.view
            if route is None or outside_proxy_hosts(flow):
                return
            chain = flows.open(flow.id).chain  # the fallback addon's pick, if any
            if chain is not None:
                route = chain.route
            incoming = Incoming(
                req.method, req.host, req.path, header_map(req.headers), view.body, req.port
            )
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
                store=self._store.store,
                secrets=secrets,
                view=view,
            )
            if isinstance(decision, Rewrite):
                # Everything that could fail is done: the flow is changed only from here on.
                report = self._rewrite(flow, incoming, decision)
                if self.fallbacks is not None:  # a chain's attempts, or a stream: the relay
                    # The run's plan: the one with the client key's name on it.
                    named = self.report.flows.plan(flow.id) or decision.plan
                    self.fallbacks.send(flow, chain, route, incoming, named)
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
                    self.report.flows.end(flow.id)  # not this bridge's flow after all
                    return
                case Pass():
                    self._passthrough(flow, decision, incoming)
                    outcome = Outcome.NOT_REWRITTEN
                    reason = f"passed through: {short(decision.reason or '')}"
                case Reject():
                    self._reject(flow, decision)
                    outcome = Outcome.REJECTED
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
        wire, plan = d.wire, d.plan
        record = self.report.flows.get(flow.id)
        if record is not None and record.client_name is not None:
            # The client key's name labels the flow's usage (the ledger reads the plan).
            plan = dataclasses.replace(plan, client_name=record.client_name)
        apply_rewrite(flow.request, incoming, d)
        run = self.report.flows.start_run(flow.id, plan)
        # Where the answer comes from, in the log line, the metadata and the view: the
        # upstream's address (never its path: a path may carry a key) and the model sent.
        url = origin(flow.request)
        model = plan.unified.model if plan.unified is not None else ""
        run.report.fields["upstream_url"] = url
        if model:
            run.report.fields["model"] = model
        if plan.client_name:
            run.report.fields["client_name"] = plan.client_name  # a name, never a key
        if plan.route.key_pool and plan.route.key_env:
            run.report.fields["key"] = plan.route.key_env  # a key pool's: its name
        self.report.state.count(Count.REQUESTS_REWRITTEN)
        decisions = decision_lines(plan.request_notes)
        if self.report.keep_originals:
            facts = (
                *plan_facts(plan),
                ("upstream URL", clean(url, 300)),
                ("upstream path", clean(wire.path, 300)),
                *((("model", clean(model, 300)),) if model else ()),
            )
            self.report.keep(flow.id, "request", Original(d.original, "request", facts, decisions))
        comment(flow, plan.label, decisions or ("no changes needed",))
        set_meta(flow, {"upstream_url": url, **plan.meta(), **({"model": model} if model else {})})
        if self._settings.settings.debug:
            log.debug("%s: upstream path %s", plan.label, clean(wire.path, 300))
            for line in decisions:
                log.debug("%s: request: %s", plan.label, clean(line, 500))
        return run.report

    def _reject(self, flow: http.HTTPFlow, d: Reject) -> None:
        """Answer the client ourselves, in its dialect; the upstream is not called."""
        label = f"cursor-bridge [{d.route.name}]"
        self.report.state.count(Count.REJECTED)
        flow.response = json_response(d.status, d.body)
        append_comment(flow, f"{label}: answered {d.status}: {short(d.message)}")
        set_meta(
            flow,
            {"route": d.route.name, "action": Action.REJECTED.value, "error": short(d.message)},
        )

    def _passthrough(self, flow: http.HTTPFlow, d: Pass, incoming: Incoming | None) -> None:
        assert d.route is not None and d.reason is not None
        if d.wire is not None and incoming is not None:
            place(flow.request, incoming, d.wire)
        label = f"cursor-bridge [{d.route.name}]"
        self.report.state.count(Count.PASSED_THROUGH)
        reason = short(d.reason)
        append_comment(flow, f"{label}: passed through: {reason}")
        set_meta(
            flow, {"route": d.route.name, "action": Action.PASSTHROUGH.value, "reason": reason}
        )
