"""OpenAI Responses API requests (``POST /v1/responses``: Codex CLI, the openai SDK) → unified.

Contract: JSON object in, ``Request`` out (the way back: ``request_encode``). Lenient on input;
raises ``UnsupportedShape`` for JSON that is not a Responses request (passed through) and
``ClientError`` for a client's mistake (``response.encode_error``). Items are grouped into
unified messages; tools only OpenAI runs become ``OpaqueTool(NAME)``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Literal, cast

from addon.dialects import names
from addon.model import (
    JSON,
    ClientError,
    Effort,
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
    ThinkingConfig,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    UnsupportedShape,
)

NAME = names.OPENAI_RESPONSES
ITEMS = "__openai_responses_items__"
"""Key of the private table in ``Request.extra`` (never written to the wire) of wire details
only a Responses upstream gets back (item ids and statuses, which system message was
``instructions``). Details: docs/dialects/openai_responses.md#module-notes."""

_EFFORTS = frozenset({"minimal", "low", "medium", "high", "xhigh"})
"""The efforts ``ThinkingConfig`` models (``none`` means no thinking; others stay in extra)."""
_MODELLED = frozenset(
    {"model", "input", "instructions", "tools", "tool_choice", "stream", "max_output_tokens",
     "temperature", "top_p", "user", "service_tier", "prompt_cache_key"}
)  # fmt: skip
_ROLES = ("user", "assistant", "system", "developer")
_CALLS = ("function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")
PART_TYPES = frozenset({"input_text", "output_text", "input_image", "input_file", "input_audio"})
"""Content-part types: an ``Opaque`` of this dialect with one of them is a part, else an item."""
CHAT_CUSTOM = "openai_chat"
"""The chat dialect's name, for its nested ``{"type": "custom", "custom": {…}}`` tools."""
_INPUT_SCHEMA_KEYS = ("input_schema", "parameters")


# --------------------------------------------------------------------------- decode


def decode_request(body: JSON, notes: Notes) -> Request:
    model = body.get("model")
    raw_input = body.get("input")
    if not isinstance(model, str) or not (raw_input is None or isinstance(raw_input, str | list)):
        raise UnsupportedShape("not a Responses request (model and input needed)")
    side: JSON = {}
    messages: list[Message] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append(Message("system", (Text(instructions),), string_content=True))
        side["instructions"] = True
    if isinstance(raw_input, str):
        user = Message("user", (Text(raw_input),), string_content=True)
        messages.append(user)
        side["input_string"] = True
        side[fingerprint("user", user.parts)] = {"_no_type": True, "_string": True}
    elif isinstance(raw_input, list):
        messages.extend(_decode_items(raw_input, side, notes))
    extra = {k: v for k, v in body.items() if k not in _MODELLED}
    if (instructions is not None and not isinstance(instructions, str)) or instructions == "":
        extra["instructions"] = instructions  # null / "" / a prompt-template form: kept as sent
    tools = body.get("tools")
    decoded_tools = decode_tools(tools, notes) if isinstance(tools, list) else None
    tool_choice = None
    raw_choice = body.get("tool_choice")
    if raw_choice is not None:
        tool_choice = decode_tool_choice(raw_choice)
        if tool_choice is None:  # allowed_tools, hosted-tool choices, mcp …: kept as sent
            extra["tool_choice"] = raw_choice
            hosted = raw_choice.get("type") if isinstance(raw_choice, dict) else None
            if isinstance(hosted, str) and hosted != "allowed_tools":
                # Said in the model too: another upstream cannot run it (leave_out_tools).
                tool_choice = ToolChoice("tool", kind=hosted)
    if body.get("parallel_tool_calls") is False and decoded_tools:
        if tool_choice is None:
            side["synthetic_tool_choice"] = True
        tool_choice = dataclasses.replace(tool_choice or ToolChoice("auto"), disable_parallel=True)
    if side:
        extra[ITEMS] = side
    return Request(
        origin=NAME,
        model=model,
        messages=tuple(messages),
        tools=decoded_tools,
        tool_choice=tool_choice,
        stream=bool(body.get("stream")),
        stream_explicit=body.get("stream") is not None,
        params=Params(
            max_tokens=_int(body.get("max_output_tokens")),
            temperature=_float(body.get("temperature")),
            top_p=_float(body.get("top_p")),
            user=body["user"] if isinstance(body.get("user"), str) else None,
            service_tier=tier if isinstance(tier := body.get("service_tier"), str) else None,
            cache_key=key if isinstance(key := body.get("prompt_cache_key"), str) else None,
        ),
        thinking=decode_reasoning(body.get("reasoning")),
        extra=extra,
    )


