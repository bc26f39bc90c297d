"""What the report says about an answer once it is rewritten: its comment lines, its
metadata, its counters and log lines (argument repairs, text tool calls, the loop guard,
what a stream carried). Functions of the ``Report`` addon's, kept apart to stay small."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from mitmproxy import http

from addon.plan import FlowPlan, dump, short
from addon.redact import clean_data
from addon.report.counters import BridgeState, KeptBytes
from addon.report.outcome import Count, Outcome
from addon.shell.flows import KEEP_STREAM_BYTES, FlowRun
from addon.shell.notes import META_KEY, append_comment, log


@dataclass(slots=True)
class FlowNotes:
    """What the notes say of a flow, as plain values (no flow): the hook applies them
    (``apply_notes``; ``Report.close`` for a flow that ends in ``error``)."""

    comments: list[str] = field(default_factory=list)
    """Lines for the flow's comment, in order."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Keys for the flow's metadata (``META_KEY``), plain data already cleaned."""
    original: tuple[bytes, bool] | None = None
    """A stream's first bytes as the upstream sent them and whether it sent more, for the
    content view (``Report.keep_answer``)."""
    client_body: KeptBytes | None = None
    """A stream's body as its client got it, when the bridge kept it (``client_body``)."""


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
    """``text_call_notes``, written on ``flow``."""
    notes = FlowNotes()
    text_call_notes(report, notes, run, plan)
    apply_notes(report, flow, run, plan, notes)


def stream_done(report: Report, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan) -> None:
    """``stream_notes``, written on ``flow``."""
    notes = FlowNotes()
    stream_notes(report, notes, run, plan)
    apply_notes(report, flow, run, plan, notes)


def apply_notes(
    report: Report, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, notes: FlowNotes
) -> None:
    """``notes`` written on ``flow``: its metadata, the content view's original, the client's
    body (``client_body``), its comment."""
    meta = flow.metadata.get(META_KEY)
    if isinstance(meta, dict):
        meta.update(notes.meta)
    if notes.original is not None:
        raw, cut = notes.original
        report.keep_answer(flow, run, plan, raw, "streamed answer", stream=True, cut=cut)
    comments = notes.comments
    resp = flow.response
    if resp is not None and resp.raw_content is None:
        body, more = client_body(notes.client_body)
        if body is not None:
            resp.raw_content = body
        comments = [*comments, *more]
    for line in comments:
        append_comment(flow, line)


def text_call_notes(report: Report, notes: FlowNotes, run: FlowRun, plan: FlowPlan) -> None:
    """The answer's changes (``answer_notes``), and the text tool calls its parser found."""
    answer_notes(report, notes, run, plan)
    parser = run.answer.parser
    if parser is None:
        return
    if parser.calls:
        notes.comments.append(f"{parser.calls} text tool calls → tool_calls")
    if parser.rejected:
        log.info(
            "%s: %d would-be tool call(s) kept as text: %s",
            plan.label,
            len(parser.rejected),
            short("; ".join(parser.rejected[:3])),
        )


def answer_notes(report: Report, notes: FlowNotes, run: FlowRun, plan: FlowPlan) -> None:
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
        notes.comments += [f"answer: {line}" for line in changes]
        notes.meta["answer_changes"] = clean_data(dict(state.answer_notes(plan)))
    for record in state.repair_log:
        report.state.count(Count.TOOL_CALLS_STILL_INVALID)
        log.info("%s: %s", plan.label, short(dump(record).decode()))
    state.repair_log.clear()
    loop_notes(report, notes, run, plan)


def loop_notes(report: Report, notes: FlowNotes, run: FlowRun, plan: FlowPlan) -> None:
    """The loop guard replaced a call (or asked again): the flow's outcome, and its
    line's ``tool`` and ``failures`` fields."""
    state = run.answer
    if plan.loop is None or not (state.loop_replaced or state.loop_asked):
        return
    report.state.count(Count.LOOP_GUARD_ANSWERS)
    run.report.add_outcome(Outcome.LOOP_GUARD)
    run.report.fields.update(tool=plan.loop.tool, failures=plan.loop.count)
    notes.meta["loop_guard"] = clean_data(
        {
            "tool": plan.loop.tool,
            "failures": plan.loop.count,
            "error_class": plan.loop.error_class,
            "fingerprint": plan.loop.fingerprint,
            "replaced": state.loop_replaced,
            "asked_again": state.loop_asked,
        }
    )


def stream_notes(report: Report, notes: FlowNotes, run: FlowRun, plan: FlowPlan) -> None:
    """A rewritten stream is over: what it carried, in the notes (metadata, comment), the
    counters and the flow's report."""
    p, parser = run.answer.processor, run.answer.parser
    assert p is not None
    notes.meta.update(
        stream_events=p.events_in,
        stream_error=short(p.error) if p.error else p.error,
        stream_skipped=p.skipped,
    )
    if parser is not None:
        notes.meta["text_tool_calls"] = parser.calls
    if p.decompressed:
        notes.comments.append("stream decompressed")
    text_call_notes(report, notes, run, plan)
    if p.original:
        notes.original = bytes(p.original), p.bytes_in > len(p.original)
    counts = run.report.counts
    # fast_events: of events_in, those a fast route or run took (0: bridge_fast_path off)
    counts.update(events_in=p.events_in, fast_events=p.fast_events, skipped=p.skipped)
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
        notes.comments.append(f"{p.skipped} unreadable upstream event(s) skipped: {why}")
    if p.whole_body:
        log.info("%s: the upstream's 2xx body was not an event stream: read whole", plan.label)
        notes.comments.append("upstream body was not an event stream: read whole")
    if p.error and p.passthrough:
        report.state.count(Count.STREAMS_PASSED_THROUGH)
        notes.comments.append(f"stream passed through after: {short(p.error)}")
        report.not_rewritten(run, f"stream passed through after: {short(p.error)}")
    elif p.error or p.ended_with_error:
        # The bridge wrote that error (or the upstream's answer could not be read to its end).
        report.state.count(Count.STREAMS_ENDED_WITH_ERROR)
        why = short(p.error or p.ended_with_error or "")
        notes.comments.append(f"stream ended with an error for the client: {why}")
        report.not_rewritten(run, f"stream ended with an error: {why}")
    else:
        report.state.count(Count.STREAMS_REWRITTEN)
    notes.client_body, run.client_bytes = run.client_bytes, None


def client_body(kept: KeptBytes | None) -> tuple[bytes | None, list[str]]:
    """A rewritten stream's body as its client got it (``kept``), for an answer on which
    mitmproxy stored none (``store_streamed_bodies=false``, its default), when the bridge kept
    all of it: exactly the bytes ``store_streamed_bodies=true`` would have stored (so saving
    and replaying the flow see the real body), and what mitmproxy needs to call the content
    view at all (it shows "Content is missing." for a body of None); set as ``raw_content``
    (not ``content``: no header is added). A longer body stays missing (a part of it would
    pass for all of it): the comment line that says so."""
    if kept is None:
        return None, []
    if kept.whole:
        return bytes(kept.data), []
    return None, [
        f"stream longer than {KEEP_STREAM_BYTES:,} bytes: body not kept "
        "(--set store_streamed_bodies=true keeps it)"
    ]
