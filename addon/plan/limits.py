"""Limits per client key (``bridge_client_keys``: ``rpm``, ``tpm``, ``max_parallel``,
``budget_usd`` per ``budget_period``), decided from plain values: what a request reserves
(``estimate``, ``ask_for``), which period a budget counts in (``period_of``), what a refusal
says to the client in its own dialect (``refusal``) and what is settled after the answer
(``settled``).

Contract: sans-IO. The store (``addon.stores.limits``) takes an ``Ask`` and answers a
``Verdict`` in one atomic step; it takes a ``Settle`` after the answer. Money is counted in
whole nano-dollars (``NANO`` per US dollar): sums that Redis's Lua (doubles) keeps exact up to
$9,000,000. What a client does with each refusal, and why these statuses: docs/deploy.md
#limits-per-client-key."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from addon.config.client_keys import Limits, Period
from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.model import ClientError
from addon.plan.captions import caption_model
from addon.plan.routing import RouteMatch
from addon.plan.values import error_bytes
from addon.report.outcome import Action, FlowReport

NANO = 1_000_000_000
"""Nano-dollars per US dollar: what the stores count money in."""
WINDOW = 60.0
"""Seconds of the sliding window ``rpm`` and ``tpm`` count over."""
RESERVATION_TTL = 90.0
"""Seconds a reservation holds its parallel slot and its cost without being renewed: a
worker renews its own every ``RENEW_EVERY`` seconds while their flows last; one that died
renews nothing, and its reservations expire by themselves."""
RENEW_EVERY = 1 / 3
"""Of the TTL: how often a live worker renews its reservations."""
PARALLEL_RETRY_AFTER = 1
"""The ``Retry-After`` of a refusal for ``max_parallel`` (seconds): a slot frees when any of
the client's requests ends, which no clock says."""


class Limit(StrEnum):
    """Which limit refused a request (the metric's and the log line's ``limit``)."""

    RPM = "rpm"
    TPM = "tpm"
    MAX_PARALLEL = "max_parallel"
    BUDGET = "budget"
    BUDGET_HELD = "budget_held"
    """What is settled is under the budget, but with the reservations of requests under way
    it is not: a 429, since those may settle for less."""
    UNPRICED = "unpriced"
    """A model no price table and no route ``price`` prices, on a key with a budget."""


RATES = frozenset({Limit.RPM, Limit.TPM, Limit.MAX_PARALLEL, Limit.BUDGET_HELD})
"""Refused with 429 and ``Retry-After``: the client may try again later."""

type Pricer = Callable[[str, int, int, int, int], float | None]
"""US dollars for ``(model, uncached input, cache read, cache write, output)`` tokens; None:
the price table does not know the model."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a request reserves: tokens as the bridge counts them, and their cost."""

    input_tokens: int
    output_tokens: int
    cost_nano: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def output_cap(requested: int | None, route: Route) -> int:
    """The output tokens a request reserves: its own cap (``max_tokens`` and kin), clamped to
    the route's ``reserve_max_output``; no cap: ``reserve_max_output``."""
    most = route.reserve_max_output
    if requested is None or requested <= 0:
        return most
    return min(requested, most)


def usd_of(
    price: Pricer | None,
    route: Route,
    model: str,
    prompt: int,
    cache_read: int,
    cache_write: int,
    output: int,
) -> float | None:
    """The cost of tokens of ``model``: the price table's, else the route's ``price``; None
    when neither prices it (never free)."""
    found = price(model, prompt, cache_read, cache_write, output) if price and model else None
    if found is None and route.price is not None:
        found = route.price.usd(prompt, cache_read, cache_write, output)
    return found


def nano(usd: float) -> int:
    return math.ceil(usd * NANO - 1e-6)


def estimate(
    limits: Limits,
    route: Route,
    asked: str,
    input_tokens: int,
    requested_output: int | None,
    price: Pricer | None,
) -> tuple[Estimate | None, str]:
    """What the request reserves (``output_cap``; its cost only when the key has a budget)
    and the model priced: the one the client ``asked`` for as sent upstream (``model_map``).
    None: the key has a budget and nothing prices the model (``Limit.UNPRICED``)."""
    out = output_cap(requested_output, route)
    model = route.mapped_model(asked) or asked
    if limits.budget_usd is None:
        return Estimate(input_tokens, out), model
    usd = price(model, input_tokens, 0, 0, out) if price is not None and model else None
    if usd is None and route.price is not None:
        usd = route.price.usd(input_tokens, 0, 0, out)
    if usd is None:
        return None, model
    return Estimate(input_tokens, out, nano(usd)), model


