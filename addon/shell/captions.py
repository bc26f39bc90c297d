"""The captions addon: a request with images on a text-only route (``images = false``, ``vision =
"<route>"``; docs/routes.md#images) waits for a caption of each image before the rewrite.

Async, before the rewrite addon (after the fallbacks picked the chain's route): what the
request needs is decided from plain values (``addon.plan.captions.caption_job``) and handed to
the captioner (``addon.shell.outbound.captioner``); its answer applied: the captions on the
flow's record, where every ``decide`` of the flow reads them (``addon.plan.images``), or the
client's 502 in its dialect naming the vision route. The calls the job made are handed to the
client key's limits (``spent``: ``ClientLimits.captioned``), settled with the flow."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from mitmproxy import http

from addon.plan.captions import Refusal, caption_job
from addon.plan.limits import CallUse
from addon.shell.flows import Flows
from addon.shell.headers import header_map, json_response
from addon.shell.notes import append_comment, log_internal_error
from addon.shell.outbound.captioner import Answer, Captioner
from addon.shell.outbound.retry import upstream_proxy
from addon.shell.settings import BridgeSettings


class Captions:
    name = "cursor_bridge_captions"

    def __init__(
        self,
        settings: BridgeSettings,
        flows: Flows,
        captioner: Captioner,
        spent: Callable[[str, Sequence[CallUse]], None] | None = None,
    ) -> None:
        self._settings = settings
        self._flows = flows
        self.captioner = captioner
        self._spent = spent
        """Told the caption calls each flow needed (the client key's limits)."""

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """Nothing but for a request with images on a route that captions them: then a
        coroutine mitmproxy awaits before the rewrite addon's ``request`` runs."""
        if flow.response is not None or flow.error is not None or not flow.live:
            return None
        settings = self._settings.settings
        if not any(r.vision for r in settings.routes):
            return None
        try:
            found = self._flows.route_match(flow, settings)
            record = self._flows.open(flow.id)
            chain = record.chain.chain if record.chain is not None else None
            req = flow.request
            origin = (req.scheme, req.host, req.port)
            name = record.client_name or ""
            headers, via = header_map(req.headers), upstream_proxy(flow)
            job = caption_job(found, chain, settings.routes, headers, origin, via, name)
            if job is None:
                return None
        except Exception as e:
            log_internal_error("cursor-bridge: captions", e)
            return None
        spent: list[CallUse] = []
        return self._apply(flow, self.captioner.ask(job, spent), spent)

    async def _apply(
        self, flow: http.HTTPFlow, asked: asyncio.Future[Answer], spent: list[CallUse]
    ) -> None:
        got = await asked
        if spent and self._spent is not None:  # a refused job's calls cost too
            self._spent(flow.id, spent)
        if isinstance(got, Refusal):
            flow.response = json_response(got.status, got.body)
            append_comment(flow, got.comment)
        else:
            self._flows.open(flow.id).captions = got

    def done(self) -> None:
        self.captioner.done()
