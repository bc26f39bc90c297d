"""OpenAI Responses ``response`` objects (non-streamed answers) and errors ↔ unified.

Contract: JSON in, ``Response`` out and back; no I/O. ``decode_response`` reads a Responses
upstream's answer; ``encode_response`` writes a complete ``response`` object the openai SDK
and Codex accept; ``encode_error`` writes OpenAI's error body. Details:
docs/dialects/openai_responses.md#module-notes."""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from addon.dialects.base import count_at
from addon.model import (
    JSON,
    AnswerDefaults,
    ClientError,
    FinishReason,
    Opaque,
    Part,
    Response,
    Text,
    Thinking,
    ToolCall,
    UnsupportedShape,
    Usage,
)

from .errors import error_body
from .request import NAME, decode_reasoning_item

_TOP = frozenset(
    {"id", "object", "created_at", "model", "output", "usage", "status", "incomplete_details",
     "error", "output_text"}
)  # fmt: skip
_INCOMPLETE: dict[str, FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}


# --------------------------------------------------------------------------- usage


def decode_usage(raw: JSON) -> Usage:
    """``input_tokens`` counts the cached tokens too (``input_tokens_details``), the model's
    ``Usage`` keeps them apart; ``output_tokens`` counts the reasoning ones."""
    prompt = count_at(raw, "input_tokens")
    read = count_at(raw, "input_tokens_details", "cached_tokens")
    written = count_at(raw, "input_tokens_details", "cache_write_tokens")
    return Usage(
        input_tokens=None if prompt is None else max(prompt - (read or 0) - (written or 0), 0),
        output_tokens=count_at(raw, "output_tokens"),
        total_tokens=count_at(raw, "total_tokens"),
        origin=NAME,
        raw=raw,
        cache_read_tokens=read,
        cache_write_tokens=written,
        reasoning_tokens=count_at(raw, "output_tokens_details", "reasoning_tokens"),
    )


def encode_usage(u: Usage | None) -> JSON:
    """Responses usage; another dialect's details (cached / reasoning tokens) are carried over.
    A Responses upstream's own usage is kept as it came, its nulls left out, the fields the
    SDK requires filled in when absent (llama.cpp sends no ``output_tokens_details``,
    LiteLLM writes ``null`` for what it lacks)."""
    if u is not None and u.origin == NAME and u.raw:
        usage = {k: _no_nulls(v) for k, v in u.raw.items() if v is not None}
        filled = _usage_of(u)
        return {**{k: v for k, v in filled.items() if k not in usage}, **usage}
    return _usage_of(u)


def _no_nulls(value: Any) -> Any:
    return {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value


def _usage_of(u: Usage | None) -> JSON:
    """Every field the SDK requires: 0 where the upstream said nothing. ``input_tokens``
    counts the cached tokens too, ``output_tokens`` the reasoning ones."""
    u = u or Usage()
    input_tokens, output_tokens = u.prompt_tokens or 0, u.output_tokens or 0
    total = u.total
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": u.cache_read_tokens or 0,
            "cache_write_tokens": u.cache_write_tokens or 0,
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens or 0},
        "total_tokens": total if total is not None else input_tokens + output_tokens,
    }


# --------------------------------------------------------------------------- decode


def finish_reason(status: str | None, incomplete: Any, has_calls: bool) -> tuple[FinishReason, str]:
    """The unified finish and the raw one (the status, or the reason it is incomplete)."""
    reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
    if status == "incomplete":
        raw = reason if isinstance(reason, str) else "incomplete"
        return _INCOMPLETE.get(raw, "other"), raw
    if status in ("failed", "cancelled"):
        return "error", status
    return ("tool_calls" if has_calls else "stop"), status or "completed"


