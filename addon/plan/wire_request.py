"""The upstream request on the wire: body, path, query and headers, credentials included.

Contract: sans-IO. ``build_wire`` takes the unified request, both dialects, the client's path,
query and headers as plain values, and returns a ``WireRequest`` the shell applies as it is.
Keys live only in ``WireRequest.set_headers`` (hidden from ``repr``); notes name where a key
came from, never its value. A note is for people: nothing reads one back (where the route's key
came from is the caller's ``RouteKey``, typed, and its note is written from it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from addon.dialects import DIALECTS
from addon.dialects.base import Dialect, Query, Target, WireRequest
from addon.model import JSON, Notes, Request
from addon.redact import Secrets

CREDENTIAL_HEADERS: frozenset[str] = frozenset(
    {"authorization", "x-api-key", "x-goog-api-key", "api-key"}
    | {h for d in DIALECTS.values() for h in (*d.key_headers, d.auth_header)}
)
"""Every header a dialect reads or writes an API key in (``api-key``: Azure OpenAI)."""


WITHHELD = (
    "client's API key not sent: the route's upstream_url is another host "
    "(client_key = true or api_key_env sends one)"
)
"""The note of a flow whose route withholds the client's key (``credentials``)."""


ENV_KEY_NOTE = "API key from the route's environment variable"


@dataclass(frozen=True, slots=True)
class RouteKey:
    """The key a route sends instead of the client's (``credentials``), with the note that says
    where it came from (a name, never the value): the route's ``api_key_env`` by default, a
    key pool's variable, a Kiro token file."""

    value: str = field(repr=False)
    note: str = ENV_KEY_NOTE


def read_key(
    dialect: Dialect, headers: Mapping[str, str], query: Query = ()
) -> tuple[str, str] | None:
    """``(source, key)``: the client's API key from its dialect's headers (names lower-case),
    else from its dialect's query parameter (``source`` is then ``query parameter 'key'``)."""
    for name in dialect.key_headers:
        value = headers.get(name, "").strip()
        if name == "authorization":
            scheme, _, token = value.partition(" ")
            value = token.strip() if scheme.lower() == "bearer" else ""
        if value:
            return name, value
    if dialect.key_query is not None:
        for name, value in query:
            if name == dialect.key_query and value.strip():
                return f"query parameter '{name}'", value.strip()
    return None


def auth_value(dialect: Dialect, key: str) -> tuple[str, str]:
    if dialect.auth_header == "authorization":
        return "authorization", f"Bearer {key}"
    return dialect.auth_header, key


