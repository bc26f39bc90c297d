"""The decisions ``decide`` returns: ``Pass`` (leave the flow), ``Reject`` (answer the
client ourselves, in its dialect), ``Rewrite`` (the upstream request and the flow's plan)."""

from __future__ import annotations

from dataclasses import dataclass, field

from addon.config.routes import Route
from addon.dialects.base import WireRequest
from addon.plan.flow_plan import FlowPlan


@dataclass(frozen=True, slots=True)
class Pass:
    """Leave the flow alone. ``reason`` set: it was routed, say why it was not rewritten."""

    route: Route | None = None
    reason: str | None = None
    wire: WireRequest | None = None
    """A route with an ``upstream_url`` or a key of its own: where the untouched request goes
    (origin, path with the prefix, the key rules' headers; ``body`` unused), else None."""


@dataclass(frozen=True, slots=True)
class Reject:
    """Answer the client ourselves (the upstream is not called)."""

    route: Route
    status: int
    body: bytes
    message: str


@dataclass(frozen=True, slots=True)
class Rewrite:
    plan: FlowPlan
    wire: WireRequest
    summary: str
    original: bytes = field(repr=False)
    body: bytes = field(repr=False, default=b"")
    """``wire.body`` as strict JSON: what the upstream gets. The client's body itself (the same
    object) when a same-dialect rewrite left it as it was (``unchanged``)."""


type Decision = Pass | Reject | Rewrite
