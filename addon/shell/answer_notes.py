"""What the report says about an answer once it is rewritten: its comment lines, its
metadata, its counters and log lines (argument repairs, text tool calls, the loop guard,
what a stream carried). Functions of the ``Report`` addon's, kept apart to stay small."""

from __future__ import annotations

from typing import Protocol

from mitmproxy import http

from addon.plan import FlowPlan, dump, short
from addon.redact import clean_data
from addon.report.counters import BridgeState
from addon.report.outcome import Count, Outcome
from addon.shell.flows import KEEP_STREAM_BYTES, FlowRun
from addon.shell.notes import META_KEY, append_comment, log


class Report(Protocol):
    """What these notes write to: the ``Report`` addon's counters, outcomes and view."""

    @property
    def state(self) -> BridgeState: ...

    def not_rewritten(self, run: FlowRun | None, why: str) -> None: ...

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
    ) -> None: ...


def note_text_calls(report: Report, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan) -> None:
    """The answer's changes (``note_answer``), and the text tool calls its parser found."""
    note_answer(report, flow, run, plan)
    parser = run.answer.parser
    if parser is None:
        return
    if parser.calls:
        append_comment(flow, f"{parser.calls} text tool calls → tool_calls")
    if parser.rejected:
        log.info(
            "%s: %d would-be tool call(s) kept as text: %s",
            plan.label,
            len(parser.rejected),
            short("; ".join(parser.rejected[:3])),
        )


def note_answer(report: Report, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan) -> None:
    """What the answer's rewrite changed (argument repairs …): in the comment and the
    metadata; one structured log line per call that still does not fit its schema."""
    state = run.answer
    failed = state.capture_error or (state.capture.error if state.capture else None)
    if failed:
        state.capture_error = None
        if state.capture is not None:
            state.capture.error = None
        report.state.count(Count.ANSWERS_NOT_REMEMBERED)
        log.warning("%s: the answer's reasoning was not remembered: %s", plan.label, short(failed))
    changes = tuple(f"{n} {what}" for what, n in state.answer_notes(plan).items())
    if changes:
        for line in changes:
            append_comment(flow, f"answer: {line}")
        meta = flow.metadata.get(META_KEY)
        if isinstance(meta, dict):
            meta["answer_changes"] = clean_data(dict(state.answer_notes(plan)))
    for record in state.repair_log:
        report.state.count(Count.TOOL_CALLS_STILL_INVALID)
        log.info("%s: %s", plan.label, short(dump(record).decode()))
    state.repair_log.clear()
    note_loop(report, flow, run, plan)


def note_loop(report: Report, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan) -> None:
    """The loop guard replaced a call (or asked again): the flow's outcome, and its
    line's ``tool`` and ``failures`` fields."""
    state = run.answer
    if plan.loop is None or not (state.loop_replaced or state.loop_asked):
        return
    report.state.count(Count.LOOP_GUARD_ANSWERS)
    run.report.add_outcome(Outcome.LOOP_GUARD)
    run.report.fields.update(tool=plan.loop.tool, failures=plan.loop.count)
    meta = flow.metadata.get(META_KEY)
    if isinstance(meta, dict):
        meta["loop_guard"] = clean_data(
            {
                "tool": plan.loop.tool,
                "failures": plan.loop.count,
                "error_class": plan.loop.error_class,
                "fingerprint": plan.loop.fingerprint,
                "replaced": state.loop_replaced,
                "asked_again": state.loop_asked,
            }
        )


def stream_done(report: Report, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan) -> None:
    """A rewritten stream is over: what it carried, in the metadata, counters and comment."""
    p, parser = run.answer.processor, run.answer.parser
    assert p is not None
    meta = flow.metadata.get(META_KEY)
    if isinstance(meta, dict):
        meta["stream_events"] = p.events_in
        meta["stream_error"] = short(p.error) if p.error else p.error
        if parser is not None:
            meta["text_tool_calls"] = parser.calls
        meta["stream_skipped"] = p.skipped
    note_text_calls(report, flow, run, plan)
    if p.original:
        report.keep_answer(
            flow,
            run,
            plan,
            bytes(p.original),
            "streamed answer",
            stream=True,
            cut=p.bytes_in > len(p.original),
        )
    counts = run.report.counts
    counts.update(events_in=p.events_in, skipped=p.skipped)
    if parser is not None:
        counts["text_tool_calls"] = parser.calls
    if plan.client.name != plan.upstream.name or not p.passthrough:
        counts["bytes_in"] = p.bytes_in
        counts["bytes_out"] = p.bytes_out
    if p.skipped:
        report.not_rewritten(run, f"{p.skipped} unreadable event(s) skipped")
        report.state.count(Count.STREAM_EVENTS_SKIPPED, p.skipped)
        why = short(p.skip_reason or "")
        log.warning("%s: %d unreadable upstream event(s) skipped: %s", plan.label, p.skipped, why)
        append_comment(flow, f"{p.skipped} unreadable upstream event(s) skipped: {why}")
    if p.whole_body:
        log.info("%s: the upstream's 2xx body was not an event stream: read whole", plan.label)
        append_comment(flow, "upstream body was not an event stream: read whole")
    if p.error and p.passthrough:
        report.state.count(Count.STREAMS_PASSED_THROUGH)
        append_comment(flow, f"stream passed through after: {short(p.error)}")
        report.not_rewritten(run, f"stream passed through after: {short(p.error)}")
    elif p.error:
        report.state.count(Count.STREAMS_ENDED_WITH_ERROR)
        append_comment(flow, f"stream ended with an error for the client: {short(p.error)}")
        report.not_rewritten(run, f"stream ended with an error: {short(p.error)}")
    elif p.ended_with_error:
        # The bridge wrote that error: the upstream's answer could not be read to its end.
        report.state.count(Count.STREAMS_ENDED_WITH_ERROR)
        why = short(p.ended_with_error)
        append_comment(flow, f"stream ended with an error for the client: {why}")
        report.not_rewritten(run, f"stream ended with an error: {why}")
    else:
        report.state.count(Count.STREAMS_REWRITTEN)
    store_client_body(flow, run)


def store_client_body(flow: http.HTTPFlow, run: FlowRun) -> None:
    """A rewritten stream's body as its client got it, stored on the flow when mitmproxy
    stored none (``store_streamed_bodies=false``, its default) and the bridge kept all of
    it: exactly the bytes ``store_streamed_bodies=true`` would have stored (so saving and
    replaying the flow see the real body), and what mitmproxy needs to call the content
    view at all (it shows "Content is missing." for a body of None). A longer body stays
    missing: a part of it would pass for all of it."""
    kept, run.client_bytes = run.client_bytes, None
    resp = flow.response
    if kept is None or resp is None or resp.raw_content is not None:
        return
    if kept.whole:
        resp.raw_content = bytes(kept.data)  # not ``content``: no header is added
    else:
        append_comment(
            flow,
            f"stream longer than {KEEP_STREAM_BYTES:,} bytes: body not kept "
            "(--set store_streamed_bodies=true keeps it)",
        )
