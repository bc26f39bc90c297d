"""The caption calls (docs/routes.md#images): a vision route asked for each image a text-only
route's request holds, off the flow's hook.

The captions addon (``addon.shell.captions``) hands a ``CaptionJob`` (plain values) to
``Captioner.ask`` and awaits its answer, as a hook hands work to the store thread: the captioner
takes jobs from its queue and answers each with every caption, or the client's 502. A caption
comes from this process's memory (``MEMO``, least recently used out first), else the shared store
(read on the store thread within its wait bound; a lost store: none), else a call of its own to
the vision route (the bridge's own client, ``Retry.attempt_via``: one request, read whole, the
vision route's ``timeout``; ``PARALLEL`` calls at once in the process; one call per image
however many requests ask for it at once; each key of a pool in turn while one is refused or
rate-limited), kept in both and counted in the usage ledger and the metrics under the vision
route (``UsageCounting.book_call``); the job that made a call is told its use (``ask``'s
``spent``), which the client key's limits settle with the flow (``ClientLimits.captioned``)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any, Protocol

from mitmproxy import http

from addon.dialects import DIALECTS
from addon.model import ClientError
from addon.plan import short
from addon.plan.captions import (
    PARALLEL,
    STORE_KIND,
    Caption,
    CaptionJob,
    Refusal,
    Wanted,
    caption_calls,
    read_caption,
    store_scope,
    vision_failed,
)
from addon.plan.limits import CallUse
from addon.report.metrics_labels import Booking
from addon.shell.notes import log, log_internal_error
from addon.shell.option_checks import environment
from addon.shell.outbound.retry import Retry
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.stores.base import StoreError
from addon.stores.ledger import LedgerKey, Tokens

MEMO = 4096
"""Captions this process keeps."""

type Name = tuple[str, str]
type Answer = dict[Name, str] | Refusal
"""Every caption of a job, or the client's 502."""


class Ledger(Protocol):
    def book_call(self, booked: Booking, upstream: str) -> None: ...


class Captioner:
    """The caption calls of every flow (see the module docstring)."""

    def __init__(self, retry: Retry, store: ReasoningStoreLife, ledger: Ledger | None) -> None:
        self._retry = retry
        self._store = store
        self._ledger = ledger
        self._memo: OrderedDict[Name, str] = OrderedDict()
        self._asking: dict[Name, asyncio.Future[str | Caption]] = {}
        """The calls under way, by image: a second job that needs one waits for it."""
        self._queue: (
            asyncio.Queue[tuple[CaptionJob, asyncio.Future[Answer], list[CallUse]]] | None
        ) = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._limit: asyncio.Semaphore | None = None

    def ask(self, job: CaptionJob, spent: list[CallUse] | None = None) -> asyncio.Future[Answer]:
        """The job queued; its answer, to await. ``spent``: told each call the job made (a
        caption another job's call gave, or one remembered, costs it nothing)."""
        loop = asyncio.get_running_loop()
        if self._queue is None or self._limit is None:
            self._queue, self._limit = asyncio.Queue(), asyncio.Semaphore(PARALLEL)
            self._spawn(self._serve())
        future: asyncio.Future[Answer] = loop.create_future()
        self._queue.put_nowait((job, future, spent if spent is not None else []))
        return future

    def done(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._queue = None

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self) -> None:
        queue = self._queue
        assert queue is not None
        while True:
            job, future, spent = await queue.get()
            self._spawn(self._answer(job, future, spent))

    async def _answer(
        self, job: CaptionJob, future: asyncio.Future[Answer], spent: list[CallUse]
    ) -> None:
        try:
            answer = await self._captions(job, spent)
        except Exception as e:
            log_internal_error("cursor-bridge: captions", e)
            answer, _ = vision_failed(
                DIALECTS[job.client], job.wants[0].vision.name, "internal error"
            )
        if not future.done():
            future.set_result(answer)

    async def _captions(self, job: CaptionJob, spent: list[CallUse]) -> Answer:
        captions = {w.name: c for w in job.wants if (c := self._remembered(w.name))}
        missing = [w for w in job.wants if w.name not in captions]
        if missing:
            captions.update(await self._stored(missing))
        asked = [w for w in job.wants if w.name not in captions]
        got = await asyncio.gather(*(self._shared(job, w, spent) for w in asked))
        for w, result in zip(asked, got, strict=True):
            if isinstance(result, str):
                refusal, message = vision_failed(DIALECTS[job.client], w.vision.name, result)
                log.warning("cursor-bridge [%s]: %s", w.vision.name, short(message))
                return refusal
            captions[w.name] = result.text
        return captions

    # ------------------------------------------------------------------ memory and store

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
        """What the shared store keeps of these captions (in memory: read on the spot; a file
        or Redis: on the store thread, within its wait bound)."""
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
        value = {"caption": caption}
        try:
            if life.does_io:
                life.worker.queue.put(store.encode(store_scope(w.vision), STORE_KIND, w.key, value))
                life.worker.wake_now()
            else:
                store.put(store_scope(w.vision), STORE_KIND, w.key, value)
        except (StoreError, ValueError, TypeError) as e:
            log.warning("cursor-bridge [%s]: caption not stored: %s", w.vision.name, short(e))

    # ------------------------------------------------------------------ the vision route's call

    async def _shared(self, job: CaptionJob, w: Wanted, spent: list[CallUse]) -> str | Caption:
        """One call per image at a time: a job that needs a caption being asked for waits for
        that call's result."""
        under_way = self._asking.get(w.name)
        if under_way is not None:
            return await asyncio.shield(under_way)
        future: asyncio.Future[str | Caption] = asyncio.get_running_loop().create_future()
        self._asking[w.name] = future
        result: str | Caption = "internal error"
        try:
            assert self._limit is not None
            async with self._limit:
                result = await self._call(job, w, spent)
        finally:
            self._asking.pop(w.name, None)
            future.set_result(result)
        return result

    async def _call(self, job: CaptionJob, w: Wanted, spent: list[CallUse]) -> str | Caption:
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
            answer = await self._retry.attempt_via(job.via, request, w.vision.timeout)
            if isinstance(answer, str):
                why = answer
                continue
            got = read_caption(w.vision, answer.status, answer.content)
            if isinstance(got, Caption) or 200 <= answer.status < 300:
                usage = got.usage if isinstance(got, Caption) else None
                day = time.strftime("%Y-%m-%d", time.gmtime())
                key = LedgerKey(day, w.vision.name, call.model, call.key_name, job.client_name)
                booked = Booking(key, Tokens.of(usage))
                if self._ledger is not None:
                    self._ledger.book_call(booked, w.vision.upstream)
                t = booked.tokens
                tokens = (t.input, t.cache_read, t.cache_write, t.output)
                spent.append(CallUse(w.vision, call.model, tokens))
            if isinstance(got, Caption):
                self._keep(w, got.text)
                return got
            why = got
            if answer.status not in (401, 403, 429) and answer.status < 500:
                break
        return why
