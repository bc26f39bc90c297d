"""A route's ``fallback`` chain, decided with plain values: which answers fall back, why a route
failed (``Reason``), how long it cools down (``Cooldowns``: this process's, or the store's,
shared by every worker on a Redis store), which route comes next, the line naming what was
tried, what the flow says once its answer came (``told``). What a failed attempt does is
``addon.plan.failed_attempt``'s. Sans-IO on an injected clock; the shell (``addon.shell.outbound.attempts``) sends the attempts.
Rules and limits: docs/routes.md ("Fallbacks")."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from enum import Enum
from typing import Protocol

from addon.config.routes import Route
from addon.dialects import Dialect
from addon.model import ClientError
from addon.plan.flow_plan import FlowPlan
from addon.plan.key_pool import is_link, link_name
from addon.plan.values import error_bytes, tenths
from addon.redact import clean
from addon.report.outcome import Action, FlowReport, Outcome

MAX_RETRY_AFTER = 3600.0
"""A ``Retry-After`` longer than this is taken as this (a route is never skipped for days)."""
COOLING_STATUSES = frozenset({429, 502, 503, 504})
"""Answers that say the upstream is down or overloaded: the route cools down (a 500 may be
this request's own trouble; it falls back without cooling unless it says ``Retry-After``)."""


def falls_back(status: int) -> bool:
    """Whether an upstream's answer with this status goes on to the next route: 429 and 5xx.
    Not a 2xx (an answer), not another 4xx (the request's own fault: the next upstream
    would refuse it too)."""
    return status == 429 or 500 <= status <= 599


def retry_after(value: str | None, now: float, most: float = MAX_RETRY_AFTER) -> float | None:
    """A ``Retry-After`` header's wait in seconds, within ``[0, most]``: delta-seconds or an
    HTTP-date (``now``: the clock's epoch seconds). None: absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > 64:
        return None
    if text.isascii() and text.isdigit():
        return min(float(int(text[:12])), most)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        wait = when.timestamp() - now
    except (OverflowError, ValueError, OSError):
        return None
    return min(max(wait, 0.0), most)


def cooldown_after(route: Route, status: int | None, wait: float | None) -> float | None:
    """How long ``route`` is skipped after a failure: the upstream's ``Retry-After`` when it
    gave one (``wait``), the route's ``cooldown`` for a connection error or timeout
    (``status`` None) and the statuses of ``COOLING_STATUSES``; None: not at all."""
    if wait is not None:
        return wait
    if status is None or status in COOLING_STATUSES:
        return route.cooldown
    return None


class Cooldowns(Protocol):
    """Until when each route is skipped, by route name: ``MemoryCooldowns`` (one process), or
    ``addon.stores.prefetch.CooldownView`` (every worker on one Redis store)."""

    def cool(self, name: str, seconds: float) -> None:
        """Skip the route for ``seconds`` from now (a later end already set is kept)."""

    def left(self, name: str) -> float:
        """Seconds the route is still skipped (0: not cooling)."""

    def cooling(self, name: str) -> bool: ...

    def clear(self, name: str) -> None:
        """The route is no longer skipped (a revoked key its probe accepted)."""


class MemoryCooldowns:
    """``Cooldowns`` of this process, on an injected clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._until: dict[str, float] = {}

    def cool(self, name: str, seconds: float) -> None:
        """Skip the route for ``seconds`` from now (a later end already set is kept)."""
        self._cool_until(name, seconds)

    def _cool_until(self, name: str, seconds: float) -> float | None:
        """``cool``'s table step: the end now kept for ``name`` (None: nothing changed)."""
        if seconds <= 0:
            return None
        until = self.clock() + seconds
        until = max(until, self._until.get(name, until))
        self._until[name] = until
        return until

    def _learn_left(self, name: str, left: float) -> None:
        """Set what another worker knows: ``left`` seconds from now (0: not cooling)."""
        if left > 0:
            self._until[name] = self.clock() + left
        else:
            self._until.pop(name, None)

    def left(self, name: str) -> float:
        """Seconds the route is still skipped (0: not cooling)."""
        until = self._until.get(name)
        if until is None:
            return 0.0
        left = until - self.clock()
        if left <= 0:
            del self._until[name]
            return 0.0
        return left

    def cooling(self, name: str) -> bool:
        return self.left(name) > 0

    def clear(self, name: str) -> None:
        self._until.pop(name, None)


class Reason(Enum):
    """Why a route of a chain gave no answer; the value is the word the tried line uses when
    the failure has no words of its own (``Failure.detail``)."""

    SKIPPED = "skipped"
    """Cooling down: passed over without asking it."""
    UNREACHABLE = "unreachable"
    """No connection: refused, name not resolved, TLS failed, closed before an answer."""
    TIMED_OUT = "timed out"
    """No connection or no first byte within the route's ``timeout``."""
    ANSWERED_FAILURE = "answered a failure"
    """It answered 429 or 5xx (``falls_back``)."""
    KEY_REFUSED = "key refused"
    """A key of a pool answered an error that is the key's own fault (``key_pool.key_verdict``):
    revoked, or passed on when this request revoked one already."""
    NOT_SENDABLE = "request not sendable there"
    """The client's request could not be written for that route."""
    INTERNAL_ERROR = "internal error"
    """A bug of ours while trying it."""


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """An attempt that got no answer at all: ``UNREACHABLE`` or ``TIMED_OUT``, and in a few
    words how (``connection refused``, ``timed out before the first byte``; never a URL)."""

    reason: Reason
    detail: str


@dataclass(frozen=True, slots=True)
class Failure:
    """One route of a chain that did not answer."""

    route: str
    """The route's name."""
    reason: Reason
    detail: str = ""
    """How, in a few words (``connection refused``, ``HTTP 429``); empty: ``reason``'s word."""
    cooling: float | None = None
    """Seconds the route now cools down; None: it does not."""
    revoked: bool = False
    """A key of a pool this request revoked (``key_pool.KeyAction.REVOKE``): one at most."""

    def describe(self) -> str:
        cool = f", cooling down {tenths(self.cooling)} s" if self.cooling else ""
        return f"{self.route} ({self.detail or self.reason.value}{cool})"


def tried_line(failures: Iterable[Failure]) -> str:
    """``primary (connection refused), second (HTTP 429, cooling down 30 s)``."""
    return ", ".join(f.describe() for f in failures)


def first_route(
    chain: tuple[Route, ...], cooldowns: Cooldowns
) -> tuple[Route | None, tuple[Route, ...]]:
    """The route (or key link, ``addon.plan.key_pool``) to try first and the ones skipped
    before it because they cool down, chain order kept. Every one cooling: the route whose
    cooldown ends first (ties: chain order), never a key of a pool: a chain of keys only
    gives None (the client's 429, ``key_pool.all_cooling``)."""
    skipped: list[Route] = []
    for route in chain:
        if not cooldowns.cooling(link_name(route)):
            return route, tuple(skipped)
        skipped.append(route)
    plain = [r for r in chain if not is_link(r)]
    if not plain:
        return None, chain
    soonest = min(plain, key=lambda r: cooldowns.left(r.name))
    return soonest, tuple(r for r in chain if r is not soonest)


def next_route(
    chain: tuple[Route, ...], tried: Iterable[str], cooldowns: Cooldowns
) -> tuple[Route | None, tuple[Route, ...]]:
    """The next route (or key link) of the chain after the ones tried (by ``link_name``): not
    tried yet, not cooling down, in chain order (None when none is left); and the ones not
    tried yet passed over before it because they cool down (the tried line names them)."""
    done = set(tried)
    passed: list[Route] = []
    for route in chain:
        name = link_name(route)
        if name in done:
            continue
        if not cooldowns.cooling(name):
            return route, tuple(passed)
        passed.append(route)
    return None, tuple(passed)


def all_failed(client: Dialect, failures: tuple[Failure, ...]) -> tuple[int, bytes]:
    """The client's error when no route could be reached (the last failure a connection
    error: 502, a timeout: 504), in its dialect, naming the routes tried."""
    timed_out = bool(failures) and failures[-1].reason is Reason.TIMED_OUT
    status = 504 if timed_out else 502
    message = f"cursor-bridge: no upstream answered; tried: {tried_line(failures)}"
    code = "upstream_timeout" if status == 504 else "upstream_unreachable"
    return status, error_bytes(client, ClientError(message, status=status, code=code))


class Level(Enum):
    """How loud a log line is (the shell's logger levels)."""

    INFO = "info"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Line:
    """One log line: its level and its text (names of routes and of key variables, statuses,
    durations, addresses: never a key)."""

    level: Level
    text: str


@dataclass(frozen=True, slots=True)
class LineEdit:
    """What a chain's answer changes in the flow's log line (``FlowReport``)."""

    route: str
    upstream: str | None = None
    """None: left as it is."""
    fields: tuple[tuple[str, str], ...] = ()
    drop: tuple[str, ...] = ()
    """Fields taken off the line."""
    rejected: str = ""
    """Not empty: the flow is rejected, for this reason (its fields only ``fields``)."""
    not_rewritten: str = ""
    """Not empty: the flow's answer was not rewritten, for this reason (if none was given)."""

    def apply(self, report: FlowReport) -> None:
        report.route = self.route
        if self.upstream is not None:
            report.upstream = self.upstream
        if self.rejected:
            report.outcome, report.mode, report.reason = Outcome.REJECTED, "", self.rejected
            report.fields = {}
        report.fields.update(self.fields)
        for name in self.drop:
            report.fields.pop(name, None)
        if self.not_rewritten:
            report.add_outcome(Outcome.NOT_REWRITTEN)
            report.reason = report.reason or clean(self.not_rewritten, 300)


@dataclass(frozen=True, slots=True)
class Told:
    """What a flow of a chain says once its answer came: a comment line, its metadata (merged
    into the flow's), its log line's changes, a log line; ``fell_back``: a fallback answered
    (``Count.FALLBACKS_ANSWERED``); ``passed``: the answer is the bridge's own, in the
    client's dialect already, passed on as it is (``Count.REJECTED``)."""

    comment: str
    meta: dict[str, object]
    edit: LineEdit
    line: Line | None = None
    fell_back: bool = False
    passed: bool = False


def told(
    by: FlowPlan | None, status: int, url: str, failures: tuple[Failure, ...], last: str
) -> Told | None:
    """What the flow says of its answer: ``by`` the plan of the route that served it (its
    request went to ``url``), or, when every route failed, of the route whose error is
    relayed; None: no route could be reached (the bridge's 502 / 504; ``last``: the flow's
    route when nothing was tried). None returned: nothing fell back, nothing to say."""
    tried = tried_line(failures)
    if by is None:
        name = failures[-1].route if failures else last
        meta: dict[str, object] = {"route": name, "action": Action.REJECTED.value}
        meta["fallback"] = {"served_by": None, "tried": _described(failures)}
        reason = f"answered {status}: no upstream reachable"
        edit = LineEdit(name, fields=(("tried", tried),), rejected=reason)
        comment = f"cursor-bridge [{name}]: no upstream reachable; tried: {tried}"
        return Told(comment, meta, edit, passed=True)
    served = link_name(by.route)  # a key of a pool: route#KEYNAME
    if served in {f.route for f in failures if f.reason is not Reason.SKIPPED}:
        said = f"no route answered; tried: {tried}"  # the last error relayed: every route failed
        edit = LineEdit(by.route.name, by.upstream.name, (("tried", tried),), not_rewritten=said)
        meta = {"fallback": {"served_by": None, "tried": _described(failures)}}
        line = Line(Level.WARNING, f"{by.label}: {said}")
        return Told(f"{by.label}: {said}", meta, edit, line)
    if not failures:
        return None
    # Served: the route that served the flow and every route tried before it, with why
    # (names, address, model, statuses: no secret).
    model = by.unified.model if by.unified is not None else ""
    comment = f"{by.label}: served by {served} ({url}, model {model or '?'}); tried: {tried}"
    fallback = {"served_by": served, "upstream_url": url, "model": model}
    meta = {**by.meta(), "fallback": {**fallback, "tried": _described(failures)}}
    fields = [("upstream_url", url), *([("model", model)] if model else []), ("tried", tried)]
    pool_key = by.route.key_env if by.route.key_pool else None
    if pool_key:
        fields.append(("key", pool_key))  # the key that served it: its name
    edit = LineEdit(by.route.name, by.upstream.name, tuple(fields), () if pool_key else ("key",))
    if all(f.reason is Reason.SKIPPED for f in failures):
        return Told(comment, meta, edit)  # routes cooling down passed over: nothing fell back
    line = Line(Level.INFO, f"{by.label}: fallback answered HTTP {status}; tried: {tried}")
    return Told(comment, meta, edit, line, fell_back=True)


def _described(failures: tuple[Failure, ...]) -> list[str]:
    return [f.describe() for f in failures]
