"""A route's ``upstream_url``: checked when the routes are read, parsed once (``UpstreamURL``:
where the shell sends the request and the prefix joined before the upstream dialect's path).

Contract: plain values; ``ValueError`` saying what is wrong."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class UpstreamURL:
    """A route's ``upstream_url``, parsed: where the shell sends the request, and the prefix
    joined before the path the upstream dialect places the request at."""

    scheme: Literal["http", "https"]
    host: str
    """Lower case, IPv6 without brackets."""
    port: int
    """The scheme's default (443, 80) when the URL names none."""
    prefix: str = ""
    """``/api`` of ``https://openrouter.ai/api`` (no trailing slash); ``""``: none."""

    def join(self, path: str) -> str:
        return self.prefix + path if self.prefix else path


@lru_cache(maxsize=256)
def parse_upstream_url(v: str) -> UpstreamURL:
    """``http(s)://host[:port][/prefix]`` → ``UpstreamURL``; ``ValueError`` saying what is
    wrong (not http/https, no host, a query or fragment, a bad port, credentials)."""
    try:
        parts = urlsplit(v.strip())
        port = parts.port
    except ValueError as e:
        raise ValueError(f"not a URL with a valid port ({e})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("must be an http:// or https:// URL (https://host[:port][/prefix])")
    host = parts.hostname
    if not host:
        raise ValueError("names no host (https://host[:port][/prefix])")
    if parts.query or parts.fragment or "?" in v or "#" in v:
        raise ValueError("must not have a query or fragment (https://host[:port][/prefix])")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not hold credentials (use api_key_env)")
    if port == 0:
        raise ValueError("port 0 is not a port")
    if any(c.isspace() for c in v.strip()) or re.search(r"[^A-Za-z0-9.\-:_]", host):
        raise ValueError(f"host {host!r} is not a host name or address")
    scheme: Literal["http", "https"] = "https" if parts.scheme == "https" else "http"
    default = 443 if scheme == "https" else 80
    return UpstreamURL(scheme, host.lower(), port or default, parts.path.rstrip("/"))


def upstream_url(v: str | None) -> str | None:
    if v is not None:
        parse_upstream_url(v)
    return v


def http_url(v: str | None) -> str | None:
    if v is not None and not re.match(r"https?://[^/\s]+", v):
        raise ValueError("must be an http:// or https:// URL")
    return v
