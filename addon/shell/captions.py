"""The captions addon: a request with images on a text-only route (``images = false``, ``vision =
"<route>"``; docs/routes.md#images) gets a caption for each image before the rewrite.

Async, before the rewrite addon (after the fallbacks picked the chain's route): each image's
caption from this process's memory, else the shared store (read on the store thread, waited
for at most its bound), else a call of its own to the vision route (the bridge's own client,
``Retry.attempt``: a whole answer, the vision route's ``timeout``; ``PARALLEL`` at a time; one
call per image however many requests ask for it at once), each call counted in the usage
ledger under the vision route. The captions go on the flow's record, where every ``decide``
of the flow reads them (``addon.plan.images``). A caption that cannot be had answers the
client's 502 in its dialect naming the vision route, with one log line."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass, field

from mitmproxy import http

from addon.dialects import DIALECTS
from addon.model import ClientError
from addon.plan import Incoming, short
from addon.plan.captions import (
    PARALLEL,
    STORE_KIND,
    Caption,
    Wanted,
    caption_calls,
    read_caption,
    store_scope,
    vision_failed,
    wanted,
)
from addon.report.metrics_labels import Booking
from addon.shell.flows import FlowRecord, Flows
from addon.shell.headers import header_map, json_response
from addon.shell.ledger_book import UsageCounting
from addon.shell.notes import append_comment, log, log_internal_error
from addon.shell.option_checks import environment
from addon.shell.outbound.retry import Retry
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.settings import BridgeSettings
from addon.stores.base import StoreError
from addon.stores.ledger import LedgerKey, Tokens

MEMO = 4096
"""Captions this process keeps (least recently used out first)."""

type Name = tuple[str, str]


@dataclass(slots=True)
class _Job:
    """What one request's captions need, as plain values."""

    record: FlowRecord
    client: str
    wants: tuple[Wanted, ...]
    incoming: Incoming = field(repr=False)
    origin: tuple[str, str, int]
    """Where the client sent its request: a vision route without ``upstream_url`` is asked there."""
    asked: str
    """The model the client asked for."""


