"""mitmproxy's ``allow_hosts`` / ``ignore_hosts``, applied to one request (``outside_proxy_hosts``).

In regular mode these options only decide TLS interception, but a plain-HTTP flow reaches the
addons whatever they say: every addon asks here before it touches a flow.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from mitmproxy import ctx, http


def outside_proxy_hosts(flow: http.HTTPFlow) -> bool:
    """True when mitmproxy's ``allow_hosts`` / ``ignore_hosts`` leave this flow alone.

    mitmproxy applies them to connections (TLS interception, reverse targets), but a
    plain-HTTP request through a regular proxy reaches addons whatever they say; the
    bridge applies them itself, matched the way mitmproxy matches (``next_layer``: a
    regex searched, case-insensitively, in ``host:port`` of the request's host, its
    Host header and the server's address)."""
    try:
        allow, ignore = ctx.options.allow_hosts, ctx.options.ignore_hosts
    except (AttributeError, KeyError):
        return False
    if not allow and not ignore:
        return False
    req = flow.request
    names = [f"{req.host}:{req.port}"]
    host_header = req.host_header
    if host_header:
        names.append(host_header if _has_port(host_header) else f"{host_header}:{req.port}")
    address = flow.server_conn.peername or flow.server_conn.address
    if address:
        names.append(f"{address[0]}:{address[1]}")
    return proxy_excludes(names, tuple(allow), tuple(ignore))


def _has_port(host: str) -> bool:
    head, sep, port = host.rpartition(":")
    return bool(sep) and port.isdigit() and not head.endswith(":")


def proxy_excludes(names: Sequence[str], allow: Sequence[str], ignore: Sequence[str]) -> bool:
    """Whether mitmproxy's ``allow_hosts`` / ``ignore_hosts`` leave a request alone.

    ``names`` are the request's ``host:port`` forms (host, Host header, server address).
    Matched as mitmproxy matches connections (``addons/next_layer.py``): each option value
    is a regex searched case-insensitively; with ``allow`` set, one must match one of the
    names; any ``ignore`` match excludes. A regex that does not compile matches nothing
    (mitmproxy itself refuses it at start)."""
    if allow and not any(_search(rex, n) for rex in allow for n in names):
        return True
    return any(_search(rex, n) for rex in ignore for n in names)


@lru_cache(maxsize=256)
def _compiled(rex: str) -> re.Pattern[str] | None:
    try:
        return re.compile(rex, re.IGNORECASE)
    except re.error:
        return None


def _search(rex: str, name: str) -> bool:
    pattern = _compiled(rex)
    return pattern is not None and pattern.search(name) is not None
