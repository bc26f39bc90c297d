"""The upstream request set on a flow from a decision: body, path and query, address, headers.

Shared by the request addon (the first route) and the fallback addon (each next route's
request, from the client's as it came).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from mitmproxy import http

from addon.shell.headers import replace_headers

if TYPE_CHECKING:
    from addon.dialects.base import WireRequest
    from addon.plan import Incoming, Rewrite


def apply_rewrite(req: http.Request, incoming: Incoming, d: Rewrite) -> None:
    """The decision's upstream request set on ``req`` (the client's request as it came): body,
    path and query, address (a route's ``upstream_url``), headers."""
    if d.body is not incoming.body:  # else the client's bytes go on as they came
        req.content = d.body
    place(req, incoming, d.wire, ("accept-encoding", "identity"))


def origin(request: http.Request) -> str:
    """``scheme://host:port`` of a request (no path: a path may carry a key)."""
    host = f"[{request.host}]" if ":" in request.host else request.host
    return f"{request.scheme}://{host}:{request.port}"


def place(
    req: http.Request, incoming: Incoming, wire: WireRequest, *extra: tuple[str, str]
) -> None:
    """The upstream request's path, query, address and headers, as ``wire`` says (a request
    passed through untouched gets this too: its route's ``upstream_url`` and key rules)."""
    if (wire.path, wire.query) != (incoming.bare_path, incoming.query):
        # surrogateescape: bytes of the client's query that are not UTF-8 go back as sent
        query = urlencode(wire.query, encoding="utf-8", errors="surrogateescape")
        req.path = wire.path + (f"?{query}" if wire.query else "")
    if wire.origin is not None:
        # A route's upstream_url: mitmproxy connects there (TLS verified as for any
        # upstream, SNI the new host) and the Host header / :authority follow the host.
        req.scheme, req.host, req.port = wire.origin
    replace_headers(req.headers, wire.drop_headers, (*wire.set_headers, *extra))
