"""The rewrite addon: chat requests and their answers, on the routes.

Hooks only apply what ``addon.plan`` decides:

- ``request``: ``plan.decide`` → leave the flow, answer it ourselves (a 400 in the
  client's dialect), or set the upstream request (body, path, query, headers);
- ``responseheaders``: a 2xx SSE answer gets the plan's ``StreamProcessor`` behind
  ``flow.response.stream``; a routed answer the bridge cannot rewrite still streams;
- ``response``: a whole answer is re-encoded for the client (retried once through
  the ``Retry`` addon when a required tool call is missing); an upstream error is
  re-shaped for a client of another dialect;
- ``error``: a flow that carried an answer is reported as ``response`` would have
  (a client that hangs up at the stream's end is no failure); the flow's state is freed.

Every routed flow gets a ``FlowReport`` (``addon.outcome``): the time spent in the
bridge's hooks and stream callable, retries, what the stream processor counted.
When the flow is over it sets the flow's mark (one per outcome), adds to the
counters (``bridge.stats``, the shutdown line) and is logged as one structured
info line, the same format for every outcome (rewritten, loop guard, passed
through, rejected); ``bridge_debug`` adds the details at debug level. The
content view gets the originals with the route, dialects and decisions, what
each retry sent, and (when mitmproxy keeps no streamed body) a stream's body as
its client got it.

Problems are logged one line each, never raised: every hook catches what nobody
expected (one ``internal error`` line, no traceback) and the client still gets an
answer — its request or the upstream's answer passed on untouched when both sides
speak the same dialect, else an error in the client's dialect. Headers are never
logged nor copied into ``flow.metadata``: they carry the user's API keys; whatever
else is written (log lines, comments, metadata) goes through ``addon.redact``.
mitmproxy's ``allow_hosts`` / ``ignore_hosts`` bind the bridge too.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from mitmproxy import command, contentviews, ctx, http
from mitmproxy.tools.dump import DumpMaster

from addon.config import (
    REWRITE_OPTIONS,
    ConfigError,
    Settings,
    StoreSettings,
    parse_settings,
    parse_store,
)
from addon.dialects import DIALECTS
from addon.dialects.kiro import CONTENT_TYPE as KIRO_CONTENT_TYPE
from addon.model import ToolCall, UnsupportedShape
from addon.outcome import FlowReport
from addon.plan import (
    CONTENT_TYPES,
    Decision,
    FlowPlan,
    Incoming,
    Pass,
    Reject,
    Rewrite,
    UpstreamError,
    decide,
    dump,
    internal_error,
    route_for,
    short,
)
from addon.redact import clean, clean_data
from addon.shell.common import (
    META_KEY,
    SECRETS,
    OptionChecks,
    add_options,
    append_comment,
    check_deferred_options,
    environment,
    header_map,
    is_json,
    json_response,
    log,
    outside_proxy_hosts,
    replace_headers,
    seal_flow,
    set_meta,
)
from addon.shell.common import internal_error as log_internal_error
from addon.shell.contentview import BridgeContentview
from addon.shell.kiro_auth import KiroAuth
from addon.shell.loop_guard import ask_again
from addon.shell.retry import Retry, RetryAnswer
from addon.state import AnswerInfo, BridgeState, KeptBytes, Original
from addon.store import ReasoningStore, StoreError
from addon.stream.decompress import UnsupportedEncoding
from addon.stream.eventstream import preload as preload_eventstream
from addon.stream.processor import StreamProcessor
from addon.transforms.repair import preload as preload_repair
from addon.transforms.staged_retry import next_stage
from addon.wire import secret_values

KEEP_STREAM_BYTES = 1024 * 1024
"""How much of a rewritten stream's upstream bytes is kept for the content view."""

MAX_TRACKED_FLOWS = 10_000
"""Flows whose answer is still awaited; the oldest are forgotten past this (a leak guard)."""


