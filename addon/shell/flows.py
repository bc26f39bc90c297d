"""What the bridge holds for one flow (``FlowRecord``) and the one table of them (``Flows``).

A record opens when an addon first needs one for a flow and ends once (``Flows.end``): when
the bridge is done with the flow (``Report``: its answer or error, or at once when it is passed
or rejected) or when the bound forgets the oldest. Ending it frees all it held, its relay leg
and its secrets included: one bound, one cleanup, so nothing a flow held outlives it."""

from __future__ import annotations

import hmac
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from secrets import token_urlsafe

from mitmproxy import http

from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan import (
    AnswerState,
    FlowPlan,
    Incoming,
    RouteCredentials,
    RouteMatch,
    match_request,
)
from addon.plan.count_tokens import CountUpstream
from addon.plan.fallback import Failure
from addon.plan.list_shapes import Shape
from addon.plan.model_lists import ListRequest
from addon.redact import NO_SECRETS, SecretForms, Secrets
from addon.report.counters import KeptBytes
from addon.report.outcome import FlowReport, Outcome
from addon.shell.host_filter import outside_proxy_hosts
from addon.shell.outbound.relay import Leg
from addon.stores.reasoning import StoreView

KEEP_STREAM_BYTES = 1024 * 1024
"""How much of a rewritten stream's bytes (upstream's, client's) is kept for the content view."""

MAX_FLOWS = 10_000
"""Flows held at once; past this the oldest record ends (a leak guard: a flow whose end the
bridge never sees)."""


@dataclass(slots=True)
class FlowRun:
    """A rewritten flow's run: from the rewrite to the flow's end."""

    report: FlowReport
    """What the flow's log line and mark will say."""
    plan: FlowPlan | None = None
    """What ``decide`` settled; None once the answer is passed on as it comes. The loop
    guard's second request, or the route of a chain that answered, replaces it."""
    answer: AnswerState = field(default_factory=AnswerState)
    """What changes while the answer is read (notes, the stream's processor and parser …)."""
    client_bytes: KeptBytes | None = None
    """A rewritten stream's first bytes as its client got them (``keep_originals``)."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a chain: its route, the plan that reads its answer, the request sent."""

    route: Route
    plan: FlowPlan
    """The plan that reads this attempt's answer (``decide`` for its route)."""
    request: http.Request
    """The request as this route is sent it (address, headers, body: what the view shows)."""


@dataclass(slots=True)
class Attempts:
    """A flow on a route with a ``fallback`` chain (``addon.shell.outbound.attempts``)."""

    route: Route
    """The route picked first (the first of the chain not cooling down)."""
    chain: tuple[Route, ...]
    """The matched route and its ``fallback`` routes, in order (``routes.fallback_chain``)."""
    original: http.Request
    """The client's request as it came: each next route's request is written from it."""
    failures: list[Failure]
    """The routes that did not answer, in order, with why (the skipped ones first)."""
    tried: list[str]
    """Names of the routes tried or passed over."""
    incoming: Incoming | None = None
    """The client's request as ``decide`` reads it; set when the attempts start."""
    attempt: Attempt | None = None
    """The attempt being made; None until the rewrite hands the flow to the relay."""
    served: Attempt | None = None
    """The attempt whose answer is relayed (an answer, or the last error when all failed);
    None until then, and when no route answered at all."""
    token: str = ""
    """The relay's single-use token for this flow: ``<flow id>.<random>``."""
    leg: Leg | None = None
    """What the relay runs for the token (the attempts); None once it asked for it."""


@dataclass(frozen=True, slots=True)
class ModelsAsked:
    """A ``GET …/models`` the catalogue answers (``addon.shell.catalogue``)."""

    models: tuple[str, ...]
    """The models added to the upstream's list."""
    others: tuple[ListRequest, ...]
    """The other upstreams' lists to ask for (each with its route's key)."""
    shape: Shape
    """The shape of the client's list (its dialect's)."""
    display: tuple[tuple[str, str], ...]
    """Display names of exposed names (``expose_as``)."""


