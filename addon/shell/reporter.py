"""The report addon: what the bridge says about each routed flow, and the end of its record.

When a flow is over (``response``, ``error``) its ``FlowReport`` (``addon.report.outcome``) sets its
mark, adds to the counters (``bridge.stats``) and is logged as one line, the same format for
every outcome; then the flow's record ends (``Flows.end``). It also keeps what the content view
shows. One place, so every flow is said once and freed once."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from mitmproxy import command, contentviews, ctx, http

from addon.plan import FlowPlan, short
from addon.redact import clean
from addon.report.counters import AnswerInfo, BridgeState, Original
from addon.report.outcome import FlowReport, Outcome
from addon.report.view import usage_text
from addon.shell.answer_notes import FlowNotes, client_body, stream_notes
from addon.shell.contentview import BridgeContentview
from addon.shell.flows import FlowRun, Flows
from addon.shell.ledger_book import UsageCounting
from addon.shell.notes import META_KEY, append_comment, log, log_internal_error, seal_flow
from addon.shell.settings import BridgeSettings


class Report:
    name = "cursor_bridge_report"

    def __init__(
        self,
        state: BridgeState,
        flows: Flows,
        settings: BridgeSettings,
        usage: UsageCounting | None = None,
    ) -> None:
        self.state = state
        self._usage = usage
        """The usage ledger: each answered flow's tokens are counted there once, at its end."""
        self.flows = flows
        """What the bridge holds for each flow; ended here, once the flow is over."""
        self._settings = settings

    @property
    def keep_originals(self) -> bool:
        return self._settings.keep_originals

    # ------------------------------------------------------------------ hooks

    def load(self, loader: Any) -> None:
        contentviews.add(BridgeContentview(self.state.originals))

    def response(self, flow: http.HTTPFlow) -> None:
        """The flow is over (after the answers addon, whatever it did)."""
        run = self.flows.run(flow.id)
        try:
            if run is not None:
                self.close(flow, run.report, line=True, run=run)
        finally:
            self.flows.end(flow.id)

    def error(self, flow: http.HTTPFlow) -> None:
        """A flow that ended without its ``response`` hook (a disconnect): reported once, as
        ``response`` would have — with what its stream carried (counts, skipped events, the
        view), and with the disconnect as its reason unless the upstream's stream had already
        reached its end (a client that hangs up as soon as it has read ``[DONE]``)."""
        run = self.flows.run(flow.id)
        if run is None:
            self.flows.end(flow.id)
            return
        report = run.report
        started = time.perf_counter_ns()
        try:
            notes = self.disconnected(run, flow.error.msg if flow.error else "")
        except Exception as e:
            log_internal_error(f"cursor-bridge [{report.route}]: error", e)
            notes = FlowNotes()
        try:
            report.spent_ns += time.perf_counter_ns() - started
            self.close(flow, report, line=True, run=run, notes=notes)
        except Exception as e:
            log_internal_error(f"cursor-bridge [{report.route}]: error", e)
        finally:
            self.flows.end(flow.id)

    def disconnected(self, run: FlowRun, why: str) -> FlowNotes:
        """What the flow's end says of a disconnect (``why``: mitmproxy's reason): the
        stream's notes when it carried events or had reached its end; the disconnect as the
        flow's reason unless it had."""
        plan, notes = run.plan, FlowNotes()
        p = run.answer.processor if plan is not None else None
        ended = p is not None and p.upstream_ended()
        # The stream had already told the client it failed (its dialect's error): that is
        # the flow's outcome and reason, whatever the client did next.
        failed = p is not None and p.error is not None
        if not ended:  # the client got part of an answer: no body to show as its own
            run.client_bytes = None
            if not failed:
                run.report.reason = run.report.reason or why[:300]  # the line cleans it
        if plan is not None and p is not None and (ended or failed or p.events_in):
            stream_notes(self, notes, run, plan)
        if ended:
            notes.comments.append("the client hung up after the answer's end")
        elif failed:
            notes.comments.append("the client hung up after the stream's error")
        return notes

    def done(self) -> None:
        try:
            log.info("cursor-bridge: %s", self.state.summary())
        except Exception as e:
            log_internal_error("cursor-bridge: done", e)

    @command.command("bridge.stats")  # type: ignore[untyped-decorator]
    def stats(self) -> str:
        """What the bridge did since it started: flows by outcome, repairs, restores,
        retries, flows not rewritten (also logged)."""
        text = self.state.summary()
        log.info("cursor-bridge: %s", text)
        return text

    # ------------------------------------------------------------------ for the other addons

    def not_rewritten(self, run: FlowRun | None, why: str) -> None:
        """Something of the flow could not be rewritten (``why``): its outcome says so."""
        if run is not None:
            run.report.add_outcome(Outcome.NOT_REWRITTEN)
            run.report.reason = run.report.reason or clean(why, 300)

    def retried(self, run: FlowRun | None, kind: str) -> None:
        # Counted once, by the flow's report (``retries (kind)``; ``bridge.stats`` says it).
        if run is not None:
            run.report.retries[kind] += 1

    def keep_answer(
        self,
        flow: http.HTTPFlow,
        run: FlowRun,
        plan: FlowPlan,
        raw: bytes,
        summary: str,
        *,
        stream: bool,
        cut: bool = False,
    ) -> None:
        """The upstream's answer as it came, for the content view's timeline."""
        if self.keep_originals:
            self.keep(flow.id, "response", self.original(run, plan, raw, summary, stream, cut))

    def original(
        self, run: FlowRun, plan: FlowPlan, raw: bytes, summary: str, stream: bool, cut: bool
    ) -> Original:
        """The upstream's answer as the content view shows it (``keep_answer``)."""
        info = AnswerInfo(
            plan.upstream.name,
            plan.upstream_framing,
            plan.client.name,
            plan.client_framing,
            stream,
            cut,
        )
        decisions = decision_lines(run.answer.answer_notes(plan))
        decisions += tuple(f"{n} {kind} asked" for kind, n in run.report.retries.items())
        facts = plan_facts(plan)
        usage = run.answer.usage
        if usage is not None:  # the answer's tokens and the cache's part, as the log line says
            facts += (("usage", clean(usage_text(usage), 300)),)
        return Original(raw, summary, facts, decisions, info)

    def attempt(self, flow: http.HTTPFlow, what: str, body: bytes | None) -> None:
        """A later attempt's body, for the request's content view (as it is sent)."""
        if self.keep_originals:
            self.state.originals.add_attempt(flow.id, what, body or b"")

    def keep(self, flow_id: str, part: str, original: Original) -> None:
        if self.keep_originals:
            # The view redacts with them when it renders (the flow's own bodies too).
            original = replace(original, secrets=self.flows.secrets(flow_id))
            self.state.originals.put(flow_id, part, original)

    def close(
        self,
        flow: http.HTTPFlow,
        report: FlowReport,
        *,
        line: bool,
        run: FlowRun | None = None,
        notes: FlowNotes | None = None,
    ) -> None:
        """The flow is over: ``notes`` written on it, its mark, its counters, its log line (and
        details); then what the bridge held for it is let go (``Flows.end``)."""
        comments = report.comments
        secrets = self.flows.secrets(flow.id)
        if notes is not None and run is not None and run.plan is not None:
            meta = flow.metadata.get(META_KEY)
            if isinstance(meta, dict):
                meta.update(notes.meta)
            if notes.original is not None and self.keep_originals:
                raw, cut = notes.original
                seen = self.original(run, run.plan, raw, "streamed answer", True, cut)
                self.state.originals.put(flow.id, "response", replace(seen, secrets=secrets))
        if notes is not None:
            comments = [*comments, *notes.comments]
            resp = flow.response
            if resp is not None and resp.raw_content is None:
                body, more = client_body(notes.client_body)
                if body is not None:
                    resp.raw_content = body
                comments = [*comments, *more]
        if flow.response is not None:
            report.status = flow.response.status_code
        record = self.flows.get(flow.id)
        if record is not None and record.cut:  # the upstream broke the body off: its line says
            report.cut = record.cut
            report.add_outcome(Outcome.NOT_REWRITTEN)
            report.reason = report.reason or f"upstream answer cut ({record.cut})"
        if run is not None:
            report.usage = run.answer.usage  # the answer the client got (its cache fields)
            if self._usage is not None:
                self._usage.count(run, report, flow)
        flow.marked = report.mark
        self.state.add(report.counters())
        if line:
            log.info("%s", report.line())
        plan = run.plan if run is not None else None
        if self._settings.settings.debug and run is not None and plan is not None:
            for what in decision_lines(run.answer.answer_notes(plan)):
                log.debug("%s: answer: %s", plan.label, clean(what, 500))
            p = run.answer.processor
            if p is not None:
                log.debug(
                    "%s: stream: %d bytes in, %d out, %d events decoded, %d skipped%s",
                    plan.label,
                    p.bytes_in,
                    p.bytes_out,
                    p.events_in,
                    p.skipped,
                    f", error: {short(p.error)}" if p.error else "",
                )
        seal_flow(flow, secrets, comments)  # the flow is over: nothing more is written of it
        self.flows.end(flow.id)