def decode_response(body: JSON) -> Response:
    output = body.get("output")
    if body.get("object") != "response" or not isinstance(output, list):
        raise UnsupportedShape("not a Responses response object")
    parts: list[Part] = []
    for item in output:
        if isinstance(item, dict):
            parts.extend(decode_output_item(item))
    has_calls = any(isinstance(p, ToolCall) for p in parts)
    status = body.get("status")
    finish, raw = finish_reason(
        status if isinstance(status, str) else None, body.get("incomplete_details"), has_calls
    )
    usage = body.get("usage")
    created = body.get("created_at")
    return Response(
        origin=NAME,
        id=body.get("id") if isinstance(body.get("id"), str) else None,
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        parts=tuple(parts),
        finish=finish,
        finish_raw=raw,
        usage=decode_usage(usage) if isinstance(usage, dict) else None,
        created=int(created) if isinstance(created, int | float) else None,
        extra={
            "top": {k: v for k, v in body.items() if k not in _TOP},
            "status": status,
            "incomplete_details": body.get("incomplete_details"),
            "error": body.get("error"),
        },
    )


def decode_output_item(item: JSON) -> list[Part]:
    """One output item → parts. Item fields ride in the parts' ``extra[NAME]`` (safe there: other
    dialects' answer encoders ignore the extras of a foreign answer)."""
    kind = item.get("type")
    if kind == "message":
        meta = {k: v for k, v in item.items() if k != "content"}
        parts: list[Part] = []
        for c in item.get("content") or []:
            if not isinstance(c, dict):
                continue
            rest = {k: v for k, v in c.items() if k not in ("text", "refusal")}
            if c.get("type") == "output_text" and isinstance(c.get("text"), str):
                parts.append(Text(c["text"], extra={NAME: {"item": meta, "part": rest}}))
            elif c.get("type") == "refusal" and isinstance(c.get("refusal"), str):
                parts.append(Text(c["refusal"], extra={NAME: {"item": meta, "part": rest}}))
            else:
                parts.append(Opaque(NAME, c))
        return parts
    if kind == "reasoning":
        return [decode_reasoning_item(item)]
    if kind in ("function_call", "custom_tool_call") and isinstance(item.get("name"), str):
        custom = kind == "custom_tool_call"
        raw = item.get("input" if custom else "arguments")
        if not isinstance(raw, str):
            raw = "" if raw is None else json.dumps(raw, ensure_ascii=False)
        known = ("call_id", "name", "input" if custom else "arguments")
        meta = {k: v for k, v in item.items() if k not in known}
        call_id = item.get("call_id")
        return [
            ToolCall(
                call_id if isinstance(call_id, str) else str(item.get("id", "")),
                item["name"],
                raw,
                extra={NAME: meta},
                custom=custom,
            )
        ]
    return [Opaque(NAME, item)]


# --------------------------------------------------------------------------- encode


def new_response_id() -> str:
    """A fresh response id, as OpenAI writes them (``resp_`` + 48 hex digits). Every answer
    not from a Responses upstream gets one: an upstream may name none, or the same every time."""
    return "resp_" + secrets.token_hex(24)


def answer_response_id(defaults: AnswerDefaults) -> str:
    """The id of the answer ``defaults`` is for: made from the flow's nonce, so every encoder
    of one answer writes the same and two answers never one; without a nonce, a fresh one."""
    if not defaults.nonce:
        return new_response_id()
    return "resp_" + hashlib.sha256(defaults.nonce.encode()).hexdigest()[:48]


def response_id(upstream_id: str) -> str:
    """A Responses upstream's id, ``resp_`` put in front when it lacks it."""
    return upstream_id if upstream_id.startswith("resp_") else f"resp_{upstream_id}"


def item_suffix(resp_id: str) -> str:
    """A short stem for the ids of a response's items (``msg_<stem>_<n>``), from our own id of
    it (never the upstream's, which may repeat)."""
    return hashlib.sha256(resp_id.encode()).hexdigest()[:16]


def call_item(c: ToolCall, item_id: str, same: bool, done: bool = True) -> JSON:
    """A ``function_call`` / ``custom_tool_call`` output item."""
    meta: JSON = c.extra.get(NAME, {}) if same else {}
    if c.custom:
        item: JSON = {
            "type": "custom_tool_call",
            "id": meta.get("id", item_id),
            "status": "completed" if done else "in_progress",
            "call_id": c.id,
            "name": c.name,
            "input": c.arguments,
        }
    else:
        item = {
            "type": "function_call",
            "id": meta.get("id", item_id),
            "status": "completed" if done else "in_progress",
            "call_id": c.id,
            "name": c.name,
            "arguments": c.arguments,
        }
    if same:
        item.update({k: v for k, v in meta.items() if k not in ("type", "id", "status")})
    return item


