"""mitmproxy's ``allow_hosts`` / ``ignore_hosts``, applied to one request.

In regular mode these options only decide TLS interception; a plain-HTTP flow reaches the
addon whatever they say, so the shell asks ``proxy_excludes`` before it rewrites one. Plain
strings in, no mitmproxy here (the shell passes the option values and the request's names).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache


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
