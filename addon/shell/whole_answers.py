"""The answers addon: in ``response``, a whole answer decoded, retried when a required tool call
is missing (``Retry``), and encoded for the client; an upstream error re-shaped for it or asked
again in stages (``staged_retry``); a streamed one only reported (``stream_attach`` rewrote it).
What it cannot read reaches a client of another dialect as a 502 in its own dialect: a client
must never get another dialect's bytes.
"""

from __future__ import annotations

import time

from mitmproxy import http

from addon.model import Response, ToolCall, UnsupportedShape
from addon.plan import CONTENT_TYPES, FlowPlan, UpstreamError, short
from addon.plan.answer import (
    client_answer,
    decode_answer,
    encode_answer,
    loop_ask_again,
    needs_retry,
)
from addon.plan.errors import cut_answer, foreign_error, success_error, upstream_error
from addon.report.outcome import Count
from addon.shell.answer_notes import note_text_calls, stream_done
from addon.shell.ask_again import second_answer
from addon.shell.flows import FlowRun
from addon.shell.headers import is_json, json_response, replace_headers
from addon.shell.notes import append_comment, log, log_internal_error
from addon.shell.outbound.retry import Retry
from addon.shell.reporter import Report
from addon.shell.staged_sender import StagedRetry, translate_error, unreadable


