"""The OpenAI Responses dialect (``/v1/responses``): Codex CLI and the openai SDK's
``responses`` API, as a client and as an upstream (see ``request``, ``response``, ``stream``)."""

from addon.dialects.base import Dialect, TokenCount

from .errors import body_status, error_type
from .request import NAME, decode_request
from .request_encode import encode_request, runs_tool
from .response import decode_response, encode_error, encode_response, error_message
from .stream import OpenAIResponsesStreamDecoder
from .stream_encode import OpenAIResponsesStreamEncoder
from .tokens import count_answer, count_request
from .web_search import SEARCH

DIALECT = Dialect(
    name=NAME,
    reasoning="reasoning_items",
    path="/responses",
    decode_request=decode_request,
    encode_request=encode_request,
    decode_response=decode_response,
    encode_response=encode_response,
    stream_decoder=OpenAIResponsesStreamDecoder,
    stream_encoder=OpenAIResponsesStreamEncoder,
    encode_error=encode_error,
    error_message=error_message,
    error_type=error_type,
    error_status=body_status,
    # Codex's own headers (x-codex-turn-metadata holds installation and session ids) mean
    # nothing to another dialect's upstream.
    own_headers=("x-codex-",),
    runs_tool=runs_tool,
    # A reasoning item may follow the message (its encrypted_content alone, no summary).
    late_signatures=True,
    native_custom_tools=True,
    cache_key=True,
    # POST /v1/responses/input_tokens: Claude Code's count_tokens, counted by the upstream.
    token_count=TokenCount(count_request, count_answer),
    web_search=SEARCH,
)

__all__ = ["DIALECT", "NAME"]
