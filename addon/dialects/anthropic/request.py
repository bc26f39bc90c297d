"""Anthropic ``/v1/messages`` requests (Claude Code, the anthropic SDK) → unified ``Request``.

Contract: JSON object in, ``Request`` out (the way back: ``request_encode``). Lenient on
input: unmodelled top-level fields stay in ``extra``, unknown blocks become ``Opaque`` parts.
Raises ``UnsupportedShape`` for JSON that is not a Messages request (passed through) and
``ClientError`` for a client's mistake. Details: docs/dialects/anthropic.md#module-notes."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

from addon.dialects import names
from addon.dialects.anthropic.blocks import cache_mark, decode_block, unmodelled
from addon.dialects.anthropic.ids import from_anthropic
from addon.model import (
    JSON,
    ClientError,
    Effort,
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

NAME = names.ANTHROPIC
_MODELLED = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "stream", "max_tokens", "temperature",
     "top_p", "top_k", "stop_sequences", "thinking"}
)  # fmt: skip
_FUNCTION_TOOL_TYPES = (None, "custom")
_EFFORTS: dict[str, Effort] = {
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
    "max": "xhigh",
}
"""``output_config.effort`` → unified effort; ``max`` is the highest level the model has."""
_NOT_EXTRA: dict[str, frozenset[str]] = {
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
}
"""Per block type, the keys ``blocks.decode_block`` models; the rest is kept in ``extra``.

