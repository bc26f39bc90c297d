"""Who may spend the proxy's keys: the client key check (``bridge_client_keys``).

Contract: plain values. ``guarded_route`` says which route's key of the proxy's a request would
spend, or None; ``check_client_key`` returns the client's name (``Admitted``) or a 401 in the
route's client dialect (``Reject``). Neither answer, nor its ``reason``, quotes a key: they name
where one was looked for. Why: a key of the proxy's is spent only for a client that has one."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from addon.config.client_keys import ClientKeys
from addon.config.options import Settings
from addon.config.routes import Route, fallback_chain
from addon.dialects import DIALECTS, Dialect
from addon.dialects.base import Query
from addon.model import ClientError
from addon.plan.decision import Reject
from addon.plan.model_lists import MODELS_SUFFIX, best_fit, lists_models_of
from addon.plan.routing import RouteMatch
from addon.plan.values import error_bytes
from addon.report.outcome import Action, FlowReport


def sends_proxy_key(route: Route) -> bool:
    """Whether the route sends a key of the proxy's upstream (``api_key_env``, Kiro's
    ``token_file``) instead of the client's: what a client key guards. It replaces the client's
    key upstream (``addon.plan.wire_request.credentials``), so the client's key never goes there."""
    return route.api_key_env is not None or route.token_file is not None


def guarded_route(
    settings: Settings,
    matched: RouteMatch,
    headers: Mapping[str, str] | None = None,
    query: Query = (),
) -> Route | None:
    """The route whose client dialect a request that would spend a key of the proxy's is
    answered in: its chat route (or one of that route's ``fallback`` routes), its token-count
    route, or, for ``GET …/models``, a route whose models that list holds
    (``lists_models_of``: a chat route of that base path, Gemini's ``…/models/{model}:…``),
    the one the request's ``headers`` and ``query`` fit best (``best_fit``). None: the request sends no
    key of the proxy's and is not checked. ``matched``: the request's routes, matched once
    (``addon.plan.routing``)."""
    routes, method, host, bare = settings.routes, matched.method, matched.host, matched.path
    if method.upper() == "GET" and bare.endswith(MODELS_SUFFIX):
        base = bare[: -len(MODELS_SUFFIX)]
        found = [r for r in routes if sends_proxy_key(r) and lists_models_of(r, host, base)]
        if found:
            return best_fit(found, headers or {}, query)
    counted = matched.counted
    if counted is not None:
        return counted if sends_proxy_key(counted) else None
    chat = matched.route
    if chat is None:
        return None
    return chat if any(sends_proxy_key(r) for r in fallback_chain(chat, routes)) else None


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request that carried a client's key."""

    route: Route
    name: str
    """The client's name in the keys file (the usage ledger's client label)."""
    source: str
    """Where the key was: a header's name, or ``query parameter 'key'``."""


def presented_keys(
    dialect: Dialect, headers: Mapping[str, str], query: Query
) -> list[tuple[str, str]]:
    """``(source, key)`` for every place a client of ``dialect`` may carry its key and does
    (header names lower-case; ``authorization`` only with the ``Bearer`` scheme)."""
    found: list[tuple[str, str]] = []
    for name in dialect.key_headers:
        value = headers.get(name, "").strip()
        if name == "authorization":
            scheme, _, token = value.partition(" ")
            value = token.strip() if scheme.lower() == "bearer" else ""
        if value:
            found.append((name, value))
    if dialect.key_query is not None:
        for name, value in query:
            if name == dialect.key_query and value.strip():
                found.append((f"query parameter '{name}'", value.strip()))
    return found


def key_places(dialect: Dialect) -> str:
    """Where a client of ``dialect`` may put its key, for messages: ``authorization (Bearer)
    or x-api-key``."""
    places = [f"{h} (Bearer)" if h == "authorization" else h for h in dialect.key_headers]
    if dialect.key_query is not None:
        places.append(f"the query parameter '{dialect.key_query}'")
    return " or ".join(places)


def check_client_key(
    keys: ClientKeys, route: Route, headers: Mapping[str, str], query: Query
) -> Admitted | Reject:
    """The client named by a key the request carries, else a 401 in the route's client
    dialect whose message (also the ``Reject``'s) says where a key was looked for: where a
    client of that dialect sends its own (``Dialect.key_headers``, then ``Dialect.key_query``).
    The 401 is ``invalid_api_key`` for OpenAI clients, ``authentication_error`` for Anthropic,
    ``UNAUTHENTICATED`` for Gemini."""
    client = DIALECTS[route.client]
    presented = presented_keys(client, headers, query)
    for source, key in presented:
        name = keys.match(key)
        if name is not None:
            return Admitted(route, name, source)
    if presented:
        why = f"the key in {', '.join(s for s, _ in presented)} is not a client key of this proxy"
    else:
        why = f"no key in {key_places(client)}"
    e = ClientError(
        f"cursor-bridge: this route needs a client key of the proxy's (bridge_client_keys): {why}",
        status=401,
        code="invalid_api_key",
    )
    return Reject(route, 401, error_bytes(client, e), why)


