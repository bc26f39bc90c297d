"""``GET …/models`` for routes with their own upstream: which lists to ask for, and their names.

Contract: plain values. ``list_requests`` says where each route with an ``upstream_url`` on
another address lists its models, and with which key; ``listed_names`` reads a list and keeps
the names the route's ``model`` globs take. The shell sends the requests and merges what
answers. Keys never cross hosts: only a route's own key, or the client's with ``client_key``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from addon.dialects import DIALECTS
from addon.plan.values import load_json
from addon.routes import Route
from addon.wire import auth_value, read_key

MODELS_SUFFIX = "/models"
CHAT_PATHS = ("/chat/completions", "/messages", "/responses")
"""``BASE/models`` is answered when a route takes ``POST BASE`` + one of these."""

MODELS_PATH = {
    "openai_chat": "/v1/models",
    "openai_responses": "/v1/models",
    "anthropic": "/v1/models",
    "gemini": "/v1beta/models",
}
"""Where each upstream dialect lists its models (Kiro and Code Assist list none)."""
MAX_NAMES = 2000


@dataclass(frozen=True, slots=True)
class ListRequest:
    """One upstream's model list to ask for: ``url`` and ``headers`` hold the key (never log
    them); ``where`` names it for a log line (scheme, host and port only)."""

    route: Route
    url: str
    headers: tuple[tuple[str, str], ...]
    where: str


def list_requests(
    routes: tuple[Route, ...],
    host: str,
    paths: tuple[str, ...],
    addressed: tuple[str, str, int],
    client_headers: Mapping[str, str],
    env: Mapping[str, str],
) -> tuple[ListRequest, ...]:
    """The lists to ask for, one per distinct (address, key): routes taking ``POST`` on one
    of ``paths`` at ``host`` whose ``upstream_url`` is not ``addressed`` (scheme, host,
    port: the upstream the models request itself goes to, which answers it); not routes
    with ``when`` conditions (they are chosen by what a request holds, not by a model). Each
    at the upstream dialect's models path under the route's prefix, with the route's
    ``api_key_env`` value, the client's key only with ``client_key = true``, else no key."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], ListRequest] = {}
    for route in routes:
        target = route.target
        path = MODELS_PATH.get(route.upstream)
        if target is None or path is None or route.when is not None:
            continue  # a route chosen by what a request holds offers no model names
        if not any(route.matches(host, p, "POST") for p in paths):
            continue
        if (target.scheme, target.host, target.port) == addressed:
            continue
        upstream = DIALECTS[route.upstream]
        key = _key(route, client_headers, env)
        headers = upstream.fixed_headers
        if key is not None:
            headers = (*headers, auth_value(upstream, key))
        netloc = f"[{target.host}]" if ":" in target.host else target.host
        where = f"{target.scheme}://{netloc}:{target.port}"
        url = where + target.join(path)
        out.setdefault((url, headers), ListRequest(route, url, headers, where))
    return tuple(out.values())


def _key(route: Route, client_headers: Mapping[str, str], env: Mapping[str, str]) -> str | None:
    if route.key_env is not None:  # a key pool's first key
        return env.get(route.key_env) or None
    if route.client_key:
        found = read_key(DIALECTS[route.client], client_headers)
        return found[1] if found is not None else None
    return None


def listed_names(route: Route, body: bytes) -> tuple[str, ...]:
    """The model names of an upstream's list (OpenAI and Anthropic ``data[].id``, Gemini
    ``models[].name``; at most ``MAX_NAMES``) that the route takes;
    ``ValueError`` when the body is not such a list."""
    data = load_json(body)
    items: Any = None
    if isinstance(data, dict):
        items = data.get("models") if route.upstream == "gemini" else data.get("data")
    if not isinstance(items, list):
        raise ValueError("not a model list")
    names: dict[str, None] = {}
    for item in items[:MAX_NAMES]:
        if not isinstance(item, dict):
            continue
        name = item.get("name") if route.upstream == "gemini" else item.get("id")
        if isinstance(name, str) and name:
            name = name.removeprefix("models/")
            if route.takes_model(name):
                names[name] = None
    return tuple(names)
