"""A fallback's outcome for the client and the view: the answer of the route that served it
(rewritten for the client with that route's plan, as the staged retry delivers), or, when
every route failed, the last upstream's error in the client's dialect; and what the flow's
comment, metadata and log line say about the routes tried (no secrets: names, addresses,
model, statuses)."""

from __future__ import annotations

from mitmproxy import http

from addon.model import UnsupportedShape
from addon.plan import AnswerState, FlowPlan, short
from addon.plan.answer import client_answer
from addon.plan.errors import foreign_error
from addon.plan.fallback import Failure, tried_line
from addon.shell.answer_notes import note_text_calls
from addon.shell.common import META_KEY, append_comment, log, origin, set_meta
from addon.shell.report import Report
from addon.shell.retry import RetryAnswer
from addon.shell.runs import FlowRun
from addon.shell.staged_retry import translate_error, unreadable


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
    meta = flow.metadata.get(META_KEY)
    base = dict(meta) if isinstance(meta, dict) else {}
    base.update(plan.meta())
    base["fallback"] = {
        "served_by": plan.route.name,
        "upstream_url": url,
        "model": model,
        "tried": [f.describe() for f in failures],
    }
    set_meta(flow, base)
    report = run.report
    report.route, report.upstream = plan.route.name, plan.upstream.name
    report.fields["upstream_url"] = url
    if model:
        report.fields["model"] = model
    report.fields["tried"] = tried


def deliver(
    report: Report,
    flow: http.HTTPFlow,
    run: FlowRun,
    plan: FlowPlan,
    got: RetryAnswer,
    failures: tuple[Failure, ...],
    request: http.Request,
) -> None:
    """A fallback route's answer that does not fall back further (2xx, or a 4xx the client
    must see), rewritten for the client with that route's plan."""
    run.plan, run.answer = plan, AnswerState.of(plan)
    note_served(flow, run, plan, request, failures)
    report.state.count("fallbacks answered")
    log.info(
        "%s: fallback answered HTTP %d; tried: %s", plan.label, got.status, tried_line(failures)
    )
    ctype = got.content_type
    if not 200 <= got.status < 300:
        flow.response = http.Response.make(got.status, got.content, {"content-type": ctype})
        if not plan.same_dialect or foreign_error(plan, got.content):
            translate_error(flow, plan)
        return
    streamed = plan.stream and not ctype.lower().startswith("application/json")
    try:
        body, content_type = client_answer(plan, run.answer, got.content, ctype)
    except (ValueError, UnsupportedShape, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else short(e)
        flow.response = http.Response.make(got.status, got.content, {"content-type": ctype})
        if not plan.same_dialect:
            unreadable(report, flow, run, plan, why)
        return
    report.keep_answer(
        flow, run, plan, got.content, f"fallback {plan.route.name} answered", stream=streamed
    )
    flow.response = http.Response.make(got.status, body, {"content-type": content_type})
    note_text_calls(report, flow, run, plan)


def all_failed(
    report: Report,
    flow: http.HTTPFlow,
    run: FlowRun,
    last: tuple[RetryAnswer, FlowPlan] | None,
    failures: tuple[Failure, ...],
) -> None:
    """Every route of the chain failed: the last upstream error the bridge got (the first
    attempt's when no later route answered at all), in the client's dialect."""
    if last is not None:
        got, last_plan = last
        run.plan, run.answer = last_plan, AnswerState.of(last_plan)
        flow.response = http.Response.make(
            got.status, got.content, {"content-type": got.content_type}
        )
    plan = run.plan
    assert plan is not None and flow.response is not None
    line = f"no route answered; tried: {tried_line(failures)}"
    append_comment(flow, f"{plan.label}: {line}")
    log.warning("%s: %s", plan.label, line)
    meta = flow.metadata.get(META_KEY)
    base = dict(meta) if isinstance(meta, dict) else {}
    base["fallback"] = {"served_by": None, "tried": [f.describe() for f in failures]}
    set_meta(flow, base)
    run.report.fields["tried"] = tried_line(failures)
    report.fallback(run, line)
    body = flow.response.get_content(strict=False) or b""
    if not plan.same_dialect or foreign_error(plan, body):
        translate_error(flow, plan)
