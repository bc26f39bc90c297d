"""What the metrics (``bridge_metrics``, ``addon.shell.metrics``) count of one flow, and under
which labels, as plain values.

Contract: no mitmproxy, no prometheus_client. Every label value is bounded by the proxy's own
configuration, never by what a client sends: ``route`` a route's name from the routes file,
``client`` a client key's name (``bridge_client_keys``) or ``anonymous``, ``model`` a name a
route lists literally in ``model`` or in ``model_map`` (either side) or ``bridge_models``
names, else ``other`` (a client's 5,000-character model is ``other``: it never becomes a
series). The counts of an answered flow are the usage ledger's for the same flow: both are
fed from one ``Booking`` (``addon.shell.ledger_book``). Names and meanings: docs/deploy.md#metrics."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from addon.config.routes import Route
from addon.plan.fallback import Failure, Reason
from addon.plan.key_pool import link_name, revoked_mark
from addon.report.outcome import FlowReport
from addon.stores.ledger import LedgerKey, Tokens

ANONYMOUS = "anonymous"
"""The ``client`` of a request that carried no client key (none asked for)."""
OTHER = "other"
"""A model (or route) the configuration does not name."""
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write", "reasoning")
"""``cursor_bridge_tokens_total``'s ``kind``: the ledger's columns of the same names."""
CAPTION = "caption"
"""``cursor_bridge_requests_total``'s ``outcome`` of a vision route's caption call (the
bridge's own call for a text-only route's request, counted under the vision route)."""
KEY_STATES = ("ready", "cooling", "revoked")
"""``cursor_bridge_key_pool_keys``'s ``state``."""
BRIDGE_COUNTERS = {
    "repairs": "repairs",
    "restores": "restores",
    "loop_guard_stops": "loop guard answers",
    "not_rewritten": "not rewritten",
    "answers_cut": "answers cut by the upstream",
}
"""``cursor_bridge_<name>_total`` → the ``bridge.stats`` counter it reads
(``addon.report.counters.BridgeState.counters``)."""
_GLOB = re.compile(r"[*?\[]")
_STATUS = re.compile(r"HTTP (\d{3})\b")
_NO_STATUS = {Reason.UNREACHABLE: "unreachable", Reason.TIMED_OUT: "timeout"}
"""An attempt that got no answer: its ``status`` label."""


@dataclass(frozen=True, slots=True)
class Booking:
    """One answered flow as the usage ledger counts it: the row's key and the flow's tokens.
    The metrics count the same value (``addon.shell.ledger_book.UsageCounting.count``)."""

    key: LedgerKey
    tokens: Tokens


def route_models(route: Route) -> frozenset[str]:
    """The models ``route`` names: literal names of its ``model`` list and of its
    ``model_map`` (a glob is no name), and the names it maps to."""
    names = set(route.model or ())
    for pattern, target in route.model_map or ():
        names.update((pattern, target))
    return frozenset(n for n in names if n and not _GLOB.search(n))


class LabelBounds:
    """The label values a configuration allows: its routes' names and their models."""

    def __init__(self, routes: Iterable[Route], models: Iterable[str] = ()) -> None:
        shared = frozenset(m for m in models if m and not _GLOB.search(m))
        self._models = {r.name: route_models(r) | shared for r in routes}

    def route(self, name: str) -> str:
        """A route's name (a key pool's link ``route#KEYNAME``: its route), else ``other``."""
        if name in self._models:
            return name
        head, sep, _ = name.partition("#")
        return head if sep and head in self._models else OTHER

    def model(self, route: str, model: str | None) -> str:
        """``model`` when the route names it (or ``bridge_models`` does), else ``other``."""
        known = self._models.get(route)
        return model if model and known is not None and model in known else OTHER

    @staticmethod
    def client(name: str | None) -> str:
        """A client key's name (names come from the client keys file), else ``anonymous``."""
        return name or ANONYMOUS


@dataclass(frozen=True, slots=True)
class FlowCounts:
    """What one routed flow adds to the metrics."""

    route: str
    client: str
    upstream: str
    model: str
    outcome: str
    tokens: tuple[tuple[str, int], ...] = ()
    """``(kind, n)`` of an answered flow (the ledger's row); empty: the ledger counts none."""
    cost: Decimal | None = None
    """Its cost in USD at the ledger's prices; None: not booked, or the model has no price."""
    upstream_errors: tuple[tuple[str, str], ...] = ()
    """``(route, status)`` of each error an upstream answered (or no answer: ``unreachable``,
    ``timeout``)."""
    fallbacks: tuple[tuple[str, str], ...] = ()
    """``(route, reason)`` of each route of a chain that gave no answer."""


