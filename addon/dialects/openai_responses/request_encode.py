"""Unified ``Request`` → an OpenAI Responses API request (``POST /v1/responses``).

Contract: ``Request`` in, JSON body out, for a Responses upstream; the decoder is ``request``,
whose private table (``ITEMS``) gives a Responses client's own wire details back.
Details: docs/dialects/openai_responses.md#module-notes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from addon.dialects.base import unsupported_tool
from addon.model import (
    JSON,
    Image,
    Message,
    Notes,
    Opaque,
    OpaqueTool,
    Part,
    Request,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
)

from .request import CHAT_CUSTOM, ITEMS, NAME, PART_TYPES, custom_tool, fingerprint


def encode_request(req: Request, notes: Notes) -> JSON:
    """The Responses body for a Responses upstream."""
    same = req.origin == NAME
    extra = dict(req.extra) if same else {}
    side: JSON = extra.pop(ITEMS, {}) if same else {}
    part_types = frozenset(side.get("part_types", ()))
    messages = list(req.messages)
    body: JSON = {"model": req.model}
    instructions = _take_instructions(messages, same, side)
    if instructions is not None:
        body["instructions"] = instructions
    custom_calls = {p.id for m in messages for p in m.parts if isinstance(p, ToolCall) and p.custom}
    items: list[JSON] = []
    for m in messages:
        items.extend(_encode_message(m, same, side, part_types, custom_calls, notes))
    if (
        same
        and side.get("input_string")
        and len(items) == 1
        and items[0].get("role") == "user"
        and isinstance(items[0].get("content"), str)
    ):
        body["input"] = items[0]["content"]
    else:
        body["input"] = items
    p = req.params
    for key, value in (
        ("max_output_tokens", p.max_tokens),
        ("temperature", p.temperature),
        ("top_p", p.top_p),
        ("user", p.user),
        ("service_tier", p.service_tier),
        ("prompt_cache_key", p.cache_key),
    ):
        if value is not None:
            body[key] = value
    if p.stop:
        notes["stop sequences dropped (the Responses API has none)"] += 1
    for name in ("seed", "presence_penalty", "frequency_penalty"):
        if getattr(p, name) is not None:
            notes[f"{name} not sent (the Responses API has no such field)"] += 1
    if req.tools is not None:
        body["tools"] = [_encode_tool(i, t, same) for i, t in enumerate(req.tools)]
    if req.tool_choice is not None:
        if not side.get("synthetic_tool_choice"):
            body["tool_choice"] = _encode_tool_choice(req.tool_choice, req.tools)
        if req.tool_choice.disable_parallel:
            body["parallel_tool_calls"] = False
    reasoning = _encode_reasoning(req, extra.pop("reasoning", None))
    if reasoning is not None:
        body["reasoning"] = reasoning
    if req.stream or req.stream_explicit:
        body["stream"] = req.stream
    if same:
        body.update(extra)
    else:
        # Nothing is stored upstream for another dialect's client; reasoning comes back
        # encrypted so that it can be replayed on the next turn.
        body["store"] = False
        if req.thinking is not None and req.thinking.enabled:
            body["include"] = ["reasoning.encrypted_content"]
    return body


def _take_instructions(messages: list[Message], same: bool, side: JSON) -> str | None:
    """Pop the messages that become ``instructions``: for a Responses client, the one it sent as
    such; for other dialects, the leading run of text-only system/developer messages."""
    if same:
        if side.get("instructions") and messages and messages[0].role == "system":
            return _text(messages.pop(0).parts)
        return None
    texts: list[str] = []
    while (
        messages
        and messages[0].role in ("system", "developer")
        and all(isinstance(p, Text) for p in messages[0].parts)
    ):
        texts.append(_text(messages.pop(0).parts))
    joined = "\n\n".join(t for t in texts if t)
    return joined or None


def _text(parts: tuple[Part, ...]) -> str:
    return "".join(p.text for p in parts if isinstance(p, Text))


def _encode_message(
    m: Message,
    same: bool,
    side: JSON,
    part_types: frozenset[str],
    custom_calls: set[str],
    notes: Notes,
) -> list[JSON]:
    out: list[JSON] = []
    content: list[Part] = []

    def flush(role: str) -> None:
        if content:
            out.append(_message_item(role, content, m.string_content, same, side, notes))
            content.clear()

    role = m.role
    if role == "tool":
        role = "user"
    for p in m.parts:
        match p:
            case ToolResult():
                flush(role)
                out.append(_output_item(p, same, side, custom_calls, notes))
            case ToolCall() if m.role == "assistant":
                flush(role)
                out.append(_call_item(p, same, side))
            case Thinking() if m.role == "assistant":
                flush(role)
                item = _reasoning_item(p, notes)
                if item is not None:
                    out.append(item)
            case Opaque() if p.origin == NAME and not _is_part(p, part_types):
                flush(role)
                out.append(p.data)
            case ToolCall():
                notes[f"tool call in a {m.role} message sent as text"] += 1
                content.append(Text(json.dumps({"tool_call": p.name, "arguments": p.arguments})))
            case _:
                content.append(p)
    flush(role)
    if not out and not m.parts:
        notes["empty message dropped"] += 1
    return out


def _is_part(p: Opaque, part_types: frozenset[str]) -> bool:
    kind = p.data.get("type")
    return isinstance(kind, str) and (kind in PART_TYPES or kind in part_types)


def _message_item(
    role: str, parts: list[Part], string_content: bool, same: bool, side: JSON, notes: Notes
) -> JSON:
    meta: JSON = dict(side.get(fingerprint(role, parts), {})) if same else {}
    no_type = meta.pop("_no_type", False)
    as_string = meta.pop("_string", string_content if not same else False)
    item: JSON = {} if no_type else {"type": "message"}
    item["role"] = role
    plain = all(isinstance(p, Text) for p in parts)
    if plain and (as_string or (not same and role == "assistant")):
        item["content"] = _text(tuple(parts))
    else:
        item["content"] = [c for p in parts if (c := _content_part(role, p, notes))]
    item.update(meta)
    return item


def _content_part(role: str, p: Part, notes: Notes) -> JSON:
    match p:
        case Text():
            if role == "assistant":
                return {"type": "output_text", "text": p.text, "annotations": []}
            return {"type": "input_text", "text": p.text}
        case Image():
            if role == "assistant":
                notes["image in an assistant message dropped"] += 1
                return {}
            if p.file is not None and not p.url:  # a file the client uploaded to OpenAI
                detail = {"detail": p.detail} if p.detail is not None else {}
                return {"type": "input_image", "file_id": p.file, **detail}
            return {"type": "input_image", "image_url": p.url, "detail": p.detail or "auto"}
        case Opaque() if p.origin == NAME:
            return p.data
        case Opaque():
            notes[f"{p.origin} part sent as JSON text"] += 1
            text = json.dumps(p.data, ensure_ascii=False)
            kind = "output_text" if role == "assistant" else "input_text"
            return {
                "type": kind,
                "text": text,
                **({"annotations": []} if role == "assistant" else {}),
            }
        case Thinking():
            kind = "output_text" if role == "assistant" else "input_text"
            return {"type": kind, "text": p.text} if p.text else {}
        case ToolCall() | ToolResult():
            raise AssertionError(f"{p.kind} parts are encoded as items")


def _call_item(c: ToolCall, same: bool, side: JSON) -> JSON:
    if c.custom:
        item: JSON = {
            "type": "custom_tool_call",
            "call_id": c.id,
            "name": c.name,
            "input": c.arguments,
        }
    else:
        item = {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
    if same:
        item.update(side.get(f"call:{c.id}", {}))
    return item


def _output_item(
    r: ToolResult, same: bool, side: JSON, custom_calls: set[str], notes: Notes
) -> JSON:
    custom = r.custom or r.tool_call_id in custom_calls
    output: str | list[JSON]
    if isinstance(r.content, str):
        output = r.content
    else:
        output = [c for p in r.content if (c := _content_part("user", p, notes))]
        if all(c.get("type") == "input_text" for c in output):
            output = "\n".join(c["text"] for c in output)  # the common case, as a string
    if r.is_error and isinstance(output, str) and not same:
        output = f"[tool error] {output}"
    item: JSON = {
        "type": "custom_tool_call_output" if custom else "function_call_output",
        "call_id": r.tool_call_id,
        "output": output,
    }
    if same:
        item.update(side.get(f"output:{r.tool_call_id}", {}))
    return item


def _reasoning_item(p: Thinking, notes: Notes) -> JSON | None:
    stored = p.extra.get(NAME)
    if isinstance(stored, dict):
        item = dict(stored)
        if p.signature:
            item["encrypted_content"] = p.signature
        summary = "\n\n".join(
            s["text"] for s in item.get("summary") or [] if isinstance(s, dict) and "text" in s
        )
        if p.text and summary and p.text != summary:  # changed by a transform
            item["summary"] = [{"type": "summary_text", "text": p.text}]
        return item
    if p.signature and not p.redacted:
        # A signature that travelled through another dialect's client (Claude Code keeps the
        # encrypted reasoning of a Responses upstream as its thinking signature).
        digest = hashlib.sha256(p.signature.encode()).hexdigest()[:32]
        return {
            "type": "reasoning",
            "id": f"rs_{digest}",
            "summary": [{"type": "summary_text", "text": p.text}] if p.text else [],
            "encrypted_content": p.signature,
        }
    notes["reasoning without encrypted content dropped (Responses replays only its own)"] += 1
    return None


def runs_tool(t: OpaqueTool) -> bool:
    """What a Responses upstream runs of the tool kinds only some dialects have: its own
    (hosted tools, ``namespace``, ``tool_search`` …) and OpenAI chat's nested custom tools
    (written as its custom tools)."""
    return t.origin == NAME or (
        t.origin == CHAT_CUSTOM and t.type == "custom" and isinstance(t.data.get(t.type), dict)
    )


def _encode_tool(i: int, t: Tool | OpaqueTool, same: bool) -> JSON:
    if isinstance(t, OpaqueTool):
        if t.origin == NAME:
            return t.data
        if runs_tool(t):
            return _encode_tool(i, custom_tool(i, t.data), same)
        raise unsupported_tool(t, i, "a Responses upstream")
    rest = dict(t.extra.get(NAME, {}))
    if t.format is not None:
        out: JSON = {"type": "custom", "name": t.name}
        if t.description is not None:
            out["description"] = t.description
        if not (rest.pop("_no_format", False) and t.format == {"type": "text"}):
            out["format"] = t.format
        out.update(rest)
        return out
    out = {"type": "function", "name": t.name}
    if t.description is not None:
        out["description"] = t.description
    out["parameters"] = t.parameters
    if t.strict is not None or not same:
        # Responses function tools are strict unless told otherwise; a schema written for
        # another API rarely meets the strict rules.
        out["strict"] = bool(t.strict)
    out.update(rest)
    return out


def _encode_tool_choice(c: ToolChoice, tools: tuple[Tool | OpaqueTool, ...] | None) -> str | JSON:
    if c.mode != "tool":
        return c.mode
    custom = any(
        isinstance(t, Tool) and t.name == c.name and t.format is not None for t in tools or ()
    )
    return {"type": "custom" if custom else "function", "name": c.name}


def _encode_reasoning(req: Request, raw: Any) -> JSON | None:
    """``reasoning`` for the upstream: a Responses client's own object (effort from the unified
    config, which transforms may have changed); for others the effort, or one derived from a
    thinking budget, with summaries so that the client sees the reasoning."""
    base: JSON = dict(raw) if isinstance(raw, dict) else {}
    t = req.thinking
    if t is None or not t.enabled:
        return base if base.get("effort") == "none" else None
    effort: str | None = t.effort
    if effort is None and t.budget_tokens is not None and req.origin != NAME:
        effort = (
            "low" if t.budget_tokens <= 4096 else "medium" if t.budget_tokens <= 16384 else "high"
        )
    if effort is not None:
        base["effort"] = effort
    if req.origin != NAME:
        base.setdefault("summary", "auto")
    return base
