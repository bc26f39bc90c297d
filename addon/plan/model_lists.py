"""``GET …/models`` for routes with their own upstream: which lists to ask for, and their names.

Contract: plain values. ``list_requests`` says where each route with an ``upstream_url`` on
another address lists its models, and with which key; ``listed_names`` reads a list and keeps
the names the route's ``model`` globs take. The shell sends the requests and merges what
answers. Keys never cross hosts: only a route's own key, or the client's with ``client_key``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from addon.config.expose import exposed_pairs
from addon.config.routes import Route, listed_models
from addon.dialects import (
    ANTHROPIC,
    DIALECTS,
    GEMINI,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    DialectName,
)
from addon.dialects.base import Dialect, Query
from addon.plan.list_shapes import SHAPES, Shape
from addon.plan.values import load_json
from addon.plan.wire_request import CREDENTIAL_HEADERS, KEY_PARAMETERS, auth_value, read_key
from addon.transforms.thinking import catalogue_models

MODELS_SUFFIX = "/models"
CHAT_PATHS = ("/chat/completions", "/messages", "/responses")
"""``BASE/models`` is answered when a route takes ``POST BASE`` + one of these."""

MODELS_PATH = {
    OPENAI_CHAT: "/v1/models",
    OPENAI_RESPONSES: "/v1/models",
    ANTHROPIC: "/v1/models",
    GEMINI: "/v1beta/models",
}
"""Where each upstream dialect lists its models (Kiro and Code Assist list none)."""
MAX_NAMES = 2000
PROBE_MODEL = "model"
"""A model name in the probe path of a dialect whose chat path holds the model
(``/models/{model}:generateContent``): ``BASE/models`` lists the models of a route taking
``POST BASE/models/model:generateContent``."""


def lists_models_of(route: Route, host: str, base: str) -> bool:
    """Whether ``GET base/models`` at ``host`` lists the models of ``route``: it takes ``POST``
    on ``base`` + one of ``CHAT_PATHS``, or, for a client dialect whose path names the model
    (Gemini's ``:generateContent``), on ``base/models/{model}`` + that path."""
    if any(route.matches(host, base + chat, "POST") for chat in CHAT_PATHS):
        return True
    path = DIALECTS[route.client].path
    return path.startswith(":") and route.matches(
        host, f"{base}{MODELS_SUFFIX}/{PROBE_MODEL}{path}", "POST"
    )


@dataclass(frozen=True, slots=True)
class ListKey:
    """The route's key a model list asked of the addressed upstream goes with: ``set_headers``
    holds it (never log them); the client's credential headers and key-named query parameters
    are dropped."""

    route: Route
    set_headers: tuple[tuple[str, str], ...] = field(repr=False)
    drop_headers: tuple[str, ...]
    drop_query: tuple[str, ...]


def list_key(
    routes: tuple[Route, ...],
    host: str,
    base: str,
    addressed: tuple[str, str, int],
    headers: Mapping[str, str],
    query: Query,
    env: Mapping[str, str],
    checked: Route | None = None,
) -> ListKey | None:
    """The key of the proxy's that ``GET base/models``, sent to the upstream it addresses,
    goes with: the ``api_key_env`` value (a pool's first key) of a route whose models that
    list holds (``lists_models_of``) and whose upstream is that one (no ``upstream_url``, or
    one at ``addressed``: keys never cross hosts), in its upstream dialect's header; of
    several, the first of the client dialect of ``checked`` (the route the request's client
    key was checked for, before the key was removed), else the first the request fits best
    (``best_fit``). None: no such route (the request goes as it came, less any client key of
    the proxy's: ``addon.plan.spending``), or its variable is not set."""
    found: list[Route] = []
    for route in routes:
        if route.key_env is None or not lists_models_of(route, host, base):
            continue
        target = route.target
        if target is not None and (target.scheme, target.host, target.port) != addressed:
            continue
        found.append(route)
    if not found:
        return None
    same = [r for r in found if checked is not None and r.client == checked.client]
    route = same[0] if same else best_fit(found, headers, query)
    key = env.get(route.key_env or "") or None
    if key is None:
        return None
    name, value = auth_value(DIALECTS[route.upstream], key)
    drop = tuple(sorted(h for h in CREDENTIAL_HEADERS if h in headers and h != name))
    params = tuple(dict.fromkeys(k for k, _ in query if k.lower() in KEY_PARAMETERS))
    return ListKey(route, ((name, value),), drop, params)


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


def best_fit(routes: list[Route], headers: Mapping[str, str], query: Query) -> Route:
    """Of several routes a model list could be for, the first the request fits best
    (``_fit``): an Anthropic client's list is an Anthropic route's, a ``?key=`` Gemini's."""
    return min(routes, key=lambda r: _fit(DIALECTS[r.client], headers, query))


def _fit(client: Dialect, headers: Mapping[str, str], query: Query) -> int:
    """How well a request fits a client dialect, best first: 0 it carries that dialect's own
    headers (``anthropic-version``), 1 a key where that dialect carries one, else 2."""
    if any(h.startswith(p) for h in headers for p in client.own_headers):
        return 0
    return 1 if read_key(client, headers, query) is not None else 2


def listed_names(route: Route, body: bytes) -> tuple[str, ...]:
    """The model names of an upstream's list (OpenAI and Anthropic ``data[].id``, Gemini
    ``models[].name``; at most ``MAX_NAMES``) that the route takes;
    ``ValueError`` when the body is not such a list."""
    data = load_json(body)
    items: Any = None
    if isinstance(data, dict):
        items = data.get("models") if route.upstream == GEMINI else data.get("data")
    if not isinstance(items, list):
        raise ValueError("not a model list")
    names: dict[str, None] = {}
    for item in items[:MAX_NAMES]:
        if not isinstance(item, dict):
            continue
        name = item.get("name") if route.upstream == GEMINI else item.get("id")
        if isinstance(name, str) and name:
            name = name.removeprefix("models/")
            if route.takes_model(name):
                names[name] = None
    return tuple(names)


@dataclass(frozen=True, slots=True)
class ModelsPlan:
    """What the catalogue does with a ``GET …/models`` (``models_plan``)."""

    key: ListKey | None
    """The route's key the request goes upstream with (``list_key``); None: as it came."""
    models: tuple[str, ...]
    """The models added to the upstream's list: the configured ones and the routes'."""
    others: tuple[ListRequest, ...]
    """The other upstreams' lists to ask for (``list_requests``)."""
    shape: Shape = SHAPES[OPENAI_CHAT]
    """The list's shape: the client's dialect's (``list_client``)."""
    display: tuple[tuple[str, str], ...] = ()
    """An exposed name's display name: the model it stands for (``expose_as``)."""


def models_plan(
    routes: tuple[Route, ...],
    configured: tuple[str, ...],
    request: tuple[str, str, str, str, int],
    headers: Mapping[str, str],
    query: Query,
    env: Mapping[str, str],
    checked: Route | None,
    inside: bool,
) -> ModelsPlan | None:
    """A ``GET base/models`` (``request``: method, path, scheme, host, port): None when it
    is not one, or no route takes a chat path of ``base`` on that host; else the key it goes
    with (only ``inside`` the proxy's hosts), the models the catalogue adds and the other
    lists to ask for, with the headers as the key leaves them (``configured``: the
    ``bridge_models``; ``checked``: the route the client's key was checked for)."""
    method, path, scheme, host, port = request
    bare = path.split("?", 1)[0]
    if method != "GET" or not bare.endswith(MODELS_SUFFIX):
        return None
    base, addressed = bare[: -len(MODELS_SUFFIX)], (scheme, host.lower(), port)
    key = list_key(routes, host, base, addressed, headers, query, env, checked) if inside else None
    chats = tuple(base + chat for chat in CHAT_PATHS)
    # Any route of a chat path on this host, whatever models it takes.
    listing = [r for r in routes if lists_models_of(r, host, base)]
    shape = SHAPES[list_client(listing, headers, query, checked)]
    if not listing or any(k in shape.later_page for k, _ in query):
        return ModelsPlan(key, (), (), shape)  # a later page: as the upstream answers it
    if key is not None:  # the others are asked with the headers the key left
        gone = {h.lower() for h in key.drop_headers} | {h.lower() for h, _ in key.set_headers}
        headers = {
            **{h: v for h, v in headers.items() if h not in gone},
            **{h.lower(): v for h, v in key.set_headers},
        }
    exposed = tuple(
        pair
        for r in listing
        if SHAPES.get(r.client) == shape
        for pair in exposed_pairs(r.expose_as, r.model_map, r.model)
    )
    listed = (*catalogue_models(configured), *listed_models(routes, host, chats))
    models = tuple(dict.fromkeys((*listed, *(name for name, _ in exposed))))
    others = list_requests(routes, host, chats, addressed, headers, env)
    return ModelsPlan(key, models, others, shape, exposed)


def list_client(
    routes: list[Route], headers: Mapping[str, str], query: Query, checked: Route | None = None
) -> DialectName:
    """Whose list a ``GET …/models`` asks for, of the client dialects of the ``routes`` that
    list there (``SHAPES``): that of ``checked`` (the route the client's key was checked for,
    before the key was removed), else the one whose own headers the request carries
    (``anthropic-version``: Anthropic's SDK and Claude Code), else the one whose own key
    header or query parameter holds a key (``x-api-key``, ``x-goog-api-key``, ``?key=``),
    else OpenAI's."""
    clients = [c for c in dict.fromkeys(r.client for r in routes) if c in SHAPES]
    if checked is not None and checked.client in clients:
        return checked.client
    for client in clients:
        if any(h.startswith(p) for h in headers for p in DIALECTS[client].own_headers):
            return client
    for client in clients:
        d = DIALECTS[client]
        if d.auth_header != "authorization" and headers.get(d.auth_header, "").strip():
            return client
        if d.key_query is not None and any(k == d.key_query for k, _ in query):
            return client
    return OPENAI_CHAT
