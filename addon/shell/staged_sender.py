"""The staged retry: an upstream 400 over signatures or reasoning is asked again without
them (stage 1), then with tools as text too (stage 2, when the error names a tool).
``addon.plan.staged.staged_step`` decides each step (the body to send, or stop); this only
sends it and delivers the answer as a first answer would be."""

from __future__ import annotations

from mitmproxy import http

from addon.model import UnsupportedShape
from addon.plan import FlowPlan, short
from addon.plan.answer import client_answer
from addon.plan.errors import error_body, unreadable_answer
from addon.plan.staged import Stop, staged_step
from addon.report.outcome import Count
from addon.shell.answer_notes import note_text_calls
from addon.shell.flows import FlowRun
from addon.shell.headers import json_response
from addon.shell.notes import META_KEY, append_comment, log
from addon.shell.outbound.retry import Retry, RetryAnswer
from addon.shell.reporter import Report


class StagedRetry:
    def __init__(self, report: Report, retry: Retry | None) -> None:
        self.report = report
        self.retry = retry

    async def answer(
        self, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, resp: http.Response
    ) -> bool:
        """True when a stage was answered: the client gets that answer, in its dialect,
        streamed if it asked."""
        if self.retry is None:
            return False
        first = resp.status_code
        step = staged_step(plan, run.answer, 0, first, resp.get_content(strict=False) or b"")
        while True:
            if step.stage is not None:
                self.report.retried(run, f"staged retry {step.stage}")
                log.info(
                    "%s: upstream refused the reasoning (HTTP %d: %s): staged retry %d",
                    plan.label,
                    first,
                    short(step.message),
                    step.stage,
                )
            if isinstance(step, Stop):
                if step.stage is not None:
                    log.warning(
                        "%s: staged retry %d not possible: %s", plan.label, step.stage, step.reason
                    )
                return False
            self.report.attempt(flow, f"staged retry {step.stage}", step.body)
            answer = await self.retry.send(flow, plan.label, step.body)
            if answer is None:
                return False
            if 200 <= answer.status < 300:
                self._deliver(flow, run, plan, answer, step.stage)
                return True
            append_comment(flow, f"staged retry {step.stage} got HTTP {answer.status}")
            step = staged_step(plan, run.answer, step.stage, answer.status, answer.content)

    def _deliver(
        self, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, answer: RetryAnswer, stage: int
    ) -> None:
        """A staged retry's 2xx answer, rewritten for the client as a first answer would be."""
        streamed = plan.stream and not answer.content_type.lower().startswith("application/json")
        try:
            body, content_type = client_answer(
                plan, run.answer, answer.content, answer.content_type
            )
        except (ValueError, UnsupportedShape, RecursionError) as e:
            why = "nested too deeply" if isinstance(e, RecursionError) else short(e)
            flow.response = http.Response.make(
                answer.status, answer.content, {"content-type": answer.content_type}
            )
            append_comment(flow, f"staged retry {stage} answered")
            if not plan.same_dialect:
                unreadable(self.report, flow, run, plan, why)
            return
        self.report.keep_answer(
            flow, run, plan, answer.content, f"staged retry {stage} answered", stream=streamed
        )
        flow.response = http.Response.make(200, body, {"content-type": content_type})
        self.report.state.count(Count.STAGED_RETRIES_ANSWERED)
        append_comment(
            flow,
            f"upstream refused the reasoning: staged retry {stage} answered "
            f"({'thinking off, thinking as text' if stage == 1 else 'tool calls as text too'})",
        )
        meta = flow.metadata.get(META_KEY)
        if isinstance(meta, dict):
            meta["staged_retry"] = stage
        note_text_calls(self.report, flow, run, plan)


def unreadable(report: Report, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, why: str) -> None:
    """An answer that cannot reach a client of another dialect: a 502 in its dialect."""
    resp = flow.response
    assert resp is not None
    status = resp.status_code
    report.state.count(Count.ANSWERS_NOT_TRANSLATABLE)
    log.warning("%s: upstream answer (HTTP %d) not translatable: %s", plan.label, status, why)
    report.not_rewritten(run, f"upstream answer not translatable: {why}")
    append_comment(flow, f"upstream answer (HTTP {status}) not translatable: {why} → 502")
    flow.response = json_response(502, unreadable_answer(plan, why))


def translate_error(flow: http.HTTPFlow, plan: FlowPlan) -> None:
    """An upstream error, re-shaped for a client of another dialect (status kept)."""
    resp = flow.response
    assert resp is not None
    body, message = error_body(plan, resp.status_code, resp.get_content(strict=False) or b"")
    resp.content = body
    resp.headers["content-type"] = "application/json"
    append_comment(flow, f"upstream error {resp.status_code} → {plan.client.name} shape")
    log.info("%s: upstream answered HTTP %d: %s", plan.label, resp.status_code, short(message))
