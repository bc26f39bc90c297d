"""Gemini whole answers (``GenerateContentResponse``) ↔ ``addon.model.Response``.

Being written (issue 9): see the contract in ``__init__``.
"""

from __future__ import annotations

from typing import Any

from addon.model import JSON, ClientError, Response


def decode_response(body: JSON) -> Response:
    """A ``generateContent`` answer, public or Code Assist-wrapped (``{"response": …}``)."""
    raise NotImplementedError


def encode_response(r: Response) -> JSON:
    """A ``generateContent`` answer for a public-API Gemini client."""
    raise NotImplementedError


def encode_code_assist_response(r: Response) -> JSON:
    """The same, wrapped as Code Assist answers (``{"response": {…}}``)."""
    raise NotImplementedError


def encode_error(err: ClientError) -> JSON:
    """``{"error": {"code", "message", "status"}}``."""
    raise NotImplementedError


def error_message(body: Any) -> str | None:
    raise NotImplementedError
