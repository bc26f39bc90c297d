"""Anthropic's error types by HTTP status, both ways: the one table of the Anthropic dialect.

Contract: plain values. ``error_type(status)`` is the ``error.type`` the bridge writes in an
Anthropic error body (``{"type": "error", "error": {type, message}}``) and in the ``error``
event that ends a stream; ``status_of(kind)`` reads a type an Anthropic upstream wrote back to
its status. The table: docs/dialects/anthropic.md#module-notes."""

from __future__ import annotations

from typing import Any

TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}

STATUSES: dict[str, int] = {kind: status for status, kind in TYPES.items() if status != 503}
"""An Anthropic error type → the status Anthropic sends it with."""


def error_type(status: int) -> str:
    """The ``error.type`` Anthropic writes for an error of this HTTP status."""
    return TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def status_of(kind: Any) -> int | None:
    return STATUSES.get(kind) if isinstance(kind, str) else None


def body_status(body: Any) -> int | None:
    """The status an Anthropic error body names by its type."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return status_of(body["error"].get("type"))
    return None


def error_body(message: str, status: int, kind: str | None = None) -> dict[str, Any]:
    """Anthropic's error object for ``status`` (``kind``: a type to write instead)."""
    return {"type": "error", "error": {"type": kind or error_type(status), "message": message}}
