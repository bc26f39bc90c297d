"""OpenAI's ``POST /v1/responses/input_tokens`` for a client's count_tokens request (Claude
Code on a Responses route asks before it compacts a conversation).

Contract: pure. ``count_request`` turns the unified request into the counting call (the body
``responses.create`` would get, less what only generating needs: the endpoint takes the
conversation, instructions, tools and reasoning); ``count_answer`` reads ``input_tokens``
back (``None`` when the answer holds no count)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from addon.dialects.base import Query, Target
from addon.model import JSON, Notes, Request

from .request_encode import encode_request

COUNTED = (
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "truncation",
    "conversation",
    "previous_response_id",
)
"""The fields ``input_tokens`` takes (the openai SDK's ``responses.input_tokens.count``)."""
SUFFIX = "/input_tokens"


def count_request(req: Request, t: Target, dialect: str, notes: Notes) -> tuple[str, Query, JSON]:
    """``(path, query, body)`` of the upstream's ``…/responses/input_tokens`` call: beside
    the route's ``upstream_path`` when it has one, else the client's path with its endpoint
    swapped for ``/responses``."""
    body = encode_request(req, notes)
    counted = {k: body[k] for k in COUNTED if k in body}
    if t.upstream_path:
        path, _, query = t.upstream_path.partition("?")
        return path.rstrip("/") + SUFFIX, _query(query), counted
    path = t.path
    if t.client_suffix and path.endswith(t.client_suffix):
        path = path[: -len(t.client_suffix)]
    return f"{path.rstrip('/')}/responses{SUFFIX}", (), counted


def _query(text: str) -> Query:
    return tuple(parse_qsl(text, keep_blank_values=True))


def count_answer(body: Any) -> int | None:
    """``input_tokens`` of the answer (``{"object": "response.input_tokens", …}``)."""
    total = body.get("input_tokens") if isinstance(body, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else None
