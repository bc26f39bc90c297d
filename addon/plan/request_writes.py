"""What the request hook writes on a flow for one decision, as plain values (sans-IO).

``writes_for(decision, …)``: the request's new body and its placement (path, address,
headers: ``WireRequest``), or the bridge's own answer; the comment's lines, the metadata, the
flow's line (outcome and reason) and the counter; for a rewrite, the plan the run reads the
answer with (the client key's name on it), the upstream's address and the model sent. The
request addon (``addon.shell.rewrite``) applies them, and writes nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from addon.config.routes import Route
from addon.dialects.base import WireRequest
from addon.plan.decision import Decision, Pass, Reject, Rewrite
from addon.plan.flow_plan import FlowPlan
from addon.plan.values import Incoming, short
from addon.redact import clean
from addon.report.outcome import Action, Count, Outcome

type Address = tuple[str, str, int]
"""Scheme, host and port."""


@dataclass(frozen=True, slots=True)
class Writes:
    """What the request hook writes on the flow (never a key: the lines and the metadata are
    redacted again when written)."""

    count: Count
    lines: tuple[str, ...]
    """The comment's lines, in order."""
    meta: Mapping[str, Any]
    wire: WireRequest | None = None
    """Where the request goes and with which headers; None: as it came."""
    extra: tuple[tuple[str, str], ...] = ()
    """Headers set beside the wire's (a rewrite asks for an answer not compressed)."""
    body: bytes | None = field(default=None, repr=False)
    """The request's new body; None: the client's bytes go on as they came."""
    answer: tuple[int, bytes] | None = None
    """The bridge's own answer (status, JSON body): the upstream is not called."""
    outcome: Outcome | None = None
    """The flow's line now (passed through, rejected); None: a rewrite's run says it."""
    reason: str = ""
    plan: FlowPlan | None = None
    """A rewrite's plan, with the client key's name on it."""
    decisions: tuple[str, ...] = ()
    """A rewrite's notes, one line each (``3 flat tools → OpenAI``)."""
    url: str = ""
    """Where a rewrite's answer comes from: the upstream's address, never its path."""
    model: str = ""
    """The model a rewrite sends ("" when it has none)."""
    original: bytes = field(default=b"", repr=False)
    """A rewrite's client body as it came (the content view's original)."""
    fields: Mapping[str, str] = field(default_factory=dict)
    """What a rewrite's line says beside its outcome: the upstream's address, the model, the
    client key's name, a key pool's name (never a key)."""
    facts: tuple[tuple[str, str], ...] = ()
    """What the content view heads a rewrite with, after the plan's own facts."""
    wire_path: str = ""
    """The path a rewrite sends (the debug log's; it may carry a key: cleaned when written)."""


def address_url(address: Address) -> str:
    """``scheme://host:port`` (no path: a path may carry a key)."""
    scheme, host, port = address
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def writes_for(
    decision: Decision, incoming: Incoming | None, address: Address, client_name: str | None
) -> Writes | None:
    """What to write for ``decision`` on a request the client sent to ``address`` (``incoming``:
    as ``decide`` read it; None when the bridge failed before); None: the flow is not the
    bridge's after all. ``client_name``: the client key's name (``bridge_client_keys``)."""
    match decision:
        case Pass(reason=None):
            return None
        case Pass(route=Route() as route):
            label, reason = f"cursor-bridge [{route.name}]", short(decision.reason or "")
            return Writes(
                Count.PASSED_THROUGH,
                (f"{label}: passed through: {reason}",),
                {"route": route.name, "action": Action.PASSTHROUGH.value, "reason": reason},
                wire=decision.wire if incoming is not None else None,
                outcome=Outcome.NOT_REWRITTEN,
                reason=f"passed through: {reason}",
            )
        case Reject():
            label, message = f"cursor-bridge [{decision.route.name}]", short(decision.message)
            said = f"answered {decision.status}: {message}"
            return Writes(
                Count.REJECTED,
                (f"{label}: {said}",),
                {"route": decision.route.name, "action": Action.REJECTED.value, "error": message},
                answer=(decision.status, decision.body),
                outcome=Outcome.REJECTED,
                reason=said,
            )
        case Rewrite():
            return _rewritten(decision, incoming, address, client_name)
    return None  # a Pass with a reason and no route: none is made


def _rewritten(
    d: Rewrite, incoming: Incoming | None, address: Address, client_name: str | None
) -> Writes:
    plan = d.plan
    if client_name is not None:
        # The client key's name labels the flow's usage (the ledger reads the plan).
        plan = replace(plan, client_name=client_name)
    url = address_url(d.wire.origin or address)
    model = plan.unified.model if plan.unified is not None else ""
    decisions = tuple(f"{n} {what}" for what, n in plan.request_notes.items())
    shown = decisions or ("no changes needed",)
    lines = (f"{plan.label}: {shown[0]}", *shown[1:])
    meta = {"upstream_url": url, **plan.meta(), **({"model": model} if model else {})}
    fields = {"upstream_url": url, **({"model": model} if model else {})}
    if plan.client_name:
        fields["client_name"] = plan.client_name  # a name, never a key
    if plan.route.key_pool and plan.route.key_env:
        fields["key"] = plan.route.key_env  # a key pool's: its name
    facts = (
        ("upstream URL", clean(url, 300)),
        ("upstream path", clean(d.wire.path, 300)),
        *((("model", clean(model, 300)),) if model else ()),
    )
    return Writes(
        Count.REQUESTS_REWRITTEN,
        lines,
        meta,
        wire=d.wire,
        extra=(("accept-encoding", "identity"),),
        body=d.body if incoming is None or d.body is not incoming.body else None,
        plan=plan,
        decisions=decisions,
        url=url,
        model=model,
        original=d.original,
        fields=fields,
        facts=facts,
        wire_path=d.wire.path,
    )