def decode_reasoning(raw: Any) -> ThinkingConfig | None:
    """``{"effort": "high", "summary": "auto"}`` → on, effort high; ``"none"`` → no thinking.

    The object itself stays in ``extra`` (``summary`` and unknown efforts are not modelled).
    """
    if not isinstance(raw, dict):
        return None
    effort = raw.get("effort")
    if effort == "none":
        return None
    return ThinkingConfig(
        True,
        effort=cast(Effort, effort) if isinstance(effort, str) and effort in _EFFORTS else None,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def fingerprint(role: str, parts: list[Part] | tuple[Part, ...]) -> str:
    """A message item's key in the private table: its role and text."""
    text = "\x00".join(p.text for p in parts if isinstance(p, Text))
    digest = hashlib.sha256(f"{role}\x01{_sample(text)}".encode("utf-8", "surrogatepass"))
    return f"message:{digest.hexdigest()[:16]}"


def _sample(text: str) -> str:
    """What of a message's text its key is made of: all of it, or for a long one (a pasted
    file) its length, start and end — the same message, the same key, without hashing
    megabytes on every request."""
    if len(text) <= 8192:
        return text
    return f"{len(text)}\x02{text[:4096]}\x02{text[-4096:]}"


class _Grouper:
    """Items → messages: assistant-side items gather in one assistant message; outputs wait
    in a run that is flushed in the order of the calls they answer."""

    def __init__(self) -> None:
        self.out: list[Message] = []
        self.assistant: list[Part] = []
        self.results: list[ToolResult] = []
        self.call_order: dict[str, int] = {}

    def add_assistant(self, part: Part) -> None:
        self.flush_results()
        self.assistant.append(part)

    def add_result(self, result: ToolResult) -> None:
        self.flush_assistant()
        self.results.append(result)

    def add_message(self, message: Message) -> None:
        self.flush_assistant()
        self.flush_results()
        self.out.append(message)

    def flush_assistant(self) -> None:
        if not self.assistant:
            return
        parts = tuple(self.assistant)
        self.assistant = []
        calls = [p.id for p in parts if isinstance(p, ToolCall)]
        self.call_order = {cid: k for k, cid in enumerate(calls)}
        # Gateways take a string far more often than an array in assistant turns.
        plain = all(isinstance(p, Text | Thinking | ToolCall) for p in parts)
        self.out.append(Message("assistant", parts, string_content=plain))

    def flush_results(self) -> None:
        if not self.results:
            return
        last = len(self.call_order)
        ordered = sorted(self.results, key=lambda r: self.call_order.get(r.tool_call_id, last))
        self.results = []
        for r in ordered:
            self.out.append(Message("tool", (r,), string_content=isinstance(r.content, str)))

    def done(self) -> list[Message]:
        self.flush_assistant()
        self.flush_results()
        return self.out


def _decode_items(items: list[Any], side: JSON, notes: Notes) -> list[Message]:
    g = _Grouper()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise UnsupportedShape(f"input[{i}] is not an object")
        kind = item.get("type", "message" if "role" in item else None)
        match kind:
            case "message":
                role = item.get("role")
                if role not in _ROLES:
                    raise UnsupportedShape(f"input[{i}] is a message with role {role!r}")
                parts, as_string = _decode_content(i, item.get("content"), side, notes)
                meta = {k: v for k, v in item.items() if k not in ("type", "role", "content")}
                if "type" not in item:
                    meta["_no_type"] = True
                if as_string:
                    meta["_string"] = True
                if meta:
                    side[fingerprint(role, parts)] = meta
                if role == "assistant":
                    g.flush_results()
                    g.assistant.extend(parts)
                else:
                    g.add_message(Message(cast(Role, role), tuple(parts), string_content=as_string))
            case "reasoning":
                g.add_assistant(decode_reasoning_item(item))
            case "function_call" | "custom_tool_call":
                g.add_assistant(_decode_call(i, item, side))
            case "function_call_output" | "custom_tool_call_output":
                g.add_result(_decode_output(i, item, side, notes))
            case _:
                # item_reference, web_search_call, local_shell_call(_output), compaction, …:
                # only a Responses upstream reads them; they stay where they were.
                notes["Responses-only input items kept aside"] += 1
                if g.assistant or (isinstance(kind, str) and kind.endswith("_call")):
                    g.add_assistant(Opaque(NAME, item))
                else:
                    g.add_message(Message("user", (Opaque(NAME, item),)))
    return g.done()


def _decode_content(i: int, content: Any, side: JSON, notes: Notes) -> tuple[list[Part], bool]:
    if isinstance(content, str):
        return [Text(content)], True
    if content is None:
        return [], False
    if not isinstance(content, list):
        raise UnsupportedShape(f"input[{i}].content is neither a string nor parts")
    parts: list[Part] = []
    for part in content:
        if isinstance(part, str):
            parts.append(Text(part))
            continue
        if not isinstance(part, dict):
            raise UnsupportedShape(f"input[{i}].content holds a part that is not an object")
        kind = part.get("type")
        text = part.get("text")
        if kind in ("input_text", "output_text", "text") and isinstance(text, str):
            parts.append(Text(text))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            detail = part.get("detail")
            parts.append(
                Image(part["image_url"], detail=detail if isinstance(detail, str) else None)
            )
        elif kind == "input_image" and isinstance(part.get("file_id"), str) and part["file_id"]:
            detail = part.get("detail")
            parts.append(
                Image("", detail if isinstance(detail, str) else None, file=part["file_id"])
            )
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            notes["refusal parts → text"] += 1
            parts.append(Text(part["refusal"]))
        else:
            # input_file, input_audio, tool_use/tool_result blocks
            # Cursor puts in items (not modelled here), …
            if isinstance(kind, str) and kind not in PART_TYPES:
                side.setdefault("part_types", []).append(kind)
            parts.append(Opaque(NAME, part))
    return parts, False


def decode_reasoning_item(item: JSON) -> Thinking:
    """A ``reasoning`` item → ``Thinking``: summary text (or its raw ``content`` when there is no
    summary), ``encrypted_content`` as the signature, the rest of the item in ``extra[NAME]``."""
    texts = [
        s["text"]
        for s in item.get("summary") or []
        if isinstance(s, dict) and isinstance(s.get("text"), str)
    ]
    if not texts:
        texts = [
            c["text"]
            for c in item.get("content") or []
            if isinstance(c, dict) and isinstance(c.get("text"), str)
        ]
    encrypted = item.get("encrypted_content")
    stored = {k: v for k, v in item.items() if k != "encrypted_content"}
    return Thinking(
        "\n\n".join(texts),
        signature=encrypted if isinstance(encrypted, str) and encrypted else None,
        extra={NAME: stored},
    )


def _decode_call(i: int, item: JSON, side: JSON) -> ToolCall:
    custom = item.get("type") == "custom_tool_call"
    call_id, name = item.get("call_id"), item.get("name")
    if not isinstance(name, str) or not name:
        raise ClientError(f"input[{i}] is a tool call without a name", param=f"input[{i}].name")
    if not isinstance(call_id, str) or not call_id:
        raise ClientError(
            f"input[{i}] is a tool call without a call_id", param=f"input[{i}].call_id"
        )
    raw = item.get("input" if custom else "arguments")
    if not isinstance(raw, str):
        raw = "" if raw is None else json.dumps(raw, ensure_ascii=False)
    known = ("type", "call_id", "name", "input" if custom else "arguments")
    meta = {k: v for k, v in item.items() if k not in known}
    if meta:
        side[f"call:{call_id}"] = meta
    return ToolCall(call_id, name, raw, custom=custom)


def _decode_output(i: int, item: JSON, side: JSON, notes: Notes) -> ToolResult:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ClientError(
            f"input[{i}] is a tool output without a call_id", param=f"input[{i}].call_id"
        )
    output = item.get("output")
    content: str | tuple[Part, ...]
    if isinstance(output, str):
        content = output
    elif isinstance(output, list):
        content = tuple(_decode_content(i, output, side, notes)[0])
    else:
        content = "" if output is None else json.dumps(output, ensure_ascii=False)
    meta = {k: v for k, v in item.items() if k not in ("type", "call_id", "output")}
    if meta:
        side[f"output:{call_id}"] = meta
    return ToolResult(call_id, content, custom=item.get("type") == "custom_tool_call_output")


def decode_tools(tools: list[Any], notes: Notes) -> tuple[Tool | OpaqueTool, ...]:
    """Responses tools (and the chat and Cursor shapes of function and custom tools)."""
    out: list[Tool | OpaqueTool] = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise ClientError(f"tools[{i}] is not an object", param=f"tools[{i}]")
        kind = t.get("type")
        if kind in ("function", None):  # None: Cursor's {name, input_schema} tools
            out.append(_function_tool(i, t))
        elif kind == "custom":
            out.append(custom_tool(i, t))
        else:
            name = t.get("name")
            out.append(OpaqueTool(NAME, name if isinstance(name, str) else None, str(kind), t))
    return tuple(out)


def _function_tool(i: int, t: JSON) -> Tool:
    nested = isinstance(t.get("function"), dict)
    src: JSON = t["function"] if nested else t
    name = src.get("name")
    if not isinstance(name, str) or not name:
        where = f"tools[{i}].function.name" if nested else f"tools[{i}].name"
        raise ClientError(f"tools[{i}] has no name", param=where)
    schema = next((src[k] for k in _INPUT_SCHEMA_KEYS if isinstance(src.get(k), dict)), None)
    known = ("type", "name", "description", "strict", "function", *_INPUT_SCHEMA_KEYS)
    rest = {k: v for k, v in src.items() if k not in known}
    if nested:
        rest.update({k: v for k, v in t.items() if k not in ("type", "function")})
    description, strict = src.get("description"), src.get("strict")
    return Tool(
        name,
        description if isinstance(description, str) else None,
        schema if schema is not None else {"type": "object", "properties": {}},
        strict=strict if isinstance(strict, bool) else None,
        extra={NAME: rest} if rest else {},
    )


def custom_tool(i: int, t: JSON) -> Tool:
    nested = isinstance(t.get("custom"), dict)
    src: JSON = t["custom"] if nested else t
    name = src.get("name")
    if not isinstance(name, str) or not name:
        where = f"tools[{i}].custom.name" if nested else f"tools[{i}].name"
        raise ClientError(f"tools[{i}] has no name", param=where)
    fmt = src.get("format")
    rest: JSON = {
        k: v for k, v in src.items() if k not in ("type", "name", "description", "format", "custom")
    }
    if not isinstance(fmt, dict):
        rest["_no_format"] = True
        fmt = {"type": "text"}
    elif fmt.get("type") == "grammar" and isinstance(fmt.get("grammar"), dict):
        # The chat API nests the grammar ({"type": "grammar", "grammar": {…}}); the unified
        # format is the flat Responses one.
        fmt = {"type": "grammar", **fmt["grammar"]}
    description = src.get("description")
    return Tool(
        name,
        description if isinstance(description, str) else None,
        {},
        format=fmt,
        extra={NAME: rest} if rest else {},
    )


def decode_tool_choice(raw: Any) -> ToolChoice | None:
    """``auto`` / ``none`` / ``required`` / a named function or custom tool (flat or chat-nested);
    ``None`` for the forms the model does not have (``allowed_tools``, hosted tools, mcp)."""
    if isinstance(raw, str):
        if raw in ("auto", "none", "required"):
            return ToolChoice(cast(Literal["auto", "none", "required"], raw))
        raise ClientError(
            f"tool_choice '{raw}' is not one of auto, none, required", param="tool_choice"
        )
    if not isinstance(raw, dict):
        raise ClientError("tool_choice must be a string or an object", param="tool_choice")
    kind = raw.get("type")
    if kind in ("function", "custom"):
        inner = raw.get(kind)
        name = inner.get("name") if isinstance(inner, dict) else raw.get("name")
        if isinstance(name, str) and name:
            return ToolChoice("tool", name)
        raise ClientError(f"tool_choice of type '{kind}' needs a name", param="tool_choice.name")
    return None