def period_of(period: Period, now: float) -> tuple[str, float | None]:
    """The budget period ``now`` is in: its name (part of the store's key) and when it ends
    (epoch seconds; None for ``total``). ``day``: UTC; ``week``: from Monday 00:00 UTC;
    ``month``: the calendar month, UTC."""
    if period == "total":
        return "total", None
    t = datetime.fromtimestamp(now, UTC)
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return f"day:{day:%Y-%m-%d}", (day + timedelta(days=1)).timestamp()
    if period == "week":
        monday = day - timedelta(days=day.weekday())
        return f"week:{monday:%Y-%m-%d}", (monday + timedelta(days=7)).timestamp()
    first = day.replace(day=1)
    nxt = (first + timedelta(days=32)).replace(day=1)
    return f"month:{first:%Y-%m}", nxt.timestamp()


@dataclass(frozen=True, slots=True)
class Ask:
    """One request's reservation, as the store takes it (plain values)."""

    client: str
    rid: str
    """The reservation's id (unique: the flow's id)."""
    now: float
    rpm: int | None
    tpm: int | None
    max_parallel: int | None
    budget_nano: int | None
    period: str
    """The budget period's name (``period_of``); ``""`` without a budget."""
    period_end: float | None
    tokens: int
    cost_nano: int
    ttl: float = RESERVATION_TTL
    slot: bool = True
    """It takes a parallel slot (``max_parallel``); a search inside a flow does not: its flow
    holds one already."""


MIN_TTL, MAX_TTL = 3.0, 3600.0
"""The range of ``bridge_client_limits_ttl``."""


def ask_for(
    client: str, rid: str, limits: Limits, est: Estimate, now: float, ttl: float = RESERVATION_TTL
) -> Ask:
    budget = None if limits.budget_usd is None else nano(limits.budget_usd)
    period, end = ("", None)
    if budget is not None and limits.budget_period is not None:
        period, end = period_of(limits.budget_period, now)
    return Ask(
        client,
        rid,
        now,
        limits.rpm,
        limits.tpm,
        limits.max_parallel,
        budget,
        period,
        end,
        est.tokens,
        est.cost_nano if budget is not None else 0,
        ttl,
    )


@dataclass(frozen=True, slots=True)
class Planned:
    """An admitted client's request, as the limits see it: the model priced (as sent
    upstream), what it reserves, and the store's ``Ask``."""

    model: str
    estimate: Estimate
    ask: Ask


@dataclass(frozen=True, slots=True)
class Given:
    """An admitted client's request as the limits read it: plain values of the flow's record
    (``FlowRecord.client_name``, ``client_route``) and of the keys file."""

    client: str
    limits: Limits
    route: Route
    """The route the client's key was checked for (``FlowRecord.client_route``)."""
    rid: str
    """The reservation's id: the flow's."""
    now: float
    ttl: float = RESERVATION_TTL
    price: Pricer | None = None
    """The price table (read only for a key with a budget)."""
    vision: Route | None = None
    """The route that captions the route's images (``images = false``, ``vision``): its
    caption calls are the flow's to pay."""


def plan_request(given: Given, matched: RouteMatch) -> Planned | Refusal | None:
    """What a request reserves (``matched``: the request's routes and its body's view, matched
    once by the client keys addon: ``FlowRecord.match``); a ``Refusal`` for a model nothing
    prices on a key with a budget; None when the limits do not count it: not the route's chat
    request (a token count, a model list), or a body that is not one."""
    route, limits = given.route, given.limits
    if matched.route is not route or matched.counted is not None:
        return None
    view = matched.view
    decoded, facts = view.decoded(route.client), view.facts(route.client)
    if decoded is None or facts is None:
        return None
    asked = view.model(route.client) or decoded.request.model
    cap = decoded.request.params.max_tokens
    priced = given.price if limits.budget_usd is not None else None
    est, model = estimate(limits, route, asked, facts.input_tokens, cap, priced)
    if est is None:
        return refused(given, matched, Verdict(Limit.UNPRICED), model)
    vision = given.vision
    if limits.budget_usd is not None and vision is not None and facts.images:
        seen = caption_model(vision, asked)  # its caption calls are paid too: never free
        if usd_of(priced, vision, seen, 1, 0, 0, 1) is None:
            return refused(given, matched, Verdict(Limit.UNPRICED), seen, vision)
    return Planned(model, est, ask_for(given.client, given.rid, limits, est, given.now, given.ttl))


