"""The usage ledger's shell: its life beside the reasoning store (``bridge_store``: memory, an
SQLite file, Redis), one count per answered flow (``Report.close`` calls ``count``; a ledger
in a file or Redis is written by the store thread, ``addon.shell.store_worker``, within a
second), the calibrated estimate's lesson of each booked answer
(``addon.plan.calibration``), and the ``bridge.usage`` command. A store error costs the flow nothing: one warning line (then quiet
until the ledger answers again). What is counted and how: docs/observability.md#usage-ledger."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Protocol

from mitmproxy import command, ctx, http

from addon.config.options import ConfigError, parse_store
from addon.plan import FlowPlan, short
from addon.plan.calibration import Calibration
from addon.plan.token_counter import learn_answer
from addon.redact import clean
from addon.report.metrics_labels import Booking
from addon.report.outcome import FlowReport
from addon.report.usage_table import genai_prices, lines, table_text
from addon.shell.flows import FlowRun
from addon.shell.notes import log
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.stores.ledger import (
    DIMENSIONS,
    LedgerKey,
    Rows,
    Tokens,
    UsageLedger,
    open_ledger,
    user_label,
)
from addon.stores.reasoning import Notice, StoreError


class UsageCounting:
    name = "cursor_bridge_usage"

    def __init__(self, store: ReasoningStoreLife) -> None:
        self._store = store
        """The reasoning store's life: a Redis ledger shares its connection."""
        self.ledger: UsageLedger = open_ledger("")
        self._path = ""
        self._shared: object | None = None
        """The store's Redis connection the ledger was opened on (None: its own, or none)."""
        self._failing = False
        """A warning was said and the ledger has not answered since."""
        self.metrics: FlowObserver | None = None
        """The metrics addon (``addon.shell.metrics``): told of every routed flow's end."""
        self.limits: LimitsObserver | None = None
        """The client keys' limits (``addon.shell.client_limits``): a reservation settled
        with the same usage."""
        self._last: tuple[float, str] | None = None
        """The last ``bridge.usage`` table read (when, the text): what the next command shows
        at once while the store thread reads a fresh one."""
        self.calibration = Calibration()
        """What the estimate learns from each booked answer (``addon.plan.calibration``):
        the count_tokens addon scales its estimates by it."""

    def configure(self, updated: set[str]) -> None:
        """After the store's own ``configure`` (the addons' order): the ledger goes where
        ``bridge_store`` says (a bad value is the store's to refuse)."""
        if "bridge_store" not in updated:
            return
        try:
            path = parse_store(lambda name: getattr(ctx.options, name)).path
        except ConfigError:
            return
        if path == self._path:
            return
        self._open(path)

    def _open(self, path: str) -> None:
        store = self._store.store
        shared = store.redis if store is not None else None
        try:
            ledger = open_ledger(path, shared=shared, notify=_notice)
        except StoreError as e:
            log.warning("cursor-bridge: usage ledger: %s", clean(e, 300))
            return
        self._store.worker.drain()  # what waits goes to the ledger it was counted for
        self._close()
        self.ledger, self._path, self._shared = ledger, path, shared
        self._store.worker.ledger = None if ledger.in_memory else ledger
        if path:
            log.info("cursor-bridge: usage ledger in %s", clean(ledger.where, 300))

    def _current(self) -> UsageLedger:
        """The ledger, on the reasoning store's Redis connection whenever the store has one
        (mitmproxy may configure this addon before the store opened: then the ledger moves
        onto the store's connection at its first count, so Redis lost is said once)."""
        store = self._store.store
        shared = store.redis if store is not None else None
        if shared is not None and shared is not self._shared and self._path:
            self._open(self._path)
        return self.ledger

    def done(self) -> None:
        """The end: the rows waiting are written (the store's ``done`` ran first and wrote
        them; a ledger without a store's writes them here), then the ledger closed."""
        self._store.worker.close()
        self._close()

    def _close(self) -> None:
        self._store.worker.ledger = None
        try:
            self.ledger.close()
        except StoreError as e:
            log.warning("cursor-bridge: closing the usage ledger: %s", short(e))

    def count(self, run: FlowRun, report: FlowReport, flow: http.HTTPFlow | None = None) -> None:
        """Add an answered flow's usage (a 2xx answer, or any answer that reported usage);
        the metrics (``bridge_metrics``) count every routed flow here, an answered one with
        the same ``Booking`` as the ledger, so that the two cannot drift."""
        booked = booking(run, report, time.time())
        if self.metrics is not None:
            self.metrics.flow_over(flow, run, report, booked)
        if self.limits is not None and flow is not None:
            self.limits.flow_over(flow.id, run, booked)
        if booked is None:
            return
        plan = run.plan
        if plan is not None and plan.unified is not None and report.usage is not None:
            learn_answer(self.calibration, plan.route, plan.unified, report.usage.prompt_tokens)
        self.book(booked)

    def book(self, booked: Booking) -> None:
        """One row's count added to the ledger (a flow's, or a caption call's: the vision
        route's, ``addon.shell.captions``); never the caller's failure."""
        try:
            ledger = self._current()
            if not ledger.in_memory:  # the store thread writes it, within a second
                if self._store.worker.queue.count(booked.key, booked.tokens):
                    self._store.worker.wake()
                return
            ledger.count(booked.key, booked.tokens)
        except Exception as e:  # never the flow's failure
            if not self._failing:
                self._failing = True
                log.warning("cursor-bridge: usage not counted: %s", clean(short(e), 300))
            return
        if self._failing:
            self._failing = False
            log.info("cursor-bridge: usage ledger counting again")

    @command.command("bridge.usage")  # type: ignore[untyped-decorator]
    def usage(self) -> str:
        """Tokens and cost by day, route, model, key name, client and user, from the usage ledger,
        and each client key's limits (also logged; ``scripts/usage`` says the same and groups as
        asked). A ledger in a file or Redis is read on the store thread, never on the event loop
        (a command runs there): the command answers at once with the last table read, and the
        fresh one follows in the log once the store answered."""
        ledger = self._current()
        if ledger.in_memory and not self._store.does_io:
            return self._told(self._table(ledger.rows()))
        read = self._store.worker.submit_after_writes(lambda: self._table(ledger.rows()))
        read.add_done_callback(self._read)
        last = self._last
        if last is None:
            return "usage: reading the ledger on the store thread; the table follows in the log"
        when = time.strftime("%H:%M:%S UTC", time.gmtime(last[0]))
        return f"usage as read at {when} (a fresh table follows in the log):\n{last[1]}"

    def _table(self, rows: Rows) -> str:
        price = genai_prices()
        text = table_text(lines(rows, DIMENSIONS, price), DIMENSIONS, price)
        if self.limits is not None:
            text += "\n\nclient keys' limits\n" + self.limits.limits_text()
        return text

    def _told(self, text: str) -> str:
        self._last = (time.time(), text)
        log.info("cursor-bridge: usage\n%s", text)
        return text

    def _read(self, read: concurrent.futures.Future[str]) -> None:
        """The store thread read the table (``usage``): logged, and kept for the next command."""
        try:
            self._told(read.result())
        except Exception as e:  # a lost store: one line, never a traceback
            log.warning("cursor-bridge: usage not read: %s", clean(short(e), 300))


