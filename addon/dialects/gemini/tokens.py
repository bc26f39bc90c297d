"""Gemini's ``countTokens`` for a client's count_tokens request (Anthropic clients on a Gemini
route: Claude Code asks before it compacts a conversation).

Contract: pure. ``count_request`` turns the unified request into the ``countTokens`` call of
the public API or of Code Assist; ``count_answer`` reads ``totalTokens`` back (``None`` when
the answer holds no count)."""

from __future__ import annotations

from typing import Any

from addon.dialects.base import Query, Target, endpoint_base
from addon.model import JSON, Notes, Request

from .parts import CODE_ASSIST
from .placement import bare_model
from .request_encode import encode_request


def count_request(req: Request, t: Target, dialect: str, notes: Notes) -> tuple[str, Query, JSON]:
    """``(path, query, body)`` of the upstream ``countTokens`` call: the public API's
    ``/v1beta/models/{model}:countTokens`` with ``generateContentRequest``, or Code Assist's
    ``/v1internal:countTokens`` with ``request``."""
    body = encode_request(req, notes)
    model = f"models/{bare_model(req.model)}"
    # countTokens takes the conversation, not how to generate it.
    counted = {k: body[k] for k in ("contents", "systemInstruction", "tools") if k in body}
    base = endpoint_base(t)
    if dialect == CODE_ASSIST:
        return f"{base}/v1internal:countTokens", (), {"request": {"model": model, **counted}}
    path = f"{base}/v1beta/models/{bare_model(req.model)}:countTokens"
    return path, (), {"generateContentRequest": {"model": model, **counted}}


def count_answer(body: Any) -> int | None:
    """``totalTokens`` of a ``countTokens`` answer (Code Assist's may be wrapped)."""
    if isinstance(body, dict) and isinstance(body.get("response"), dict):
        body = body["response"]
    total = body.get("totalTokens") if isinstance(body, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else None