def reserved(
    given: Given, matched: RouteMatch, planned: Planned, verdict: Verdict
) -> Refusal | None:
    """The store's verdict on ``planned``: None, admitted; else the client's refusal."""
    if verdict.admitted:
        return None
    return refused(given, matched, verdict, planned.model)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The store's answer to an ``Ask``: admitted (``limit`` None) or the limit that refused,
    how long to wait (rates), and the budget's state after the step."""

    limit: Limit | None = None
    retry_after: float = 0.0
    spent_nano: int | None = None
    """Settled spend plus the open reservations' estimates in the period; None: no budget."""
    parallel: int | None = None
    """Admitted: the parallel slots held with this one (None: no ``max_parallel``)."""
    tokens: int | None = None
    """Admitted: the ``tpm`` window's tokens with this one's estimate (None: no ``tpm``)."""

    @property
    def admitted(self) -> bool:
        return self.limit is None


def settle_at_once(ask: Ask, verdict: Verdict) -> bool:
    """Whether an admitted reservation's settle is to be written, and waited for, as soon as
    the flow ends rather than with the store thread's next write (at most a second later):
    when a limit is near — one more request like it would find a parallel slot, the ``tpm``
    window or the budget full while this one is still held, and be refused until it is
    settled. Far from every limit, a late settle refuses nothing (what it holds is freed or
    replaced by less a second later). docs/deploy.md#limits-per-client-key."""
    if ask.max_parallel is not None and (verdict.parallel or 0) + 1 >= ask.max_parallel:
        return True
    if ask.tpm is not None and (verdict.tokens or 0) + ask.tokens >= ask.tpm:
        return True
    budget, spent = ask.budget_nano, verdict.spent_nano
    return budget is not None and (spent or 0) + ask.cost_nano >= budget


@dataclass(frozen=True, slots=True)
class Settle:
    """A reservation settled with what the upstream reported (or what was delivered)."""

    client: str
    rid: str
    now: float
    period: str
    period_end: float | None
    tokens: int
    """The reservation's tokens replaced by these in the ``tpm`` window."""
    cost_nano: int
    """Added to the period's spend; the reservation's estimate is let go."""


def used_cost(
    limits: Limits,
    route: Route,
    model: str,
    price: Pricer | None,
    tokens: tuple[int, int, int, int],
    reserved: Estimate,
) -> int:
    """What a finished request spent (``tokens``: uncached input, cache read, cache write,
    output as the upstream reported): its price, else the route's; a model that lost its
    price since the reservation (a reload) costs what was reserved, never nothing."""
    if limits.budget_usd is None:
        return 0
    usd = usd_of(price, route, model, *tokens)
    return reserved.cost_nano if usd is None else nano(usd)


@dataclass(frozen=True, slots=True)
class Refusal:
    """What the client gets: status, headers, a body in its dialect, and the log line's
    words (the client key's name and the limit, never the key)."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    message: str
    limit: Limit = field(default=Limit.RPM)
    meta: dict[str, str] = field(default_factory=dict)
    """The flow's metadata (``refused``): the route, the action, the limit, the message."""
    line: FlowReport | None = None
    """The flow's log line (``refused``): names the client key's name and the limit."""


def refusal(
    route: Route,
    client: str,
    limits: Limits,
    verdict: Verdict,
    model: str,
    priced: Route | None = None,
) -> Refusal:
    """A refused request's answer in the route's client dialect. A rate (``rpm``, ``tpm``,
    ``max_parallel``): 429 with ``Retry-After`` (whole seconds, at least 1), which every
    client waits on and retries. A budget (spent, or a model nothing prices): 402 with
    ``x-should-retry: false`` — no client this project serves retries a 402 (the Stainless
    SDKs and Claude Code retry 408, 409, 429 and 5xx, and honour ``x-should-retry``; Codex CLI
    429 and 5xx; OpenCode's AI SDK 408, 409, 429, 5xx; Gemini CLI 429, 499, 5xx), while a 429
    would be retried until the period ends."""
    limit = verdict.limit or Limit.RPM
    dialect = DIALECTS[route.client]
    if limit in RATES:
        wait = max(1, math.ceil(verdict.retry_after))
        what = _what(limit, limits)
        name = "budget" if limit is Limit.BUDGET_HELD else limit.value
        message = (
            f"cursor-bridge: client key {client!r} is over its {name} limit ({what}); "
            f"try again in {wait} s"
        )
        e = ClientError(message, status=429, code="rate_limit_exceeded")
        return Refusal(429, (("retry-after", str(wait)),), error_bytes(dialect, e), message, limit)
    if limit is Limit.UNPRICED:
        message = (
            f"cursor-bridge: client key {client!r} has a budget, and the model {model[:200]!r} "
            f"has no price (not in the price table, and route {(priced or route).name!r} sets no price): "
            f"refused, never counted as free"
        )
    else:
        period = limits.budget_period or "total"
        per = "in total" if period == "total" else f"per {period}, UTC"
        message = (
            f"cursor-bridge: client key {client!r} has spent its budget (${limits.budget_usd:g} {per})"
            + ("" if period == "total" else "; it renews when the period does")
        )
    e = ClientError(message, status=402, code="insufficient_quota")
    return Refusal(402, (("x-should-retry", "false"),), error_bytes(dialect, e), message, limit)


