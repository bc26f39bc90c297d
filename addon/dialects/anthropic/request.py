"""Anthropic ``/v1/messages`` requests (Claude Code, the anthropic SDK) ↔ unified ``Request``.

Contract: JSON object in, ``Request`` out (and back, for an Anthropic
upstream). Unmodelled fields stay in ``extra`` for an Anthropic upstream only.
Raises ``UnsupportedShape`` for JSON that is not a Messages request and
``ClientError`` for a client's mistake, such as a server tool (web search,
code execution, computer use) that an OpenAI-compatible upstream cannot run.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from addon.dialects.anthropic.blocks import decode_block
from addon.model import (
    JSON,
    ClientError,
    Image,
    Message,
    Notes,
    Opaque,
    OpaqueTool,
    Params,
    Part,
    Request,
    Text,
    Thinking,
    ThinkingConfig,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    UnsupportedShape,
)

NAME = "anthropic"
DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires max_tokens; used when a request from another dialect has none."""
_MODELLED = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "stream", "max_tokens", "temperature",
     "top_p", "top_k", "stop_sequences", "thinking"}
)  # fmt: skip


# --------------------------------------------------------------------------- decode


def decode_request(body: JSON, notes: Notes) -> Request:
    model, messages = body.get("model"), body.get("messages")
    if not isinstance(model, str) or not isinstance(messages, list):
        raise UnsupportedShape("not an Anthropic Messages request (model and messages needed)")
    decoded: list[Message] = []
    system = body.get("system")
    if isinstance(system, str) and system:
        decoded.append(Message("system", (Text(system),), string_content=True))
    elif isinstance(system, list) and system:
        decoded.append(Message("system", tuple(_text_block(b, "system") for b in system)))
    for i, m in enumerate(messages):
        decoded.append(_decode_message(i, m))
    extra = {k: v for k, v in body.items() if k not in _MODELLED}
    metadata = extra.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    stops = body.get("stop_sequences")
    thinking = body.get("thinking")
    return Request(
        origin=NAME,
        model=model,
        messages=tuple(decoded),
        tools=_decode_tools(body["tools"]) if isinstance(body.get("tools"), list) else None,
        tool_choice=_decode_tool_choice(body.get("tool_choice")),
        stream=bool(body.get("stream")),
        params=Params(
            max_tokens=_num(body.get("max_tokens"), int),
            temperature=_num(body.get("temperature"), float),
            top_p=_num(body.get("top_p"), float),
            top_k=_num(body.get("top_k"), int),
            stop=tuple(s for s in stops if isinstance(s, str)) if isinstance(stops, list) else None,
            user=user if isinstance(user, str) else None,
        ),
        thinking=(
            ThinkingConfig(True, _num(thinking.get("budget_tokens"), int))
            if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
            else None
        ),
        extra=extra,
    )


def _num(value: Any, kind: type[int] | type[float]) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if kind is int else float(value)


def _text_block(block: Any, where: str) -> Part:
    if (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ):
        return Text(
            block["text"], extra={k: v for k, v in block.items() if k not in ("type", "text")}
        )
    raise UnsupportedShape(f"{where}: expected text blocks")


def _decode_message(i: int, m: Any) -> Message:
    if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
        raise UnsupportedShape(f"messages[{i}] is not a user or assistant message")
    role: Literal["user", "assistant"] = m["role"]
    content = m.get("content")
    if isinstance(content, str):
        return Message(role, (Text(content),), string_content=True)
    if not isinstance(content, list):
        raise UnsupportedShape(f"messages[{i}].content is neither a string nor blocks")
    parts = tuple(_decode_block(f"messages[{i}].content[{j}]", b) for j, b in enumerate(content))
    for j, p in enumerate(parts):
        wrong = (isinstance(p, ToolCall) and role != "assistant") or (
            isinstance(p, ToolResult) and role != "user"
        )
        if wrong:
            raise ClientError(
                f"messages[{i}].content[{j}]: {'tool_use' if isinstance(p, ToolCall) else 'tool_result'}"
                f" blocks cannot appear in {role} messages",
                param=f"messages[{i}].content[{j}]",
            )
    return Message(role, parts)


def _decode_block(where: str, block: Any) -> Part:
    if not isinstance(block, dict):
        raise UnsupportedShape(f"{where} is not an object")
    if block.get("type") == "text":
        return _text_block(block, where)
    part = decode_block(where, block, _decode_block)
    return part if part is not None else Opaque(NAME, block)


def _decode_tools(tools: list[Any]) -> tuple[Tool | OpaqueTool, ...]:
    out: list[Tool | OpaqueTool] = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise ClientError(f"tools[{i}] is not an object", param=f"tools[{i}]")
        name = t.get("name")
        kind = t.get("type")
        if not isinstance(name, str) or not name:
            raise ClientError(f"tools[{i}] has no name", param=f"tools[{i}].name")
        if kind not in (None, "custom"):
            # Server tools run on Anthropic's side (web_search_20250305, bash_20250124,
            # text_editor_…, computer_…, code_execution_…); only an Anthropic upstream has them.
            out.append(OpaqueTool(NAME, name, str(kind), t))
            continue
        schema = t.get("input_schema")
        extra = {
            k: v for k, v in t.items() if k not in ("name", "description", "input_schema", "type")
        }
        out.append(
            Tool(
                name,
                t.get("description"),
                schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
                extra={"anthropic": extra} if extra else {},
            )
        )
    return tuple(out)


