"""Anthropic's ``POST …/messages/count_tokens``, decided with plain values (the shell's
``count_tokens`` addon only applies it). ``count_request``: not the bridge's (None), answer at
once with an estimate (``CountLocally``), ask a llama.cpp server (``CountLlama``:
``addon.plan.llama_count``), or send it upstream (``CountUpstream``);
``count_answer``: what the client gets instead of the upstream's answer, if anything. How and
why: docs/dialects/anthropic.md."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal
from urllib.parse import urlencode

from addon.config.routes import Route, match, withholds_key
from addon.dialects import DIALECTS, Dialect
from addon.dialects.base import Query, Target
from addon.model import ClientError, Request, UnsupportedShape
from addon.plan.calibration import Scales
from addon.plan.conditions import RequestView
from addon.plan.llama_count import CountLlama, llama_request
from addon.plan.token_counter import Counted, calibration_key, count_calibrated
from addon.plan.values import dump, load_json
from addon.plan.wire_request import RouteKey, credentials, secret_values
from addon.redact import Secrets
from addon.transforms.tools import leave_out_tools

SUFFIX = "/count_tokens"
MISSING_ENDPOINT = frozenset({404, 405, 501})
"""The upstream's answers that say it has no such endpoint: the estimate answers instead."""


@dataclass(frozen=True, slots=True)
class CountLocally:
    """Answer the client at once with the estimate; the upstream is not asked (it has no such
    endpoint)."""

    body: bytes
    comment: str
    estimated: bool = True
    """The estimate answers (not a tokenizer's tables)."""


@dataclass(frozen=True, slots=True)
class CountUpstream:
    """Send the request upstream with these headers (and, when set, this path and body): as it
    came, or as the upstream's own counting call."""

    estimate: Counted
    """What answers a missing endpoint."""
    client: Dialect
    set_headers: tuple[tuple[str, str], ...]
    drop_headers: tuple[str, ...]
    secrets: Secrets
    """The flow's credential values: redacted from an error the bridge writes for it."""
    path: str | None = None
    body: bytes | None = None
    counter: Dialect | None = None
    """The upstream that counts itself (``Dialect.token_count``): its answer is read."""
    origin: tuple[Literal["http", "https"], str, int] | None = None
    """Where it goes instead of where the client sent it (the route's ``upstream_url``)…"""
    prefix: str = ""
    """…and the path prefix joined before its path."""


@dataclass(frozen=True, slots=True)
class CountAnswer:
    """The client's answer instead of the upstream's."""

    status: int
    body: bytes
    comment: str
    estimated: bool = False


def count_route(
    routes: tuple[Route, ...], method: str, host: str, path: str, body: bytes = b""
) -> Route | None:
    """The route of a token-count request of a client dialect that has one, or None (a
    route's ``model`` and ``when`` read the counting body, as for the chat request)."""
    if method != "POST" or not path.endswith(SUFFIX):
        return None
    chat = path[: -len(SUFFIX)]
    view = RequestView(body, chat)
    route = match(routes, host, chat, "POST", view.model, view.facts)
    if route is None:
        return None
    client = DIALECTS[route.client]
    return route if client.token_count_endpoint and chat.endswith(client.path) else None


def count_calibration_key(route: Route, raw: bytes) -> str | None:
    """The store key of the ratios a token-count request on ``route`` may be scaled by
    (``addon.plan.calibration.store_key``: the route and the body's model as sent upstream),
    for its prefetch to read; None: the route does not count it by the estimate."""
    try:
        body = load_json(raw)
    except (ValueError, RecursionError):
        return None
    model = body.get("model") if isinstance(body, dict) else None
    return calibration_key(route, model if isinstance(model, str) else None)


def count_request(
    route: Route,
    path: str,
    raw: bytes,
    headers: Mapping[str, str],
    query: Query,
    env: Mapping[str, str],
    addressed: tuple[str, int | None] | None = None,
    calibration: Scales | None = None,
) -> CountLocally | CountUpstream | CountLlama | None:
    """What to do with a token-count request on ``route`` (``count_route``); None: send it
    upstream as it came (a body that is not strict JSON is not the bridge's to judge). A
    route's ``upstream_url``: it goes there, without the client's key where it is another
    place than the host and port the client ``addressed`` (``withholds_key``). An estimate is
    calibrated where ``calibration`` has answers of the route and model."""
    withhold = addressed is not None and withholds_key(route, *addressed)
    sent = _count_request(route, path, raw, headers, query, env, withhold, calibration)
    target = route.target
    if target is None or not isinstance(sent, CountUpstream):
        return sent
    return replace(sent, prefix=target.prefix, origin=(target.scheme, target.host, target.port))