class RewriteAddon(OptionChecks):
    name = "cursor_bridge"

    def __init__(
        self,
        state: BridgeState | None = None,
        retry: Retry | None = None,
        kiro: KiroAuth | None = None,
    ) -> None:
        self.settings = Settings()
        self.state = state or BridgeState()
        self.retry = retry
        self.kiro = kiro
        """Reads the Kiro token file of a route (its ``request`` hook runs before ours)."""
        self._plans: OrderedDict[str, FlowPlan] = OrderedDict()
        self._client_bytes: OrderedDict[str, KeptBytes] = OrderedDict()
        """Streams being rewritten: the first bytes their client got (``keep_originals``)."""
        self._reports: OrderedDict[str, FlowReport] = OrderedDict()
        """Routed flows still running: what their log line and mark will say."""
        self.store: ReasoningStore | None = None
        """The reasoning store (``bridge_store*``), shared by every flow; None: off."""
        self._store_settings: StoreSettings | None = None
        self.keep_originals = True
        """Keep what the content view shows (originals, the first MiB of each stream): not in
        a mitmdump that never renders bodies (``flow_detail`` < 3)."""

    # ------------------------------------------------------------------ options

    def load(self, loader: Any) -> None:
        contentviews.add(BridgeContentview(self.state.originals))
        add_options(loader, REWRITE_OPTIONS)
        # The last of the bridge's addons to load: every bridge option is declared now.
        check_deferred_options(getattr(getattr(loader, "master", None), "options", None))

    def running(self) -> None:
        super().running()
        # Start-up work, not the first flow's (its ``bridge_ms``): what the routes will need
        # and would otherwise import on first use.
        s = self.settings
        try:
            if any((route.tool_repair or s.tool_repair) == "on" for route in s.routes):
                preload_repair()
            if any(DIALECTS[r.upstream].framing_for(()) == "aws_eventstream" for r in s.routes):
                preload_eventstream()
        except Exception as e:
            log_internal_error("cursor-bridge: loading what the routes need", e)

    def configure(self, updated: set[str]) -> None:
        if "flow_detail" in updated:
            self.keep_originals = views_shown()
        if not any(name.startswith("bridge_") for name in updated):
            return
        try:
            self.settings = parse_settings(lambda name: getattr(ctx.options, name), environment())
            self._configure_store(parse_store(lambda name: getattr(ctx.options, name)))
        except ConfigError as e:
            self.refuse(str(e))
            return
        if "bridge_routes" in updated and ctx.options.bridge_routes:
            log.info(
                "cursor-bridge: %d route(s) from %s",
                len(self.settings.routes),
                clean(ctx.options.bridge_routes, 1000),
            )

    def _configure_store(self, wanted: StoreSettings) -> None:
        """Open the reasoning store the options ask for (once per change of them)."""
        if wanted == self._store_settings:
            return
        old = self._store_settings
        if (
            self.store is not None
            and old is not None
            and wanted.size > 0
            and old.path == wanted.path
        ):
            # Same place, new bounds: keep what is remembered (an in-memory store would
            # otherwise forget every conversation).
            try:
                self.store.rebound(wanted.size, wanted.ttl)
            except (StoreError, ValueError) as e:
                raise ConfigError(f"bridge_store: {clean(e, 300)}") from None
            self._store_settings = wanted
            return
        store = None
        if wanted.size > 0:
            try:
                store = ReasoningStore(wanted.path, max_entries=wanted.size, ttl=wanted.ttl)
            except (StoreError, ValueError) as e:
                raise ConfigError(f"bridge_store: {clean(e, 300)}") from None
        self._close_store()
        self.store, self._store_settings = store, wanted
        if store is not None and wanted.path:  # in memory is the default: nothing to say
            log.info("cursor-bridge: %s", clean(store.describe(), 500))

    def _close_store(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            try:
                store.close()
            except Exception as e:
                log.warning("cursor-bridge: closing the reasoning store: %s", short(e))

    # ------------------------------------------------------------------ request

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.error is not None or not flow.live:
            return
        started = time.perf_counter_ns()
        route = None
        try:
            req = flow.request
            route = route_for(self.settings, req.method, req.host, req.path)
            if route is None or outside_proxy_hosts(flow):
                return
            incoming = Incoming(
                req.method,
                req.host,
                req.path,
                header_map(req.headers),
                req.get_content(strict=False) or b"",
            )
            creds = self.kiro.take(flow.id) if self.kiro is not None else None
            env = environment()
            route_key = creds.key if creds else env.get(route.api_key_env or "")
            secrets = secret_values(incoming.headers, incoming.query, route_key)
            SECRETS.add(flow.id, secrets)  # before any line about this flow is written
            decision: Decision = decide(
                self.settings, route, incoming, env, creds, store=self.store, secrets=secrets
            )
            if isinstance(decision, Rewrite):
                # Everything that could fail is done: the flow is changed only from here on.
                self._rewrite(flow, incoming, decision)
                self._reports[flow.id].spent_ns += time.perf_counter_ns() - started
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
                    SECRETS.drop(flow.id)
                    return
                case Pass():
                    self._passthrough(flow, decision)
                    outcome, reason = "fallback", f"passed through: {short(decision.reason or '')}"
                case Reject():
                    self._reject(flow, decision)
                    outcome = "rejected"
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
            self._close(flow, report, line=True)
        except Exception as e:
            log_internal_error(f"cursor-bridge [{route.name}]: request", e)

    def _rewrite(self, flow: http.HTTPFlow, incoming: Incoming, d: Rewrite) -> None:
        req, wire, plan = flow.request, d.wire, d.plan
        path = None
        if (wire.path, wire.query) != (incoming.bare_path, incoming.query):
            # surrogateescape: bytes of the client's query that are not UTF-8 go back as sent
            query = urlencode(wire.query, encoding="utf-8", errors="surrogateescape")
            path = wire.path + (f"?{query}" if wire.query else "")
        if d.body is not incoming.body:  # else the client's bytes go on as they came
            req.content = d.body
        if path is not None:
            req.path = path
        replace_headers(
            req.headers, wire.drop_headers, (*wire.set_headers, ("accept-encoding", "identity"))
        )
        self._remember(flow.id, plan)
        self.state.count("requests rewritten")
        decisions = decision_lines(plan.notes)
        if self.keep_originals:
            facts = (*plan_facts(plan), ("upstream path", clean(wire.path, 300)))
            self._keep(flow.id, "request", Original(d.original, "request", facts, decisions))
        comment(flow, plan.label, decisions or ("no changes needed",))
        set_meta(flow, plan.meta())
        if self.settings.debug:
            log.debug("%s: upstream path %s", plan.label, clean(wire.path, 300))
            for line in decisions:
                log.debug("%s: request: %s", plan.label, clean(line, 500))

    # ------------------------------------------------------------------ response

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        started = time.perf_counter_ns()
        try:
            self._responseheaders(flow)
        except Exception as e:
            plan = self._plans.get(flow.id)
            log_internal_error(plan.label if plan else "cursor-bridge", e)
            self._fallback(flow, f"internal error ({type(e).__name__})")
            if flow.response is not None and (plan is None or plan.same_dialect):
                # Same dialect: the answer is passed on as it comes (a stream still streams).
                self._plans.pop(flow.id, None)
                if (
                    flow.response.headers.get("content-type", "")
                    .lower()
                    .startswith("text/event-stream")
                ):
                    flow.response.stream = True
            # Another dialect: buffered; ``response`` turns it into the client's dialect or
            # into an error in it.
        if report := self._reports.get(flow.id):
            report.spent_ns += time.perf_counter_ns() - started

    def _responseheaders(self, flow: http.HTTPFlow) -> None:
        plan = self._plans.get(flow.id)
        resp = flow.response
        if resp is None:
            return
        ctype = resp.headers.get("content-type", "").lower()
        sse = ctype.startswith("text/event-stream")
        # Gemini without ``alt=sse`` streams one JSON array as ``application/json``.
        array = plan is not None and plan.stream and plan.upstream_framing == "json_array"
        # Kiro streams AWS event-stream frames (``application/vnd.amazon.eventstream``).
        binary = (
            plan is not None
            and plan.stream
            and plan.upstream_framing == "aws_eventstream"
            and ctype.startswith(KIRO_CONTENT_TYPE)
        )
        if not (sse or (array and is_json(resp)) or binary):
            return
        if plan is None:
            meta = flow.metadata.get(META_KEY)
            if isinstance(meta, dict) and meta.get("action") == "passthrough":
                resp.stream = True  # passed through untouched: it still streams
            return
        if not (200 <= resp.status_code < 300):
            if plan.same_dialect:
                resp.stream = True  # the client reads this error itself: never buffered
            return  # another dialect: buffered, re-shaped in ``response``
        if plan.loop_held and self.retry is not None:
            return  # read whole: the loop guard may ask again (``_loop_held``)
        encoding = resp.headers.get("content-encoding")
        try:
            processor = plan.stream_processor(
                encoding,
                keep_original=KEEP_STREAM_BYTES if self.keep_originals else 0,
                status=resp.status_code,
                content_type=resp.headers.get("content-type"),
            )
        except UnsupportedEncoding as e:
            log.warning("%s: stream passed through unchanged: %s", plan.label, short(e))
            append_comment(flow, f"{plan.label}: stream not rewritten ({short(e)})")
            self._fallback(flow, f"stream not rewritten ({short(e)})")
            resp.stream = True  # still stream it: SSE must never be buffered
            self._plans.pop(flow.id, None)
            return
        drop = ["content-length"]
        put = []
        if encoding:
            drop.append("content-encoding")
            append_comment(flow, "stream decompressed")
        if flow.request.http_version.startswith("HTTP/1"):
            put.append(("transfer-encoding", "chunked"))
        if plan.client_framing != plan.upstream_framing:
            put.append(("content-type", CONTENT_TYPES[plan.client_framing]))
        replace_headers(resp.headers, drop, put)
        read = stream_callable(processor, plan.label, self._reports.get(flow.id))
        if self.keep_originals and not stores_streamed_bodies():
            # What the client gets, for the content view when mitmproxy keeps no streamed body.
            kept = self._client_bytes[flow.id] = KeptBytes(KEEP_STREAM_BYTES)
            read = keeping(read, kept)
            while len(self._client_bytes) > MAX_TRACKED_FLOWS:
                self._client_bytes.popitem(last=False)
        resp.stream = read

    async def response(self, flow: http.HTTPFlow) -> None:
        started = time.perf_counter_ns()
        plan = self._plans.pop(flow.id, None)
        resp = flow.response
        try:
            if plan is not None and resp is not None:
                await self._answer_for_client(flow, plan, resp)
        finally:
            self._client_bytes.pop(flow.id, None)
            report = self._reports.pop(flow.id, None)
            if report is not None:
                report.spent_ns += time.perf_counter_ns() - started
                self._close(flow, report, line=True, plan=plan)

    async def _answer_for_client(
        self, flow: http.HTTPFlow, plan: FlowPlan, resp: http.Response
    ) -> None:
        try:
            await self._response(flow, plan, resp)
        except Exception as e:
            log_internal_error(f"{plan.label}: answer", e)
            self._fallback(flow, f"internal error ({type(e).__name__})")
            if plan.same_dialect or plan.processor is not None:
                return  # passed on as the upstream sent it (a stream is already on its way)
            self._unreadable(flow, plan, f"internal error ({type(e).__name__})")

    async def _response(self, flow: http.HTTPFlow, plan: FlowPlan, resp: http.Response) -> None:
        if plan.processor is not None:
            self._stream_done(flow, plan)
            return
        if not (200 <= resp.status_code < 300):
            if await self._staged_retry(flow, plan, resp):
                return
            if not plan.same_dialect:
                self._translate_error(flow, plan)
            return
        if (
            plan.loop_held
            and self.retry is not None
            and (not is_json(resp) or plan.upstream_framing == "json_array")
        ):
            await self._loop_held(flow, plan, resp, self.retry)
            return
        if plan.same_dialect and not is_json(resp):
            return  # not JSON: the client reads it itself
        raw = resp.get_content(strict=False) or b""
        try:
            answer = plan.decode_answer(
                raw, status=resp.status_code, content_type=resp.headers.get("content-type")
            )
            if plan.needs_retry(answer) and self.retry is not None:
                # ``resend`` sends the request's body again, as the first attempt did.
                self._attempt(flow, "retry for a required tool call", flow.request.content)
                again = await self.retry.resend(flow, plan.label)
                if again is not None:
                    retried = plan.decode_answer(again)
                    raw = again  # the view shows the answer the client's was made from
                    self._retried(flow, "required tool call")
                    got = "got one" if not plan.needs_retry(retried) else "still none"
                    append_comment(
                        flow, f"no tool call although one was required: retried once → {got}"
                    )
                    answer = retried
            body = plan.encode_answer(answer)
            calls = sum(isinstance(p, ToolCall) for p in answer.parts)
            if plan.loop_ask_again and self.retry is not None:
                second = await self._ask_again(flow, plan, self.retry)
                if second is not None:
                    body, _, raw = second
                    calls = plan.parser.calls if plan.parser is not None else 0
        except UpstreamError as e:
            # An error inside the upstream's answer framing (a Kiro exception frame).
            self.state.count("upstream errors re-shaped")
            log.info("%s: upstream answered an error: %s", plan.label, short(e.message))
            append_comment(flow, f"upstream error in its stream → {plan.client.name} shape")
            flow.response = json_response(e.status, plan.upstream_error(e))
            return
        except (ValueError, UnsupportedShape, RecursionError) as e:
            why = "nested too deeply" if isinstance(e, RecursionError) else short(e)
            if not plan.same_dialect:
                self._unreadable(flow, plan, why)
                return
            log.info("%s: answer passed through unchanged: %s", plan.label, why)
            append_comment(flow, f"answer not rewritten ({why})")
            self._fallback(flow, f"answer not rewritten ({why})")
            return
        self._note_text_calls(flow, plan)
        self._keep_answer(flow, plan, raw, "whole answer re-encoded", stream=False)
        if report := self._reports.get(flow.id):
            report.counts.update(bytes_in=len(raw), bytes_out=len(body), tool_calls=calls)
        if plan.stream:
            resp.headers["content-type"] = CONTENT_TYPES[plan.client_framing]
            append_comment(flow, "whole answer sent as a stream (client asked for one)")
        else:
            resp.headers["content-type"] = "application/json"
        resp.content = body
        self.state.count("answers rewritten")

    async def _loop_held(
        self, flow: http.HTTPFlow, plan: FlowPlan, resp: http.Response, retry: Retry
    ) -> None:
        """A stream read whole because the loop guard may ask again (``FlowPlan.loop_held``):
        through the stream pipeline; when the answer repeated the call, the second answer
        instead (``ask_again``). The client gets either as one body in its stream framing."""
        raw = resp.get_content(strict=False) or b""
        body, ctype = plan.client_answer(raw, resp.headers.get("content-type", ""))
        if plan.loop_ask_again:
            again = await self._ask_again(flow, plan, retry)
            if again is not None:
                body, ctype, raw = again
        self._note_text_calls(flow, plan)
        self._keep_answer(flow, plan, raw, "stream read whole (loop guard)", stream=True)
        if report := self._reports.get(flow.id):
            report.counts.update(bytes_in=len(raw), bytes_out=len(body))
        replace_headers(
            resp.headers,
            ["content-length", "content-encoding", "transfer-encoding"],
            [("content-type", ctype)],
        )
        resp.content = body
        append_comment(flow, "stream read whole before it was sent (loop guard, fallback on)")
        self.state.count("answers rewritten")

    async def _ask_again(
        self, flow: http.HTTPFlow, plan: FlowPlan, retry: Retry
    ) -> tuple[bytes, str, bytes] | None:
        """The loop guard's second request (``addon.shell.loop_guard``), counted as a retry."""
        second = await ask_again(retry, flow, plan)
        if plan.loop_asked:
            self._retried(flow, "loop guard")
        return second

    async def _staged_retry(self, flow: http.HTTPFlow, plan: FlowPlan, resp: http.Response) -> bool:
        """An upstream 400 over signatures / reasoning: ask again without them (stage 1), then
        with tools as text too (stage 2, when the error names a tool). True when a stage was
        answered: the client gets that answer, in its dialect, streamed if it asked."""
        if self.retry is None or plan.unified is None:
            return False
        message = plan.error_message(resp.get_content(strict=False) or b"")
        stage = next_stage(0, resp.status_code, message)
        first = resp.status_code
        while stage is not None:
            self._retried(flow, f"staged retry {stage}")
            log.info(
                "%s: upstream refused the reasoning (HTTP %d: %s): staged retry %d",
                plan.label,
                first,
                short(message),
                stage,
            )
            try:
                body = plan.stage_body(stage)
            except (ValueError, UnsupportedShape, RecursionError) as e:
                log.warning("%s: staged retry %d not possible: %s", plan.label, stage, short(e))
                return False
            self._attempt(flow, f"staged retry {stage}", body)
            answer = await self.retry.send(flow, plan.label, body)
            if answer is None:
                return False
            if 200 <= answer.status < 300:
                self._deliver_stage(flow, plan, answer, stage)
                return True
            message = plan.error_message(answer.content)
            append_comment(flow, f"staged retry {stage} got HTTP {answer.status}")
            stage = next_stage(stage, answer.status, message)
        return False

    def _deliver_stage(
        self, flow: http.HTTPFlow, plan: FlowPlan, answer: RetryAnswer, stage: int
    ) -> None:
        """A staged retry's 2xx answer, rewritten for the client as a first answer would be."""
        streamed = plan.stream and not answer.content_type.lower().startswith("application/json")
        if streamed or (plan.stream and plan.upstream_framing == "json_array"):
            processor = plan.stream_processor(None)
            body = b"".join([*processor.feed(answer.content), *processor.finish()])
            plan.processor = None
            content_type = CONTENT_TYPES[plan.client_framing]
        else:
            try:
                body = plan.encode_answer(plan.decode_answer(answer.content))
            except (ValueError, UnsupportedShape, RecursionError) as e:
                why = "nested too deeply" if isinstance(e, RecursionError) else short(e)
                flow.response = http.Response.make(
                    answer.status, answer.content, {"content-type": answer.content_type}
                )
                append_comment(flow, f"staged retry {stage} answered")
                if not plan.same_dialect:
                    self._unreadable(flow, plan, why)
                return
            content_type = CONTENT_TYPES[plan.client_framing] if plan.stream else "application/json"
        self._keep_answer(
            flow, plan, answer.content, f"staged retry {stage} answered", stream=streamed
        )
        flow.response = http.Response.make(200, body, {"content-type": content_type})
        self.state.count("staged retries answered")
        append_comment(
            flow,
            f"upstream refused the reasoning: staged retry {stage} answered "
            f"({'thinking off, thinking as text' if stage == 1 else 'tool calls as text too'})",
        )
        meta = flow.metadata.get(META_KEY)
        if isinstance(meta, dict):
            meta["staged_retry"] = stage
        self._note_text_calls(flow, plan)

    def _stream_done(self, flow: http.HTTPFlow, plan: FlowPlan) -> None:
        p = plan.processor
        assert p is not None
        meta = flow.metadata.get(META_KEY)
        if isinstance(meta, dict):
            meta["stream_events"] = p.events_in
            meta["stream_fallback"] = short(p.error) if p.error else p.error
            if plan.parser is not None:
                meta["text_tool_calls"] = plan.parser.calls
            meta["stream_skipped"] = p.skipped
        self._note_text_calls(flow, plan)
        if p.original:
            self._keep_answer(
                flow,
                plan,
                bytes(p.original),
                "streamed answer",
                stream=True,
                cut=p.bytes_in > len(p.original),
            )
        if report := self._reports.get(flow.id):
            report.counts.update(events_in=p.events_in, skipped=p.skipped)
            if plan.parser is not None:
                report.counts["text_tool_calls"] = plan.parser.calls
            if plan.client.name != plan.upstream.name or not p.passthrough:
                report.counts["bytes_in"] = p.bytes_in
                report.counts["bytes_out"] = p.bytes_out
        if p.skipped:
            self._fallback(flow, f"{p.skipped} unreadable event(s) skipped")
            self.state.count("stream events skipped", p.skipped)
            why = short(p.skip_reason or "")
            log.warning(
                "%s: %d unreadable upstream event(s) skipped: %s", plan.label, p.skipped, why
            )
            append_comment(flow, f"{p.skipped} unreadable upstream event(s) skipped: {why}")
        if p.whole_body:
            log.info("%s: the upstream's 2xx body was not an event stream: read whole", plan.label)
            append_comment(flow, "upstream body was not an event stream: read whole")
        if p.error and p.passthrough:
            self.state.count("stream fallbacks")
            append_comment(flow, f"stream passed through after: {short(p.error)}")
            self._fallback(flow, f"stream passed through after: {short(p.error)}")
        elif p.error:
            self.state.count("streams ended with an error")
            append_comment(flow, f"stream ended with an error for the client: {short(p.error)}")
            self._fallback(flow, f"stream ended with an error: {short(p.error)}")
        elif p.ended_with_error:
            # The bridge wrote that error: the upstream's answer could not be read to its end.
            self.state.count("streams ended with an error")
            why = short(p.ended_with_error)
            append_comment(flow, f"stream ended with an error for the client: {why}")
            self._fallback(flow, f"stream ended with an error: {why}")
        else:
            self.state.count("streams rewritten")
        self._store_client_body(flow)

    def _store_client_body(self, flow: http.HTTPFlow) -> None:
        """A rewritten stream's body as its client got it, stored on the flow when mitmproxy
        stored none (``store_streamed_bodies=false``, its default) and the bridge kept all of
        it: exactly the bytes ``store_streamed_bodies=true`` would have stored (so saving and
        replaying the flow see the real body), and what mitmproxy needs to call the content
        view at all (it shows "Content is missing." for a body of None). A longer body stays
        missing: a part of it would pass for all of it."""
        kept = self._client_bytes.pop(flow.id, None)
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

    def _note_text_calls(self, flow: http.HTTPFlow, plan: FlowPlan) -> None:
        self._note_answer(flow, plan)
        parser = plan.parser
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

    def _note_answer(self, flow: http.HTTPFlow, plan: FlowPlan) -> None:
        """What the answer's rewrite changed (argument repairs …): in the comment and the
        metadata; one structured log line per call that still does not fit its schema."""
        failed = plan.capture_error or (plan.capture.error if plan.capture else None)
        if failed:
            plan.capture_error = None
            if plan.capture is not None:
                plan.capture.error = None
            self.state.count("answers not remembered")
            log.warning(
                "%s: the answer's reasoning was not remembered: %s", plan.label, short(failed)
            )
        changes = decision_lines(plan.answer_notes())
        if changes:
            for line in changes:
                append_comment(flow, f"answer: {line}")
            meta = flow.metadata.get(META_KEY)
            if isinstance(meta, dict):
                meta["answer_changes"] = clean_data(dict(plan.answer_notes()))
        for record in plan.repair_log:
            self.state.count("tool calls still invalid after repair")
            log.info("%s: %s", plan.label, short(dump(record).decode()))
        plan.repair_log.clear()
        self._note_loop(flow, plan)

    def _note_loop(self, flow: http.HTTPFlow, plan: FlowPlan) -> None:
        """The loop guard replaced a call (or asked again): the flow's outcome, and its
        line's ``tool`` and ``failures`` fields."""
        if plan.loop is None or not (plan.loop_replaced or plan.loop_asked):
            return
        self.state.count("loop guard answers")
        if report := self._reports.get(flow.id):
            report.add_outcome("loop_guard")
            report.fields.update(tool=plan.loop.tool, failures=plan.loop.count)
        meta = flow.metadata.get(META_KEY)
        if isinstance(meta, dict):
            meta["loop_guard"] = clean_data(
                {
                    "tool": plan.loop.tool,
                    "failures": plan.loop.count,
                    "error_class": plan.loop.error_class,
                    "fingerprint": plan.loop.fingerprint,
                    "replaced": plan.loop_replaced,
                    "asked_again": plan.loop_asked,
                }
            )

    def _unreadable(self, flow: http.HTTPFlow, plan: FlowPlan, why: str) -> None:
        """An answer that cannot reach a client of another dialect: a 502 in its dialect."""
        resp = flow.response
        assert resp is not None
        status = resp.status_code
        self.state.count("answers not translatable")
        log.warning("%s: upstream answer (HTTP %d) not translatable: %s", plan.label, status, why)
        self._fallback(flow, f"upstream answer not translatable: {why}")
        append_comment(flow, f"upstream answer (HTTP {status}) not translatable: {why} → 502")
        flow.response = json_response(502, plan.unreadable_answer(why))

    def _translate_error(self, flow: http.HTTPFlow, plan: FlowPlan) -> None:
        """An upstream error, re-shaped for a client of another dialect (status kept)."""
        resp = flow.response
        assert resp is not None
        body, message = plan.error_body(resp.status_code, resp.get_content(strict=False) or b"")
        resp.content = body
        resp.headers["content-type"] = "application/json"
        append_comment(flow, f"upstream error {resp.status_code} → {plan.client.name} shape")
        log.info("%s: upstream answered HTTP %d: %s", plan.label, resp.status_code, short(message))

    def error(self, flow: http.HTTPFlow) -> None:
        """A flow that ended without its ``response`` hook (a disconnect): reported once, as
        ``response`` would have — with what its stream carried (counts, skipped events, the
        view), and with the disconnect as its reason unless the upstream's stream had already
        reached its end (a client that hangs up as soon as it has read ``[DONE]``)."""
        plan = self._plans.pop(flow.id, None)
        report = self._reports.pop(flow.id, None)
        if report is None:
            self._client_bytes.pop(flow.id, None)
            SECRETS.drop(flow.id)
            return
        started = time.perf_counter_ns()
        try:
            self._reports[flow.id] = report  # ``_stream_done`` adds to it
            p = plan.processor if plan is not None else None
            ended = p is not None and p.upstream_ended()
            if not ended:  # the client got part of an answer: no body to show as its own
                self._client_bytes.pop(flow.id, None)
                report.reason = report.reason or clean(flow.error.msg if flow.error else "", 300)
            if plan is not None and p is not None and (ended or p.events_in):
                self._stream_done(flow, plan)
            if ended:
                append_comment(flow, "the client hung up after the answer's end")
        except Exception as e:
            log_internal_error(f"cursor-bridge [{report.route}]: error", e)
        finally:
            self._reports.pop(flow.id, None)
        try:
            report.spent_ns += time.perf_counter_ns() - started
            self._close(flow, report, line=True, plan=plan)
        except Exception as e:
            log_internal_error(f"cursor-bridge [{report.route}]: error", e)

    def done(self) -> None:
        try:
            log.info("cursor-bridge: %s", self.state.summary())
        except Exception as e:
            log_internal_error("cursor-bridge: done", e)
        self._close_store()

    @command.command("bridge.stats")  # type: ignore[untyped-decorator]
    def stats(self) -> str:
        """What the bridge did since it started: flows by outcome, repairs, restores,
        retries, fallbacks (also logged)."""
        text = self.state.summary()
        log.info("cursor-bridge: %s", text)
        return text

    # ------------------------------------------------------------------ helpers

    def _reject(self, flow: http.HTTPFlow, d: Reject) -> None:
        """Answer the client ourselves, in its dialect; the upstream is not called."""
        label = f"cursor-bridge [{d.route.name}]"
        self.state.count("rejected")
        flow.response = json_response(d.status, d.body)
        append_comment(flow, f"{label}: answered {d.status}: {short(d.message)}")
        set_meta(flow, {"route": d.route.name, "action": "rejected", "error": short(d.message)})

    def _passthrough(self, flow: http.HTTPFlow, d: Pass) -> None:
        assert d.route is not None and d.reason is not None
        label = f"cursor-bridge [{d.route.name}]"
        self.state.count("passed through")
        reason = short(d.reason)
        append_comment(flow, f"{label}: passed through: {reason}")
        set_meta(flow, {"route": d.route.name, "action": "passthrough", "reason": reason})

    def _remember(self, flow_id: str, plan: FlowPlan) -> None:
        self._plans[flow_id] = plan
        self._reports[flow_id] = FlowReport(
            plan.route.name,
            "rewritten",
            client=plan.client.name,
            upstream=plan.upstream.name,
            mode="stream" if plan.stream else "whole",
            notes=plan.notes,
        )
        for tracked in (self._plans, self._reports):
            while len(tracked) > MAX_TRACKED_FLOWS:
                tracked.popitem(last=False)

    def _fallback(self, flow: http.HTTPFlow, why: str) -> None:
        if report := self._reports.get(flow.id):
            report.add_outcome("fallback")
            report.reason = report.reason or clean(why, 300)

    def _retried(self, flow: http.HTTPFlow, kind: str) -> None:
        # Counted once, by the flow's report (``retries (kind)``; ``bridge.stats`` says it).
        if report := self._reports.get(flow.id):
            report.retries[kind] += 1

    def _keep_answer(
        self,
        flow: http.HTTPFlow,
        plan: FlowPlan,
        raw: bytes,
        summary: str,
        *,
        stream: bool,
        cut: bool = False,
    ) -> None:
        """The upstream's answer as it came, for the content view's timeline."""
        if not self.keep_originals:
            return
        info = AnswerInfo(
            plan.upstream.name,
            plan.upstream_framing,
            plan.client.name,
            plan.client_framing,
            stream,
            cut,
        )
        decisions = decision_lines(plan.answer_notes())
        if report := self._reports.get(flow.id):
            decisions += tuple(f"{n} {kind} asked" for kind, n in report.retries.items())
        self._keep(flow.id, "response", Original(raw, summary, plan_facts(plan), decisions, info))

    def _attempt(self, flow: http.HTTPFlow, what: str, body: bytes | None) -> None:
        """A later attempt's body, for the request's content view (as it is sent)."""
        if self.keep_originals:
            self.state.originals.add_attempt(flow.id, what, body or b"")

    def _keep(self, flow_id: str, part: str, original: Original) -> None:
        if self.keep_originals:
            # The view redacts with them when it renders (the flow's own bodies too).
            original = dataclasses.replace(original, secrets=SECRETS.get(flow_id))
            self.state.originals.put(flow_id, part, original)

    def _close(
        self, flow: http.HTTPFlow, report: FlowReport, *, line: bool, plan: FlowPlan | None = None
    ) -> None:
        """The flow is over: its mark, its counters, its log line (and details)."""
        if flow.response is not None:
            report.status = flow.response.status_code
        flow.marked = report.mark
        self.state.add(report.counters())
        if line:
            log.info("%s", report.line())
        if self.settings.debug and plan is not None:
            for what in decision_lines(plan.answer_notes()):
                log.debug("%s: answer: %s", plan.label, clean(what, 500))
            p = plan.processor
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
        seal_flow(flow)  # the flow is over: nothing more is written about it


def views_shown() -> bool:
    """Whether anything renders the content view: mitmweb and the console do, mitmdump only
    at ``flow_detail`` 3 and up."""
    try:
        master, detail = ctx.master, ctx.options.flow_detail
    except (AttributeError, KeyError):
        return True
    return not isinstance(master, DumpMaster) or detail >= 3


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


def keeping(
    read: Callable[[bytes], Sequence[bytes]], kept: KeptBytes
) -> Callable[[bytes], Sequence[bytes]]:
    """``read`` whose output is also kept in ``kept`` (the first bytes the client gets)."""

    def keep(data: bytes) -> Sequence[bytes]:
        out = read(data)
        if out and kept.whole:
            kept.extend(out)
        return out

    return keep


def stream_callable(
    processor: StreamProcessor,
    label: str,
    report: FlowReport | None = None,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> Callable[[bytes], Sequence[bytes]]:
    """The ``flow.response.stream`` callable: ``b""`` ends the body, anything else is fed.

    It is the processor's reader (``StreamProcessor.reader``): the common read in one flat
    function, the others through ``general`` here, which keeps a failure of ours from eating
    the stream and logs why the processor gave up (once, at the first read after it did). The
    time reads take goes to the flow's report, sampled after a stream's first reads."""
    reported = False
    feed, finish = processor.feed_general, processor.finish

    def general(data: bytes) -> list[bytes]:
        nonlocal reported
        out: list[bytes]
        try:
            out = feed(data) if data else finish()
        except Exception as e:
            out = failed(data, e)
        if processor.error and not reported:
            reported = True
            how = (
                "stream passed through from here on"
                if processor.passthrough
                else "stream ended with an error for the client"
            )
            log.warning("%s: %s: %s", label, how, short(processor.error))
        return out

    def spent(ns: int) -> None:
        assert report is not None
        report.spent_ns += ns

    def failed(data: bytes, e: Exception) -> list[bytes]:
        """A bug in the processor itself: never eat the user's stream, never hand a client
        another dialect's bytes. One log line says so."""
        nonlocal reported
        reported = True
        same = processor.same_dialect
        log.error(
            "%s: stream rewrite failed (%s: %s); %s",
            label,
            type(e).__name__,
            short(e),
            "passing the rest through" if same else "ending the client's stream with an error",
        )
        try:
            out = processor.abort(f"internal error {type(e).__name__}")
        except Exception:  # nothing more can be done for this stream
            out = []
        if processor.passthrough:
            # The failed chunk as the client can read it (decompressed: the answer's
            # content-encoding header is gone).
            chunk = processor.last_chunk if data else b""
            return [chunk] if chunk else []
        return out

    return processor.reader(general, clock, spent if report is not None else None, failed)
