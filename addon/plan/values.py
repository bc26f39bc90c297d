"""The plain values a plan is made of and speaks in: the client's request, the
upstream's in-framing errors, a route's own credentials, and strict JSON in and out
(``load_json`` refuses ``NaN``, ``Infinity`` and floats that overflow; ``dump`` never
writes them). Text quoted from input goes through ``short`` (redacted, escaped, cut)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from addon.dialects import Dialect
from addon.dialects.base import Framing, Query
from addon.jsonio import dumpb, loads
from addon.model import (
    ClientError,
    UnsupportedShape,
)
from addon.redact import clean

MAX_REASON = 200
"""Reasons and messages quoted from input are cut to this many characters."""
SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError)
"""What a lenient codec raises on a shape it did not foresee (a value of another type
where it expected an object): the body is not understood, like ``UnsupportedShape`` —
passed on (same dialect) or a 400 (another), never a traceback."""
MAX_ERROR_QUOTE = 500
"""Characters of an upstream's unreadable error body quoted in the client's error."""


@dataclass(frozen=True, slots=True)
class Incoming:
    """The client's request as plain values. ``headers`` may hold keys: never shown."""

    method: str
    host: str
    path: str
    """Path and query, as sent."""
    headers: Mapping[str, str] = field(repr=False)
    """Names lower-case."""
    body: bytes = field(repr=False, default=b"")
    port: int | None = None
    """The port the client addressed (or the reverse target's); None: not known, the host
    alone says whether a route's ``upstream_url`` is another place."""

    @property
    def bare_path(self) -> str:
        return self.path.split("?", 1)[0]

    @property
    def query(self) -> Query:
        from urllib.parse import parse_qsl

        q = self.path.partition("?")[2]
        # surrogateescape: a %FF (not UTF-8) survives the trip back (the shell encodes alike)
        return tuple(parse_qsl(q, keep_blank_values=True, errors="surrogateescape")) if q else ()


class UpstreamError(UnsupportedShape):
    """A whole answer that is an upstream error in its stream framing (a Kiro exception frame):
    the client gets it in its dialect with ``status``."""

    def __init__(self, message: str, status: int, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


@dataclass(frozen=True, slots=True)
class RouteCredentials:
    """A key the shell read for the route (a Kiro token file's access token), sent upstream
    instead of the client's; never shown."""

    key: str = field(repr=False)
    profile_arn: str | None = None


CONTENT_TYPES: dict[Framing, str] = {
    "sse": "text/event-stream; charset=utf-8",
    "json_array": "application/json",
    "aws_eventstream": "application/vnd.amazon.eventstream",
}
"""The content type of a stream in each framing."""


def error_bytes(client: Dialect, e: ClientError) -> bytes:
    """The client dialect's error body; its own shape always (a message that will not encode
    is replaced by one that does)."""
    try:
        return dump(client.encode_error(e))
    except (ValueError, RecursionError):
        plain = ClientError(
            clean(e.message, MAX_ERROR_QUOTE), status=e.status, code=e.code, type=e.type
        )
        return dump(client.encode_error(plain))


def dump(body: Any) -> bytes:
    """Strict JSON for the wire: UTF-8, compact. A lone surrogate (``"\\ud83d"`` in the input)
    cannot be UTF-8: then the whole body is written with ASCII escapes, still valid JSON.
    Raises ``RecursionError`` for data nested too deeply. What it writes was read by
    ``load_json``, which lets no ``NaN`` / ``Infinity`` in (``addon.jsonio``)."""
    return dumpb(body)


def load_json(raw: bytes | str) -> Any:
    """Strict JSON: UTF-8 only (RFC 8259; ``json.loads`` alone would take UTF-16/32 and
    surrogates encoded as UTF-8 bytes), no ``NaN``, ``Infinity``, ``-Infinity`` or floats
    that overflow (``1e400``): ``ValueError``, as for anything else ``json.loads`` refuses.
    Nesting too deep raises ``RecursionError``. Empty input is not JSON. A leading UTF-8
    byte order mark is ignored (RFC 8259 allows it)."""
    if isinstance(raw, bytes | bytearray):
        return loads(bytes(raw).removeprefix(b"\xef\xbb\xbf"))
    return loads(raw.removeprefix("\ufeff"))


def short(e: BaseException | str) -> str:
    """A message cut to ``MAX_REASON`` characters, safe to log and show whatever it holds:
    credentials redacted, surrogates and control characters escaped (``addon.redact``)."""
    return clean(e, MAX_REASON)


def tenths(seconds: float) -> str:
    """A duration for a log line, to a tenth of a second, rounded up (a cooldown is never said
    shorter than it is, nor ``0`` while it lasts): ``30``, ``0.4``, ``29.8``."""
    text = f"{math.ceil(round(seconds * 10, 6)) / 10:.1f}"
    return text.removesuffix(".0")
