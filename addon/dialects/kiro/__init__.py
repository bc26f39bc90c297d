"""Kiro (``kiro``): the CodeWhisperer ``generateAssistantResponse`` API behind the Kiro IDE.

An upstream-only dialect: Cursor, Claude Code and every other client reach Kiro's Claude
models through it; no route takes Kiro clients. The request is the IDE's ``conversationState``
body (``request_encode.py``); the answer is always AWS event-stream frames (``stream.py``),
streamed or assembled into a whole answer by the plan."""

from addon.dialects.base import Dialect, RouteFacts
from addon.model import Notes, Request

from .errors import body_status, error_type
from .placement import DESCRIPTION_LIMIT, PATH, framing, place, prepare
from .request import NAME, decode_request
from .request_encode import encode_request
from .response import (
    UPSTREAM_ONLY,
    decode_response,
    encode_error,
    encode_response,
    error_message,
)
from .stream import KiroStreamDecoder, KiroStreamEncoder

CONTENT_TYPE = "application/vnd.amazon.eventstream"
"""The answer's type, streamed or not: AWS event-stream frames (framing ``aws_eventstream``:
split by ``addon.stream.eventstream``, decoded by ``stream.py``)."""


def prepare_for_route(req: Request, notes: Notes, route: RouteFacts) -> Request:
    return prepare(
        req,
        notes,
        keep_model=route.model_mapped,
        profile_arn=route.profile_arn,
        description_limit=route.description_limit or DESCRIPTION_LIMIT,
    )


# Placed at ``/generateAssistantResponse`` with the key as a Bearer token; a route may read the
# key from the Kiro IDE's token file (``token.py`` and the shell's ``kiro_auth``).
DIALECT = Dialect(
    name=NAME,
    path=PATH,
    decode_request=decode_request,
    encode_request=encode_request,
    decode_response=decode_response,
    encode_response=encode_response,
    stream_decoder=KiroStreamDecoder,
    stream_encoder=KiroStreamEncoder,
    encode_error=encode_error,
    error_message=error_message,
    error_type=error_type,
    error_status=body_status,
    place=place,
    key_headers=("authorization",),
    auth_header="authorization",
    own_headers=("x-amzn-kiro-", "x-amzn-codewhisperer-"),
    fixed_headers=(("x-amzn-kiro-agent-mode", "vibe"),),
    framing=framing,
    route_keys=frozenset({"profile_arn", "token_file", "refresh_url", "description_limit"}),
    schema_profile="strict",
    reasoning_switch=False,
    answer_text_calls="bracket",
    prepare=prepare_for_route,
    counts_tokens=False,
)

__all__ = ["CONTENT_TYPE", "DIALECT", "NAME", "UPSTREAM_ONLY"]