class Answers:
    name = "cursor_bridge_answers"

    def __init__(self, report: Report, retry: Retry | None) -> None:
        self.report = report
        self.retry = retry
        self.staged = StagedRetry(report, retry)

    async def response(self, flow: http.HTTPFlow) -> None:
        started = time.perf_counter_ns()
        run = self.report.flows.run(flow.id)
        resp = flow.response
        if run is None:
            return
        try:
            if run.plan is not None and resp is not None:
                await self._answer_for_client(flow, run, run.plan, resp)
        finally:
            run.client_bytes = None
            run.report.spent_ns += time.perf_counter_ns() - started

    async def _answer_for_client(
        self, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, resp: http.Response
    ) -> None:
        try:
            await self._response(flow, run, plan, resp)
        except Exception as e:
            log_internal_error(f"{plan.label}: answer", e)
            self.report.not_rewritten(run, f"internal error ({type(e).__name__})")
            if plan.same_dialect or run.answer.processor is not None:
                return  # passed on as the upstream sent it (a stream is already on its way)
            unreadable(self.report, flow, run, plan, f"internal error ({type(e).__name__})")

    async def _required_call(
        self,
        flow: http.HTTPFlow,
        run: FlowRun,
        plan: FlowPlan,
        retry: Retry,
        answer: Response,
        raw: bytes,
    ) -> tuple[Response, bytes]:
        """No tool call although one was required: the request sent once more (its body as
        the first attempt sent it); the new answer and its bytes, or the first ones."""
        self.report.attempt(flow, "retry for a required tool call", flow.request.content)
        again = await retry.resend(flow, plan.label)
        if again is None:
            return answer, raw
        retried = decode_answer(plan, run.answer, again)
        self.report.retried(run, "required tool call")
        got = "got one" if not needs_retry(plan, run.answer, retried) else "still none"
        append_comment(flow, f"no tool call although one was required: retried once → {got}")
        return retried, again  # the view shows the answer the client's was made from

    async def _response(
        self, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, resp: http.Response
    ) -> None:
        state = run.answer
        if state.processor is not None:
            stream_done(self.report, flow, run, plan)
            return
        record = self.report.flows.get(flow.id)
        if record is not None and record.cut and not resp.stream:  # not an answer: 502
            self.report.not_rewritten(run, f"upstream answer cut ({record.cut})")
            append_comment(flow, f"upstream answer cut ({record.cut}) → 502")
            flow.response = json_response(502, cut_answer(plan, record.cut))
            return
        if not (200 <= resp.status_code < 300):
            if await self.staged.answer(flow, run, plan, resp):
                return
            if not plan.same_dialect or foreign_error(plan, resp.get_content(strict=False) or b""):
                translate_error(flow, plan)
            return
        if (
            plan.loop_held
            and self.retry is not None
            and (not is_json(resp) or plan.upstream_framing == "json_array")
        ):
            await self._loop_held(flow, run, plan, resp, self.retry)
            return
        if plan.same_dialect and not is_json(resp):
            return  # not JSON: the client reads it itself
        raw = resp.get_content(strict=False) or b""
        try:
            answer = decode_answer(
                plan,
                state,
                raw,
                status=resp.status_code,
                content_type=resp.headers.get("content-type"),
            )
            if needs_retry(plan, state, answer) and self.retry is not None:
                answer, raw = await self._required_call(flow, run, plan, self.retry, answer, raw)
            body = encode_answer(plan, answer)
            calls = sum(isinstance(p, ToolCall) for p in answer.parts)
            if loop_ask_again(plan, state) and self.retry is not None:
                second = await self._ask_again(flow, run, plan, self.retry)
                if second is not None:
                    body, _, raw = second
                    calls = state.parser.calls if state.parser is not None else 0
                plan = run.plan or plan  # the second request's, when it was asked
        except UpstreamError as e:
            # An error inside the upstream's answer framing (a Kiro exception frame).
            self.report.state.count(Count.UPSTREAM_ERRORS_RESHAPED)
            log.info("%s: upstream answered an error: %s", plan.label, short(e.message))
            append_comment(flow, f"upstream error in its stream → {plan.client.name} shape")
            flow.response = json_response(e.status, upstream_error(plan, e))
            return
        except (ValueError, UnsupportedShape, RecursionError) as e:
            if error_answer(flow, plan, raw, self.report):
                return
            why = "nested too deeply" if isinstance(e, RecursionError) else short(e)
            if not plan.same_dialect:
                unreadable(self.report, flow, run, plan, why)
                return
            log.info("%s: answer passed through unchanged: %s", plan.label, why)
            append_comment(flow, f"answer not rewritten ({why})")
            self.report.not_rewritten(run, f"answer not rewritten ({why})")
            return
        note_text_calls(self.report, flow, run, plan)
        self.report.keep_answer(flow, run, plan, raw, "whole answer re-encoded", stream=False)
        run.report.counts.update(bytes_in=len(raw), bytes_out=len(body), tool_calls=calls)
        if plan.stream:
            resp.headers["content-type"] = CONTENT_TYPES[plan.client_framing]
            append_comment(flow, "whole answer sent as a stream (client asked for one)")
        else:
            resp.headers["content-type"] = "application/json"
        resp.content = body
        self.report.state.count(Count.ANSWERS_REWRITTEN)

    async def _loop_held(
        self, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, resp: http.Response, retry: Retry
    ) -> None:
        """A stream read whole because the loop guard may ask again (``FlowPlan.loop_held``):
        through the stream pipeline; when the answer repeated the call, the second answer
        instead (``second_answer``). The client gets either as one body in its stream framing."""
        raw = resp.get_content(strict=False) or b""
        body, ctype = client_answer(plan, run.answer, raw, resp.headers.get("content-type", ""))
        if loop_ask_again(plan, run.answer):
            again = await self._ask_again(flow, run, plan, retry)
            if again is not None:
                body, ctype, raw = again
            plan = run.plan or plan  # the second request's, when it was asked
        note_text_calls(self.report, flow, run, plan)
        self.report.keep_answer(flow, run, plan, raw, "stream read whole (loop guard)", stream=True)
        run.report.counts.update(bytes_in=len(raw), bytes_out=len(body))
        replace_headers(
            resp.headers,
            ["content-length", "content-encoding", "transfer-encoding"],
            [("content-type", ctype)],
        )
        resp.content = body
        append_comment(
            flow, "stream read whole before it was sent (loop guard, bridge_loop_fallback on)"
        )
        self.report.state.count(Count.ANSWERS_REWRITTEN)

    async def _ask_again(
        self, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, retry: Retry
    ) -> tuple[bytes, str, bytes] | None:
        """The loop guard's second request (``addon.shell.ask_again``), counted as a retry."""
        second = await second_answer(retry, flow, run, plan)
        if run.answer.loop_asked:
            self.report.retried(run, "loop guard")
        return second


def error_answer(flow: http.HTTPFlow, plan: FlowPlan, raw: bytes, report: Report) -> bool:
    """A 2xx body that is an upstream error (``success_error``): answered with the status
    its type names, in the client's dialect (streamed or not: an SDK reads a 2xx as the
    answer). False when the body is no error."""
    failed = success_error(plan, raw)
    if failed is None:
        return False
    status, body, message = failed
    old = flow.response.status_code if flow.response is not None else 200
    flow.response = json_response(status, body)
    append_comment(flow, f"upstream error in a {old} answer → {status}, {plan.client.name} shape")
    report.state.count(Count.UPSTREAM_ERRORS_RESHAPED)
    log.info("%s: upstream answered an error with HTTP %d: %s", plan.label, old, short(message))
    return True
