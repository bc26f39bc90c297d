"""The Anthropic Messages dialect (``/v1/messages``): Claude Code and the anthropic SDK."""

from addon.dialects.base import Dialect
from addon.model import CacheMarks

from .errors import body_status, error_type
from .request import NAME, decode_request
from .request_encode import encode_request
from .response import decode_response, encode_error, encode_response, error_message
from .server_search import SEARCH
from .stream import AnthropicStreamDecoder
from .stream_encode import AnthropicStreamEncoder

DIALECT = Dialect(
    name=NAME,
    reasoning="signed_blocks",
    token_count_endpoint=True,
    path="/messages",
    decode_request=decode_request,
    encode_request=encode_request,
    decode_response=decode_response,
    encode_response=encode_response,
    stream_decoder=AnthropicStreamDecoder,
    stream_encoder=AnthropicStreamEncoder,
    encode_error=encode_error,
    error_message=error_message,
    error_type=error_type,
    error_status=body_status,
    # Claude Code sends x-api-key (ANTHROPIC_API_KEY) or Authorization: Bearer
    # (ANTHROPIC_AUTH_TOKEN); an Anthropic upstream wants x-api-key and a version.
    key_headers=("x-api-key", "authorization"),
    auth_header="x-api-key",
    fixed_headers=(("anthropic-version", "2023-06-01"),),
    own_headers=("anthropic-",),
    # Anthropic caches only up to a breakpoint: the bridge places them by default.
    cache_marks=CacheMarks(
        frozenset({"text", "image", "tool_call", "tool_result"}), tools=True, default="auto"
    ),
    web_search=SEARCH,
)

__all__ = ["DIALECT", "NAME"]