def _count_request(
    route: Route,
    path: str,
    raw: bytes,
    headers: Mapping[str, str],
    query: Query,
    env: Mapping[str, str],
    withhold: bool,
    calibration: Scales | None,
) -> CountLocally | CountUpstream | CountLlama | None:
    try:
        body = load_json(raw)
    except (ValueError, RecursionError):
        if route.target is None:
            return None
        # Not the bridge's to judge, but it goes where the route says, key rules and all.
        body = None
    client, upstream = DIALECTS[route.client], DIALECTS[route.upstream]
    # The conversation as the upstream would get it: the tools it cannot run left out.
    req = _decoded(client, upstream, body)
    counted = count_calibrated(route, req, body, calibration)
    estimate = counted.tokens
    chat = path[: -len(SUFFIX)]
    if not upstream.counts_tokens:
        # Kiro has no token-count endpoint: the estimate answers, the upstream is not asked.
        return CountLocally(
            dump({"input_tokens": estimate}),
            f"cursor-bridge: count_tokens estimated ({counted.said}; Kiro has no such endpoint)",
        )
    if route.count_tokens == "llama":
        asked = llama_request(route, client, chat, req, headers, env, withhold, counted)
        if asked is not None:
            return asked
    if _counts_here(route, upstream, counted):
        return CountLocally(
            dump({"input_tokens": estimate}), _local_comment(counted), counted.estimated
        )
    # The key follows the upstream's dialect here too (a Bearer gateway would say 401).
    env_key = (env.get(route.key_env) or None) if route.key_env else None  # a pool's first
    route_key = RouteKey(env_key) if env_key is not None else None
    set_headers, drop = credentials(
        client, upstream, headers, route_key, Counter(), withhold=withhold
    )
    secrets = secret_values(headers, query, env_key)
    counter = upstream.token_count
    if counter is None or req is None:
        return CountUpstream(counted, client, set_headers, drop, secrets)
    notes: Counter[str] = Counter()
    # The upstream counts for the model it would answer with (the route's model_map).
    unified = replace(req, model=route.mapped_model(req.model) or req.model)
    target = Target(
        chat,
        (),
        client.path,
        same_dialect=False,
        upstream_path=route.upstream_path,
        project=route.project,
    )
    try:
        new_path, new_query, new_body = counter.request(unified, target, route.upstream, notes)
    except (ClientError, UnsupportedShape, ValueError, TypeError, KeyError):
        return CountUpstream(counted, client, set_headers, drop, secrets)
    if new_query:
        new_path = f"{new_path}?{urlencode(new_query)}"
    return CountUpstream(
        counted, client, set_headers, drop, secrets, new_path, dump(new_body), counter=upstream
    )


def _decoded(client: Dialect, upstream: Dialect, body: object) -> Request | None:
    if not isinstance(body, dict):
        return None
    notes: Counter[str] = Counter()
    try:
        req = client.decode_request(body, notes)
        return leave_out_tools(req, upstream.runs, f"the {upstream.name} upstream", notes)
    except (ClientError, UnsupportedShape, ValueError, TypeError, KeyError):
        return None


def _counts_here(route: Route, upstream: Dialect, counted: Counted) -> bool:
    """Whether the bridge answers the count itself: the route says how (tables, or the
    estimate), or the upstream has no counter of its own and the model's tables counted."""
    if route.count_tokens is not None:
        return route.count_tokens != "upstream"
    own = upstream.token_count_endpoint or upstream.token_count is not None
    return not own and not counted.estimated


def _local_comment(counted: Counted) -> str:
    if counted.estimated:
        return f"cursor-bridge: count_tokens estimated ({counted.said}; the route says estimate)"
    return f"cursor-bridge: count_tokens from the {counted.how} tables ({counted.tokens})"


def count_answer(sent: CountUpstream, status: int, raw: bytes) -> CountAnswer | None:
    """The client's answer instead of the upstream's (``status``, body ``raw``), or None: the
    upstream's goes on as it is (an auth, rate-limit or server error is the client's). An
    estimate when the endpoint is missing, the upstream's own count, or its error re-shaped."""
    if status in MISSING_ENDPOINT:
        return CountAnswer(
            200,
            dump({"input_tokens": sent.estimate.tokens}),
            f"cursor-bridge: count_tokens estimated ({sent.estimate.said}; the upstream has no "
            f"such endpoint: HTTP {status})",
            estimated=True,
        )
    upstream = sent.counter
    if upstream is None or upstream.token_count is None:
        return None
    try:
        body = load_json(raw)
    except (ValueError, RecursionError):
        body = None
    total = upstream.token_count.answer(body) if 200 <= status < 300 else None
    if total is not None:
        return CountAnswer(
            200,
            dump({"input_tokens": total}),
            f"cursor-bridge: count_tokens from the {upstream.name} upstream's own counter ({total})",
        )
    message = upstream.error_message(body) or (
        f"the upstream's token counter answered HTTP {status} without a count"
    )
    status = status if status >= 400 else 502
    error = sent.client.encode_error(ClientError(sent.secrets(message), status=status))
    return CountAnswer(
        status,
        dump(error),
        f"cursor-bridge: count_tokens error from the {upstream.name} upstream (HTTP {status})",
    )
