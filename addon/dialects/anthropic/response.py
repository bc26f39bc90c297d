"""Anthropic ``message`` objects (non-streamed answers) and errors ↔ unified.

Contract: JSON in, ``Response`` out and back. Content blocks come out in the
order Anthropic uses: thinking, text, tool_use. Tool arguments that are not a
JSON object (a model's broken output) are not dropped: the block's input is
``{"_raw_arguments": "<text>"}`` so the client's tool reports the problem to
the model, which can try again.
"""

from __future__ import annotations

import json
from typing import Any

from addon.model import (
    JSON,
    ClientError,
    FinishReason,
    Part,
    Response,
    Text,
    Thinking,
    ToolCall,
    UnsupportedShape,
    Usage,
)

from .request import NAME

_STOP_TO_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
_FINISH_TO_STOP: dict[FinishReason, str] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
    "error": "end_turn",
    "other": "end_turn",
}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def finish_reason(stop_reason: str) -> FinishReason:
    return _STOP_TO_FINISH.get(stop_reason, "other")


def stop_reason(reason: FinishReason | None, raw: str | None, same_dialect: bool) -> str:
    if same_dialect and raw:
        return raw
    return _FINISH_TO_STOP[reason or "stop"]


def tool_input(arguments: str) -> JSON:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_raw_arguments": arguments}


def decode_usage(raw: JSON) -> Usage:
    inp, out = raw.get("input_tokens"), raw.get("output_tokens")
    return Usage(
        input_tokens=inp if isinstance(inp, int) else None,
        output_tokens=out if isinstance(out, int) else None,
        origin=NAME,
        raw=raw,
    )


def encode_usage(u: Usage | None, *, output_only: bool = False) -> JSON:
    if u is not None and u.origin == NAME and u.raw:
        return dict(u.raw)
    out: JSON = {"output_tokens": (u.output_tokens if u else None) or 0}
    if not output_only or (u is not None and u.input_tokens is not None):
        out = {"input_tokens": (u.input_tokens if u else None) or 0, **out}
    return out


def decode_response(body: JSON) -> Response:
    content = body.get("content")
    if body.get("type") != "message" or not isinstance(content, list):
        raise UnsupportedShape("not an Anthropic message")
    parts: list[Part] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        match block.get("type"):
            case "text":
                parts.append(Text(str(block.get("text", ""))))
            case "thinking":
                parts.append(
                    Thinking(str(block.get("thinking", "")), block.get("signature") or None)
                )
            case "redacted_thinking":
                parts.append(Thinking(str(block.get("data", "")), redacted=True))
            case "tool_use":
                parts.append(
                    ToolCall(
                        str(block.get("id", "")),
                        str(block.get("name", "")),
                        json.dumps(block.get("input", {}), ensure_ascii=False),
                    )
                )
    raw_stop = body.get("stop_reason")
    usage = body.get("usage")
    return Response(
        origin=NAME,
        id=body.get("id"),
        model=body.get("model"),
        parts=tuple(parts),
        finish=finish_reason(raw_stop) if isinstance(raw_stop, str) else None,
        finish_raw=raw_stop if isinstance(raw_stop, str) else None,
        usage=decode_usage(usage) if isinstance(usage, dict) else None,
        extra={
            "top": {
                k: v
                for k, v in body.items()
                if k not in ("id", "model", "content", "stop_reason", "usage", "type", "role")
            }
        },
    )


def encode_response(r: Response) -> JSON:
    same = r.origin == NAME
    thinking: list[JSON] = []
    text: list[JSON] = []
    tools: list[JSON] = []
    for p in r.parts:
        match p:
            case Thinking(redacted=True):
                thinking.append({"type": "redacted_thinking", "data": p.text})
            case Thinking():
                thinking.append(
                    {"type": "thinking", "thinking": p.text, "signature": p.signature or ""}
                )
            case Text():
                if text:
                    text[-1]["text"] += p.text
                else:
                    text.append({"type": "text", "text": p.text})
            case ToolCall():
                tools.append(
                    {
                        "type": "tool_use",
                        "id": p.id,
                        "name": p.name,
                        "input": tool_input(p.arguments),
                    }
                )
    body: JSON = {
        "id": r.id or "msg_bridge",
        "type": "message",
        "role": "assistant",
        "model": r.model or "",
        "content": [*thinking, *text, *tools],
        "stop_reason": stop_reason(r.finish, r.finish_raw, same),
        "stop_sequence": None,
        "usage": encode_usage(r.usage),
    }
    if same:
        body.update(r.extra.get("top", {}))
    return body


def encode_error(err: ClientError) -> JSON:
    kind = _ERROR_TYPES.get(
        err.status, "api_error" if err.status >= 500 else "invalid_request_error"
    )
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def error_message(body: Any) -> str | None:
    """The message of an Anthropic error body, if it is one."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
        return message if isinstance(message, str) else None
    return None
