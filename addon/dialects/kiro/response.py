"""Kiro answers: errors, and what a Kiro client would get (nothing: Kiro is upstream-only).

Contract: JSON in, plain values out; no I/O. Kiro answers only in AWS event-stream frames
(``stream.py``), so ``decode_response`` refuses a JSON body on a 2xx; ``encode_response`` and
the stream encoder raise ``UnsupportedShape`` (no route takes Kiro clients). Details:
docs/dialects/kiro.md#module-notes."""

from __future__ import annotations

from typing import Any

from addon.model import (
    JSON,
    ClientError,
    Response,
    UnsupportedShape,
)

UPSTREAM_ONLY = "kiro is an upstream-only dialect: the bridge does not answer Kiro clients"


def decode_response(body: JSON) -> Response:
    message = error_message(body)
    if message is not None:
        raise UnsupportedShape(f"the Kiro upstream answered an error: {message}")
    raise UnsupportedShape(
        "Kiro answers in AWS event-stream frames (application/vnd.amazon.eventstream), not JSON"
    )


def encode_response(resp: Response) -> JSON:
    raise UnsupportedShape(UPSTREAM_ONLY)


def encode_error(err: ClientError) -> JSON:
    """Kiro's error shape: ``{"message", "reason"}``."""
    return {"message": err.message, "reason": err.code}


def error_message(body: Any) -> str | None:
    """The message of a Kiro / AWS error body, with its exception type when it names one."""
    if not isinstance(body, dict):
        return None
    message = body.get("message", body.get("Message"))
    if not isinstance(message, str) or not message:
        return None
    kind = body.get("__type")
    if isinstance(kind, str) and kind:
        return f"{kind.rsplit('#', 1)[-1]}: {message}"
    reason = body.get("reason")
    if isinstance(reason, str) and reason:
        return f"{message} ({reason})"
    return message