def credentials(
    client: Dialect,
    upstream: Dialect,
    headers: Mapping[str, str],
    route_key: RouteKey | None,
    notes: Notes,
    query: Query = (),
    withhold: bool = False,
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """``(headers to set, headers to drop)`` for the key: the client's API key (header, or
    Gemini's ``?key=``) moved to the upstream dialect's header, or the route's own key sent
    (``route_key``, noted with its note); the credential headers only the client's dialect understands dropped
    (docs/routes.md). Same dialect: a key in a header stays as it is, Gemini's ``?key=``
    moves to ``x-goog-api-key``.
    ``withhold``: the client's key must not go upstream (another host): without ``route_key``
    every credential header is dropped and none is set."""
    if route_key is not None:
        key = route_key.value
        notes[route_key.note] += 1
    elif withhold:
        drop = tuple(sorted(h for h in CREDENTIAL_HEADERS if h in headers))
        notes[WITHHELD] += 1
        return (), drop
    elif client.name == upstream.name:
        # The key goes on where the client put it; Gemini's ``?key=`` alone moves to its
        # header (``build_wire`` drops the parameter): a key is never in the upstream's URL.
        found = read_key(client, headers, query) if client.key_query is not None else None
        if found is None or found[0] in client.key_headers:
            return (), ()
        source, key = found
        name, value = auth_value(upstream, key)
        notes[f"API key moved from {source} to {name}"] += 1
        return ((name, value),), ()
    else:
        found = read_key(client, headers, query)
        if found is None:
            return (), ()
        source, key = found
    name, value = auth_value(upstream, key)
    drop = tuple(sorted(h for h in CREDENTIAL_HEADERS if h != name and h in headers))
    if route_key is None and source != name:
        notes[f"API key moved from {source} to {name}"] += 1
    return ((name, value),), drop


def build_wire(
    req: Request,
    client: Dialect,
    upstream: Dialect,
    *,
    path: str,
    query: Query,
    headers: Mapping[str, str],
    notes: Notes,
    upstream_path: str | None = None,
    route_key: RouteKey | None = None,
    body: JSON | None = None,
    project: str | None = None,
    withhold_key: bool = False,
) -> WireRequest:
    """The whole upstream request: the upstream dialect encodes the body and places it
    (``Dialect.placement``), ``credentials`` sets the key, and the query key only the client's
    dialect understands is removed. ``headers`` are the client's, names lower-case.
    ``withhold_key``: the client's key must not go upstream (``credentials``), neither in a
    header nor in a query parameter.

    ``body`` is the encoded body when the caller already has it (the retry path);
    otherwise the upstream dialect encodes ``req`` (and wraps it: ``Dialect.envelope``).
    """
    same = client.name == upstream.name
    base = client.path_base(path) if client.path_base is not None else None
    target = Target(path, query, client.path, same, upstream_path, project, base)
    if body is None:
        body = upstream.encode_request(req, notes)
        if upstream.envelope is not None:
            body = upstream.envelope(body, req, target)
    out = body
    new_path, new_query = upstream.placement(req, target)
    if client.key_query is not None:
        # The client's key travels in a header of the upstream's dialect (or is replaced by
        # the route's), the same dialect's too (Gemini reads x-goog-api-key as it reads
        # ?key=): its query parameter must reach neither the upstream nor a URL mitmproxy
        # prints. A parameter the route's upstream_path sets itself is the route's, and stays.
        theirs = {(k, v) for k, v in query if k == client.key_query}
        new_query = tuple(kv for kv in new_query if kv not in theirs)
    if withhold_key:
        # Whatever the dialects, no key-named parameter of the client's goes to another host
        # (a route's upstream_path may set its own: those stay).
        theirs = {(k, v) for k, v in query if k.lower() in KEY_PARAMETERS}
        new_query = tuple(kv for kv in new_query if kv not in theirs)
    if not same and query and new_query != query:
        notes[f"query parameters of the {client.name} client dropped"] += 1
    set_headers, drop = credentials(
        client, upstream, headers, route_key, notes, query, withhold_key
    )
    setting = {k for k, _ in set_headers}
    if not same:
        for k, v in upstream.fixed_headers:
            if k not in headers and k not in setting:
                set_headers += ((k, v),)
        own = tuple(
            h
            for h in headers
            if any(h.startswith(p) for p in client.own_headers) and h not in setting
        )
        upstream_own = {k for k, _ in upstream.fixed_headers}
        own = tuple(h for h in own if h not in upstream_own)
        if own:
            notes[f"{client.name} headers removed"] += len(own)
        drop += own
    return WireRequest(out, new_path, new_query, set_headers, tuple(dict.fromkeys(drop)))


KEY_PARAMETERS: frozenset[str] = frozenset(
    {"key", "api_key", "api-key", "apikey", "access_token", "token"}
    | {d.key_query for d in DIALECTS.values() if d.key_query is not None}
)
"""Query parameters a client may carry a credential in (Gemini's ``?key=``)."""


def secret_values(headers: Mapping[str, str], query: Query, *keys: str | None) -> Secrets:
    """The exact credential values of a flow, for redaction (``addon.redact.Secrets``): every
    credential header the client sent (a scheme's token on its own too), its key-named query
    parameters, and ``keys`` (the route's ``api_key_env`` value, a Kiro token)."""
    values: list[str | None] = list(keys)
    for name in CREDENTIAL_HEADERS:
        value = headers.get(name, "").strip()
        if value:
            values.append(value)
            scheme, _, token = value.partition(" ")
            if token.strip() and scheme.lower() in ("bearer", "basic", "token"):
                values.append(token.strip())
    values += [v for k, v in query if k.lower() in KEY_PARAMETERS]
    return Secrets(values)