def refused(
    given: Given, matched: RouteMatch, verdict: Verdict, model: str, priced: Route | None = None
) -> Refusal:
    """``refusal``, with what the flow says of it: its metadata and its one log line (the
    client key's name and the limit, never the key; a path without its query)."""
    route = given.route
    r = refusal(route, given.client, given.limits, verdict, model, priced)
    limit = r.limit.value
    meta = {"route": route.name, "action": Action.REJECTED.value, "limit": limit}
    line = matched.refused(route, r.status, r.message)
    line.fields.update(client_name=given.client, limit=limit)
    return replace(r, meta={**meta, "error": r.message}, line=line)


# --------------------------------------------------------------------------- a flow's own calls
# The searches the bridge runs for an answer and the caption calls a text-only route needs
# count against the client key of the flow that needed them (docs/deploy.md
# #limits-per-client-key): a search is one request in the ``rpm`` window and its price in the
# budget, reserved before it runs and refused (the model and the client see the search's
# error) when the key has neither left; a caption call's tokens and cost are settled with its
# flow's own reservation.

SEARCH_REFUSED: dict[Limit, str] = {
    Limit.RPM: "too_many_requests",
    Limit.BUDGET_HELD: "too_many_requests",
    Limit.BUDGET: "unavailable",
}
"""A refused search's error code (``Searched.error``: Anthropic's ``web_search_tool_result_error``
codes, which Claude Code shows): a rate, ``too_many_requests``; a spent budget, ``unavailable``
(Anthropic's list has no budget code)."""


def search_ask(
    client: str,
    rid: str,
    limits: Limits,
    price_usd: float,
    now: float,
    ttl: float = RESERVATION_TTL,
) -> Ask | None:
    """One search the bridge is about to run for a flow of ``client``: one request in the
    ``rpm`` window (no tokens, no parallel slot) and ``price_usd`` in the budget; None when the
    key has neither an ``rpm`` nor a budget (nothing to count)."""
    if limits.rpm is None and limits.budget_usd is None:
        return None
    est = Estimate(0, 0, nano(price_usd) if price_usd > 0 else 0)
    ask = ask_for(
        client,
        rid,
        Limits(rpm=limits.rpm, budget_usd=limits.budget_usd, budget_period=limits.budget_period),
        est,
        now,
        ttl,
    )
    return replace(ask, slot=False)


def search_refused(verdict: Verdict) -> str | None:
    """The store's verdict on a search: None, it runs; else the search's error code."""
    if verdict.admitted or verdict.limit is None:
        return None
    return SEARCH_REFUSED.get(verdict.limit, "too_many_requests")


def search_settle(ask: Ask, now: float, ran: bool) -> Settle:
    """A search's reservation settled: its price spent when the backend answered (``ran``),
    nothing when it failed; the request stays in the ``rpm`` window either way."""
    return Settle(
        ask.client, ask.rid, now, ask.period, ask.period_end, 0, ask.cost_nano if ran else 0
    )


@dataclass(frozen=True, slots=True)
class CallUse:
    """A caption call a flow needed: the vision route, the model it was sent, the tokens the
    vision upstream reported (uncached input, cache read, cache write, output)."""

    route: Route
    model: str
    tokens: tuple[int, int, int, int]


def calls_used(limits: Limits, price: Pricer | None, calls: tuple[CallUse, ...]) -> tuple[int, int]:
    """The tokens and cost (nano-dollars) of a flow's caption calls, settled with the flow
    (``tpm``, budget): each priced as a request of its vision route (the price table, else
    the route's ``price``; neither: nothing — ``plan_request`` refused such a flow on a key
    with a budget before any call, so only a price lost to a reload since gets here)."""
    tokens = sum(sum(c.tokens) for c in calls)
    cost = 0
    if limits.budget_usd is not None:
        for c in calls:
            usd = usd_of(price, c.route, c.model, *c.tokens)
            cost += nano(usd) if usd is not None else 0
    return tokens, cost


def _what(limit: Limit, limits: Limits) -> str:
    """A rate limit in words, for a refusal's message."""
    if limit is Limit.RPM:
        return f"{limits.rpm} requests per minute"
    if limit is Limit.TPM:
        return f"{limits.tpm} tokens per minute"
    if limit is Limit.MAX_PARALLEL:
        return f"{limits.max_parallel} requests at once"
    return f"${limits.budget_usd:g}, with its requests under way"