def flow_counts(
    bounds: LabelBounds,
    report: FlowReport,
    *,
    model: str | None,
    client: str | None,
    booking: Booking | None,
    cost: Decimal | None,
    failures: Sequence[Failure] = (),
    served: str | None = None,
) -> FlowCounts:
    """What the flow ``report`` closes counts: ``model`` as sent upstream, ``client`` the
    client key's name, ``booking`` the ledger's row for it (None: the ledger counts none),
    ``cost`` the booking's price, ``failures`` its chain's routes that gave no answer,
    ``served`` the link whose answer the client got (None: no route of a chain answered)."""
    route = bounds.route(report.route)
    errors = [e for f in failures if (e := _upstream_error(bounds, f)) is not None]
    status = report.status
    last = failures[-1] if failures else None
    relayed_again = (  # the last error of a chain is both a failure and the client's answer
        last is not None and last.route == served and _status_of(last) == str(status)
    )
    from_upstream = report.outcome != "rejected" and (not failures or served is not None)
    if status is not None and status >= 400 and from_upstream and not relayed_again:
        errors.append((route, str(status)))
    tokens: tuple[tuple[str, int], ...] = ()
    if booking is not None:
        t = booking.tokens
        tokens = tuple((kind, getattr(t, kind)) for kind in TOKEN_KINDS)
    return FlowCounts(
        route=route,
        client=bounds.client(client),
        upstream=report.upstream or OTHER,
        model=bounds.model(route, model),
        outcome=report.final,
        tokens=tokens,
        cost=cost if booking is not None else None,
        upstream_errors=tuple(errors),
        fallbacks=tuple((bounds.route(f.route), f.reason.name.lower()) for f in failures),
    )


def call_counts(
    bounds: LabelBounds, booking: Booking, upstream: str, cost: Decimal | None
) -> FlowCounts:
    """What one caption call counts (``booking``: the usage ledger's row for it, under the
    vision route; ``upstream``: that route's dialect): a request with the outcome ``caption``,
    its tokens and cost, under the same bounded labels as a flow's."""
    key = booking.key
    route = bounds.route(key.route)
    t = booking.tokens
    return FlowCounts(
        route=route,
        client=bounds.client(key.client),
        upstream=upstream or OTHER,
        model=bounds.model(route, key.model),
        outcome=CAPTION,
        tokens=tuple((kind, getattr(t, kind)) for kind in TOKEN_KINDS),
        cost=cost,
    )


def _status_of(failure: Failure) -> str | None:
    found = _STATUS.match(failure.detail)
    return found[1] if found else None


def _upstream_error(bounds: LabelBounds, failure: Failure) -> tuple[str, str] | None:
    """A chain's failure as an upstream error: the status it answered (``HTTP 429``: its
    detail), or why none came; None for a route the bridge itself passed over."""
    if failure.reason in _NO_STATUS:
        return bounds.route(failure.route), _NO_STATUS[failure.reason]
    if failure.reason in (Reason.ANSWERED_FAILURE, Reason.KEY_REFUSED):
        status = _status_of(failure)
        if status is not None:
            return bounds.route(failure.route), status
    return None


def key_pool_states(
    routes: Iterable[Route], cooling: Callable[[str], bool]
) -> list[tuple[str, str, int]]:
    """``(route, state, keys)`` for every route with a key pool, each state counted (0 too):
    ``revoked`` when the cooldowns (``cooling``) hold its revocation, else ``cooling`` when ``cooling(link)``, else
    ``ready``; ``link`` is ``route#KEYNAME`` (``addon.plan.key_pool.link_name``), its
    revocation the cooldowns' ``revoked:`` entry beside it (``revoked_mark``)."""
    out: list[tuple[str, str, int]] = []
    for route in routes:
        pool = route.key_pool
        if not pool:
            continue
        counts = dict.fromkeys(KEY_STATES, 0)
        for key in pool:
            link = link_name(dataclasses.replace(route, api_key_env=(key,)))
            state = (
                "revoked"
                if cooling(revoked_mark(link))
                else "cooling"
                if cooling(link)
                else "ready"
            )
            counts[state] += 1
        out += [(route.name, state, n) for state, n in counts.items()]
    return out


def bridge_counters(counters: Mapping[str, int]) -> list[tuple[str, int]]:
    """``(metric name, value)`` of the bridge's own counters (``BRIDGE_COUNTERS``)."""
    return [(name, counters.get(key, 0)) for name, key in BRIDGE_COUNTERS.items()]