class FlowObserver(Protocol):
    def flow_over(
        self, flow: http.HTTPFlow | None, run: FlowRun, report: FlowReport, booking: Booking | None
    ) -> None: ...


class LimitsObserver(Protocol):
    def flow_over(self, flow_id: str, run: FlowRun, booking: Booking | None) -> None: ...
    def limits_text(self) -> str: ...


def booking(run: FlowRun, report: FlowReport, now: float) -> Booking | None:
    """What the ledger counts of a flow that is over: its row's key and its tokens; None when
    it counts nothing (not answered with a 2xx and no usage reported, or no plan)."""
    plan = run.plan
    answered = report.status is not None and 200 <= report.status < 300
    if plan is None or not (answered or report.usage is not None):
        return None
    return Booking(ledger_key(plan, now), Tokens.of(report.usage, run.answer.searches))


def ledger_key(plan: FlowPlan, now: float) -> LedgerKey:
    """What a flow is counted under: the day (UTC), its route, the model as sent upstream
    (what the upstream bills and a price table knows: not a ``-thinking`` alias or a
    ``model_map`` name), the route's key name (never its value; empty: the client's own key),
    the client key's name (on every route of a chain: the plan of each carries it), and the
    ``user`` the body said, in a column of its own: a body never names the client."""
    unified = plan.unified
    model = unified.model if unified is not None else plan.defaults.model
    user = unified.params.user if unified is not None else None
    return LedgerKey(
        time.strftime("%Y-%m-%d", time.gmtime(now)),
        plan.route.name,
        model,
        plan.route.key_env or "",  # the key sent (a pool's: the attempt's one)
        plan.client_name,
        user_label(user),
    )


def _notice(notice: Notice) -> None:
    level = logging.WARNING if notice.warning else logging.INFO
    log.log(level, "cursor-bridge: usage ledger: %s", clean(notice.text, 500))