Only for the parts whose ``extra`` no other dialect writes to the wire: the OpenAI
encoder copies ``ToolCall.extra`` and ``Image.extra`` into its own objects. A
``cache_control`` Anthropic takes is modelled on every part (``cache``)."""


# --------------------------------------------------------------------------- decode


def decode_request(body: JSON, notes: Notes) -> Request:
    """The unified request. Server tools become ``OpaqueTool``; tool ids a client sends back
    are un-escaped (``ids.from_anthropic``)."""
    model, messages = body.get("model"), body.get("messages")
    if not isinstance(model, str) or not isinstance(messages, list):
        raise UnsupportedShape("not an Anthropic Messages request (model and messages needed)")
    decoded: list[Message] = []
    system = body.get("system")
    if isinstance(system, str):
        if system:
            decoded.append(Message("system", (Text(system),), string_content=True))
    elif isinstance(system, list):
        if system:
            decoded.append(
                Message(
                    "system", tuple(_text_block(b, f"system[{k}]") for k, b in enumerate(system))
                )
            )
    elif system is not None:
        raise UnsupportedShape("system is neither a string nor text blocks")
    for i, m in enumerate(messages):
        decoded.append(_decode_message(i, m))
    extra = {k: v for k, v in body.items() if k not in _MODELLED}
    metadata = extra.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    stops = body.get("stop_sequences")
    tools = body.get("tools")
    return Request(
        origin=NAME,
        model=model,
        messages=tuple(decoded),
        tools=_decode_tools(tools) if isinstance(tools, list) else None,
        tool_choice=_decode_tool_choice(body.get("tool_choice")),
        stream=bool(body.get("stream")),
        stream_explicit=body.get("stream") is not None,
        params=Params(
            max_tokens=_num(body.get("max_tokens"), int),
            temperature=_num(body.get("temperature"), float),
            top_p=_num(body.get("top_p"), float),
            top_k=_num(body.get("top_k"), int),
            stop=tuple(s for s in stops if isinstance(s, str)) if isinstance(stops, list) else None,
            user=user if isinstance(user, str) else None,
        ),
        thinking=_decode_thinking(body.get("thinking"), _effort(extra.get("output_config")), extra),
        extra=extra,
    )


def _effort(output_config: Any) -> Effort | None:
    """``output_config.effort`` (``low`` … ``max``) as a unified effort; unknown values: None."""
    if not isinstance(output_config, dict):
        return None
    effort = output_config.get("effort")
    return _EFFORTS.get(effort) if isinstance(effort, str) else None


def _decode_thinking(raw: Any, effort: Effort | None, extra: JSON) -> ThinkingConfig | None:
    """``enabled`` → on with its budget; ``disabled`` → None; other kinds (and ``disabled``)
    also kept in ``extra``.

    ``adaptive`` (the model decides, no budget) is "on" for other dialects; the
    original object stays in ``extra`` so that an Anthropic upstream gets it back
    as it was rather than as ``enabled`` with a made-up budget. ``effort`` (from
    ``output_config``, which stays in ``extra``) rides along when thinking is on.
    """
    if not isinstance(raw, dict):
        return None
    match raw.get("type"):
        case "enabled":
            return ThinkingConfig(True, _num(raw.get("budget_tokens"), int), effort=effort)
        case "disabled":
            extra["thinking"] = raw  # said explicitly: an Anthropic upstream gets it back
            return None
        case "adaptive":
            extra["thinking"] = raw
            return ThinkingConfig(True, None, effort=effort, adaptive=True)
        case _:
            extra["thinking"] = raw
            return None


def _num(value: Any, kind: type[int] | type[float]) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if kind is int else float(value)


def _text_block(block: Any, where: str) -> Text:
    if (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ):
        mark = cache_mark(block)
        return Text(block["text"], extra=unmodelled(block, ("type", "text"), mark), cache=mark)
    raise UnsupportedShape(f"{where}: expected a text block")


def _decode_message(i: int, m: Any) -> Message:
    if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
        raise UnsupportedShape(f"messages[{i}] is not a user, assistant or system message")
    extra = {k: v for k, v in m.items() if k not in ("role", "content")}
    content = m.get("content")
    if m["role"] == "system":  # mid-conversation system message (beta): text only
        if isinstance(content, str):
            return Message("system", (Text(content),), string_content=True, extra=extra)
        if not isinstance(content, list):
            raise UnsupportedShape(f"messages[{i}].content is neither a string nor text blocks")
        texts = tuple(_text_block(b, f"messages[{i}].content[{j}]") for j, b in enumerate(content))
        return Message("system", texts, extra=extra)
    role: Literal["user", "assistant"] = m["role"]
    if isinstance(content, str):
        return Message(role, (Text(content),), string_content=True, extra=extra)
    if not isinstance(content, list):
        raise UnsupportedShape(f"messages[{i}].content is neither a string nor blocks")
    parts = tuple(_decode_block(f"messages[{i}].content[{j}]", b) for j, b in enumerate(content))
    for j, p in enumerate(parts):
        if isinstance(p, ToolCall) and role != "assistant":
            raise ClientError(
                f"messages[{i}].content[{j}]: tool_use blocks cannot appear in {role} messages",
                param=f"messages[{i}].content[{j}]",
            )
        if isinstance(p, ToolResult) and role != "user":
            raise ClientError(
                f"messages[{i}].content[{j}]: tool_result blocks cannot appear in {role} messages",
                param=f"messages[{i}].content[{j}]",
            )
    return Message(role, parts, extra=extra)


def _decode_block(where: str, block: Any) -> Part:
    if not isinstance(block, dict):
        raise UnsupportedShape(f"{where} is not an object")
    kind = block.get("type")
    if kind == "text":
        return _text_block(block, where)
    part = decode_block(where, block, _decode_block)
    if part is None:  # document, search_result, server_tool_use, … : only Anthropic reads them
        return Opaque(NAME, block)
    if isinstance(part, ToolCall):  # ids escaped for this client on the way out: un-escape
        return dataclasses.replace(part, id=from_anthropic(part.id))
    if isinstance(part, ToolResult):
        part = dataclasses.replace(part, tool_call_id=from_anthropic(part.tool_call_id))
    modelled = _NOT_EXTRA.get(str(kind))
    if modelled is not None and isinstance(part, ToolResult | Thinking):
        extra = unmodelled(block, modelled, part.cache if isinstance(part, ToolResult) else None)
        if extra:
            return dataclasses.replace(part, extra=extra)
    return part


def _decode_tools(tools: list[Any]) -> tuple[Tool | OpaqueTool, ...]:
    out: list[Tool | OpaqueTool] = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise ClientError(f"tools[{i}] is not an object", param=f"tools[{i}]")
        name = t.get("name")
        kind = t.get("type")
        if not isinstance(name, str) or not name:
            raise ClientError(f"tools[{i}] has no name", param=f"tools[{i}].name")
        if kind not in _FUNCTION_TOOL_TYPES:
            # Server tools run on Anthropic's side: only an Anthropic upstream can take them;
            # a route to another upstream leaves them out (transforms.tools.leave_out_tools).
            out.append(OpaqueTool(NAME, name, str(kind), t))
            continue
        schema = t.get("input_schema")
        mark = cache_mark(t)
        extra = unmodelled(t, ("name", "description", "input_schema", "type"), mark)
        if kind is not None:
            extra["type"] = kind
        description = t.get("description")
        out.append(
            Tool(
                name,
                description if isinstance(description, str) else None,
                schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
                extra={NAME: extra} if extra else {},
                cache=mark,
            )
        )
    return tuple(out)


def _decode_tool_choice(raw: Any) -> ToolChoice | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ClientError("tool_choice must be an object", param="tool_choice")
    disable = raw.get("disable_parallel_tool_use")
    parallel = bool(disable) if disable is not None else None
    match raw.get("type"):
        case "auto":
            return ToolChoice("auto", disable_parallel=parallel)
        case "any":
            return ToolChoice("required", disable_parallel=parallel)
        case "none":
            return ToolChoice("none")
        case "tool" if isinstance(raw.get("name"), str) and raw["name"]:
            return ToolChoice("tool", raw["name"], disable_parallel=parallel)
        case "tool":
            raise ClientError("tool_choice of type 'tool' needs a name", param="tool_choice.name")
    raise ClientError(
        f"tool_choice {json.dumps(raw, ensure_ascii=False)} is not one of auto, any, tool, none",
        param="tool_choice.type",
    )