@dataclass(frozen=True, slots=True)
class ClientKeysFound:
    """Where a request carries a client key of the proxy's: the headers (names lower-case) and
    query parameters to remove before anything goes upstream. Names only, never a key."""

    headers: tuple[str, ...] = ()
    query: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.headers or self.query)


def client_keys_in(
    keys: ClientKeys, headers: Iterable[tuple[str, str]], query: Query
) -> ClientKeysFound:
    """Every header whose value (or the token after its scheme: ``Bearer KEY``) and every query
    parameter whose value is a listed client key, whatever the route, guarded or not, the
    header's name or the parameter's: a client key is the proxy's, and never goes upstream
    (the route's own key, where it has one, is set by whoever sends the request)."""
    names: dict[str, None] = {}
    for name, value in headers:
        value = value.strip()
        scheme, _, token = value.partition(" ")
        if keys.holds(value) or (scheme and keys.holds(token.strip())):
            names[name.lower()] = None
    params = dict.fromkeys(name for name, value in query if keys.holds(value.strip()))
    return ClientKeysFound(tuple(names), tuple(params))


def unguarded_warning(routes: Iterable[Route]) -> str | None:
    """The start-up warning when client keys are set and no route sends a key of the proxy's:
    no request is checked, every one is served (client keys are still removed from what goes
    upstream). None: some route does."""
    if any(sends_proxy_key(route) for route in routes):
        return None
    return (
        "bridge_client_keys is set, but no route sends a key of the proxy's (api_key_env, "
        "token_file): no request is checked for a client key, every request is served "
        "(client keys are still removed from what goes upstream)"
    )


@dataclass(frozen=True, slots=True)
class Gate:
    """What the client keys addon does with a request: the check's answer (``None``: the
    request is not checked), the places holding a client key to remove (not on a refused
    request: it goes nowhere), and the comment saying so."""

    found: Admitted | Reject | None
    strip: ClientKeysFound
    comment: str | None
    report: FlowReport | None = None
    """A refused request's line (its ``spent_ns`` the hook's to set)."""
    meta: Mapping[str, Any] | None = None
    """What the flow's metadata gets: the refusal's, or the admitted client's name."""


def admit(
    settings: Settings,
    matched: RouteMatch,
    headers: Mapping[str, str],
    fields: Iterable[tuple[str, str]],
    query: Query,
    keys_for: Callable[[bool], ClientKeys],
) -> Gate:
    """The client keys addon's whole decision for one request: the route whose key it would
    spend (``guarded_route``; none outside the proxy's hosts, ``RouteMatch.outside``), the keys as they are now
    (``keys_for(guarded)``: the file read again when it changed), the check and the keys to
    remove (``gate``), and what the flow says (a refusal's line and metadata, or the admitted
    client's name)."""
    route = guarded_route(settings, matched, headers, query)
    if route is not None and matched.outside:
        route = None
    g = gate(keys_for(route is not None), route, headers, fields, query)
    found = g.found
    if isinstance(found, Reject):
        r = found.route
        why = f"answered {found.status}: {found.message}"
        report = matched.refused(r, found.status, found.message)
        meta = {"route": r.name, "action": Action.REJECTED.value, "error": found.message}
        return replace(g, comment=f"cursor-bridge [{r.name}]: {why}", report=report, meta=meta)
    if isinstance(found, Admitted):
        return replace(g, meta={"client_name": found.name})
    return g


def gate(
    keys: ClientKeys,
    route: Route | None,
    headers: Mapping[str, str],
    fields: Iterable[tuple[str, str]],
    query: Query,
) -> Gate:
    """A request checked for ``route`` (None: not guarded, only its client keys removed):
    ``check_client_key``, then ``client_keys_in`` over every header field (``fields``, as
    sent: a repeated header once per value) and query parameter."""
    found = check_client_key(keys, route, headers, query) if route is not None else None
    if isinstance(found, Reject):
        return Gate(found, ClientKeysFound(), None)
    strip = client_keys_in(keys, fields, query)
    places = [*strip.headers, *(f"query parameter '{q}'" for q in strip.query)]
    comment = (
        f"cursor-bridge: client key not sent upstream ({', '.join(places)})" if strip else None
    )
    return Gate(found, strip, comment)
