"""The staged retry: an upstream 400 over signatures or reasoning is asked again without
them (stage 1), then with tools as text too (stage 2, when the error names a tool).
``transforms.staged_retry.next_stage`` decides each step; this only sends what the plan
builds and delivers the answer as a first answer would be."""

from __future__ import annotations

from mitmproxy import http

from addon.model import UnsupportedShape
from addon.plan import CONTENT_TYPES, FlowPlan, short
from addon.plan.answer import decode_answer, encode_answer, stage_body, stream_processor
from addon.plan.errors import error_message, unreadable_answer
from addon.shell.answer_notes import note_text_calls
from addon.shell.common import META_KEY, append_comment, json_response, log
from addon.shell.report import Report
from addon.shell.retry import Retry, RetryAnswer
from addon.shell.runs import FlowRun
from addon.transforms.staged_retry import next_stage


class StagedRetry:
    def __init__(self, report: Report, retry: Retry | None) -> None:
        self.report = report
        self.retry = retry

    async def answer(
        self, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, resp: http.Response
    ) -> bool:
        """True when a stage was answered: the client gets that answer, in its dialect,
        streamed if it asked."""
        if self.retry is None or plan.unified is None:
            return False
        message = error_message(plan, resp.get_content(strict=False) or b"")
        stage = next_stage(0, resp.status_code, message)
        first = resp.status_code
        while stage is not None:
            self.report.retried(run, f"staged retry {stage}")
            log.info(
                "%s: upstream refused the reasoning (HTTP %d: %s): staged retry %d",
                plan.label,
                first,
                short(message),
                stage,
            )
            try:
                body = stage_body(plan, run.answer, stage)
            except (ValueError, UnsupportedShape, RecursionError) as e:
                log.warning("%s: staged retry %d not possible: %s", plan.label, stage, short(e))
                return False
            self.report.attempt(flow, f"staged retry {stage}", body)
            answer = await self.retry.send(flow, plan.label, body)
            if answer is None:
                return False
            if 200 <= answer.status < 300:
                self._deliver(flow, run, plan, answer, stage)
                return True
            message = error_message(plan, answer.content)
            append_comment(flow, f"staged retry {stage} got HTTP {answer.status}")
            stage = next_stage(stage, answer.status, message)
        return False

    def _deliver(
        self, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, answer: RetryAnswer, stage: int
    ) -> None:
        """A staged retry's 2xx answer, rewritten for the client as a first answer would be."""
        streamed = plan.stream and not answer.content_type.lower().startswith("application/json")
        if streamed or (plan.stream and plan.upstream_framing == "json_array"):
            processor = stream_processor(plan, run.answer, None)
            body = b"".join([*processor.feed(answer.content), *processor.finish()])
            run.answer.processor = None
            content_type = CONTENT_TYPES[plan.client_framing]
        else:
            try:
                body = encode_answer(plan, decode_answer(plan, run.answer, answer.content))
            except (ValueError, UnsupportedShape, RecursionError) as e:
                why = "nested too deeply" if isinstance(e, RecursionError) else short(e)
                flow.response = http.Response.make(
                    answer.status, answer.content, {"content-type": answer.content_type}
                )
                append_comment(flow, f"staged retry {stage} answered")
                if not plan.same_dialect:
                    unreadable(self.report, flow, run, plan, why)
                return
            content_type = CONTENT_TYPES[plan.client_framing] if plan.stream else "application/json"
        self.report.keep_answer(
            flow, run, plan, answer.content, f"staged retry {stage} answered", stream=streamed
        )
        flow.response = http.Response.make(200, body, {"content-type": content_type})
        self.report.state.count("staged retries answered")
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
    report.state.count("answers not translatable")
    log.warning("%s: upstream answer (HTTP %d) not translatable: %s", plan.label, status, why)
    report.fallback(run, f"upstream answer not translatable: {why}")
    append_comment(flow, f"upstream answer (HTTP {status}) not translatable: {why} → 502")
    flow.response = json_response(502, unreadable_answer(plan, why))
