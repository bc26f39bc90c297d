"""Gemini: the public API (``gemini``) and Code Assist / Antigravity (``gemini_code_assist``).

Both speak the same ``contents`` / ``parts`` JSON; Code Assist wraps the request as
``{model, project, user_prompt_id, request: {…}}`` and every answer as ``{"response": {…}}``,
and takes a Bearer token where the public API takes ``x-goog-api-key``. Streams are SSE with
``alt=sse`` and one JSON array without it (``framing``)."""

from addon.dialects.base import Dialect, TokenCount

from .errors import error_type
from .parts import CODE_ASSIST, NAME
from .placement import (
    code_assist_envelope,
    framing,
    from_path,
    path_base,
    place_code_assist,
    place_public,
)
from .request import decode_request
from .request_encode import encode_request, runs_tool
from .response import (
    decode_response,
    encode_code_assist_response,
    encode_error,
    encode_response,
    error_message,
    error_status,
)
from .stream import GeminiStreamDecoder
from .stream_encode import CodeAssistStreamEncoder, GeminiStreamEncoder
from .tokens import count_answer, count_request
from .web_search import SEARCH

TOKEN_COUNT = TokenCount(count_request, count_answer)

# As clients: Gemini CLI (``/v1beta/models/{model}:streamGenerateContent?alt=sse``), whose
# model and streaming live in the path (``from_path``).
DIALECT = Dialect(
    name=NAME,
    reasoning="signed_parts",
    path=":generateContent",
    decode_request=decode_request,
    encode_request=encode_request,
    decode_response=decode_response,
    encode_response=encode_response,
    stream_decoder=GeminiStreamDecoder,
    stream_encoder=GeminiStreamEncoder,
    encode_error=encode_error,
    error_message=error_message,
    error_type=error_type,
    error_status=error_status,
    place=place_public,
    key_headers=("x-goog-api-key", "authorization"),
    key_query="key",
    auth_header="x-goog-api-key",
    own_headers=("x-goog-",),
    framing=framing,
    from_path=from_path,
    path_base=path_base,
    runs_tool=runs_tool,
    late_signatures=True,
    schema_profile="gemini",
    token_count=TOKEN_COUNT,
    web_search=SEARCH,
)

CODE_ASSIST_DIALECT = Dialect(
    name=CODE_ASSIST,
    reasoning="signed_parts",
    path=":generateContent",
    decode_request=decode_request,
    encode_request=encode_request,
    decode_response=decode_response,
    encode_response=encode_code_assist_response,
    stream_decoder=GeminiStreamDecoder,
    stream_encoder=CodeAssistStreamEncoder,
    encode_error=encode_error,
    error_message=error_message,
    error_type=error_type,
    error_status=error_status,
    place=place_code_assist,
    key_headers=("authorization",),
    auth_header="authorization",
    own_headers=("x-goog-",),
    framing=framing,
    envelope=code_assist_envelope,
    from_path=from_path,
    path_base=path_base,
    runs_tool=runs_tool,
    late_signatures=True,
    schema_profile="gemini",
    token_count=TOKEN_COUNT,
    web_search=SEARCH,
)

__all__ = ["CODE_ASSIST", "CODE_ASSIST_DIALECT", "DIALECT", "NAME"]
