"""OpenAI ``chat/completions`` requests, with Cursor's variants, → unified ``Request``.

Contract: JSON object in, ``Request`` out (the way back: ``request_encode``). Lenient on
input: every field this codec does not model is kept in ``extra`` and written back unchanged.
Raises ``UnsupportedShape`` for JSON it cannot read (passed through) and ``ClientError`` for a
client's mistake (400 in OpenAI's error shape). Details: docs/dialects/openai_chat.md."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, get_args

from addon.dialects import names
from addon.dialects.anthropic.blocks import cache_mark, decode_block, unmodelled
from addon.dialects.openai_responses.request import decode_tools
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
    Role,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    UnsupportedShape,
)

from .hybrid import decode_chat_hybrid

NAME = names.OPENAI_CHAT

# Anthropic server tools (web search, code execution, computer use ...) carry a
# versioned ``type`` and no schema; an OpenAI-compatible upstream cannot run them.
_FUNCTION_TOOL_TYPES = {None, "function", "custom"}
_BLOCK_NOTES = {
    "image": "Anthropic image blocks → image_url",
    "tool_use": "tool_use blocks → tool_calls",
    "tool_result": "tool_result blocks → tool messages",
    "thinking": "thinking blocks → reasoning_content",
    "redacted_thinking": "redacted_thinking blocks kept aside",
}


@dataclass(slots=True)
class _WireMessage:
    """One message of a chat request, its modelled keys checked (``_wire_request``)."""

    role: Role
    content: str | list[Any] | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    reasoning_content: str | None
    extra: dict[str, Any]
    """Every other key, as sent."""


@dataclass(slots=True)
class _WireRequest:
    model: str
    messages: list[_WireMessage]
    tools: list[Any] | None
    tool_choice: str | dict[str, Any] | None
    stream: bool


_MODELLED = frozenset({"model", "messages", "tools", "tool_choice", "stream"})
_MESSAGE_MODELLED = frozenset(
    {"role", "content", "tool_calls", "tool_call_id", "reasoning_content"}
)
_ROLES: tuple[str, ...] = get_args(Role.__value__)
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


class _Shape(ValueError):
    """A modelled key of the wrong type: where it is (``messages.3.role``) and what it takes."""


def _wire_request(body: JSON) -> _WireRequest:
    """The keys a chat request is read by, checked by hand (what pydantic's lax mode took:
    the types below, ``stream`` also as 0/1 or "true"/"false"); extra keys are kept."""
    model = body.get("model")
    if not isinstance(model, str):
        raise _Shape(_wrong("model", model, "a valid string"))
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _Shape(_wrong("messages", messages, "a valid list"))
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise _Shape(_wrong("tools", tools, "a valid list"))
    choice = body.get("tool_choice")
    if choice is not None and not isinstance(choice, str | dict):
        raise _Shape(_wrong("tool_choice", choice, "a valid string or dictionary"))
    return _WireRequest(
        model,
        [_wire_message(i, m) for i, m in enumerate(messages)],
        tools,
        choice,
        _lax_bool("stream", body.get("stream")),
    )


def _wire_message(i: int, m: object) -> _WireMessage:
    where = f"messages.{i}"
    if not isinstance(m, dict):
        raise _Shape(_wrong(where, m, "a valid dictionary"))
    role = m.get("role")
    if role not in _ROLES:
        raise _Shape(_wrong(f"{where}.role", role, " or ".join(map(repr, _ROLES))))
    content = m.get("content")
    if content is not None and not isinstance(content, str | list):
        raise _Shape(_wrong(f"{where}.content", content, "a valid string or list"))
    calls = m.get("tool_calls")
    if calls is not None and (
        not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls)
    ):
        raise _Shape(_wrong(f"{where}.tool_calls", calls, "a list of objects"))
    for key in ("tool_call_id", "reasoning_content"):
        if (v := m.get(key)) is not None and not isinstance(v, str):
            raise _Shape(_wrong(f"{where}.{key}", v, "a valid string"))
    extra = {k: v for k, v in m.items() if k not in _MESSAGE_MODELLED}
    return _WireMessage(
        role, content, calls, m.get("tool_call_id"), m.get("reasoning_content"), extra
    )


def _lax_bool(where: str, v: object) -> bool:
    if v is None or isinstance(v, bool):
        return bool(v)
    if type(v) is int and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.lower() in _TRUE | _FALSE:
        return v.lower() in _TRUE
    raise _Shape(_wrong(where, v, "a valid boolean"))


def _wrong(where: str, got: object, takes: str) -> str:
    if got is None:
        return f"{where}: Field required"
    return f"{where}: Input should be {takes} (got {type(got).__name__})"


# --------------------------------------------------------------------------- decode


def decode_request(body: JSON, notes: Notes) -> Request:
    """The unified request, Cursor's variants included (flat tools, Anthropic-style blocks,
    Responses-shaped agent bodies: ``hybrid``): docs/dialects/openai_chat.md#module-notes."""
    if isinstance(body.get("input"), str | list):
        # Cursor agent mode: a Responses request on /chat/completions (with or without
        # ``messages``; how both are merged is documented in decode_chat_hybrid).
        return decode_chat_hybrid(body, notes, _decode_chat_request)
    return _decode_chat_request(body, notes)


