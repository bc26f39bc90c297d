"""Anthropic Messages SSE ↔ unified stream events.

Contract: the encoder turns unified events into ``(event name, JSON data)``
pairs exactly as the Anthropic API sends them — ``message_start``, per block
``content_block_start`` / ``content_block_delta`` (``text_delta``,
``thinking_delta``, ``signature_delta``, ``input_json_delta``) /
``content_block_stop``, then ``message_delta`` (stop reason, output usage) and
``message_stop`` — which is what the anthropic SDKs' accumulators and Claude
Code expect. The decoder does the reverse for an Anthropic upstream. No bytes,
lines or sockets here.

Block numbering is the encoder's own (0, 1, 2 … in the order blocks open):
upstream tool-call indexes are mapped, since OpenAI-compatible gateways number
calls their own way (e.g. from 1 after text, see the recording
``openai-chat-stream-claude-text-then-tool_call-index1.vercel-ai.sse``). One
block is open at a time, as with Anthropic. An argument fragment that arrives
for a call whose block was already closed (an upstream interleaving parallel
calls) is still sent, addressed to that block's index: the SDKs accumulate
deltas by index, and dropping it would corrupt the call.

``message_delta`` / ``message_stop`` go out at the end of the stream, not on
the upstream's finish reason, because OpenAI sends usage in a chunk after it.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from addon.model import (
    JSON,
    Event,
    Finish,
    FinishReason,
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
    Usage,
    UsageEvent,
)

from .request import NAME
from .response import decode_usage, finish_reason, stop_reason

type Out = list[tuple[str | None, str]]


def _pair(name: str, data: JSON) -> tuple[str | None, str]:
    return name, json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class AnthropicStreamEncoder:
    def __init__(self) -> None:
        self._started = False
        self._done = False
        self._same = False
        self._message: JSON = {}
        self._next_index = 0
        self._open: tuple[Literal["text", "thinking", "tool"], int, int] | None = None
        """The open block: (kind, block index, unified tool index or -1)."""
        self._tool_blocks: dict[int, int] = {}
        self._finish: FinishReason | None = None
        self._finish_raw: str | None = None
        self._usage: Usage | None = None

    # ------------------------------------------------------------------ blocks

    def _start(self, out: Out) -> None:
        if self._started:
            return
        self._started = True
        message: JSON = {
            "id": "msg_bridge",
            "type": "message",
            "role": "assistant",
            "model": "",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        message.update(self._message)
        out.append(_pair("message_start", {"type": "message_start", "message": message}))

    def _close(self, out: Out) -> None:
        if self._open is not None:
            out.append(
                _pair("content_block_stop", {"type": "content_block_stop", "index": self._open[1]})
            )
            self._open = None

    def _open_block(
        self, kind: Literal["text", "thinking", "tool"], block: JSON, out: Out, tool: int = -1
    ) -> int:
        self._start(out)
        self._close(out)
        index = self._next_index
        self._next_index += 1
        self._open = (kind, index, tool)
        out.append(
            _pair(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
        )
        return index

    def _ensure(self, kind: Literal["text", "thinking"], out: Out) -> int:
        if self._open is not None and self._open[0] == kind:
            return self._open[1]
        block: JSON = (
            {"type": "text", "text": ""}
            if kind == "text"
            else {"type": "thinking", "thinking": "", "signature": ""}
        )
        return self._open_block(kind, block, out)

    @staticmethod
    def _delta(index: int, delta: JSON) -> tuple[str | None, str]:
        return _pair(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )

    # ------------------------------------------------------------------ events

    def feed(self, event: Event) -> Out:
        out: Out = []
        match event:
            case MessageStart():
                if self._started:
                    # A second message_start: the upstream started over (a retry spliced into
                    # the stream, see anthropic-…-spliced-EDGECASE). Mirror it: the SDKs then
                    # discard the partial first message exactly as they would upstream.
                    self._close(out)
                    self._started, self._next_index, self._tool_blocks = False, 0, {}
                self._same = event.origin == NAME
                if self._same:
                    self._message = dict(event.envelope)
                else:
                    self._message = {"id": event.id or "msg_bridge", "model": event.model or ""}
                self._start(out)
            case TextDelta():
                if event.text:
                    out.append(
                        self._delta(
                            self._ensure("text", out), {"type": "text_delta", "text": event.text}
                        )
                    )
            case ThinkingDelta():
                index = self._ensure("thinking", out)
                if event.text:
                    out.append(
                        self._delta(index, {"type": "thinking_delta", "thinking": event.text})
                    )
                if event.signature:
                    out.append(
                        self._delta(
                            index, {"type": "signature_delta", "signature": event.signature}
                        )
                    )
            case ToolCallStart():
                block = {"type": "tool_use", "id": event.id, "name": event.name, "input": {}}
                index = self._open_block("tool", block, out, tool=event.index)
                self._tool_blocks[event.index] = index
                if event.arguments:
                    out.append(
                        self._delta(
                            index, {"type": "input_json_delta", "partial_json": event.arguments}
                        )
                    )
            case ToolCallArgsDelta():
                index_or_none = self._tool_blocks.get(event.index)
                if index_or_none is not None and event.delta:
                    out.append(
                        self._delta(
                            index_or_none, {"type": "input_json_delta", "partial_json": event.delta}
                        )
                    )
            case ToolCallEnd():
                pass  # closed when the next block opens or the message ends
            case UsageEvent():
                self._usage = event.usage
            case Finish():
                self._finish, self._finish_raw = event.reason, event.raw
            case StreamError():
                error: JSON = (
                    event.raw
                    if event.origin == NAME and event.raw
                    else {"type": "error", "error": {"type": "api_error", "message": event.message}}
                )
                out.append(_pair("error", error))
            case RawEvent():
                if event.origin == NAME and isinstance(event.data.get("type"), str):
                    out.append(_pair(event.data["type"], event.data))
            case StreamEnd():
                out.extend(self.finish())
        return out

    def finish(self) -> Out:
        if self._done:
            return []
        self._done = True
        out: Out = []
        self._start(out)
        self._close(out)
        usage: JSON = {"output_tokens": 0}
        u = self._usage
        if u is not None:
            usage = (
                dict(u.raw)
                if u.origin == NAME and u.raw
                else {"output_tokens": u.output_tokens or 0}
            )
            if u.origin != NAME and u.input_tokens is not None:
                usage["input_tokens"] = u.input_tokens
        delta = {
            "stop_reason": stop_reason(self._finish, self._finish_raw, self._same),
            "stop_sequence": None,
        }
        out.append(
            _pair("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        )
        out.append(_pair("message_stop", {"type": "message_stop"}))
        return out


class AnthropicStreamDecoder:
    """Anthropic upstream SSE → unified events (tool indexes are the block indexes)."""

    def __init__(self) -> None:
        self._blocks: dict[int, str] = {}
        self._finished = False

    def feed(self, data: str, event: str | None) -> list[Event]:
        try:
            payload: Any = json.loads(data)
        except ValueError as e:
            raise UnsupportedShape(f"Anthropic event is not JSON: {data[:60]!r}") from e
        if not isinstance(payload, dict):
            raise UnsupportedShape("Anthropic event is not an object")
        kind = payload.get("type", event)
        match kind:
            case "message_start":
                message = payload.get("message") or {}
                out: list[Event] = [
                    MessageStart(
                        NAME, id=message.get("id"), model=message.get("model"), envelope=message
                    )
                ]
                if isinstance(message.get("usage"), dict):
                    out.append(UsageEvent(decode_usage(message["usage"])))
                return out
            case "content_block_start":
                index, block = payload.get("index", 0), payload.get("content_block") or {}
                self._blocks[index] = str(block.get("type"))
                if block.get("type") == "tool_use":
                    return [
                        ToolCallStart(index, str(block.get("id", "")), str(block.get("name", "")))
                    ]
                if block.get("type") == "text" and block.get("text"):
                    return [TextDelta(block["text"])]
                return []
            case "content_block_delta":
                index, delta = payload.get("index", 0), payload.get("delta") or {}
                match delta.get("type"):
                    case "text_delta":
                        return [TextDelta(str(delta.get("text", "")))]
                    case "thinking_delta":
                        return [ThinkingDelta(str(delta.get("thinking", "")))]
                    case "signature_delta":
                        return [ThinkingDelta("", signature=str(delta.get("signature", "")))]
                    case "input_json_delta":
                        return [ToolCallArgsDelta(index, str(delta.get("partial_json", "")))]
                return [RawEvent(NAME, payload)]
            case "content_block_stop":
                index = payload.get("index", 0)
                return [ToolCallEnd(index)] if self._blocks.get(index) == "tool_use" else []
            case "message_delta":
                out = []
                delta = payload.get("delta") or {}
                if isinstance(payload.get("usage"), dict):
                    out.append(UsageEvent(decode_usage(payload["usage"])))
                reason = delta.get("stop_reason")
                if isinstance(reason, str):
                    out.append(Finish(finish_reason(reason), raw=reason))
                return out
            case "message_stop":
                return [StreamEnd()]
            case "ping":
                return []
            case "error":
                err = payload.get("error") or {}
                return [
                    StreamError(
                        str(err.get("message", "")), err.get("type"), origin=NAME, raw=payload
                    )
                ]
        return [RawEvent(NAME, payload)]

    def finish(self) -> list[Event]:
        return []
