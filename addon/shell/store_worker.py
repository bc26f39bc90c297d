"""The store thread: every call to a store that does I/O (SQLite, Redis) runs here, never on
mitmproxy's event loop, so that a slow or lost store slows no stream.

- ``StoreWorker``: one thread. The hooks and the stream callable add what they learn to its
  ``WriteQueue`` (reasoning values, usage rows, cooldowns, the client limits' settles:
  ``settle``); the thread writes it all, each kind in one pipeline (one SQLite transaction),
  at most every ``FLUSH_EVERY`` second and at the end (``close``, from the store's ``done``). ``fetch`` runs a request's prefetch there and
  waits at most ``WAIT_MOST`` for it (a circuit: after a wait ran out, no request waits until
  ``PROBE_EVERY`` has passed). ``call``: any other store step, awaited off the loop.
- ``Prefetch``: the async request hook (before the fallbacks' and the rewrite's): what the
  request may need before ``decide`` — the reasoning values its history may restore, under
  every scope its route chain may send it with, and its chain's cooldowns — in one round trip,
  kept on the flow's record (``FlowRecord.store_view``) where ``decide`` reads it. The
  prefetches queued together on the thread (requests that came at once) go in one pipeline. On Redis a
  client key's reserve rides first in that pipeline (``Prefetch.reserve``, called by the client
  limits' hook, which runs first): still one round trip before ``decide``.

Why a thread and not ``redis.asyncio``: docs/architecture.md#the-store-thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from mitmproxy import http

from addon.config.routes import Route, fallback_chain
from addon.plan.conditions import RequestView
from addon.plan.count_tokens import count_calibration_key
from addon.plan.key_pool import link_name, links, revoked_mark
from addon.plan.key_probe import probed_mark
from addon.redact import clean
from addon.shell.flows import Flows
from addon.shell.notes import log, log_internal_error
from addon.shell.settings import BridgeSettings
from addon.stores.base import CONNECT_TIMEOUT, RETRY_FIRST, StoreError
from addon.stores.prefetch import CooldownView, Fetched, restore_keys, scoped_keys
from addon.stores.reasoning import ReasoningStore, Scope, StoreView
from addon.stores.write_behind import FLUSH_EVERY, Batch, Settles, Settling, WriteQueue
from addon.transforms.conversation import PROCESS_SECRET
from addon.transforms.thinking import resolve_model

if TYPE_CHECKING:
    from addon.plan.limits import Ask, Settle, Verdict
    from addon.stores.ledger import UsageLedger
    from addon.stores.limits import RedisLimits
    from addon.stores.redis_backend import FetchAsk, Read

WAIT_MOST = CONNECT_TIMEOUT
"""Seconds a request waits for its prefetch at most (then goes on as if the store were lost)."""
PROBE_EVERY = RETRY_FIRST
"""Seconds no request waits for the store thread after one waited ``WAIT_MOST`` in vain."""
DRAIN_WAIT = 10.0
"""Seconds ``close`` (mitmproxy's ``done``) waits for the last write."""

type Wanted = tuple[ReasoningStore, list[str], list[str], list[str]]
"""What a request's prefetch reads: the store, full store keys, cooldown names, the keys of
the calibration's ratios."""

_STOP = object()
_NOW = object()


class _Job:
    __slots__ = ("fn", "future")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return  # its waiter gave up before it started
        try:
            self.future.set_result(self.fn())
        except BaseException as e:
            self.future.set_exception(e)


class _Fetch(_Job):
    """A request's prefetch (``StoreWorker.submit_fetch``): run together with the prefetches
    queued right behind it, in one pipeline (``ReasoningStore.fetch_many``), then ``then``
    on what it read, on the store thread."""

    __slots__ = ("ask", "store", "then")

    def __init__(
        self, store: ReasoningStore, ask: FetchAsk, then: Callable[[Read | StoreError], Any]
    ) -> None:
        super().__init__(lambda: then(store.fetch_many([ask])[0]))
        self.store, self.ask, self.then = store, ask, then


FETCH_BATCH = 64
"""Prefetches sent in one pipeline at most (those queued together on the store thread)."""


def _fetch_together(batch: list[_Fetch]) -> None:
    """Each prefetch's read in one round trip, then each one's ``then`` (its own error its own)."""
    live = [job for job in batch if job.future.set_running_or_notify_cancel()]
    if not live:
        return
    try:
        reads = live[0].store.fetch_many([job.ask for job in live])
    except BaseException as e:
        for job in live:
            job.future.set_exception(e)
        return
    for job, read in zip(live, reads, strict=True):
        try:
            job.future.set_result(job.then(read))
        except BaseException as e:
            job.future.set_exception(e)


class StoreWorker:
    """The store thread and what waits for it (see the module docstring)."""

    def __init__(
        self,
        flush_every: float = FLUSH_EVERY,
        wait_most: float = WAIT_MOST,
        probe_every: float = PROBE_EVERY,
    ) -> None:
        self.queue = WriteQueue()
        self.flush_every, self.wait_most, self.probe_every = flush_every, wait_most, probe_every
        self.store: ReasoningStore | None = None
        """Where the queue's reasoning values and cooldowns go (set by the store's life)."""
        self.ledger: UsageLedger | None = None
        """Where the queue's usage rows go (set by the ledger's life)."""
        self._jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._closed = False
        self._circuit_until = 0.0
        self._failing = False
        self._dropped_said = 0

    # ------------------------------------------------------------------ the loop's side

    def wake(self, now: bool = False) -> None:
        """Something waits to be written: the thread sleeps no longer than ``flush_every``;
        ``now``: it writes as soon as it is free (reasoning values, cooldowns: another worker
        may need them for the conversation's next turn)."""
        self._jobs.put(_NOW if now else None)
        self._started()

    def wake_now(self) -> None:
        self.wake(now=True)

    def settle(
        self, store: Settles, done: Settle, *, now: bool = False
    ) -> concurrent.futures.Future[int | None]:
        """A flow's reservation settled with the next write, no round trip of its own (the
        settles that waited go in one pipeline); ``now``: as soon as the thread is free (a
        limit is near: ``addon.plan.limits.settle_at_once``). The future: done once written,
        with the period's spend after it (None: not known, or not written: logged). Once the
        thread is closed: written at once, where it is handed."""
        future: concurrent.futures.Future[int | None] = concurrent.futures.Future()
        was_empty = self.queue.settle(store, done, future.set_result)
        if self._closed:
            self._flush()
        elif now or was_empty:
            self.wake(now=now)
        return future

    def submit[T](self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        """``fn`` queued for the thread; once the thread is closed (``close``: mitmproxy's
        ``done``), run at once where it is handed, so that no caller waits for it forever."""
        return self._submitted(_Job(fn))

    def submit_fetch[T](
        self, store: ReasoningStore, ask: FetchAsk, then: Callable[[Read | StoreError], T]
    ) -> concurrent.futures.Future[T]:
        """A request's prefetch (``ask``) queued for the thread, ``then(what it read)`` run
        there: the prefetches queued together go in one pipeline (one round trip for all)."""
        return self._submitted(_Fetch(store, ask, then))

    def _submitted(self, job: _Job) -> concurrent.futures.Future[Any]:
        if self._closed:
            job.run()
            return job.future
        self._jobs.put(job)
        self._started()
        return job.future

    def submit_after_writes[T](self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        """``fn`` on the store thread once what waits to be written is written (a read of the
        ledger that must hold every flow counted so far: ``bridge.usage``)."""

        def written_then() -> T:
            self._flush()
            return fn()

        return self.submit(written_then)

    def call[T](self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        """``await worker.call(fn, *args)``: ``fn(*args)`` on the store thread, after what is
        already queued there; its result or its exception. No wait bound: the caller's."""
        return asyncio.wrap_future(self.submit(lambda: fn(*args)))

    async def fetch[T](self, fn: Callable[[], T]) -> T | StoreError:
        """``fn()`` on the store thread, waited for at most ``wait_most`` seconds; the
        ``StoreError`` to note when it failed, ran out of time or the circuit is open (a wait
        ran out less than ``probe_every`` ago: nothing is waited for until then)."""
        return await self.bounded(lambda: self.submit(fn))

    async def bounded[T](
        self, submit: Callable[[], concurrent.futures.Future[T]]
    ) -> T | StoreError:
        """What ``submit`` queued, waited for as ``fetch`` says."""
        if time.monotonic() < self._circuit_until:
            return StoreError("the store did not answer in time: not asked until it may again")
        future = submit()
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.wait_most)
        except TimeoutError:
            self._circuit_until = time.monotonic() + self.probe_every
            log.warning(
                "cursor-bridge: the store did not answer in %g s: requests go on without it "
                "(asked again in %g s)",
                self.wait_most,
                self.probe_every,
            )
            return StoreError(f"the store did not answer in {self.wait_most:g} s")
        except StoreError as e:
            return e

    def drain(self, timeout: float = DRAIN_WAIT) -> None:
        """Write what waits now, and wait for it (a store or ledger about to be replaced)."""
        if self._thread is None or not self._thread.is_alive():
            self._flush()
            return
        try:
            self.submit(self._flush).result(timeout)
        except concurrent.futures.TimeoutError:
            log.warning("cursor-bridge: the store's last writes did not end in %g s", timeout)

    def close(self, timeout: float = DRAIN_WAIT) -> None:
        """The end (mitmproxy's ``done``): what waits is written, the thread ends."""
        self._closed = True
        thread = self._thread
        if thread is None or not thread.is_alive():
            self._flush()
            return
        self._jobs.put(_STOP)
        thread.join(timeout)
        if thread.is_alive():
            log.warning("cursor-bridge: the store's last writes did not end in %g s", timeout)

    def _started(self) -> None:
        if self._thread is not None or self._closed:
            return
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="cursor-bridge-store", daemon=True
                )
                self._thread.start()

    # ------------------------------------------------------------------ the thread's side

    def _run(self) -> None:
        last = time.monotonic()
        taken: object = None
        while True:
            if taken is not None:
                item, taken = taken, None
            else:
                wait = None
                if len(self.queue):
                    wait = max(0.0, last + self.flush_every - time.monotonic())
                try:
                    item = self._jobs.get(timeout=wait)
                except queue.Empty:
                    item = None
            if item is _STOP:
                self._flush()
                return
            if isinstance(item, _Fetch):
                taken = self._fetches(item)
            elif isinstance(item, _Job):
                item.run()
            if len(self.queue) and (item is _NOW or time.monotonic() - last >= self.flush_every):
                self._flush()
                last = time.monotonic()

    def _fetches(self, first: _Fetch) -> object:
        """``first`` with the prefetches queued right behind it on the same store, in one
        round trip; the next other item taken off the queue (to run next, in its turn)."""
        batch, taken = [first], None
        while len(batch) < FETCH_BATCH:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                break
            if not isinstance(item, _Fetch) or item.store is not first.store:
                taken = item
                break
            batch.append(item)
        _fetch_together(batch)
        return taken

    def _flush(self) -> None:
        """Everything waiting, written: each kind in one call (one pipeline, one transaction)."""
        batch = self.queue.take()
        if not batch:
            return
        if batch.settles:
            _settle_all(batch.settles)
        store, ledger = self.store, self.ledger
        try:
            if store is not None:
                store.put_many(batch.puts)
                _share_cools(store, batch)
                store.add_ratios(batch.ratios)
        except Exception as e:  # reasoning values lost: a later turn restores less
            self._fail("reasoning store", e)
        try:
            if ledger is not None:
                ledger.count_many(batch.rows)
        except Exception as e:
            self.queue.give_back(Batch(rows=batch.rows))  # money: tried again
            self._fail("usage ledger", e)
        else:
            if self._failing:
                self._failing = False
                log.info("cursor-bridge: the store's writes go through again")
        if self.queue.dropped > self._dropped_said:
            log.warning(
                "cursor-bridge: %d reasoning values dropped unwritten (too many waited)",
                self.queue.dropped - self._dropped_said,
            )
            self._dropped_said = self.queue.dropped

    def _fail(self, what: str, e: Exception) -> None:
        if not self._failing:
            self._failing = True
            log.warning("cursor-bridge: %s: not written: %s", what, clean(str(e), 300))


def _settle_all(settles: list[Settling]) -> None:
    """The settles that waited, each store's in one call (one pipeline); each one's waiter
    told. One that fails is not tried again (it might count twice): its reservation expires
    by itself."""
    by_store: dict[int, tuple[Settles, list[Settling]]] = {}
    for item in settles:
        by_store.setdefault(id(item[0]), (item[0], []))[1].append(item)
    for store, items in by_store.values():
        spends: list[int | None] = [None] * len(items)
        try:
            spends = store.settle_many([done for _, done, _ in items])
        except Exception as e:
            log.warning(
                "cursor-bridge: client limits: %d not settled (their reservations expire by "
                "themselves): %s",
                len(items),
                clean(str(e), 300),
            )
        for (_, _, told), spent in zip(items, spends, strict=True):
            if told is not None:
                told(spent)


def _share_cools(store: ReasoningStore, batch: Batch) -> None:
    redis_backend = store.redis
    if redis_backend is None or not batch.cools:
        return
    now = time.time()
    redis_backend.cool_many(
        [(n, None if until is None else until - now) for n, until in batch.cools.items()]
    )


class StoreLife(Protocol):
    """What the prefetch reads of the store's life (``addon.shell.reasoning_store``)."""

    store: ReasoningStore | None
    worker: StoreWorker
    cooldowns: CooldownView | None

    @property
    def does_io(self) -> bool: ...
    @property
    def known_secret(self) -> bool: ...
    def view(self, got: Fetched | StoreError) -> StoreView | None: ...
    def default_view(self) -> StoreView | None: ...


class Prefetch:
    """The async request hook that fetches what ``decide`` will read (see the module
    docstring); nothing for a store in memory (it is read on the spot, no I/O)."""

    name = "cursor_bridge_store_prefetch"

    def __init__(self, settings: BridgeSettings, life: StoreLife, flows: Flows) -> None:
        self._settings = settings
        self._life = life
        self._flows = flows
        flows.default_store_view = life.default_view

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        record = self._flows.get(flow.id)
        if record is not None and record.store_view is not None:
            return None  # fetched already, with the client limits' reserve (``reserve``)
        wanted = self._wanted(flow)
        if wanted is None:
            return None
        if not any(wanted[1:]) and self._life.known_secret:
            # Nothing to read (a first turn on a route without cooldowns): no hand-off.
            self._flows.open(flow.id).store_view = self._life.view(Fetched())
            return None
        return self._fetch(flow.id, *wanted)

    async def reserve(self, flow: http.HTTPFlow, limits: RedisLimits, ask: Ask) -> Verdict:
        """The client limits' reserve on Redis (``ClientLimits.request``, which runs before
        this hook), sent first in this request's prefetch pipeline: one round trip for both,
        one job on the store thread, awaited in full (a wait that ran out must not lead to a
        second reserve). What was read is kept on the flow's record; ``request`` then reads
        nothing again. Nothing to prefetch: the reserve alone."""
        wanted = self._wanted(flow)
        if wanted is None:
            return await self._life.worker.call(limits.reserve, ask)
        store, keys, names, ratios = wanted
        first = limits.reserve_step(ask)

        def both(fetched: Read | StoreError) -> tuple[Fetched | StoreError, Verdict | Exception]:
            try:
                if isinstance(fetched, StoreError):
                    raise fetched
                secret = store.secret
                values, lefts, answer, read = fetched
            except StoreError as e:  # the reserve's fate unknown: an expiring one at most
                return e, e
            got = Fetched(
                dict(zip(keys, values, strict=True)),
                dict(zip(names, lefts, strict=True)),
                secret,
                read,
            )
            try:
                return got, limits.verdict(ask, answer)
            except Exception as e:
                return got, e

        ask_both = (keys, names, first, ratios)
        submitted = self._life.worker.submit_fetch(store, ask_both, both)
        got, verdict = await asyncio.wrap_future(submitted)
        self._flows.open(flow.id).store_view = self._life.view(got)
        if isinstance(verdict, Exception):
            raise verdict
        return verdict

    def _wanted(self, flow: http.HTTPFlow) -> Wanted | None:
        """The store and what this request's prefetch reads of it (full store keys, cooldown
        names, the calibration's ratios of a token count: ``count_calibration_key``); None:
        nothing to fetch (no store doing I/O, no route, an answered flow)."""
        life = self._life
        store = life.store
        if store is None or not life.does_io or flow.response is not None:
            return None
        if flow.error is not None or not flow.live:
            return None
        try:
            settings = self._settings.settings
            match = self._flows.route_match(flow, settings)
            if match.outside:
                return None
            if match.counted is not None:  # a token count: its ratios, nothing to restore
                key = count_calibration_key(match.counted, match.view.body)
                return store, [], [], [key] if key is not None else []
            route = match.route
            if route is None:
                return None
            chain = fallback_chain(route, settings.routes)
            keys = _reasoning_keys(chain, match.view, route, flow.request.host, settings.models)
            names = _cooldown_names(chain) if life.cooldowns is not None else []
        except Exception as e:
            log_internal_error("cursor-bridge: store prefetch", e)
            return None
        return store, keys, names, []

    async def _fetch(
        self,
        flow_id: str,
        store: ReasoningStore,
        keys: list[str],
        names: list[str],
        ratios: list[str],
    ) -> None:
        def read(fetched: Read | StoreError) -> Fetched:
            if isinstance(fetched, StoreError):
                raise fetched
            secret = store.secret
            values, lefts, _, got = fetched
            return Fetched(
                dict(zip(keys, values, strict=True)),
                dict(zip(names, lefts, strict=True)),
                secret,
                got,
            )

        worker, ask = self._life.worker, (keys, names, None, ratios)
        got = await worker.bounded(lambda: worker.submit_fetch(store, ask, read))
        self._flows.open(flow_id).store_view = self._life.view(got)


def _reasoning_keys(
    chain: tuple[Route, ...], view: RequestView, route: Route, host: str, catalogue: tuple[str, ...]
) -> list[str]:
    """Every full store key the restore may read for this request, on any route of its chain."""
    decoded = view.decoded(route.client)
    if decoded is None:
        return []
    wanted = restore_keys(decoded.request)
    if not wanted:
        return []
    asked = view.model(route.client) or decoded.request.model
    scopes = [
        Scope.of(r.name, r.target.host if r.target is not None else host, model)
        for r in chain
        for model in _models_sent(r, asked, catalogue)
    ]
    return scoped_keys(scopes, wanted)


def _models_sent(route: Route, asked: str, catalogue: tuple[str, ...]) -> list[str]:
    """The model names ``decide`` may send ``asked`` as on ``route`` (``-thinking`` resolved,
    then the route's ``model_map``): the store's scope is the model as sent."""
    try:
        model, _ = resolve_model(asked, catalogue)
    except Exception:  # decide refuses it: nothing to restore
        return [asked]
    mapped = route.mapped_model(model)
    return list(dict.fromkeys(m for m in (asked, model, mapped) if m))


def _cooldown_names(chain: tuple[Route, ...]) -> list[str]:
    """Every cooldown the fallbacks and key pools read for this chain: each link's, its
    revocation's and its probe's, and each route's own (the set is the secret's to order,
    not to choose: any secret gives the same names)."""
    names: dict[str, None] = {}
    for r in links(chain, PROCESS_SECRET, ""):
        name = link_name(r)
        for n in (name, revoked_mark(name), probed_mark(name), r.name):
            names[n] = None
    return list(names)
