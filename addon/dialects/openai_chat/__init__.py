"""The OpenAI ``chat/completions`` dialect, Cursor's variants included (see ``request``)."""

from addon.dialects.base import Dialect
from addon.model import CacheMarks

from .errors import body_status, error_type
from .request import NAME, decode_request
from .request_encode import encode_request
from .response import decode_response, encode_error, encode_response, error_message
from .stream import OpenAIChatStreamDecoder
from .stream_encode import OpenAIChatStreamEncoder

DIALECT = Dialect(
    name=NAME,
    reasoning="reasoning_fields",
    path="/chat/completions",
    decode_request=decode_request,
    encode_request=encode_request,
    decode_response=decode_response,
    encode_response=encode_response,
    stream_decoder=OpenAIChatStreamDecoder,
    stream_encoder=OpenAIChatStreamEncoder,
    encode_error=encode_error,
    error_message=error_message,
    error_type=error_type,
    error_status=body_status,
    # OpenRouter and LiteLLM take Anthropic's cache_control on content parts (for Anthropic
    # and Gemini models); strict gateways refuse it: only a route's word places them.
    cache_marks=CacheMarks(frozenset({"text", "tool_result"}), tools=False, default="drop"),
    cache_key=True,
)

__all__ = ["DIALECT", "NAME"]