def _decode_chat_request(body: JSON, notes: Notes) -> Request:
    try:
        wire = _wire_request(body)
    except _Shape as e:
        raise UnsupportedShape(f"not an OpenAI chat request: {e}") from None
    extra = {k: v for k, v in body.items() if k not in _MODELLED}
    params = _decode_params(extra)
    tool_choice = None
    if wire.tool_choice is not None:
        tool_choice = _decode_tool_choice(wire.tool_choice, notes)
        if tool_choice is None:  # an OpenAI form we do not model (e.g. allowed_tools): keep it
            extra["tool_choice"] = wire.tool_choice
    return Request(
        origin=NAME,
        model=wire.model,
        messages=tuple(_decode_message(i, m, notes) for i, m in enumerate(wire.messages)),
        tools=None if wire.tools is None else _decode_tools(wire.tools, notes),
        tool_choice=tool_choice,
        stream=wire.stream,
        stream_explicit=body.get("stream") is not None,
        params=params,
        extra=extra,
    )


def _decode_params(extra: JSON) -> Params:
    """Move the parameters every dialect shares out of ``extra`` (when they have a usable type)."""

    def take(key: str, kind: type | tuple[type, ...]) -> Any:
        value = extra.get(key)
        if isinstance(value, kind) and not isinstance(value, bool):
            return extra.pop(key)
        return None

    stop = extra.get("stop")
    stops: tuple[str, ...] | None = None
    if isinstance(stop, str):
        stops = (extra.pop("stop"),)
    elif isinstance(stop, list) and all(isinstance(x, str) for x in stop):
        stops = tuple(extra.pop("stop"))
    return Params(
        max_tokens=take("max_tokens", int),
        temperature=take("temperature", (int, float)),
        top_p=take("top_p", (int, float)),
        top_k=take("top_k", int),
        stop=stops,
        user=take("user", str),
        seed=take("seed", int),
        presence_penalty=take("presence_penalty", (int, float)),
        frequency_penalty=take("frequency_penalty", (int, float)),
        service_tier=take("service_tier", str),
        cache_key=take("prompt_cache_key", str),
    )


