"""The answers addon: in ``response``, what happens to the answer is decided with plain values
by ``addon.plan.whole_steps`` (a whole answer decoded and encoded for the client, retried when
a required tool call is missing, asked again by the loop guard, an upstream error asked again
in stages or re-shaped; a streamed one only reported, ``stream_attach`` rewrote it). This
reads the flow once, sends what a step asks to send (``Retry``) and applies what it says.
What it cannot read reaches a client of another dialect as a 502 in its own dialect: a client
must never get another dialect's bytes.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

from mitmproxy import http

from addon.plan import FlowPlan
from addon.plan.web_search import Search
from addon.plan.whole_steps import Answer, Reply, Seen, Send, Told, broken, searched, whole_step
from addon.shell.answer_notes import note_text_calls, stream_done
from addon.shell.flows import FlowRun
from addon.shell.headers import replace_headers
from addon.shell.notes import META_KEY, append_comment, log, log_internal_error
from addon.shell.outbound.retry import Retry
from addon.shell.outbound.searxng import Searches
from addon.shell.reporter import Report


class Answers:
    name = "cursor_bridge_answers"

    def __init__(
        self, report: Report, retry: Retry | None, searches: Searches | None = None
    ) -> None:
        self.report = report
        self.retry = retry
        self.searches = searches or Searches()

    async def done(self) -> None:
        await self.searches.done()

    async def response(self, flow: http.HTTPFlow) -> None:
        started = time.perf_counter_ns()
        run = self.report.flows.run(flow.id)
        if run is None:
            return
        try:
            if run.plan is not None and flow.response is not None:
                await self._answer(flow, run, run.plan, flow.response)
        finally:
            run.client_bytes = None
            run.report.spent_ns += time.perf_counter_ns() - started

    async def _answer(
        self, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan, resp: http.Response
    ) -> None:
        """The steps ``whole_step`` says, each applied as it comes; a bug on the way is
        one log line and, for a client of another dialect, a 502 in its dialect."""
        try:
            record = self.report.flows.get(flow.id)
            streamed = run.answer.processor is not None  # its body is not read again
            first = Seen(
                resp.status_code,
                resp.headers.get("content-type"),
                b"" if streamed else resp.get_content(strict=False) or b"",
                record.cut if record is not None and not resp.stream else None,
            )
            step = whole_step(run.answer, Answer(plan, first, can_retry=self.retry is not None))
            while isinstance(step, Send | Search):
                self._apply(flow, run, step.told)
                if isinstance(step, Search):
                    step = whole_step(run.answer, await self._search(plan, step))
                else:
                    step = whole_step(run.answer, await self._send(flow, run, step))
            self._apply(flow, run, step)
        except Exception as e:
            log_internal_error(f"{plan.label}: answer", e)
            status = flow.response.status_code if flow.response is not None else 502
            self._apply(flow, run, broken(run.answer, plan, status, type(e).__name__))

    async def _send(self, flow: http.HTTPFlow, run: FlowRun, send: Send) -> Answer:
        """The flow's request sent again as ``send`` says; its answer for the next step.
        The step's plan becomes the flow's (the loop guard's second request's)."""
        assert self.retry is not None
        then = send.then
        if send.attempt is not None:
            body = send.body if send.body is not None else flow.request.content
            self.report.attempt(flow, send.attempt, body)
        run.plan = then.plan
        got = await self.retry.send(flow, then.plan.label, send.body)
        if got is None:
            return then
        return dataclasses.replace(then, seen=Seen(got.status, got.content_type, got.content))

    async def _search(self, plan: FlowPlan, step: Search[Told, Answer]) -> Answer:
        """The model's web searches run, one after another (``addon.plan.web_search``)."""
        assert plan.search is not None
        found = []
        for call, run in zip(step.calls, step.runs, strict=True):
            if isinstance(run, str):
                found.append(
                    await self.searches.run(plan.label, plan.search, call.id, run, plan.secrets)
                )
            else:
                found.append(run)
        return searched(step, found)

    def _apply(self, flow: http.HTTPFlow, run: FlowRun, told: Told) -> None:
        """What a step said, applied to the flow in ``Told``'s order."""
        for line in told.lines:
            append_comment(flow, line)
        for level, message, args in told.logs:
            log.log(level, message, *args)
        self.report.state.add(Counter(count.value for count in told.counts))
        for kind in told.retried:
            self.report.retried(run, kind)
        for why in told.not_rewritten:
            self.report.not_rewritten(run, why)
        reply, resp = told.reply, flow.response
        if isinstance(reply, Reply):
            ctype = {"content-type": reply.content_type}
            flow.response = http.Response.make(reply.status, reply.body, ctype)
        elif reply is not None and resp is not None:
            if reply.drop:
                replace_headers(resp.headers, reply.drop, [("content-type", reply.content_type)])
            else:
                resp.headers["content-type"] = reply.content_type
            resp.content = reply.body
        meta = flow.metadata.get(META_KEY)
        if told.meta and isinstance(meta, dict):
            meta.update(told.meta)
        if told.notes:
            note_text_calls(self.report, flow, run, told.plan)
        if told.kept is not None:
            kept = told.kept
            self.report.keep_answer(
                flow, run, told.plan, kept.raw, kept.summary, stream=kept.stream
            )
        run.report.counts.update(told.sizes)
        for line in told.after:
            append_comment(flow, line)
        if told.streamed:
            stream_done(self.report, flow, run, told.plan)
