"""Anthropic ``message`` objects (non-streamed answers) and errors ↔ unified.

Contract: JSON in, ``Response`` out and back; no I/O. ``decode_response`` reads an Anthropic
upstream's answer (unknown blocks become ``Opaque`` parts); ``encode_response`` writes a
complete ``message``; ``encode_error`` writes Anthropic's error body. Details:
docs/dialects/anthropic.md#module-notes."""

from __future__ import annotations

import json
from typing import Any

from addon import jsonio
from addon.dialects.base import count_at
from addon.model import (
    JSON,
    AnswerDefaults,
    ClientError,
    FinishReason,
    Image,
    Opaque,
    Part,
    Response,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnsupportedShape,
    Usage,
    new_nonce,
)

from .errors import error_body
from .ids import to_anthropic
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
_TOP = frozenset({"id", "type", "role", "model", "content", "stop_reason", "usage"})


def new_message_id() -> str:
    """A fresh message id, as Anthropic writes them (``msg_01`` + 22 base62 characters).
    Every answer not from an Anthropic upstream gets one: Claude Code merges consecutive
    assistant messages that share an id."""
    return "msg_01" + new_nonce()[:22]


def answer_message_id(defaults: AnswerDefaults) -> str:
    """The id of the answer ``defaults`` is for: made from the flow's nonce, so every encoder
    of one answer writes the same and two answers never one; without a nonce, a fresh one."""
    return "msg_01" + (defaults.nonce or new_nonce())[:22]


def finish_reason(stop_reason: str) -> FinishReason:
    return _STOP_TO_FINISH.get(stop_reason, "other")


def stop_reason(reason: FinishReason | None, raw: str | None, same_dialect: bool) -> str:
    if same_dialect and raw:
        return raw
    return _FINISH_TO_STOP[reason or "stop"]


def tool_input(arguments: str) -> JSON:
    """The ``input`` object of a tool_use block; broken arguments kept as ``_raw_arguments``."""
    try:
        parsed = jsonio.loads(arguments or "{}")
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_raw_arguments": arguments}


def decode_usage(raw: JSON) -> Usage:
    """Anthropic counts cache reads and writes apart from ``input_tokens``, as ``Usage`` does."""
    return Usage(
        input_tokens=count_at(raw, "input_tokens"),
        output_tokens=count_at(raw, "output_tokens"),
        origin=NAME,
        raw=raw,
        cache_read_tokens=count_at(raw, "cache_read_input_tokens"),
        cache_write_tokens=count_at(raw, "cache_creation_input_tokens"),
        reasoning_tokens=count_at(raw, "output_tokens_details", "thinking_tokens"),
    )


def usage_fields(u: Usage) -> JSON:
    """Another dialect's counts as Anthropic's usage fields, only those it knows: the prompt
    tokens read from (written to) a cache apart from ``input_tokens``; the reasoning part of
    ``output_tokens`` as ``output_tokens_details.thinking_tokens``."""
    out: JSON = {}
    if u.input_tokens is not None:
        out["input_tokens"] = u.input_tokens
    if u.cache_read_tokens is not None:
        out["cache_read_input_tokens"] = u.cache_read_tokens
    if u.cache_write_tokens is not None:
        out["cache_creation_input_tokens"] = u.cache_write_tokens
    if u.output_tokens is not None:
        out["output_tokens"] = u.output_tokens
    if u.reasoning_tokens:
        out["output_tokens_details"] = {"thinking_tokens": u.reasoning_tokens}
    return out


def encode_usage(u: Usage | None) -> JSON:
    """A whole answer's usage: ``input_tokens`` and ``output_tokens`` are required (0 when
    the upstream said nothing)."""
    if u is not None and u.origin == NAME and u.raw:
        return dict(u.raw)
    return {"input_tokens": 0, "output_tokens": 0, **(usage_fields(u) if u else {})}


