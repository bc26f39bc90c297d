"""What a fallback chain's outcome does to the flow once the relay's answer came: the plan of
the route that served it (its answer is read as any), or, when every route failed, the last
upstream error it relayed, or the bridge's own 502 / 504 when none answered at all; and what
the flow's comment, metadata and log line say about the routes tried (no secrets: names,
addresses, model, statuses)."""

from __future__ import annotations

from dataclasses import dataclass

from mitmproxy import http

from addon.plan import AnswerState, FlowPlan
from addon.plan.fallback import Failure, Reason, falls_back, tried_line
from addon.routes import Route
from addon.shell.notes import META_KEY, append_comment, log, set_meta
from addon.shell.report import Report
from addon.shell.runs import FlowRun
from addon.shell.upstream_request import origin


@dataclass(frozen=True, slots=True)
class Served:
    """One attempt of a chain: its route, the plan that reads its answer, the request sent."""

    route: Route
    plan: FlowPlan
    request: http.Request


def served(
    report: Report, flow: http.HTTPFlow, by: Served | None, failures: tuple[Failure, ...]
) -> None:
    """The flow's run and notes for the relayed answer: ``by`` served it (None: no route
    answered, the answer is the bridge's own error in the client's dialect)."""
    run = report.runs.get(flow.id)
    if run is None or flow.response is None:
        return
    if by is None:
        _unreachable(report, flow, run, failures)
        return
    if run.plan is not by.plan:
        run.plan, run.answer = by.plan, AnswerState.of(by.plan)
        run.report.notes = run.answer.notes
    if falls_back(flow.response.status_code):
        _all_failed(report, flow, run, by.plan, failures)
    elif failures:
        note_served(flow, run, by.plan, flow.request, failures)
        if all(f.reason is Reason.SKIPPED for f in failures):
            return  # routes cooling down were passed over: nothing fell back on this flow
        report.state.count("fallbacks answered")
        log.info(
            "%s: fallback answered HTTP %d; tried: %s",
            by.plan.label,
            flow.response.status_code,
            tried_line(failures),
        )


def note_served(
    flow: http.HTTPFlow,
    run: FlowRun,
    plan: FlowPlan,
    request: http.Request,
    failures: tuple[Failure, ...],
) -> None:
    """The route that served the flow and every route tried before it, with why: the flow's
    comment, ``flow.metadata`` and log line."""
    url = origin(request)
    model = plan.unified.model if plan.unified is not None else ""
    tried = tried_line(failures)
    append_comment(
        flow,
        f"{plan.label}: served by {plan.route.name} ({url}, model {model or '?'}); tried: {tried}",
    )
    _meta(
        flow,
        plan.meta(),
        {"served_by": plan.route.name, "upstream_url": url, "model": model, "tried": failures},
    )
    report = run.report
    report.route, report.upstream = plan.route.name, plan.upstream.name
    report.fields["upstream_url"] = url
    if model:
        report.fields["model"] = model
    report.fields["tried"] = tried


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
    _meta(flow, {"route": last, "action": "rejected"}, {"served_by": None, "tried": failures})
    run.plan = None  # the body is the client's already: passed on as it is
    report.state.count("rejected")
    r = run.report
    r.route, r.outcome, r.mode = last, "rejected", ""
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
