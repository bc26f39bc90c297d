"""The Responses API's errors: OpenAI's table (``openai_chat.errors``) for error bodies, and
the ``code`` of a failed response.

Contract: plain values. An error body of the Responses API is OpenAI's
(``{"error": {message, type, param, code}}``, the same types by status); a stream ends in
``response.failed`` whose ``response.error`` is ``{code, message}``, from a closed list."""

from __future__ import annotations

from typing import Any

from addon.dialects.openai_chat import errors
from addon.dialects.openai_chat.errors import body_status, error_body, error_code, error_type

_CLIENT_CODES = [
    "invalid_prompt",
    "data_residency_mismatch",
    "bio_policy",
    "misalignment_policy_violation",
    "invalid_image",
    "invalid_image_format",
    "invalid_base64_image",
    "invalid_image_url",
    "image_too_large",
    "image_too_small",
    "image_parse_error",
    "image_content_policy_violation",
    "invalid_image_mode",
    "image_file_too_large",
    "unsupported_image_media_type",
    "empty_image_file",
    "failed_to_download_image",
    "image_file_not_found",
]

FAILED_STATUSES: dict[str, int] = {
    "server_error": 500,
    "rate_limit_exceeded": 429,
    "vector_store_timeout": 504,
    **dict.fromkeys(_CLIENT_CODES, 400),
}
"""``response.error.code`` → the status it stands for. A closed list (the official SDK's
``ResponseError.code``): beyond the three ``failed_code`` writes, it names image and
vector-store problems, all client errors."""


def failed_code(status: int) -> str:
    """The ``response.error.code`` of a failed response for an error of this status:
    ``rate_limit_exceeded`` for a 429, ``server_error`` for a failure of the service,
    ``invalid_prompt`` for what the request itself caused."""
    if status == 429:
        return "rate_limit_exceeded"
    return "server_error" if status >= 500 else "invalid_prompt"


def status_of(*kinds: Any) -> int | None:
    """The status a code or type of a Responses upstream stands for (``error`` events and
    ``response.failed``)."""
    for kind in kinds:
        if isinstance(kind, str) and kind in FAILED_STATUSES:
            return FAILED_STATUSES[kind]
    return errors.status_of(*kinds)


__all__ = ["body_status", "error_body", "error_code", "error_type", "failed_code", "status_of"]