@dataclass(slots=True)
class FlowRecord:
    """Everything the bridge holds for one flow while it runs."""

    secrets: Secrets = NO_SECRETS
    """Its credentials: its comment, its metadata and every line logged are redacted with them."""
    match: RouteMatch | None = None
    """Which route takes the request, matched once by the first request hook that asks
    (``Flows.route_match``); every later one reads it here. The rewrite, its last reader,
    lets it go."""
    credentials: dict[str, RouteCredentials] = field(default_factory=dict)
    """What was read for the route the flow is sent to, by route name: a Kiro route's token
    (``addon.shell.kiro_auth``), read before the rewrite, until the rewrite takes it."""
    chain: Attempts | None = None
    """Its route's ``fallback`` chain: the route picked, the attempts, the relay's leg."""
    run: FlowRun | None = None
    """Once rewritten: the plan, the answer's state, the report."""
    count: CountUpstream | None = None
    """An Anthropic token count sent upstream, whose answer is read with this."""
    models: ModelsAsked | None = None
    """A model list the catalogue answers."""
    client_name: str | None = None
    """The name of the client whose key the request carried (``bridge_client_keys``): the
    usage ledger's client label. Never the key."""
    cut: str | None = None
    """How the upstream's body broke off (the relay's ``BodyCut`` cause: ``upstream_cut``,
    ``upstream_reset``, ``upstream_idle``), the relay having ended mitmproxy's read of it
    cleanly: the stream's reader ends the client's stream with it (``upstream_cut``), a whole
    answer becomes the client's 502."""
    client_route: Route | None = None
    """The route that client's key was checked for: its client dialect is the request's (a
    model list asks its upstream with a key of such a route: ``addon.plan.model_lists``)."""
    captions: dict[tuple[str, str], str] | None = None
    """The captions of the request's images (``addon.shell.captions``, before the rewrite):
    (vision route's name, image key) → caption; every ``decide`` of the flow reads them."""
    store_view: StoreView | None = None
    """What the request's prefetch read of a store that does I/O (``addon.shell.store_worker``:
    reasoning values, the secret), its writes queued: every ``decide`` of the flow reads the
    store through it (``ReasoningStoreLife.for_flow``), never the store itself."""


