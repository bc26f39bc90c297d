"""Unified ``Request`` → an Anthropic ``/v1/messages`` request.

Contract: ``Request`` in, JSON body out, for an Anthropic upstream; an Anthropic client's
unmodelled fields (``Request.extra``) go back as they came. The decoder is ``request``.
Every change is counted in ``notes``. Details: docs/dialects/anthropic.md#module-notes."""

from __future__ import annotations

import json
from typing import Literal

from addon import jsonio
from addon.dialects.anthropic.blocks import CACHE_KEY, cache_control
from addon.dialects.anthropic.ids import to_anthropic
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

from .request import NAME

DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires max_tokens; used when a request from another dialect has none."""
DEFAULT_THINKING_BUDGET = 2048
"""Thinking budget when thinking is on but no budget was given (Anthropic's minimum is 1024)."""
_MIN_ANSWER_TOKENS = 1024
"""Room left for the answer when ``max_tokens`` must be raised above the thinking budget."""


def encode_request(req: Request, notes: Notes) -> JSON:
    """The Messages body for an Anthropic upstream: strictly alternating turns, leading system
    messages as ``system`` blocks, escaped tool ids, ``max_tokens`` always."""
    same = req.origin == NAME
    system, system_string, turns = _encode_messages(req, notes)
    body: JSON = {"model": req.model, "messages": turns}
    if system:
        plain = system_string and all(set(b) == {"type", "text"} for b in system)
        body["system"] = "\n\n".join(b["text"] for b in system) if plain else system
    params = req.params
    max_tokens = params.max_tokens
    if max_tokens is None:
        notes[f"max_tokens {DEFAULT_MAX_TOKENS} added (Anthropic requires it)"] += 1
        max_tokens = DEFAULT_MAX_TOKENS
    thinking_on, max_tokens = _encode_thinking(req, body, turns, max_tokens, notes)
    body["max_tokens"] = max_tokens
    sampling = (
        ("temperature", params.temperature),
        ("top_p", params.top_p),
        ("top_k", params.top_k),
    )
    for key, value in sampling:
        if value is None:
            continue
        if thinking_on and not same and key != "top_p":
            # Anthropic rejects temperature and top_k changes while thinking is on; an
            # Anthropic client is told so by the upstream itself, others get it dropped.
            notes[f"{key} dropped (Anthropic refuses it with thinking)"] += 1
            continue
        body[key] = value
    if params.stop:
        body["stop_sequences"] = list(params.stop)
    for name in ("seed", "presence_penalty", "frequency_penalty", "service_tier"):
        if getattr(params, name) is not None:
            notes[f"{name} not sent (the Messages API has no such field)"] += 1
    if params.user:
        body["metadata"] = {"user_id": params.user}
    if req.tools is not None:
        body["tools"] = [_encode_tool(i, t) for i, t in enumerate(req.tools)]
    if req.tool_choice is not None:
        body["tool_choice"] = _encode_tool_choice(req.tool_choice)
    if req.stream or req.stream_explicit:
        body["stream"] = req.stream
    if same:
        extra = dict(req.extra)
        if isinstance(extra.get("metadata"), dict) and "metadata" in body:
            extra["metadata"] = {**extra["metadata"], **body["metadata"]}
        body.update(extra)
    return body


def _encode_messages(req: Request, notes: Notes) -> tuple[list[JSON], bool, list[JSON]]:
    """``system`` blocks (and whether all of them came as strings) and alternating turns."""
    same = req.origin == NAME
    system: list[JSON] = []
    system_string = True
    turns: list[JSON] = []
    for m in req.messages:
        if m.role == "system" and turns and same:
            # A mid-conversation system message of an Anthropic client: kept where it is.
            _system_turn(m, turns, notes)
            continue
        if m.role in ("system", "developer"):
            if turns:
                notes["system message moved to the top (Anthropic has one system prompt)"] += 1
            for p in m.parts:
                if isinstance(p, Text):
                    if p.text:
                        system.append(_encode_text(p))
                else:
                    notes[f"{p.kind} part of a system message dropped (system takes text)"] += 1
            system_string = system_string and m.string_content
            continue
        role: Literal["user", "assistant"] = "assistant" if m.role == "assistant" else "user"
        blocks = [b for p in m.parts if (b := _encode_part(p, notes))]
        if not blocks:
            if m.parts:
                notes["message left empty by the conversion dropped"] += 1
            else:
                notes["empty message dropped"] += 1
            continue
        if turns and turns[-1]["role"] == role:  # Anthropic requires alternating roles
            turns[-1]["content"].extend(blocks)
            turns[-1].pop("_string", None)
        else:
            turn: JSON = {"role": role, "content": blocks}
            if m.string_content:
                turn["_string"] = True
            if same:
                turn.update(m.extra)
            turns.append(turn)
    for turn in turns:
        _finish_turn(turn, same)
    return system, system_string, turns


def _encode_thinking(
    req: Request, body: JSON, turns: list[JSON], max_tokens: int, notes: Notes
) -> tuple[bool, int]:
    """``thinking`` into ``body``: whether it is on, and ``max_tokens`` raised above its budget."""
    same = req.origin == NAME
    thinking_on = req.thinking is not None and req.thinking.enabled
    if thinking_on and not same and _tool_loop_without_thinking(turns):
        # Anthropic: with thinking on, an assistant turn with tool_use that the request
        # continues must start with its (signed) thinking block. Reasoning from another
        # dialect has no signature and was dropped above, so the upstream would refuse.
        notes["thinking off: the tool loop has no signed thinking (Anthropic requires it)"] += 1
        thinking_on = False
    if thinking_on and not same:
        budget = (req.thinking.budget_tokens if req.thinking else None) or DEFAULT_THINKING_BUDGET
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if budget >= max_tokens:
            # Anthropic requires budget_tokens < max_tokens.
            notes["max_tokens raised above the thinking budget"] += 1
            max_tokens = budget + _MIN_ANSWER_TOKENS
    elif thinking_on and req.thinking is not None:
        body["thinking"] = {"type": "enabled"}
        if req.thinking.budget_tokens is not None:
            body["thinking"]["budget_tokens"] = req.thinking.budget_tokens
    return thinking_on, max_tokens


_THINKING_TYPES = ("thinking", "redacted_thinking")


def _system_turn(m: Message, turns: list[JSON], notes: Notes) -> None:
    """A system message after the first turn, as a ``system`` entry of ``messages`` (beta
    ``mid-conversation-system-2026-04-07``); it takes text only."""
    blocks: list[JSON] = []
    for p in m.parts:
        if isinstance(p, Text):
            if p.text:
                blocks.append(_encode_text(p))
        else:
            notes[f"{p.kind} part of a system message dropped (system takes text)"] += 1
    if not blocks:
        notes["empty message dropped"] += 1
        return
    turn: JSON = {"role": "system", "content": blocks}
    if m.string_content:
        turn["_string"] = True
    turn.update(m.extra)
    turns.append(turn)


def _tool_loop_without_thinking(turns: list[JSON]) -> bool:
    last = next((t for t in reversed(turns) if t["role"] == "assistant"), None)
    if last is None or not isinstance(last["content"], list):
        return False
    blocks: list[JSON] = last["content"]
    uses_tools = any(b.get("type") == "tool_use" for b in blocks)
    return uses_tools and blocks[0].get("type") not in _THINKING_TYPES


def _finish_turn(turn: JSON, same: bool) -> None:
    """Anthropic's order rules for a turn from another dialect — tool results first in a user
    turn, thinking first in an assistant turn (stable sorts) — and a lone plain text back to
    a string. An Anthropic client's own order is left alone."""
    blocks: list[JSON] = turn["content"]
    if same:
        pass
    elif turn["role"] == "user":
        blocks.sort(key=lambda b: 0 if b.get("type") == "tool_result" else 1)
    else:
        blocks.sort(key=lambda b: 0 if b.get("type") in _THINKING_TYPES else 1)
    if turn.pop("_string", False) and len(blocks) == 1 and set(blocks[0]) == {"type", "text"}:
        turn["content"] = blocks[0]["text"]


def _encode_text(p: Text) -> JSON:
    return _marked({"type": "text", "text": p.text, **p.extra}, p)


def _marked(block: JSON, p: Text | Image | ToolCall | ToolResult | Tool) -> JSON:
    """``block`` with the part's cache breakpoint, if it has one."""
    if p.cache is not None:
        block[CACHE_KEY] = cache_control(p.cache)
    return block


def _tool_id(raw: str, notes: Notes) -> str:
    clean = to_anthropic(raw)
    if clean != raw:
        # Ids with dots and colons come from some OpenAI-compatible servers (Kimi K2 uses
        # ``functions.Read:0``; no recording of it here, see the test with that id). The
        # same mapping applies to the tool_use and its tool_result, so they still match,
        # and it is reversible (``ids``), unlike a character replacement.
        notes["tool ids made Anthropic-safe"] += 1
    return clean


def _encode_part(p: Part, notes: Notes) -> JSON:
    """One part as a content block; ``{}`` for a part Anthropic cannot take (noted)."""
    match p:
        case Text():
            if not p.text:  # Anthropic rejects empty text blocks
                return {}
            return _encode_text(p)
        case Image():
            return _marked(_encode_image(p), p)
        case ToolCall():
            try:
                args = jsonio.loads(p.arguments or "{}")
            except ValueError:
                args = None
            if not isinstance(args, dict):
                # Never turn a model's broken arguments into {} silently.
                notes["unparsable tool arguments kept as _raw_arguments"] += 1
                args = {"_raw_arguments": p.arguments}
            use = {"type": "tool_use", "id": _tool_id(p.id, notes), "name": p.name, "input": args}
            return _marked(use, p)
        case ToolResult():
            content: str | list[JSON]
            if isinstance(p.content, str):
                content = p.content
            else:
                content = [b for q in p.content if (b := _encode_result_part(q, notes))]
            block: JSON = {
                "type": "tool_result",
                "tool_use_id": _tool_id(p.tool_call_id, notes),
                "content": content,
            }
            if p.is_error:
                block["is_error"] = True
            block.update(p.extra)
            return _marked(block, p)
        case Thinking():
            if p.redacted:
                return {"type": "redacted_thinking", "data": p.text, **p.extra}
            if not p.signature:
                notes["unsigned thinking dropped (Anthropic rejects it)"] += 1
                return {}
            return {"type": "thinking", "thinking": p.text, "signature": p.signature, **p.extra}
        case Opaque():
            if p.origin == NAME:
                return p.data
            notes[f"{p.origin} part sent as JSON text"] += 1
            return {"type": "text", "text": json.dumps(p.data, ensure_ascii=False)}


def _encode_result_part(p: Part, notes: Notes) -> JSON:
    """A part inside a tool_result: Anthropic takes text and image blocks there."""
    match p:
        case Text() | Image() | Opaque():
            return _encode_part(p, notes)
        case Thinking():
            return {"type": "text", "text": p.text} if p.text and not p.redacted else {}
        case ToolCall() | ToolResult():
            raise AssertionError("tool blocks cannot nest in a tool_result (checked on decode)")


def _encode_image(p: Image) -> JSON:
    if p.file is not None and not p.url:  # a file the client uploaded to Anthropic
        source: JSON = {"type": "file", "file_id": p.file}
    elif p.url.startswith("data:") and ";base64," in p.url:
        media, data = p.url[5:].split(";base64,", 1)
        source = {"type": "base64", "media_type": media, "data": data}
    else:
        source = {"type": "url", "url": p.url}
    return {"type": "image", "source": source}


def _encode_tool(i: int, t: Tool | OpaqueTool) -> JSON:
    if isinstance(t, OpaqueTool):
        if t.origin == NAME:
            return t.data
        raise unsupported_tool(t, i, "an Anthropic upstream")
    out: JSON = {"name": t.name}
    if t.description is not None:
        out["description"] = t.description
    out["input_schema"] = t.parameters
    out.update(t.extra.get(NAME, {}))
    return _marked(out, t)


def _encode_tool_choice(c: ToolChoice) -> JSON:
    out: JSON
    match c.mode:
        case "auto":
            out = {"type": "auto"}
        case "required":
            out = {"type": "any"}
        case "none":
            return {"type": "none"}
        case "tool":
            out = {"type": "tool", "name": c.name}
    if c.disable_parallel is not None:
        out["disable_parallel_tool_use"] = c.disable_parallel
    return out
