"""Headers as mitmproxy holds them (bytes, repeated names): read into a plain map, replaced in
one pass; and the content type of a JSON answer.

One pass because ``Headers.pop`` and ``[]=`` each search every field.
"""

from __future__ import annotations

from collections.abc import Iterable

from mitmproxy import http


def replace_headers(
    headers: http.Headers, drop: Iterable[str], put: Iterable[tuple[str, str]]
) -> None:
    """Every header named in ``drop`` or ``put`` removed, then ``put``'s added (a name put
    twice: the last value), in one pass over the fields."""
    new = {name.lower(): (name, value) for name, value in put}
    gone = {name.lower() for name in drop} | new.keys()
    kept = [(k, v) for k, v in headers.fields if _native(k).lower() not in gone]
    kept += [(_raw(name), _raw(value)) for name, value in new.values()]
    headers.fields = tuple(kept)


def _native(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _raw(s: str) -> bytes:
    """A header name or value as mitmproxy stores it."""
    return s.encode("utf-8", "surrogateescape")


def header_map(headers: http.Headers) -> dict[str, str]:
    """Names lower-cased; repeated headers joined with ", " (the values may be secrets)."""
    out: dict[str, str] = {}
    for k, v in headers.fields:
        name, value = _native(k).lower(), _native(v)
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def is_json(resp: http.Response) -> bool:
    ctype = resp.headers.get("content-type", "").lower()
    return ctype.startswith("application/json") or "+json" in ctype


def json_response(status: int, body: bytes) -> http.Response:
    return http.Response.make(status, body, {"content-type": "application/json"})
