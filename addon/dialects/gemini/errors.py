"""Google's error statuses by HTTP status, both ways: the one table of the Gemini dialects.

Contract: plain values. A Google error is ``{"error": {"code": <HTTP status>, "message",
"status": <canonical code name>}}``; ``error_type(status)`` is the name the bridge writes for
an HTTP status (in whole bodies and in the error chunk that ends a stream), ``status_of``
reads a name (or the ``code`` number) back. The table: docs/dialects/gemini.md#module-notes."""

from __future__ import annotations

from typing import Any

TYPES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
    529: "UNAVAILABLE",
}

STATUSES: dict[str, int] = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ABORTED": 409,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INTERNAL": 500,
    "DATA_LOSS": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
"""A canonical code name → the HTTP status Google sends it with."""


def error_type(status: int) -> str:
    """The ``status`` name Google writes for an error of this HTTP status."""
    return TYPES.get(status) or ("INTERNAL" if status >= 500 else "INVALID_ARGUMENT")


def status_of(err: Any) -> int | None:
    """The HTTP status of a Google ``error`` object: its ``code``, else its ``status`` name."""
    if not isinstance(err, dict):
        return None
    code = err.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return code
    name = err.get("status")
    return STATUSES.get(name) if isinstance(name, str) else None


def error_body(message: str, status: int, kind: str | None = None) -> dict[str, Any]:
    """Google's error object for ``status`` (``kind``: a status name to write instead)."""
    return {"error": {"code": status, "message": message, "status": kind or error_type(status)}}