def _decode_message(i: int, m: _WireMessage, notes: Notes) -> Message:
    extra = dict(m.extra)
    parts: list[Part] = []
    if m.role == "assistant" and m.reasoning_content:
        parts.append(Thinking(m.reasoning_content))
    if isinstance(m.content, str):
        content_parts: list[Part] = [Text(m.content)]
    elif m.content is None:
        content_parts = []
    else:
        content_parts = [_decode_block(i, j, b, notes) for j, b in enumerate(m.content)]
    for j, p in enumerate(content_parts):
        if isinstance(p, ToolCall) and m.role != "assistant":
            raise ClientError(
                f"messages[{i}].content[{j}]: tool_use blocks belong in assistant messages",
                param=f"messages[{i}].content[{j}]",
            )
        if isinstance(p, ToolResult) and m.role not in ("user", "tool"):
            raise ClientError(
                f"messages[{i}].content[{j}]: tool_result blocks belong in user messages",
                param=f"messages[{i}].content[{j}]",
            )
    if m.role == "tool":
        if any(isinstance(p, ToolCall | ToolResult) for p in content_parts):
            raise ClientError(
                f"messages[{i}] is a tool message holding tool_use/tool_result blocks",
                param=f"messages[{i}].content",
            )
        if m.tool_call_id is None:
            raise ClientError(
                f"messages[{i}] has role 'tool' but no tool_call_id",
                param=f"messages[{i}].tool_call_id",
            )
        content: str | tuple[Part, ...] = (
            m.content if isinstance(m.content, str) else tuple(content_parts)
        )
        name = extra.pop("name", None)
        result = ToolResult(m.tool_call_id, content, name=name if isinstance(name, str) else None)
        return Message("tool", (result,), string_content=isinstance(m.content, str), extra=extra)
    parts.extend(content_parts)
    if m.tool_calls:
        seen = {p.id for p in parts if isinstance(p, ToolCall)}
        for k, call in enumerate(m.tool_calls):
            decoded = _decode_tool_call(i, k, call)
            if decoded.id not in seen:
                parts.append(decoded)
    if m.role != "assistant" and any(isinstance(p, ToolCall) for p in parts):
        # OpenAI refuses tool_calls on any other role; no upstream dialect can place them.
        raise ClientError(
            f"messages[{i}]: only assistant messages carry tool calls (role {m.role!r})",
            param=f"messages[{i}].tool_calls",
        )
    # Cursor's assistant arrays with tool_use/thinking blocks: the remaining text goes out as
    # a string, which gateways accept far more often than an array in assistant turns.
    as_string = isinstance(m.content, str) or (
        m.role == "assistant"
        and any(not isinstance(p, Text | Image | Opaque) for p in content_parts)
    )
    return Message(m.role, tuple(parts), string_content=as_string, extra=extra)


def _decode_tool_call(i: int, k: int, call: dict[str, Any]) -> ToolCall:
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ClientError(
            f"messages[{i}].tool_calls[{k}] has no function name",
            param=f"messages[{i}].tool_calls[{k}].function.name",
        )
    args = fn.get("arguments")
    if not isinstance(args, str):  # some clients send the object itself
        args = json.dumps(args if args is not None else {}, ensure_ascii=False)
    extra = {key: v for key, v in call.items() if key not in ("id", "type", "function")}
    fn_extra = {key: v for key, v in fn.items() if key not in ("name", "arguments")}
    if fn_extra:
        extra["function"] = fn_extra
    return ToolCall(str(call.get("id") or f"call_{i}_{k}"), fn["name"], args, extra=extra)


def _decode_block(i: int, j: int, block: Any, notes: Notes) -> Part:
    if isinstance(block, str):  # seen from hand-written clients: a bare string in the array
        return Text(block)
    if not isinstance(block, dict):
        raise UnsupportedShape(f"messages[{i}].content[{j}] is not an object")
    kind = block.get("type")
    rest = {k: v for k, v in block.items() if k not in ("type", kind)}
    match kind:
        case "text" if isinstance(block.get("text"), str):
            # OpenRouter and LiteLLM take Anthropic's cache_control on chat content parts.
            mark = cache_mark(block)
            return Text(block["text"], extra=unmodelled(rest, ("text",), mark), cache=mark)
        case "image_url" if isinstance(block.get("image_url"), dict | str):
            ref = block["image_url"]
            if isinstance(ref, str):
                return Image(ref, cache=cache_mark(block))
            return Image(str(ref.get("url", "")), detail=ref.get("detail"), cache=cache_mark(block))
        case "image" | "tool_use" | "tool_result" | "thinking" | "redacted_thinking":
            # Cursor puts Anthropic blocks into OpenAI messages.
            part = decode_block(
                f"messages[{i}].content[{j}]", block, lambda _, b: _decode_block(i, j, b, notes)
            )
            if part is not None:
                notes[_BLOCK_NOTES[kind]] += 1
                return part
            return Opaque(NAME, block)
        case _:
            return Opaque(NAME, block)