def _decode_tool_choice(raw: Any) -> ToolChoice | None:
    if not isinstance(raw, dict):
        return None
    disable = raw.get("disable_parallel_tool_use")
    parallel = bool(disable) if disable is not None else None
    match raw.get("type"):
        case "auto":
            return ToolChoice("auto", disable_parallel=parallel)
        case "any":
            return ToolChoice("required", disable_parallel=parallel)
        case "none":
            return ToolChoice("none")
        case "tool" if isinstance(raw.get("name"), str):
            return ToolChoice("tool", raw["name"], disable_parallel=parallel)
    raise ClientError(f"tool_choice {json.dumps(raw)} is not understood", param="tool_choice")


# --------------------------------------------------------------------------- encode


def encode_request(req: Request, notes: Notes) -> JSON:
    """The Messages body for an Anthropic upstream."""
    system: list[JSON] = []
    turns: list[JSON] = []
    for m in req.messages:
        if m.role in ("system", "developer"):
            system.extend(_encode_part(p, notes) for p in m.parts)
            continue
        role = "assistant" if m.role == "assistant" else "user"
        blocks = [b for p in m.parts if (b := _encode_part(p, notes))]
        if m.role == "assistant":
            # Anthropic wants thinking first, and rejects thinking without a signature.
            blocks.sort(
                key=lambda b: 0 if b.get("type") in ("thinking", "redacted_thinking") else 1
            )
        if turns and turns[-1]["role"] == role:  # Anthropic requires alternating roles
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    body: JSON = {"model": req.model, "messages": turns}
    if system:
        body["system"] = system
    p = req.params
    if p.max_tokens is None:
        notes[f"max_tokens {DEFAULT_MAX_TOKENS} added (Anthropic requires it)"] += 1
    body["max_tokens"] = p.max_tokens or DEFAULT_MAX_TOKENS
    for key, value in (("temperature", p.temperature), ("top_p", p.top_p), ("top_k", p.top_k)):
        if value is not None:
            body[key] = value
    if p.stop:
        body["stop_sequences"] = list(p.stop)
    if p.user:
        body["metadata"] = {"user_id": p.user}
    if req.tools is not None:
        body["tools"] = [_encode_tool(t) for t in req.tools]
    if req.tool_choice is not None:
        body["tool_choice"] = _encode_tool_choice(req.tool_choice)
    if req.thinking is not None and req.thinking.enabled:
        body["thinking"] = {"type": "enabled", "budget_tokens": req.thinking.budget_tokens or 2048}
    if req.stream:
        body["stream"] = True
    if req.origin == NAME:
        body.update(req.extra)
    return body


def _encode_part(p: Part, notes: Notes) -> JSON:
    match p:
        case Text():
            return {"type": "text", "text": p.text, **p.extra}
        case Image():
            if p.url.startswith("data:") and ";base64," in p.url:
                media, data = p.url[5:].split(";base64,", 1)
                return {
                    "type": "image",
                    "source": {"type": "base64", "media_type": media, "data": data},
                }
            return {"type": "image", "source": {"type": "url", "url": p.url}}
        case ToolCall():
            try:
                args = json.loads(p.arguments or "{}")
            except ValueError:
                args = None
            if not isinstance(args, dict):
                notes["unparsable tool arguments kept as _raw_arguments"] += 1
                args = {"_raw_arguments": p.arguments}
            return {"type": "tool_use", "id": p.id, "name": p.name, "input": args}
        case ToolResult():
            content: Any = (
                p.content
                if isinstance(p.content, str)
                else [_encode_part(q, notes) for q in p.content]
            )
            block: JSON = {"type": "tool_result", "tool_use_id": p.tool_call_id, "content": content}
            if p.is_error:
                block["is_error"] = True
            return block
        case Thinking():
            if p.redacted:
                return {"type": "redacted_thinking", "data": p.text}
            if not p.signature:
                notes["unsigned thinking dropped (Anthropic rejects it)"] += 1
                return {}
            return {"type": "thinking", "thinking": p.text, "signature": p.signature}
        case Opaque():
            return p.data if p.origin == NAME else {"type": "text", "text": json.dumps(p.data)}


def _encode_tool(t: Tool | OpaqueTool) -> JSON:
    if isinstance(t, OpaqueTool):
        if t.origin == NAME:
            return t.data
        raise ClientError(f"tool '{t.name}' of type '{t.type}' cannot be sent to Anthropic")
    out: JSON = {"name": t.name, "input_schema": t.parameters}
    if t.description is not None:
        out["description"] = t.description
    out.update(t.extra.get("anthropic", {}))
    return out


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
