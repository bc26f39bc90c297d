"""OpenAI ``chat.completion`` objects (non-streamed answers) and errors ↔ unified.

Contract: JSON in, ``Response`` out and back. Only the first choice is
modelled; an answer with several choices (``n > 1``) raises
``UnsupportedShape`` and is passed through untouched. Fields not modelled are
kept per level (top, choice, message) and written back for OpenAI clients."""

from __future__ import annotations

import json
from typing import Any

from addon.dialects.base import count_at
from addon.model import (
    JSON,
    AnswerDefaults,
    ClientError,
    FinishReason,
    Part,
    Response,
    Text,
    Thinking,
    ToolCall,
    UnsupportedShape,
    Usage,
    new_nonce,
)

from .errors import error_body
from .request import NAME

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
    "error": "error",
}
_TOP = frozenset({"id", "model", "created", "choices", "usage"})
_CHOICE = frozenset({"index", "message", "finish_reason"})
_MESSAGE = frozenset({"role", "content", "tool_calls", "reasoning_content"})


def new_completion_id() -> str:
    """A fresh completion id, as OpenAI writes them (``chatcmpl-`` + 29 base62 characters).
    Every answer not from a chat upstream gets one: an upstream may name none, or the same
    every time."""
    return "chatcmpl-" + new_nonce()[:29]


def answer_completion_id(defaults: AnswerDefaults) -> str:
    """The id of the answer ``defaults`` is for: made from the flow's nonce, so every encoder
    of one answer writes the same and two answers never one; without a nonce, a fresh one."""
    return "chatcmpl-" + (defaults.nonce or new_nonce())[:29]


def finish_reason(raw: str) -> FinishReason:
    return _FINISH.get(raw, "other")


def decode_usage(raw: JSON) -> Usage:
    """``prompt_tokens`` counts the cached ones too (``prompt_tokens_details.cached_tokens``;
    DeepSeek's ``prompt_cache_hit_tokens``; OpenRouter's ``cache_write_tokens``): ``Usage``
    keeps them apart; ``completion_tokens`` counts the reasoning ones."""
    prompt = count_at(raw, "prompt_tokens")
    read = count_at(raw, "prompt_tokens_details", "cached_tokens")
    if read is None:
        read = count_at(raw, "prompt_cache_hit_tokens")
    written = count_at(raw, "prompt_tokens_details", "cache_write_tokens")
    return Usage(
        input_tokens=None if prompt is None else max(prompt - (read or 0) - (written or 0), 0),
        output_tokens=count_at(raw, "completion_tokens"),
        total_tokens=count_at(raw, "total_tokens"),
        origin=NAME,
        raw=raw,
        cache_read_tokens=read,
        cache_write_tokens=written,
        reasoning_tokens=count_at(raw, "completion_tokens_details", "reasoning_tokens"),
    )


def encode_usage(u: Usage) -> JSON:
    """Chat usage; another dialect's counts carried over: ``prompt_tokens`` counts the cached
    tokens too (``prompt_tokens_details.cached_tokens`` / ``cache_write_tokens``),
    ``completion_tokens`` the
    reasoning ones (``completion_tokens_details.reasoning_tokens``). The SDK requires the three
    counts: 0 where the upstream said nothing."""
    if u.origin == NAME and u.raw:
        return u.raw
    prompt, output = u.prompt_tokens or 0, u.output_tokens or 0
    total = u.total
    out: JSON = {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": total if total is not None else prompt + output,
    }
    details: JSON = {}
    if u.cache_read_tokens:
        details["cached_tokens"] = u.cache_read_tokens
    if u.cache_write_tokens:
        details["cache_write_tokens"] = u.cache_write_tokens
    if details:
        out["prompt_tokens_details"] = details
    if u.reasoning_tokens:
        out["completion_tokens_details"] = {"reasoning_tokens": u.reasoning_tokens}
    return out


def decode_response(body: JSON) -> Response:
    choices = body.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise UnsupportedShape("not a single-choice chat.completion")
    choice: JSON = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise UnsupportedShape("chat.completion choice without a message")
    parts: list[Part] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        parts.append(Thinking(reasoning))
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append(Text(content))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments", "")
        parts.append(
            ToolCall(
                str(call.get("id", "")),
                str(fn.get("name", "")),
                args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
                extra={k: v for k, v in call.items() if k not in ("id", "type", "function")},
            )
        )
    raw_finish = choice.get("finish_reason")
    usage = body.get("usage")
    created = body.get("created")
    return Response(
        origin=NAME,
        id=body.get("id"),
        model=body.get("model"),
        parts=tuple(parts),
        finish=finish_reason(raw_finish) if isinstance(raw_finish, str) else None,
        finish_raw=raw_finish if isinstance(raw_finish, str) else None,
        usage=decode_usage(usage) if isinstance(usage, dict) else None,
        created=created if isinstance(created, int) else None,
        extra={
            "top": {k: v for k, v in body.items() if k not in _TOP},
            "choice": {k: v for k, v in choice.items() if k not in _CHOICE},
            "message": {k: v for k, v in message.items() if k not in _MESSAGE},
            "content_null": content is None,
        },
    )


def encode_response(r: Response) -> JSON:
    same = r.origin == NAME
    extra: dict[str, Any] = r.extra if same else {}
    text = "".join(p.text for p in r.parts if isinstance(p, Text))
    calls = [p for p in r.parts if isinstance(p, ToolCall)]
    thinking = "".join(p.text for p in r.parts if isinstance(p, Thinking) and not p.redacted)
    message: JSON = {"role": "assistant"}
    message["content"] = None if not text and (calls or extra.get("content_null")) else text
    if thinking:
        message["reasoning_content"] = thinking
    if calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
                **(c.extra if same else {}),
            }
            for c in calls
        ]
    message.update(extra.get("message", {}))
    choice: JSON = {"index": 0, "message": message}
    choice.update(extra.get("choice", {}))
    choice["finish_reason"] = (r.finish_raw if same else None) or _encode_finish(r.finish)
    body: JSON = {
        "id": r.id if same and r.id else new_completion_id(),
        "object": "chat.completion",
        "created": r.created or 0,
        "model": r.model or "",
    }
    body.update(extra.get("top", {}))
    body["choices"] = [choice]
    if r.usage is not None:
        body["usage"] = encode_usage(r.usage)
    return body


def _encode_finish(reason: FinishReason | None) -> str | None:
    if reason is None:
        return None
    return "stop" if reason in ("other", "error") else reason


def encode_error(err: ClientError) -> JSON:
    """OpenAI's error body, its ``type`` (and default ``code``) from the status (``errors``)."""
    return error_body(err.message, err.status, code=err.code, param=err.param, kind=err.type)


def error_message(body: Any) -> str | None:
    """``{"error": {"message": …}}`` as OpenAI sends it; gateways also use a bare
    ``{"error": "…"}`` or ``{"message": …}`` / ``{"detail": …}``."""
    if not isinstance(body, dict):
        return None
    err = body.get("error")
    if isinstance(err, dict):
        err = err.get("message")
    message = err if err is not None else body.get("message") or body.get("detail")
    return message if isinstance(message, str) and message else None
