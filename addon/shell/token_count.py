"""The count_tokens addon: Anthropic's ``POST …/messages/count_tokens`` when the upstream
has no such endpoint. ``addon.plan.count_tokens`` decides (send it upstream as it is or as
the upstream's own counting call, ask a llama.cpp server, or answer with an estimate at once);
this applies the decision in ``request`` (a llama.cpp server asked through ``Retry``, on the
bridge's upstream path) and the answer it gives for the upstream's in ``response``. Estimates
are calibrated by the answers the usage ledger books (``Calibration``, shared with
``addon.shell.ledger_book``; with a store that does I/O, the ratios its request's prefetch read,
every worker's). Never a host outside mitmproxy's ``allow_hosts`` /
``ignore_hosts``. How it answers: docs/dialects/anthropic.md."""

from __future__ import annotations

from functools import partial

from mitmproxy import http

from addon.plan import (
    CountLlama,
    CountLocally,
    LlamaCall,
    Reply,
    count_answer,
    count_request,
    llama_count,
)
from addon.plan.calibration import Calibration
from addon.report.counters import BridgeState
from addon.report.outcome import Count
from addon.shell.flows import Flows
from addon.shell.headers import header_map, json_response
from addon.shell.host_filter import outside_proxy_hosts
from addon.shell.notes import append_comment, log, log_internal_error
from addon.shell.option_checks import environment
from addon.shell.outbound.retry import Retry, RetryAnswer, upstream_proxy
from addon.shell.settings import BridgeSettings
from addon.stores.prefetch import PrefetchedStore


class CountTokens:
    name = "cursor_bridge_count_tokens"

    def __init__(
        self,
        settings: BridgeSettings,
        state: BridgeState,
        flows: Flows,
        retry: Retry | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        self._settings = settings
        self._state = state
        self._flows = flows
        """A count sent upstream is its flow's record's ``count``, its key its ``secrets``."""
        self._retry = retry
        """How a llama.cpp server is asked (None: the estimate answers)."""
        self.calibration = calibration or Calibration()

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or not flow.live:
            return
        try:
            await self._request(flow)
        except Exception as e:  # the request goes upstream as the client sent it
            record = self._flows.get(flow.id)
            if record is not None:
                record.count = None
            log_internal_error("cursor-bridge: count_tokens request", e)

    async def _request(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        path = req.path.split("?", 1)[0]
        raw = req.get_content(strict=False) or b""
        route, view = self._flows.counted(flow, self._settings.settings)
        if route is None or outside_proxy_hosts(flow):
            return
        query = tuple(req.query.items(multi=True))
        addressed = (req.host, req.port)
        decision = count_request(
            route,
            path,
            raw,
            header_map(req.headers),
            query,
            environment(),
            addressed,
            view.calibration(self.calibration)
            if isinstance(view, PrefetchedStore)  # the store's ratios, every worker's
            else self.calibration,
        )
        if decision is None:
            return
        if isinstance(decision, CountLlama):
            send = partial(self._send, upstream_proxy(flow))
            told = await llama_count(decision, send, (req.scheme, req.host, req.port))
            if told.log is not None:
                log.warning("%s", told.log)
            decision = CountLocally(told.body, told.comment, told.estimated)
        if isinstance(decision, CountLocally):
            flow.response = json_response(200, decision.body)
            append_comment(flow, decision.comment)
            if decision.estimated:
                self._state.count(Count.TOKEN_COUNTS_ESTIMATED)
            return
        if decision.path is not None and decision.body is not None:
            req.path = decision.path
            req.content = decision.body
            req.headers["content-type"] = "application/json"
        if decision.origin is not None:  # the route's upstream_url (as for the chat request)
            req.scheme, req.host, req.port = decision.origin
            req.path = decision.prefix + req.path
        self._flows.add_secrets(flow.id, decision.secrets)
        for name in decision.drop_headers:
            req.headers.pop(name, None)
        for name, value in decision.set_headers:
            req.headers[name] = value
        self._flows.open(flow.id).count = decision

    async def _send(self, via: tuple[str, str] | None, call: LlamaCall) -> Reply:
        """One call to a llama.cpp server, the way mitmproxy sends the flow's request."""
        if self._retry is None:
            return None, b"", "the bridge sends no requests of its own here"
        fields = [(k.encode(), v.encode()) for k, v in call.headers]
        request = http.Request.make("POST", call.url, call.body, fields)
        got = await self._retry.attempt_via(via, request, call.timeout)
        if isinstance(got, RetryAnswer):
            return got.status, got.content, ""
        return None, b"", got

    def response(self, flow: http.HTTPFlow) -> None:
        record = self._flows.get(flow.id)
        sent = record.count if record is not None else None
        resp = flow.response
        if sent is None or resp is None:
            return
        try:
            answer = count_answer(sent, resp.status_code, resp.get_content(strict=False) or b"")
            if answer is not None:
                flow.response = json_response(answer.status, answer.body)
                append_comment(flow, answer.comment)
                if answer.estimated:
                    self._state.count(Count.TOKEN_COUNTS_ESTIMATED)
        except Exception as e:  # the upstream's answer goes on as it is
            log_internal_error("cursor-bridge: count_tokens answer", e)
