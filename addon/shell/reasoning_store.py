"""The reasoning store's life: ``bridge_store*`` opens it, new bounds rebound it, the end
of mitmproxy writes what waits (the store thread, ``addon.shell.store_worker``) and closes it.
Flows read the store through ``ReasoningStoreLife.view`` / ``for_flow`` (None: off): the store
itself in memory, else what their request's prefetch read. A Redis store's notices (Redis lost:
one warning; back: one line) are logged here."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from mitmproxy import ctx

from addon.config.options import ConfigError, StoreSettings, parse_store
from addon.plan import short
from addon.plan.caching import secret_of
from addon.plan.fallback import Cooldowns
from addon.redact import clean
from addon.shell.notes import log
from addon.shell.option_checks import OptionChecks
from addon.shell.store_worker import StoreWorker
from addon.stores.prefetch import CooldownView, Fetched, PrefetchedStore
from addon.stores.reasoning import Notice, ReasoningStore, StoreError, StoreView
from addon.transforms.conversation import PROCESS_SECRET

SCRAPE_WAIT = 2.0
"""How long a scrape waits for the store thread's read of a cooldown (else this process's)."""


class ReasoningStoreLife(OptionChecks):
    name = "cursor_bridge_store"

    def __init__(self) -> None:
        self.store: ReasoningStore | None = None
        """The reasoning store (``bridge_store*``), shared by every flow; None: off. Called
        only on the store thread (``worker``) unless it is in memory (``does_io`` False)."""
        self._wanted: StoreSettings | None = None
        self.worker = StoreWorker()
        """The store thread: every SQLite and Redis call (the usage ledger's too)."""
        self.cooldowns: CooldownView | None = None
        """The cooldowns shared by every worker on a Redis store, as this process knows them;
        None: not Redis (each process keeps its own)."""
        self._secret: bytes | None = None
        """The store's secret, as the last prefetch read it."""

    def shared_cooling(self, local: Cooldowns) -> Callable[[str], bool]:
        """Whether a cooldown is set, for a scrape (the metrics server's thread, never the
        event loop): on a Redis store as Redis holds it now, every worker's alike (read on the
        store thread, waited for at most ``SCRAPE_WAIT``); else, or Redis away, ``local``."""
        store = self.store
        backend = store.redis if store is not None else None
        if backend is None:
            return local.cooling
        worker = self.worker

        def cooling(name: str) -> bool:
            try:
                read = worker.submit(lambda: backend.fetch([], time.time(), 0.0, [name]))
                left: float | None = read.result(SCRAPE_WAIT)[1][0]
            except Exception:
                left = None
            return local.cooling(name) if left is None else left > 0

        return cooling

    @property
    def does_io(self) -> bool:
        """Whether the store is a file or Redis (read on the store thread, after a prefetch)."""
        return self.store is not None and bool(self.store.path)

    def view(self, got: Fetched | StoreError) -> StoreView | None:
        """What a flow's plan reads of the store: the store itself in memory; else what the
        request's prefetch read (``got``; a ``StoreError``: nothing, and every restore notes
        it), its writes queued for the store thread."""
        store = self.store
        if store is None or not self.does_io:
            return store
        if isinstance(got, StoreError):
            fetched, error = Fetched(), str(got)
        else:
            fetched, error = got, None
            if got.secret is not None:
                self._secret = got.secret
            if self.cooldowns is not None:
                self.cooldowns.learn(got.lefts)
        secret = self._secret or PROCESS_SECRET
        return PrefetchedStore(
            store, fetched, self.worker.queue, secret, self.worker.wake_now, error
        )

    @property
    def known_secret(self) -> bool:
        """Whether a prefetch read the store's secret (a request with nothing else to read
        then needs no hand-off to the store thread)."""
        return self._secret is not None

    def default_view(self) -> StoreView | None:
        """The store as a flow no prefetch saw reads it: the store itself in memory; for one
        that does I/O nothing read (no store call on the event loop), its writes queued."""
        return self.view(Fetched())

    @property
    def secret(self) -> bytes:
        """The store's secret without a store call: in memory the store's; else as the last
        prefetch read it (the process's until one did)."""
        store = self.store
        if store is not None and not self.does_io:
            return secret_of(store)
        return self._secret or PROCESS_SECRET

    def configure(self, updated: set[str]) -> None:
        if not any(name.startswith("bridge_store") for name in updated):
            return
        try:
            self._open(parse_store(lambda name: getattr(ctx.options, name)))
        except ConfigError as e:
            self.refuse(str(e))

    def done(self) -> None:
        """The end: what waits is written (``StoreWorker.close``), then the store closed."""
        self.worker.close()
        self._close()

    def _close(self) -> None:
        store, self.store = self.store, None
        self.worker.store, self.cooldowns, self._secret = None, None, None
        if store is not None:
            try:
                store.close()
            except Exception as e:
                log.warning("cursor-bridge: closing the reasoning store: %s", short(e))

    def _open(self, wanted: StoreSettings) -> None:
        """Open the reasoning store the options ask for (once per change of them)."""
        if wanted == self._wanted:
            return
        old = self._wanted
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
            self._wanted = wanted
            return
        store = None
        if wanted.size > 0:
            try:
                store = ReasoningStore(
                    wanted.path, max_entries=wanted.size, ttl=wanted.ttl, notify=_log_notice
                )
            except (StoreError, ValueError) as e:
                raise ConfigError(f"bridge_store: {clean(e, 300)}") from None
        self.worker.drain()  # what waits goes to the store it was learned for
        self._close()
        self.store, self._wanted = store, wanted
        self.worker.store = store if store is not None and store.path else None
        if store is not None and store.redis is not None:
            self.cooldowns = CooldownView(self.worker.queue, self.worker.wake_now)
        if store is not None and wanted.path:  # in memory is the default: nothing to say
            log.info("cursor-bridge: %s", clean(store.describe(), 500))


def _log_notice(notice: Notice) -> None:
    """What a Redis store says when Redis is lost (a warning, once) or back (no traceback)."""
    level = logging.WARNING if notice.warning else logging.INFO
    log.log(level, "cursor-bridge: %s", clean(notice.text, 500))
