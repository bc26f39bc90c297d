"""Kiro's (AWS's) exception names by HTTP status, both ways: the one table of the Kiro dialect.

Contract: plain values. ``status_of(name)`` is the HTTP status AWS sends an exception with;
``error_type(status)`` the name for a status (Kiro is upstream-only: the bridge never writes it
to a client, but a dialect's table goes both ways)."""

from __future__ import annotations

from typing import Any

STATUSES: dict[str, int] = {
    "ValidationException": 400,
    "UnauthorizedException": 401,
    "ExpiredTokenException": 401,
    "AccessDeniedException": 403,
    "ResourceNotFoundException": 404,
    "ConflictException": 409,
    "ThrottlingException": 429,
    "ServiceQuotaExceededException": 429,
    "InternalServerException": 500,
    "ServiceUnavailableException": 503,
}

TYPES: dict[int, str] = {
    400: "ValidationException",
    401: "UnauthorizedException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    409: "ConflictException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def error_type(status: int) -> str:
    return TYPES.get(status) or (
        "InternalServerException" if status >= 500 else "ValidationException"
    )


def status_of(name: Any) -> int | None:
    """The status of an exception name, with or without its namespace (``…#Name``). Kiro
    reports an error as an AWS exception: the ``__type`` of a JSON error body
    (``"com.amazon.aws.codewhisperer#ThrottlingException"``) or the ``exceptionType`` of an
    exception frame in its stream."""
    if not isinstance(name, str):
        return None
    return STATUSES.get(name.rsplit("#", 1)[-1])


def body_status(body: Any) -> int | None:
    """The status a Kiro / AWS error body names by its ``__type``."""
    return status_of(body.get("__type")) if isinstance(body, dict) else None
