"""Gemini requests (``GenerateContentRequest``) → ``addon.model.Request``: the decoder.

Contract: JSON object in, ``Request`` out; camelCase and snake_case alike. Unknown fields stay
in ``extra`` for a Gemini upstream. Raises ``UnsupportedShape`` for JSON that is not a Gemini
request (passed through) and ``ClientError`` for a client's mistake. The way back is
``request_encode``; paths and the Code Assist envelope are ``placement``."""

from __future__ import annotations

import dataclasses
from typing import Any

from addon.model import (
    JSON,
    ClientError,
    Effort,
    Image,
    Message,
    Notes,
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

from .parts import CODE_ASSIST, SIDE, Leftover, decode_part, digest, get, rest, snake, spellings
from .parts import NAME as NAME
from .placement import bare_model

_MODELLED = spellings(
    "contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "model"
)
GENERATION = {
    "maxOutputTokens": "max_tokens",
    "temperature": "temperature",
    "topP": "top_p",
    "topK": "top_k",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
}
"""``generationConfig`` fields ↔ ``Params`` fields."""
_GC_MODELLED = spellings(*GENERATION, "stopSequences", "thinkingConfig")
_DECL_MODELLED = spellings("name", "description", "parameters", "parametersJsonSchema")
FC_CONFIG = spellings("functionCallingConfig")
_LEVELS: dict[str, Effort] = {
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
}
_GEMINI_TYPES = frozenset(
    {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL", "TYPE_UNSPECIFIED"}
)


def decode_request(body: JSON, notes: Notes) -> Request:
    """A public-API body, or a Code Assist envelope ``{model, project, request: {…}}``."""
    inner = body.get("request")
    side: JSON = {}
    model: Any
    if isinstance(inner, dict) and get(body, "contents") is None:
        origin = CODE_ASSIST
        model = body.get("model")
        envelope = {k: v for k, v in body.items() if k not in ("model", "request")}
        if envelope:
            side["envelope"] = envelope
    else:
        origin, inner, model = NAME, body, get(body, "model")
        if isinstance(model, str):
            side["body_model"] = model
    contents = get(inner, "contents")
    if not isinstance(contents, list):
        raise UnsupportedShape("not a Gemini request (contents needed)")
    d = _Decoder(notes)
    messages: list[Message] = []
    system = d.system(get(inner, "systemInstruction"), side)
    if system is not None:
        messages.append(system)
    for ci, content in enumerate(contents):
        messages.append(d.content(ci, content))
    extra = {k: v for k, v in inner.items() if k not in _MODELLED}
    gc = get(inner, "generationConfig")
    params = Params()
    thinking = None
    if isinstance(gc, dict):
        params, thinking = _decode_generation(gc, side, extra)
    elif gc is not None:
        raise UnsupportedShape("generationConfig is not an object")
    tools = get(inner, "tools")
    if tools is not None and not isinstance(tools, list):
        raise UnsupportedShape("tools is not a list")
    tool_config = get(inner, "toolConfig")
    choice = None
    if isinstance(tool_config, dict):
        side["tool_config"] = tool_config
        choice = decode_choice(tool_config)
    table = d.table_json()
    if table:
        side["parts"] = table
    if side:
        extra[SIDE] = side
    return Request(
        origin=origin,
        model=bare_model(model) if isinstance(model, str) else "",
        messages=tuple(messages),
        tools=_decode_tools(tools) if tools is not None else None,
        tool_choice=choice,
        params=params,
        thinking=thinking,
        extra=extra,
    )


class _Decoder:
    def __init__(self, notes: Notes) -> None:
        self.notes = notes
        self.table: dict[str, list[JSON]] = {}
        self.ids: set[str] = set()
        self.pending: dict[str, list[str]] = {}
        """Calls of the last model turn not answered yet, by function name, in order."""

    def keep(self, key: str, left: Leftover) -> None:
        self.table.setdefault(key, []).append(left.as_json())

    def table_json(self) -> JSON:
        return {k: v for k, v in self.table.items() if any(v)}

    def system(self, raw: Any, side: JSON) -> Message | None:
        if raw is None:
            return None
        if isinstance(raw, str):
            return Message("system", (Text(raw),), string_content=True) if raw else None
        if not isinstance(raw, dict):
            raise UnsupportedShape("systemInstruction is not an object")
        kept = rest(raw, spellings("parts"))
        if kept:
            side["system"] = kept
        parts = self.parts("systemInstruction", get(raw, "parts"), "system", -1)
        if not parts:
            return None
        single = len(parts) == 1 and isinstance(parts[0], Text)
        return Message("system", tuple(parts), string_content=single)

    def content(self, ci: int, raw: Any) -> Message:
        where = f"contents[{ci}]"
        if not isinstance(raw, dict):
            raise UnsupportedShape(f"{where} is not an object")
        role = raw.get("role", "user")
        if role not in ("user", "model", "function"):  # "function": older clients' result turns
            raise UnsupportedShape(f"{where} has the role {role!r}")
        if rest(raw, spellings("role", "parts")):
            self.notes["unknown fields of Gemini contents dropped"] += 1
        if role == "model":
            self.pending = {}
        parts = self.parts(where, get(raw, "parts"), role, ci)
        if role == "model":
            plain = all(isinstance(p, Text | Thinking | ToolCall) for p in parts)
            texts = sum(isinstance(p, Text) for p in parts)
            return Message("assistant", tuple(parts), string_content=plain and texts <= 1)
        single = len(parts) == 1 and isinstance(parts[0], Text)
        return Message("user", tuple(parts), string_content=single)

    def parts(self, where: str, raw: Any, role: str, ci: int) -> list[Part]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise UnsupportedShape(f"{where}.parts is not a list")
        out: list[Part] = []
        for pi, item in enumerate(raw):
            at = f"{where}.parts[{pi}]"
            part, left = decode_part(item, at)
            match part:
                case ToolCall():
                    if role != "model":
                        raise ClientError(
                            f"{at}: a functionCall can only be in a model turn", param=at
                        )
                    part = dataclasses.replace(part, id=self.call_id(part, ci, pi))
                    self.keep(f"c:{part.id}", left)
                case ToolResult():
                    if role in ("model", "system"):
                        raise ClientError(
                            f"{at}: a functionResponse can only be in a user turn", param=at
                        )
                    part = dataclasses.replace(part, tool_call_id=self.result_id(part, ci, pi))
                    self.keep(f"r:{part.tool_call_id}", left)
                case Thinking():
                    self.keep(f"h:{digest(part.text)}", left)
                case Text():
                    self.keep(f"t:{digest(part.text)}", left)
                case Image():
                    self.keep(f"i:{digest(part.url)}", left)
            out.append(part)
        return out

    def fresh(self, name: str, ci: int, pi: int) -> str:
        """``call_{name}_{content}_{part}``: the same history gives the same ids every turn."""
        base = f"call_{name}_{ci}_{pi}"
        cid, n = base, 1
        while cid in self.ids:
            n += 1
            cid = f"{base}_{n}"
        self.ids.add(cid)
        return cid

    def call_id(self, call: ToolCall, ci: int, pi: int) -> str:
        cid = call.id or self.fresh(call.name, ci, pi)
        self.ids.add(cid)
        self.pending.setdefault(call.name, []).append(cid)
        return cid

    def result_id(self, result: ToolResult, ci: int, pi: int) -> str:
        waiting = self.pending.get(result.name or "", [])
        if result.tool_call_id:
            if result.tool_call_id in waiting:
                waiting.remove(result.tool_call_id)
            return result.tool_call_id
        if waiting:
            return waiting.pop(0)
        self.notes["Gemini function response without a call to answer"] += 1
        return self.fresh(result.name or "result", ci, pi)


def _decode_generation(gc: JSON, side: JSON, extra: JSON) -> tuple[Params, ThinkingConfig | None]:
    values: dict[str, Any] = {}
    raw: JSON = {}
    for key, field in GENERATION.items():
        value = get(gc, key)
        if value is None:
            continue
        number = _int(value) if field in ("max_tokens", "top_k", "seed") else _float(value)
        if number is not None:
            values[field] = number
            raw[key] = value
    stops = get(gc, "stopSequences")
    if isinstance(stops, list):
        values["stop"] = tuple(s for s in stops if isinstance(s, str))
        raw["stopSequences"] = stops
    remainder = rest(gc, _GC_MODELLED)
    for key in GENERATION:  # values of a type we do not model stay as they were
        for spelled in (key, snake(key)):
            if spelled in gc and key not in raw:
                remainder[spelled] = gc[spelled]
    if remainder:
        extra["generationConfig"] = remainder
    if raw:
        side["generation"] = raw
    thinking_raw = get(gc, "thinkingConfig")
    thinking = None
    if thinking_raw is not None:
        side["thinking"] = thinking_raw
        thinking = decode_thinking(thinking_raw)
    return Params(**values), thinking


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if float(value).is_integer() else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def decode_thinking(raw: Any) -> ThinkingConfig | None:
    """``thinkingBudget`` 0 → off (None); > 0 → that budget; -1 (dynamic) or none → no budget;
    ``thinkingLevel`` → effort."""
    if not isinstance(raw, dict):
        return None
    budget = _int(get(raw, "thinkingBudget"))
    if budget == 0:
        return None
    level = get(raw, "thinkingLevel")
    effort = _LEVELS.get(level.lower()) if isinstance(level, str) else None
    return ThinkingConfig(
        True, budget if budget is not None and budget > 0 else None, effort=effort
    )


def decode_choice(raw: JSON) -> ToolChoice | None:
    config = get(raw, "functionCallingConfig")
    if not isinstance(config, dict):
        return None
    mode = get(config, "mode")
    mode = mode.upper() if isinstance(mode, str) else None
    names = get(config, "allowedFunctionNames")
    match mode:
        case "AUTO" | "VALIDATED":
            return ToolChoice("auto")
        case "NONE":
            return ToolChoice("none")
        case "ANY":
            if isinstance(names, list) and len(names) == 1 and isinstance(names[0], str):
                return ToolChoice("tool", names[0])
            return ToolChoice("required")
    return None


def _decode_tools(tools: list[Any]) -> tuple[Tool | OpaqueTool, ...]:
    out: list[Tool | OpaqueTool] = []
    for i, entry in enumerate(tools):
        if not isinstance(entry, dict):
            raise UnsupportedShape(f"tools[{i}] is not an object")
        for key, value in entry.items():
            if key in ("functionDeclarations", "function_declarations"):
                if not isinstance(value, list):
                    raise UnsupportedShape(f"tools[{i}].{key} is not a list")
                out.extend(
                    _decode_declaration(f"tools[{i}].{key}[{j}]", d) for j, d in enumerate(value)
                )
            else:  # googleSearch, codeExecution, urlContext, fileSearch, …: run by Gemini
                out.append(OpaqueTool(NAME, key, key, {key: value}))
    return tuple(out)


def _decode_declaration(where: str, decl: Any) -> Tool:
    if not isinstance(decl, dict):
        raise ClientError(f"{where} is not an object", param=where)
    name = get(decl, "name")
    if not isinstance(name, str) or not name:
        raise ClientError(f"{where} has no name", param=f"{where}.name")
    own = rest(decl, _DECL_MODELLED)
    parameters: JSON = {"type": "object", "properties": {}}
    for key in ("parametersJsonSchema", "parametersjson_schema", "parameters"):
        schema = decl.get(key)
        if schema is None:
            continue
        own["_schema"] = key
        if isinstance(schema, dict):
            parameters = json_schema(schema) if key == "parameters" else schema
            if parameters is not schema:
                own["_raw_schema"] = schema
        else:
            own["_raw_schema"] = schema
        break
    description = get(decl, "description")
    return Tool(
        name,
        description if isinstance(description, str) else None,
        parameters,
        extra={NAME: own} if own else {},
    )


def json_schema(schema: Any) -> Any:
    """Gemini's OpenAPI-subset ``Schema`` (``"type": "OBJECT"``) as JSON Schema: type names
    lower-cased; everything else as it is. Returns ``schema`` itself when nothing changes."""
    if isinstance(schema, list):
        items = [json_schema(s) for s in schema]
        return schema if all(a is b for a, b in zip(items, schema, strict=True)) else items
    if not isinstance(schema, dict):
        return schema
    out: JSON = {}
    changed = False
    for k, v in schema.items():
        if k == "type" and isinstance(v, str) and v in _GEMINI_TYPES:
            new: Any = v.lower()
        elif k in ("enum", "required", "propertyOrdering", "example", "default"):
            new = v
        else:
            new = json_schema(v)
        changed = changed or new is not v
        out[k] = new
    return out if changed else schema
