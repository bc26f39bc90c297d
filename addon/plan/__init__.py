"""What to do with a flow, decided with plain values: the shell only applies it.

Sans-IO (no mitmproxy, no sockets); nothing here logs, the shell does from what these
return. ``request``: ``decide(settings, route, incoming, env)`` returns one ``decision``:
``Pass``, ``Reject`` (an error in the client's dialect) or ``Rewrite``; ``answer`` the answer
side; ``errors``, ``staged``, ``count_tokens``, ``values``: each module says what it holds."""

from addon.plan.answer import AnswerState
from addon.plan.conditions import RequestView
from addon.plan.count_tokens import CountLocally, count_answer, count_request
from addon.plan.decision import Decision, Pass, Reject, Rewrite
from addon.plan.flow_plan import FlowPlan
from addon.plan.llama_count import CountLlama, LlamaCall, Reply, llama_count
from addon.plan.request import (
    SAME_MIN_BYTES,
    decide,
    internal_error,
    route_for,
    transform,
    unchanged,
)
from addon.plan.request_writes import Writes, writes_for
from addon.plan.routing import RouteMatch, flow_secrets, match_request
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
    "AnswerState",
    "CountLlama",
    "CountLocally",
    "Decision",
    "FlowPlan",
    "Incoming",
    "LlamaCall",
    "Pass",
    "Reject",
    "Reply",
    "RequestView",
    "Rewrite",
    "RouteCredentials",
    "RouteMatch",
    "UpstreamError",
    "Writes",
    "count_answer",
    "count_request",
    "decide",
    "dump",
    "flow_secrets",
    "internal_error",
    "llama_count",
    "load_json",
    "match_request",
    "route_for",
    "short",
    "transform",
    "unchanged",
    "writes_for",
]
