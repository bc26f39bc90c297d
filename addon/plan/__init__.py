"""What to do with a flow, decided with plain values: the shell only applies it.

Contract: sans-IO (no mitmproxy, no sockets). The request side is one call,
``decide(settings, route, incoming, env)`` (``request``), returning one of the
decisions (``decision``): ``Pass`` (leave the flow alone, with a reason when it was
routed), ``Reject`` (answer the client ourselves, in its dialect), ``Rewrite`` (the
``WireRequest`` to send upstream and the ``FlowPlan`` that says how to rewrite the
answer). The answer side works on the ``FlowPlan`` (``flow``): the stream pipeline,
whole answers decoded and encoded, error bodies. The values both sides speak in, and
strict JSON in and out, are ``values``. Nothing here logs; the shell does, from what
these return.
"""

from addon.plan.decision import Decision, Pass, Reject, Rewrite
from addon.plan.flow import FlowPlan
from addon.plan.request import (
    SAME_MIN_BYTES,
    decide,
    internal_error,
    route_for,
    transform,
    unchanged,
)
from addon.plan.values import (
    CONTENT_TYPES,
    MAX_REASON,
    SHAPE_ERRORS,
    Incoming,
    RouteCredentials,
    UpstreamError,
    dump,
    load_json,
    short,
)

__all__ = [
    "CONTENT_TYPES",
    "MAX_REASON",
    "SAME_MIN_BYTES",
    "SHAPE_ERRORS",
    "Decision",
    "FlowPlan",
    "Incoming",
    "Pass",
    "Reject",
    "Rewrite",
    "RouteCredentials",
    "UpstreamError",
    "decide",
    "dump",
    "internal_error",
    "load_json",
    "route_for",
    "short",
    "transform",
    "unchanged",
]