def stores_streamed_bodies() -> bool:
    """mitmproxy's ``store_streamed_bodies``: it keeps a streamed body itself."""
    try:
        return bool(ctx.options.store_streamed_bodies)
    except (AttributeError, KeyError):
        return False


def decision_lines(notes: Mapping[str, int]) -> tuple[str, ...]:
    """A flow's notes, one line each (``3 flat tools → OpenAI``)."""
    return tuple(f"{n} {what}" for what, n in notes.items())


def comment(flow: http.HTTPFlow, label: str, lines: Sequence[str]) -> None:
    """The flow's comment: one line per decision, the first with the route's label."""
    for i, line in enumerate(lines):
        append_comment(flow, f"{label}: {line}" if i == 0 else line)


def plan_facts(plan: FlowPlan) -> tuple[tuple[str, str], ...]:
    """What the content view heads a flow with (no header, no key)."""
    # A framing is a stream's: a whole answer is one JSON body, whatever the dialect.
    client, upstream = plan.client.name, plan.upstream.name
    if plan.stream:
        client, upstream = (
            f"{client} ({plan.client_framing})",
            f"{upstream} ({plan.upstream_framing})",
        )
    facts = [
        ("route", plan.route.name),
        ("client", client),
        ("upstream", f"{upstream} at {plan.host}"),
        ("answer", "stream" if plan.stream else "whole"),
    ]
    if plan.protocol:
        facts.append(("tool protocol", plan.protocol))
    if plan.loop is not None:
        facts.append(("loop guard", plan.loop.note))
    return tuple((k, clean(v, 300)) for k, v in facts)