def reasoning_item(p: Thinking, item_id: str, same: bool) -> JSON:
    """A ``reasoning`` output item: the upstream's own when known, else summary + signature."""
    stored = p.extra.get(NAME) if same else None
    if isinstance(stored, dict):
        item = dict(stored)
    else:
        item = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": p.text}] if p.text else [],
        }
    if p.signature:
        item["encrypted_content"] = p.signature
    return item


def encode_response(r: Response) -> JSON:
    """A complete ``response`` object; ids ``resp_…``, ``msg_…``, ``rs_…``, ``fc_…``,
    ``ctc_…``, fresh per answer unless a Responses upstream's are known."""
    same = r.origin == NAME
    ours = new_response_id()
    rid = response_id(r.id) if same and r.id else ours
    stem = item_suffix(ours)
    output: list[JSON] = []
    text: list[Text] = []

    def flush() -> None:
        if not text:
            return
        meta: JSON = text[0].extra.get(NAME, {}).get("item", {}) if same else {}
        content = []
        for t in text:
            part_meta: JSON = t.extra.get(NAME, {}).get("part", {}) if same else {}
            if part_meta.get("type") == "refusal":
                content.append({**part_meta, "refusal": t.text})
            else:
                content.append(
                    {"type": "output_text", "text": t.text, "annotations": [], **part_meta}
                )
        item: JSON = {
            "id": f"msg_{stem}_{len(output)}",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": content,
        }
        item.update(meta)
        output.append(item)
        text.clear()

    for p in r.parts:
        match p:
            case Text():
                if p.text or same:
                    text.append(p)
            case Thinking() if not p.redacted:
                flush()
                output.append(reasoning_item(p, f"rs_{stem}_{len(output)}", same))
            case ToolCall():
                flush()
                prefix = "ctc" if p.custom else "fc"
                output.append(call_item(p, f"{prefix}_{stem}_{len(output)}", same))
            case Opaque() if p.origin == NAME:
                flush()
                output.append(p.data)
            case _:
                pass  # redacted thinking, images, tool results, foreign opaque parts
    flush()
    status, incomplete = encode_status(r.finish, r.finish_raw, r.extra if same else {})
    body: JSON = {
        "id": rid,
        "object": "response",
        "created_at": r.created or 0,
        "status": status,
        "error": r.extra.get("error") if same else None,
        "incomplete_details": incomplete,
        "model": r.model or "",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": encode_usage(r.usage),
    }
    if same:  # the upstream's fields; a null never takes the place of one the SDK requires
        top = r.extra.get("top", {})
        body.update({k: v for k, v in top.items() if v is not None or k not in body})
    return body


def encode_status(
    finish: FinishReason | None, raw: str | None, same_extra: JSON
) -> tuple[str, JSON | None]:
    """``status`` and ``incomplete_details`` for a finish reason."""
    if same_extra.get("status") in ("completed", "incomplete", "failed", "cancelled"):
        details = same_extra.get("incomplete_details")
        return same_extra["status"], details if isinstance(details, dict) else None
    if finish == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def encode_error(err: ClientError) -> JSON:
    """OpenAI's error body, its ``type`` (and default ``code``) from the status (``errors``)."""
    return error_body(err.message, err.status, code=err.code, param=err.param, kind=err.type)


def error_message(body: Any) -> str | None:
    """``{"error": {"message": …}}`` as OpenAI sends it; gateways also use a bare
    ``{"error": "…"}``, ``{"message": …}`` or ``{"detail": …}``."""
    if not isinstance(body, dict):
        return None
    err = body.get("error")
    if isinstance(err, dict):
        err = err.get("message")
    message = err if err is not None else body.get("message") or body.get("detail")
    return message if isinstance(message, str) and message else None
