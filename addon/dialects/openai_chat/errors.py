"""OpenAI's error types by HTTP status, both ways: the one table of the OpenAI dialects.

Contract: plain values. ``error_type`` / ``error_code`` are what the bridge writes in an
OpenAI error body (``{"error": {message, type, param, code}}``) or in the error chunk that
ends a chat stream; ``status_of`` reads a type or code back. ``openai_responses`` uses the
same table. What OpenAI writes: docs/dialects/openai_chat.md#module-notes."""

from __future__ import annotations

from typing import Any

CLIENT_ERROR = "invalid_request_error"
RATE_LIMIT = "requests"
SERVER_ERROR = "server_error"

TYPES: dict[int, str] = {429: RATE_LIMIT}
"""Statuses whose type is not the default of their class (``invalid_request_error`` for
4xx, ``server_error`` for 5xx)."""

CODES: dict[int, str] = {429: "rate_limit_exceeded"}
"""The ``code`` OpenAI writes with a status, when the error has no code of its own."""

STATUSES: dict[str, int] = {
    # OpenAI's own types and codes
    "invalid_request_error": 400,
    "invalid_api_key": 401,
    "request_forbidden": 403,
    "unsupported_country_region_territory": 403,
    "model_not_found": 404,
    "requests": 429,
    "tokens": 429,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    # What OpenAI-compatible gateways write (LiteLLM, vLLM, OpenRouter): Anthropic-style names
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "rate_limit_error": 429,
    "api_error": 500,
    "internal_server_error": 500,
    "service_unavailable_error": 503,
    "overloaded_error": 503,
}
"""A type or code an OpenAI-compatible upstream writes → the status it stands for."""


def error_type(status: int) -> str:
    """The ``type`` OpenAI writes for an error of this HTTP status."""
    return TYPES.get(status) or (SERVER_ERROR if status >= 500 else CLIENT_ERROR)


def error_code(status: int) -> str | None:
    """The ``code`` OpenAI writes with this status when nothing more precise is known."""
    return CODES.get(status)


def status_of(*kinds: Any) -> int | None:
    """The status the first of ``kinds`` (a ``type``, a ``code`` an OpenAI-compatible upstream
    wrote) that names one stands for: one of the names above, or a status number (gateways
    write ``"code": 429`` or ``"429"``)."""
    for kind in kinds:
        if isinstance(kind, int) and not isinstance(kind, bool) and 400 <= kind <= 599:
            return kind
        if isinstance(kind, str):
            if kind.isdigit() and 400 <= int(kind) <= 599:
                return int(kind)
            if kind in STATUSES:
                return STATUSES[kind]
    return None


def body_status(body: Any) -> int | None:
    """The status an OpenAI error body (``{"error": {type, code}}``) names by its type or
    code: the more precise ``code`` first."""
    if not isinstance(body, dict):
        return None
    err = body.get("error")
    if not isinstance(err, dict):
        return None
    return status_of(err.get("code"), err.get("type"))


def error_body(
    message: str,
    status: int,
    *,
    code: str | None = None,
    param: str | None = None,
    kind: str | None = None,
) -> dict[str, Any]:
    """OpenAI's error object for ``status`` (``kind``: a type to write instead of the
    status's own)."""
    return {
        "error": {
            "message": message,
            "type": kind or error_type(status),
            "param": param,
            "code": code if code is not None else error_code(status),
        }
    }