class Flows:
    """The records of the flows still running, by flow id (bounded: ``MAX_FLOWS``)."""

    def __init__(self, limit: int = MAX_FLOWS) -> None:
        self.default_store_view: Callable[[], StoreView | None] = lambda: None
        """The store as a flow no prefetch saw reads it (``ReasoningStoreLife.default_view``:
        the store itself in memory; for a store that does I/O, nothing read, writes queued)."""
        self._records: OrderedDict[str, FlowRecord] = OrderedDict()
        self._limit = limit
        self._forms = SecretForms()
        """The secrets of every record, for the log lines (``_SecretFilter``)."""
        _TABLES.add(self)

    def open(self, flow_id: str) -> FlowRecord:
        """The flow's record, a new one if it has none yet."""
        record = self._records.get(flow_id)
        if record is None:
            record = self._records[flow_id] = FlowRecord()
            while len(self._records) > self._limit:
                self.end(next(iter(self._records)))
        return record

    def store_view(self, flow_id: str) -> StoreView | None:
        """The store as this flow's ``decide`` reads it: what its request's prefetch read
        (``FlowRecord.store_view``), else ``default_store_view`` — never a store call."""
        record = self._records.get(flow_id)
        if record is not None and record.store_view is not None:
            return record.store_view
        return self.default_store_view()

    def captions(self, flow_id: str) -> dict[tuple[str, str], str] | None:
        record = self._records.get(flow_id)
        return record.captions if record is not None else None

    def get(self, flow_id: str) -> FlowRecord | None:
        return self._records.get(flow_id)

    def route_match(self, flow: http.HTTPFlow, settings: Settings) -> RouteMatch:
        """The flow's routes, matched once (``match_request``) and kept on its record; matched
        again only where an addon before sent the request elsewhere (``RouteMatch.fits``: a
        token count sent as the upstream's own counting call)."""
        req = flow.request
        record = self.open(flow.id)
        found = record.match
        if found is None or not found.fits(req.method, req.host, req.path):
            body = req.get_content(strict=False) or b""
            outside = outside_proxy_hosts(flow)
            found = record.match = match_request(
                settings, req.method, req.host, req.path, body, outside
            )
        return found

    def counted(
        self, flow: http.HTTPFlow, settings: Settings
    ) -> tuple[Route | None, StoreView | None]:
        """A token count's route (``route_match``'s ``counted``; None: not a count) and what
        its request's prefetch read of the store (the calibrated estimate's ratios)."""
        route = self.route_match(flow, settings).counted
        record = self._records.get(flow.id)
        return route, record.store_view if record is not None else None

    def end(self, flow_id: str) -> None:
        """The flow is over for the bridge: everything its record held is let go."""
        record = self._records.pop(flow_id, None)
        if record is not None:
            self._forms.remove(record.secrets)

    # ------------------------------------------------------------------ secrets

    def add_secrets(self, flow_id: str, found: Secrets) -> None:
        """The flow's credentials (none: nothing changes): from now on redacted from its
        comment, its metadata and every line the bridge logs."""
        if not found:
            return
        record = self.open(flow_id)
        self._forms.remove(record.secrets)
        record.secrets = found
        self._forms.add(found)

    def secrets(self, flow_id: str) -> Secrets:
        record = self._records.get(flow_id)
        return record.secrets if record is not None else NO_SECRETS

    def redact(self, text: str) -> str:
        """``text`` redacted with the secrets of every flow still running."""
        return self._forms.redact(text)

    def holds_secrets(self) -> bool:
        return bool(self._forms)

    # ------------------------------------------------------------------ the run

    def run(self, flow_id: str) -> FlowRun | None:
        record = self._records.get(flow_id)
        return record.run if record is not None else None

    def plan(self, flow_id: str) -> FlowPlan | None:
        run = self.run(flow_id)
        return run.plan if run is not None else None

    # ------------------------------------------------------------------ the relay's leg

    def new_token(self, flow_id: str) -> str:
        return f"{flow_id}.{token_urlsafe(24)}"

    def take_leg(self, token: str) -> Leg | None:
        """What the relay runs for ``token`` (once); None for a token no running flow holds."""
        record = self._records.get(token.partition(".")[0])
        chain = record.chain if record is not None else None
        if chain is None or chain.leg is None or not hmac.compare_digest(chain.token, token):
            return None
        leg, chain.leg = chain.leg, None
        return leg

    def cut(self, flow_id: str, cause: str) -> None:
        """The relay saw the flow's upstream body break off (``FlowRecord.cut``)."""
        if (record := self._records.get(flow_id)) is not None:
            record.cut = cause

    def __contains__(self, flow_id: object) -> bool:
        return flow_id in self._records

    def __len__(self) -> int:
        return len(self._records)


_TABLES: weakref.WeakSet[Flows] = weakref.WeakSet()
"""Every flow table alive (one in a proxy; a test makes several): logging is the process's."""


def secrets_of(flow_id: str) -> Secrets:
    """The flow's secrets, whichever table holds its record."""
    for table in _TABLES:
        found = table.secrets(flow_id)
        if found:
            return found
    return NO_SECRETS


class _SecretFilter(logging.Filter):
    """Every line the bridge logs, redacted with the secrets of every flow still running: an
    upstream that echoes a key that has no key's shape ("Incorrect API key provided:
    SECRETKEY456") is caught wherever the line quotes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        tables = [t for t in _TABLES if t.holds_secrets()]
        if tables:
            try:
                message = record.getMessage()
            except Exception:  # a bad format is the handler's to report
                return True
            clean_message = message
            for table in tables:
                clean_message = table.redact(clean_message)
            if clean_message != message:
                record.msg, record.args = clean_message, None
        return True


logging.getLogger("cursor_bridge").addFilter(_SecretFilter())


def new_run(plan: FlowPlan) -> FlowRun:
    """The run of a flow rewritten for ``plan``: its report (rewritten, until the answer says
    otherwise) and its answer's state."""
    answer = AnswerState.of(plan)
    report = FlowReport(
        plan.route.name,
        Outcome.REWRITTEN,
        client=plan.client.name,
        upstream=plan.upstream.name,
        mode="stream" if plan.stream else "whole",
        notes=answer.notes,
    )
    return FlowRun(report, plan, answer)
