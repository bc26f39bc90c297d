"""Gemini requests (``GenerateContentRequest``) ↔ ``addon.model.Request``; placement on the wire.

Being written (issue 9): see the contract in ``__init__``.
"""

from __future__ import annotations

from addon.dialects.base import Framing, PathFields, Query, Target
from addon.model import JSON, Notes, Request

NAME = "gemini"
CODE_ASSIST = "gemini_code_assist"


def decode_request(body: JSON, notes: Notes) -> Request:
    """A public-API body, or a Code Assist envelope ``{model, project, request: {…}}``."""
    raise NotImplementedError


def encode_request(req: Request, notes: Notes) -> JSON:
    raise NotImplementedError


def place_public(req: Request, t: Target) -> tuple[str, Query]:
    """``…/v1beta/models/{model}:streamGenerateContent?alt=sse`` or ``:generateContent``."""
    raise NotImplementedError


def place_code_assist(req: Request, t: Target) -> tuple[str, Query]:
    """``…/v1internal:streamGenerateContent?alt=sse`` or ``:generateContent``."""
    raise NotImplementedError


def code_assist_envelope(body: JSON, req: Request, t: Target) -> JSON:
    """``{model, project, user_prompt_id, request: body}``."""
    raise NotImplementedError


def from_path(path: str, query: Query) -> PathFields:
    """The model and whether it streams, from a Gemini client's path."""
    raise NotImplementedError


def framing(query: Query) -> Framing:
    return "sse" if ("alt", "sse") in query else "json_array"
