"""Anthropic Messages SSE (an Anthropic upstream) → unified stream events.

Contract: sans-IO. ``AnthropicStreamDecoder.feed`` takes one SSE event's data (and name) and
returns unified events; ``finish()`` ends a stream that was cut with a ``StreamError``.
Blocks the model knows (text, thinking, tool_use) become deltas and tool-call events, the rest
``RawEvent``s only the Anthropic encoder re-emits. The encoder is in ``stream_encode.py``."""

from __future__ import annotations

import json
from typing import Any

from addon.jsonio import loads
from addon.model import (
    JSON,
    STREAM_CUT,
    Event,
    Finish,
    MessageStart,
    RawEvent,
    StreamEnd,
    StreamError,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UnsupportedShape,
    UsageEvent,
)

from .errors import status_of
from .request import NAME
from .response import decode_usage, finish_reason

_BLOCK_FIELDS = {
    "tool_use": ("type", "id", "name", "input"),
    "text": ("type", "text"),
    "thinking": ("type", "thinking", "signature"),
}


class AnthropicStreamDecoder:
    """Anthropic upstream SSE → unified events (tool indexes are the block indexes).

    Blocks the unified model knows (text, thinking, tool_use) become deltas and
    tool-call events; other blocks (``redacted_thinking``, ``server_tool_use``,
    ``web_search_tool_result`` …) and unknown events become ``RawEvent``s that
    only the Anthropic encoder re-emits. ``ping`` carries nothing.
    """

    fast_path: None = None
    """Nothing for the fast path (``StreamDecoder``, ``StreamEncoder``)."""

    def __init__(self) -> None:
        self._blocks: dict[int, str] = {}
        self._block_extra: JSON = {}
        """Unknown fields of the text/thinking block just started, for its first delta."""
        self._ended = False
        """``message_stop``, a stop reason or an error was read: the stream was not cut."""

    def _extra(self) -> JSON:
        if not self._block_extra:
            return {}
        extra, self._block_extra = {NAME: {"block": self._block_extra}}, {}
        return extra

    def feed(self, data: str, event: str | None) -> list[Event]:
        try:
            payload: Any = loads(data)
        except ValueError as e:
            raise UnsupportedShape(f"Anthropic event is not JSON: {data[:60]!r}") from e
        if not isinstance(payload, dict):
            raise UnsupportedShape("Anthropic event is not an object")
        # llama-server ends a stream with ``event: error`` and the error object itself as its
        # data (``{"code", "message", "type": "server_error"}``, no wrapper): the name says it.
        kind = "error" if event == "error" else payload.get("type", event)
        match kind:
            case "message_start":
                message = payload.get("message")
                if not isinstance(message, dict):
                    raise UnsupportedShape("message_start without a message")
                self._blocks = {}  # a spliced second message_start numbers blocks from 0 again
                out: list[Event] = [
                    MessageStart(
                        NAME,
                        id=message.get("id") if isinstance(message.get("id"), str) else None,
                        model=message.get("model")
                        if isinstance(message.get("model"), str)
                        else None,
                        envelope=message,
                    )
                ]
                if isinstance(message.get("usage"), dict):
                    out.append(UsageEvent(decode_usage(message["usage"])))
                return out
            case "content_block_start":
                return self._block_start(payload)
            case "content_block_delta":
                return self._block_delta(payload)
            case "content_block_stop":
                self._block_extra = {}
                index = payload.get("index")
                match self._blocks.get(index) if isinstance(index, int) else None:
                    case "tool_use":
                        return [ToolCallEnd(index)] if isinstance(index, int) else []
                    case _:
                        # Text and thinking blocks too: an Anthropic encoder keeps the
                        # boundary between two text blocks (web search answers have many).
                        return [RawEvent(NAME, payload)]
            case "message_delta":
                out = []
                delta = payload.get("delta")
                delta = delta if isinstance(delta, dict) else {}
                if isinstance(payload.get("usage"), dict):
                    out.append(UsageEvent(decode_usage(payload["usage"])))
                reason = delta.get("stop_reason")
                if isinstance(reason, str):
                    self._ended = True
                    # stop_sequence, container, context_management (the vercel-ai thinking
                    # recordings), …: written back by the Anthropic encoder only.
                    wire = {
                        "delta": {k: v for k, v in delta.items() if k != "stop_reason"},
                        "event": {
                            k: v for k, v in payload.items() if k not in ("type", "delta", "usage")
                        },
                    }
                    out.append(Finish(finish_reason(reason), raw=reason, extra={NAME: wire}))
                return out
            case "message_stop":
                self._ended = True
                return [StreamEnd()]
            case "ping":
                return []
            case "error":
                self._ended = True
                return [_stream_error(payload)]
        return [RawEvent(NAME, payload)]

    def _block_start(self, payload: JSON) -> list[Event]:
        index, block = payload.get("index"), payload.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            raise UnsupportedShape("content_block_start without an index or a block")
        kind = str(block.get("type"))
        self._blocks[index] = kind
        rest = {k: v for k, v in block.items() if k not in _BLOCK_FIELDS.get(kind, ())}
        self._block_extra = {}
        match kind:
            case "tool_use":
                tool_input = block.get("input")
                args = ""
                if isinstance(tool_input, dict) and tool_input:  # input given whole at start
                    args = json.dumps(tool_input, ensure_ascii=False)
                return [
                    ToolCallStart(
                        index,
                        str(block.get("id", "")),
                        str(block.get("name", "")),
                        args,
                        # ``caller`` (recording anthropic-…-text-then-tool_use-input_json_delta)
                        extra={NAME: rest} if rest else {},
                    )
                ]
            case "text":
                self._block_extra = rest
                text = block.get("text")
                return (
                    [TextDelta(text, extra=self._extra())] if isinstance(text, str) and text else []
                )
            case "thinking":
                self._block_extra = rest
                thinking, signature = block.get("thinking"), block.get("signature")
                text = thinking if isinstance(thinking, str) else ""
                sig = signature if isinstance(signature, str) and signature else None
                if not text and not sig:
                    return []
                return [ThinkingDelta(text, signature=sig, extra=self._extra())]
            case _:
                return [RawEvent(NAME, payload)]

    def _block_delta(self, payload: JSON) -> list[Event]:
        index, delta = payload.get("index"), payload.get("delta")
        if not isinstance(index, int) or not isinstance(delta, dict):
            raise UnsupportedShape("content_block_delta without an index or a delta")
        match self._blocks.get(index), delta.get("type"):
            case "text", "text_delta":
                return [TextDelta(str(delta.get("text", "")), extra=self._extra())]
            case "thinking", "thinking_delta":
                return [ThinkingDelta(str(delta.get("thinking", "")), extra=self._extra())]
            case "thinking", "signature_delta":
                signature = delta.get("signature")
                if not isinstance(signature, str) or not signature:
                    return []  # llama-server's "": no signature, never one to send back
                return [ThinkingDelta("", signature=signature, extra=self._extra())]
            case "tool_use", "input_json_delta":
                # Anthropic opens every tool block with partial_json "" (same recording);
                # the encoder sends no empty fragments.
                return [ToolCallArgsDelta(index, str(delta.get("partial_json", "")))]
            case _:
                return [RawEvent(NAME, payload)]

    def finish(self) -> list[Event]:
        """A stream that ended without ``message_stop``, a stop reason or an error was cut."""
        if self._ended:
            return []
        self._ended = True
        return [StreamError(STREAM_CUT, "upstream_cut")]


def _stream_error(payload: JSON) -> StreamError:
    """An ``error`` event: Anthropic's ``{"type": "error", "error": {type, message}}``, or
    llama-server's bare ``{"code", "message", "type"}`` (its status: ``code``, else its type).
    Only Anthropic's own shape is kept to be written back as it came."""
    wrapped = isinstance(payload.get("error"), dict)
    err: JSON = payload["error"] if wrapped else payload
    err_type, message, code = err.get("type"), err.get("message"), err.get("code")
    status = status_of(err_type)
    if status is None and isinstance(code, int) and not isinstance(code, bool):
        status = code if 400 <= code <= 599 else None
    return StreamError(
        message if isinstance(message, str) else "",
        err_type if isinstance(err_type, str) else None,
        origin=NAME,
        raw=payload if wrapped else {},
        status=status,
    )