def decode_response(body: JSON) -> Response:
    content = body.get("content")
    if body.get("type") != "message" or not isinstance(content, list):
        raise UnsupportedShape("not an Anthropic message")
    parts: list[Part] = []
    for block in content:
        if isinstance(block, dict):
            parts.append(_decode_block(block))
    raw_stop = body.get("stop_reason")
    usage = body.get("usage")
    return Response(
        origin=NAME,
        id=body.get("id") if isinstance(body.get("id"), str) else None,
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        parts=tuple(parts),
        finish=finish_reason(raw_stop) if isinstance(raw_stop, str) else None,
        finish_raw=raw_stop if isinstance(raw_stop, str) else None,
        usage=decode_usage(usage) if isinstance(usage, dict) else None,
        extra={"top": {k: v for k, v in body.items() if k not in _TOP}},
    )


def _decode_block(block: JSON) -> Part:
    def rest(*known: str) -> JSON:
        return {k: v for k, v in block.items() if k not in ("type", *known)}

    match block.get("type"):
        case "text" if isinstance(block.get("text"), str):
            return Text(block["text"], extra=rest("text"))  # citations, …
        case "thinking" if isinstance(block.get("thinking"), str):
            signature = block.get("signature")
            return Thinking(
                block["thinking"],
                signature if isinstance(signature, str) and signature else None,
                extra=rest("thinking", "signature"),
            )
        case "redacted_thinking" if isinstance(block.get("data"), str):
            return Thinking(block["data"], redacted=True, extra=rest("data"))
        case "tool_use" if isinstance(block.get("name"), str):
            args = block.get("input", {})
            return ToolCall(
                str(block.get("id", "")),
                block["name"],
                args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
            )
    # server_tool_use, web_search_tool_result, …: only an Anthropic client can read them.
    return Opaque(NAME, block)


def encode_response(r: Response) -> JSON:
    """A complete ``message`` the anthropic SDK and Claude Code accept (tool ids escaped with
    ``ids.to_anthropic``, broken arguments as ``{"_raw_arguments": …}``)."""
    same = r.origin == NAME
    content: list[JSON]
    if same:
        content = [b for p in r.parts if (b := _encode_block(p, same))]
    else:
        # Anthropic's own blocks the bridge wrote (its web searches, ``server_search``) keep
        # their place before the text; another dialect's opaque parts write nothing.
        order = {"thinking": 0, "opaque": 1, "text": 1, "tool_call": 2}
        ordered = sorted(
            (p for p in r.parts if p.kind in order), key=lambda p: order.get(p.kind, 3)
        )
        content = []
        for p in ordered:
            block = _encode_block(p, same)
            if not block:
                continue
            if content and block["type"] == "text" and content[-1]["type"] == "text":
                content[-1]["text"] += block["text"]  # one text block, as Anthropic sends
            else:
                content.append(block)
    body: JSON = {
        "id": r.id if same and r.id else new_message_id(),
        "type": "message",
        "role": "assistant",
        "model": r.model or "",
        "content": content,
        "stop_reason": stop_reason(r.finish, r.finish_raw, same),
        "stop_sequence": None,
        "usage": encode_usage(r.usage),
    }
    if same:
        body.update(r.extra.get("top", {}))
    return body


def _encode_block(p: Part, same: bool) -> JSON:
    """One part as a response content block; ``{}`` for nothing to send."""
    extra = p.extra if same and not isinstance(p, Opaque) else {}
    match p:
        case Thinking(redacted=True):
            return {"type": "redacted_thinking", "data": p.text, **extra}
        case Thinking():
            # Reasoning from another dialect has no signature: "" is what the SDK types allow.
            return {"type": "thinking", "thinking": p.text, "signature": p.signature or "", **extra}
        case Text():
            return {"type": "text", "text": p.text, **extra} if p.text or same else {}
        case ToolCall():
            return {
                "type": "tool_use",
                "id": to_anthropic(p.id),
                "name": p.name,
                "input": tool_input(p.arguments),
            }
        case Opaque():
            return p.data if p.origin == NAME else {}
        case Image() | ToolResult():
            return {}  # not something an assistant answer holds


def encode_error(err: ClientError) -> JSON:
    """Anthropic's error body, its type from the status (``errors``)."""
    return error_body(err.message, err.status, err.type)


def error_message(body: Any) -> str | None:
    """The message of an Anthropic error body, if it is one."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
        return message if isinstance(message, str) else None
    return None