class Captions:
    name = "cursor_bridge_captions"

    def __init__(
        self,
        settings: BridgeSettings,
        flows: Flows,
        retry: Retry,
        store: ReasoningStoreLife,
        usage: UsageCounting | None = None,
    ) -> None:
        self._settings = settings
        self._flows = flows
        self._retry = retry
        self._store = store
        self._usage = usage
        self._memo: OrderedDict[Name, str] = OrderedDict()
        self._asking: dict[Name, asyncio.Future[str | Caption]] = {}
        """The caption calls under way, by image: a second request for one waits for it."""

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """Nothing but for a request with images on a route that captions them: then a
        coroutine mitmproxy awaits before the rewrite addon's ``request`` runs."""
        if flow.response is not None or flow.error is not None or not flow.live:
            return None
        try:
            job = self._job(flow)
        except Exception as e:
            log_internal_error("cursor-bridge: captions", e)
            return None
        return None if job is None else self._run(flow, job)

    def _job(self, flow: http.HTTPFlow) -> _Job | None:
        settings = self._settings.settings
        if not any(r.vision for r in settings.routes):
            return None
        found = self._flows.route_match(flow, settings)
        route = found.route
        if route is None or found.outside:
            return None
        record = self._flows.open(flow.id)
        chain = record.chain.chain if record.chain is not None else (route,)
        decoded = found.view.decoded(route.client)
        if decoded is None:
            return None
        wants = wanted(chain, settings.routes, decoded.request)
        if not wants:
            return None
        req = flow.request
        incoming = Incoming(req.method, req.host, req.path, header_map(req.headers), b"", req.port)
        asked = found.view.model(route.client) or decoded.request.model
        return _Job(record, route.client, wants, incoming, (req.scheme, req.host, req.port), asked)

    async def _run(self, flow: http.HTTPFlow, job: _Job) -> None:
        try:
            captions = {w.name: c for w in job.wants if (c := self._remembered(w.name))}
            missing = [w for w in job.wants if w.name not in captions]
            if missing:
                captions.update(await self._stored(missing))
            asked = [w for w in job.wants if w.name not in captions]
            limit = asyncio.Semaphore(PARALLEL)
            got = await asyncio.gather(*(self._shared(flow, job, w, limit) for w in asked))
        except Exception as e:
            log_internal_error("cursor-bridge: captions", e)
            got, asked = ["internal error"], list(job.wants[:1])
        for w, result in zip(asked, got, strict=True):
            if isinstance(result, str):
                self._refuse(flow, job, w, result)
                return
            captions[w.name] = result.text
        job.record.captions = captions

    def _refuse(self, flow: http.HTTPFlow, job: _Job, w: Wanted, why: str) -> None:
        status, body, message = vision_failed(DIALECTS[job.client], w.vision.name, why)
        label = f"cursor-bridge [{w.vision.name}]"
        log.warning("%s: %s", label, short(message))
        flow.response = json_response(status, body)
        append_comment(flow, f"{label}: answered {status}: no caption ({short(why)})")

    # ------------------------------------------------------------------ where a caption comes from

    def _remembered(self, name: Name) -> str | None:
        caption = self._memo.get(name)
        if caption is not None:
            self._memo.move_to_end(name)
        return caption

    def _remember(self, name: Name, caption: str) -> None:
        self._memo[name] = caption
        self._memo.move_to_end(name)
        while len(self._memo) > MEMO:
            self._memo.popitem(last=False)

    async def _stored(self, wants: list[Wanted]) -> dict[Name, str]:
        """What the shared store keeps of these captions (a store in memory read on the spot,
        one that does I/O on the store thread within its wait bound; a lost store: none)."""
        life = self._store
        store = life.store
        if store is None:
            return {}

        def read() -> list[object]:
            return [store.get(store_scope(w.vision), STORE_KIND, w.key) for w in wants]

        try:
            values = await life.worker.fetch(read) if life.does_io else read()
        except StoreError:
            return {}
        if isinstance(values, StoreError):
            return {}
        out: dict[Name, str] = {}
        for w, value in zip(wants, values, strict=True):
            text = value.get("caption") if isinstance(value, dict) else None
            if isinstance(text, str) and text:
                out[w.name] = text
                self._remember(w.name, text)
        return out

    def _keep(self, w: Wanted, caption: str) -> None:
        """A new caption in this process's memory and the shared store (queued for the store
        thread when it does I/O)."""
        self._remember(w.name, caption)
        life = self._store
        store = life.store
        if store is None:
            return
        try:
            if life.does_io:
                life.worker.queue.put(
                    store.encode(store_scope(w.vision), STORE_KIND, w.key, {"caption": caption})
                )
                life.worker.wake_now()
            else:
                store.put(store_scope(w.vision), STORE_KIND, w.key, {"caption": caption})
        except (StoreError, ValueError, TypeError) as e:
            log.warning("cursor-bridge [%s]: caption not stored: %s", w.vision.name, short(e))

    # ------------------------------------------------------------------ the vision route's call

    async def _shared(
        self, flow: http.HTTPFlow, job: _Job, w: Wanted, limit: asyncio.Semaphore
    ) -> str | Caption:
        """One call per image at a time in this process: a request that needs a caption being
        asked for waits for that call's result."""
        under_way = self._asking.get(w.name)
        if under_way is not None:
            return await asyncio.shield(under_way)
        future: asyncio.Future[str | Caption] = asyncio.get_running_loop().create_future()
        self._asking[w.name] = future
        try:
            async with limit:
                result = await self._call(flow, job, w)
        except BaseException as e:
            future.set_result(f"internal error ({type(e).__name__})")
            raise
        finally:
            self._asking.pop(w.name, None)
        future.set_result(result)
        return result

    async def _call(self, flow: http.HTTPFlow, job: _Job, w: Wanted) -> str | Caption:
        """The vision route asked (each key of its pool in turn while one is refused or
        rate-limited); its caption kept and counted, or why there is none."""
        try:
            client = DIALECTS[job.client]
            calls = caption_calls(w.vision, w.image, client, job.incoming, environment(), job.asked)
        except ClientError as e:
            return e.message
        why = "no key to try"
        for call in calls:
            scheme, host, port = call.origin or job.origin
            url = f"{scheme}://{host if ':' not in host else f'[{host}]'}:{port}{call.path}"
            headers = http.Headers([(k.encode(), v.encode("latin-1")) for k, v in call.headers])
            request = http.Request.make("POST", url, call.body, headers)
            answer = await self._retry.attempt(flow, request, w.vision.timeout)
            if isinstance(answer, str):
                why = answer
                continue
            got = read_caption(w.vision, answer.status, answer.content)
            ok = isinstance(got, Caption)
            if self._usage is not None and (ok or 200 <= answer.status < 300):
                usage = got.usage if isinstance(got, Caption) else None
                day = time.strftime("%Y-%m-%d", time.gmtime())
                key = LedgerKey(
                    day, w.vision.name, call.model, call.key_name, job.record.client_name or ""
                )
                self._usage.book(Booking(key, Tokens.of(usage)))
            if isinstance(got, Caption):
                self._keep(w, got.text)
                return got
            why = got
            if answer.status not in (401, 403, 429) and answer.status < 500:
                break
        return why