def _decode_tools(tools: list[Any], notes: Notes) -> tuple[Tool | OpaqueTool, ...]:
    out: list[Tool | OpaqueTool] = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise ClientError(f"tools[{i}] is not an object", param=f"tools[{i}]")
        kind = t.get("type")
        if kind is not None and not isinstance(kind, str):
            raise ClientError(f"tools[{i}].type must be a string", param=f"tools[{i}].type")
        fn = t.get("function")
        if kind == "function" and isinstance(fn, dict):
            name = fn.get("name")
            if not isinstance(name, str) or not name:
                raise ClientError(f"tools[{i}] has no name", param=f"tools[{i}].function.name")
            extra: JSON = {}
            fn_extra = {
                k: v
                for k, v in fn.items()
                if k not in ("name", "description", "parameters", "strict")
            }
            mark = cache_mark(t)  # LiteLLM's cache_control on a chat tool
            tool_extra = unmodelled(t, ("type", "function"), mark)
            if fn_extra:
                extra["function"] = fn_extra
            if tool_extra:
                extra["tool"] = tool_extra
            out.append(
                Tool(
                    name,
                    fn.get("description"),
                    _parameters(fn.get("parameters")),
                    strict=fn.get("strict"),
                    extra=extra,
                    cache=mark,
                )
            )
            continue
        name = t.get("name")
        if kind is not None and isinstance(t.get(kind), dict):
            # OpenAI's nested non-function tools (e.g. {"type": "custom", "custom": {...}}):
            # only an OpenAI upstream can carry them, so they stay opaque.
            inner_name = t[kind].get("name")
            out.append(
                OpaqueTool(NAME, inner_name if isinstance(inner_name, str) else None, kind, t)
            )
            continue
        if not isinstance(name, str) or not name:
            raise ClientError(f"tools[{i}] has no name", param=f"tools[{i}].name")
        if kind == "custom" and "input_schema" not in t and "parameters" not in t:
            # A flat OpenAI custom (freeform) tool, as Cursor's Ask mode sends it next to
            # nested function tools (Anthropic's custom tools carry an input_schema).
            notes["flat custom tools → custom tools"] += 1
            out.extend(decode_tools([t], notes))
            continue
        if kind not in _FUNCTION_TOOL_TYPES:
            raise ClientError(
                f"tool '{name}' has type '{kind}', a server tool that an OpenAI-compatible "
                "upstream cannot run; remove it from the request",
                param=f"tools[{i}].type",
                code="unsupported_tool",
            )
        # Cursor's flat Anthropic-style tool, or the Responses API's flat function tool.
        notes["flat tools → OpenAI"] += 1
        schema = t.get("input_schema", t.get("parameters"))
        out.append(Tool(name, t.get("description"), _parameters(schema), strict=t.get("strict")))
    return tuple(out)


def _parameters(schema: Any) -> JSON:
    if isinstance(schema, dict):
        return schema
    return {"type": "object", "properties": {}}


def _decode_tool_choice(raw: str | dict[str, Any], notes: Notes) -> ToolChoice | None:
    if isinstance(raw, str):
        match raw:
            case "auto" | "none" | "required":
                return ToolChoice(raw)
            case "any":
                notes["Anthropic tool_choice → OpenAI"] += 1
                return ToolChoice("required")
        raise ClientError(
            f"tool_choice '{raw}' is not one of auto, none, required", param="tool_choice"
        )
    kind = raw.get("type")
    disable = raw.get("disable_parallel_tool_use")
    disable_parallel = bool(disable) if disable is not None else None
    fn = raw.get("function")
    if kind == "function" and isinstance(fn, dict) and isinstance(fn.get("name"), str):
        return ToolChoice("tool", fn["name"])
    mode: Literal["auto", "none", "required", "tool"]
    match kind:
        case "auto":
            mode = "auto"
        case "any":
            mode = "required"
        case "none":
            mode = "none"
        case "tool" if isinstance(raw.get("name"), str):
            notes["Anthropic tool_choice → OpenAI"] += 1
            return ToolChoice("tool", raw["name"], disable_parallel=disable_parallel)
        case "tool":
            raise ClientError("tool_choice of type 'tool' needs a name", param="tool_choice.name")
        case _:
            return None
    notes["Anthropic tool_choice → OpenAI"] += 1
    return ToolChoice(mode, disable_parallel=disable_parallel)
