"""Gemini requests (``GenerateContentRequest``) ↔ ``addon.model.Request``; placement on the wire.

Contract: JSON object in, ``Request`` out (and back, for a Gemini upstream). Lenient on input:
camelCase and snake_case field names alike (``parts.get``), unknown top-level fields
(``safetySettings``, ``cachedContent``, ``labels``, Code Assist's ``session_id`` …) kept in
``extra`` and written back only for a Gemini client (both Gemini dialects share this JSON).
Raises ``UnsupportedShape`` for JSON that is not a Gemini request (the caller passes the body
through) and ``ClientError`` for a client's mistake (a function call in a user turn, a
declaration without a name).

Decoding
- The Code Assist envelope ``{model, project, user_prompt_id, request: {…}}`` is unwrapped:
  ``origin`` is then ``gemini_code_assist``, the model comes from it, and its other fields
  are kept for a Code Assist upstream (``code_assist_envelope``). A public-API body has no
  model: ``from_path`` reads it (and whether it streams) from the client's path.
- ``systemInstruction`` → a leading system message; each content → one message (``model`` →
  assistant; ``user`` → user, its ``functionResponse`` parts as ``ToolResult`` parts in it,
  which every encoder splits out as it needs).
- Calls without an ``id`` get ``call_{name}_{content}_{part}`` (deterministic: the same
  history gives the same ids on every turn); a response without an ``id`` takes the id of the
  first call of its name not yet answered since the last model turn. Such made-up ids are
  never sent back to a Gemini upstream.
- ``functionResponse.response`` → content: the string of ``{"output": str}`` /
  ``{"error": str}`` (the latter ``is_error``), else the JSON text of the object
  (``parts.result_content``).
- ``generationConfig``: ``maxOutputTokens``, ``temperature``, ``topP``, ``topK``,
  ``stopSequences`` → ``Params``; ``thinkingConfig`` → ``ThinkingConfig`` (``thinkingBudget``
  0: off, -1: dynamic, no budget; ``thinkingLevel`` → effort); the rest of it
  (``responseMimeType``, ``responseJsonSchema``, ``seed`` …) stays in
  ``extra["generationConfig"]``.
- ``tools``: function declarations → ``Tool`` (``parametersJsonSchema`` as it is;
  ``parameters``, Gemini's OpenAPI subset, with its upper-case type names lower-cased so
  other dialects get JSON Schema); ``googleSearch``, ``codeExecution``, ``urlContext`` … →
  ``OpaqueTool`` (only a Gemini upstream runs them). ``toolConfig.functionCallingConfig`` →
  ``ToolChoice`` (``ANY`` with one allowed name: that tool).

What a same-dialect round trip needs beyond the unified model — thought signatures on
function calls and texts, other part-level fields, made-up ids, a ``fileData`` image's
``mimeType``, a function response object as sent, the raw ``thinkingConfig`` and
``toolConfig``, the envelope — is kept in a private table in ``Request.extra`` (``SIDE``),
parts keyed by call id or text digest and taken in order. Not in ``ToolCall.extra`` /
``Text.extra``: the OpenAI chat encoder copies those onto its own wire objects, so a Gemini
CLI conversation sent to an OpenAI upstream would carry ``thoughtSignature`` fields there.
The encoder still honours a signature another codec put on a unified part
(``parts.signature_of``).

Encoding (another dialect's request for a Gemini upstream)
- Leading system/developer messages → ``systemInstruction``. A system message later in the
  conversation (Claude Code's mid-conversation system messages, Codex's developer messages)
  stays where it is, as user text wrapped in ``<system>…</system>``: Gemini has one system
  instruction, and moving it there would change its meaning and its position in time (and
  the prompt prefix on every turn). Noted.
- Consecutive turns of one role are merged (roles alternate). In a user turn the function
  responses come first, in the order of the calls they answer; images of a tool result
  follow as ``inlineData`` parts of the same turn (a ``functionResponse`` takes an object).
- A result's function name is its own (OpenAI's ``name``) or its call's; neither →
  ``ClientError`` naming the call id.
- Reasoning: only signed thinking is sent (Gemini refuses signatures it did not make, and
  thoughts without one add nothing); a signature right before a function call without one
  goes onto that call, where Gemini puts it. Gemini 3 refuses a replayed step whose first
  call has no signature: ``addon.transforms.restore`` gives it back from the reasoning store
  or, where the route allows it, marks it with the value Google documents for that case
  (``parts.SKIP_SIGNATURE``); the encoder writes what the calls carry.
- Arguments that are not a JSON object → ``{"_raw_arguments": text}`` (noted).
- ``ThinkingConfig`` → ``thinkingConfig{includeThoughts: true}`` with ``thinkingBudget``
  from the budget, else ``thinkingLevel`` from the effort (minimal/low → ``LOW``, medium and
  up → ``HIGH``: the levels every Gemini 3 model takes); Gemini 1.x/2.x models take no level,
  they get a budget for the effort instead.
- Function declarations with ``parameters``; an object schema without properties is left
  out (Gemini refuses empty ``properties`` for an OBJECT). Other dialects' own tool kinds
  never get here (``addon.transforms.tools.leave_out_tools``): the encoder refuses them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Literal
from urllib.parse import quote, unquote

from addon.dialects.base import (
    Framing,
    PathFields,
    Query,
    Target,
    endpoint_base,
    split_path,
    unsupported_tool,
)
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
    Text,
    Thinking,
    ThinkingConfig,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    UnsupportedShape,
)

from .parts import NAME as NAME
from .parts import (
    SIGNATURE,
    Leftover,
    args_object,
    decode_part,
    decode_result_content,
    encode_image,
    get,
    rest,
    result_response,
    signature_of,
    snake,
    spellings,
)

CODE_ASSIST = "gemini_code_assist"
SIDE = "__gemini__"
"""Key of the private table in ``Request.extra`` (never written to the wire)."""
SYSTEM_TAG = "system"
"""Mid-conversation system messages are sent as ``<system>…</system>`` user text."""
MAX_STOP_SEQUENCES = 5
"""Gemini takes at most five stop sequences."""

_OWN = (NAME, CODE_ASSIST)


def runs_tool(t: OpaqueTool) -> bool:
    """What a Gemini upstream runs of the tool kinds only some dialects have: Gemini's own
    (``googleSearch``, ``codeExecution`` …), from either wrapper."""
    return t.origin in _OWN


_MODELLED = spellings(
    "contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "model"
)
_GENERATION = {
    "maxOutputTokens": "max_tokens",
    "temperature": "temperature",
    "topP": "top_p",
    "topK": "top_k",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
}
_GC_MODELLED = spellings(*_GENERATION, "stopSequences", "thinkingConfig")
_DECL_MODELLED = spellings("name", "description", "parameters", "parametersJsonSchema")
_FC_CONFIG = spellings("functionCallingConfig")
_LEVELS: dict[str, Effort] = {
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
}
_LEVEL_OUT: dict[str, str] = {
    "minimal": "LOW",
    "low": "LOW",
    "medium": "HIGH",
    "high": "HIGH",
    "xhigh": "HIGH",
}
_EFFORT_BUDGET: dict[str, int] = {
    "minimal": 512,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 24576,
}
"""Thinking budgets for an effort on models that take no level (Gemini 2.5 Flash's maximum is
24576; Flash-Lite's minimum 512)."""
_OLD_MODEL = re.compile(r"(?:models/)?gemini-[12][.-]")
"""Gemini 1.x / 2.x: thinking budgets only, and no thought-signature check."""
_GEMINI_TYPES = frozenset(
    {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL", "TYPE_UNSPECIFIED"}
)
_ENDPOINT = re.compile(
    r"^(?P<base>.*?)/(?P<version>v\d+[a-z]*\d*)"
    r"(?P<resource>/(?:models|tunedModels|projects)/[^?]*?)?:(?P<method>[A-Za-z]+)$"
)
"""``{base}/{version}[/models/{model}]:{method}`` (public API, Vertex AI, Code Assist)."""
_GENERATE = {"generateContent": False, "streamGenerateContent": True}


# --------------------------------------------------------------------------- paths


def from_path(path: str, query: Query) -> PathFields:
    """The model and whether it streams, from a Gemini client's path: ``/v1beta/models/{model}:
    streamGenerateContent`` → ``{"model": model, "stream": True}``; Code Assist's
    ``/v1internal:generateContent`` → ``{"stream": False}`` (its model is in the body). Model
    names may be URL-encoded and carry ``models/`` prefixes; Vertex AI's
    ``projects/…/publishers/google/models/{model}`` gives ``{model}``."""
    m = _ENDPOINT.match(unquote(path))
    if m is None:
        return {}
    out: PathFields = {}
    resource = m["resource"]
    if resource:
        name = resource.lstrip("/")
        if name.startswith("projects/") and "/models/" in name:
            name = name.rsplit("/models/", 1)[1]
        name = bare_model(name)
        if name:
            out["model"] = name
    if m["method"] in _GENERATE:
        out["stream"] = _GENERATE[m["method"]]
        out["stream_explicit"] = True  # the client chose the endpoint: it said
    return out


def path_base(path: str) -> str | None:
    """Where a Gemini client's endpoint starts (``Dialect.path_base``): ``/proxy`` of
    ``/proxy/v1beta/models/m:streamGenerateContent``, ``""`` of ``/v1internal:generateContent``;
    None for a path of another shape."""
    m = _ENDPOINT.match(path)
    return m["base"] if m else None


def bare_model(model: str) -> str:
    """``models/gemini-2.5-pro`` → ``gemini-2.5-pro`` (every ``models/`` prefix)."""
    while model.startswith("models/"):
        model = model[len("models/") :]
    return model


def framing(query: Query) -> Framing:
    return "sse" if ("alt", "sse") in query else "json_array"


def place_public(req: Request, t: Target) -> tuple[str, Query]:
    """``{base}/v1beta/models/{model}:streamGenerateContent?alt=sse`` or ``:generateContent``
    (``endpoint_base``: the client's path without its endpoint and API version). Same
    dialect: the client's path and query; a route's ``upstream_path`` wins (``_route_path``)."""
    if t.upstream_path is not None:
        return _route_path(req, t)
    if t.same_dialect:
        return t.path, t.query
    model = quote(bare_model(req.model), safe="/")
    return f"{endpoint_base(t)}/v1beta/models/{model}:{_method(req)}", _alt(req)


def place_code_assist(req: Request, t: Target) -> tuple[str, Query]:
    """``{base}/v1internal:streamGenerateContent?alt=sse`` or ``:generateContent``."""
    if t.upstream_path is not None:
        return _route_path(req, t)
    if t.same_dialect:
        return t.path, t.query
    return f"{endpoint_base(t)}/v1internal:{_method(req)}", _alt(req)


def _method(req: Request) -> str:
    return "streamGenerateContent" if req.stream else "generateContent"


def _alt(req: Request) -> Query:
    return (("alt", "sse"),) if req.stream else ()


def _route_path(req: Request, t: Target) -> tuple[str, Query]:
    """A route's ``upstream_path`` wins, its query as written. Same dialect: without a query of
    its own the client's query goes along (as ``suffix_placement`` does); with one, the client's
    ``alt`` and ``key`` are added unless the route sets them (the framing the client asked for,
    and its key, which a same-dialect route leaves where it is). Another dialect: ``alt=sse``
    is added to a streamed request unless the route says ``alt`` itself or names the unary
    ``:generateContent``; the client's own query (its ``key`` included) never goes along."""
    path, query = split_path(t.upstream_path or "", ())
    has_query = "?" in (t.upstream_path or "")
    named = {k for k, _ in query}
    if t.same_dialect:
        if not has_query:
            return path, t.query
        return path, query + tuple(
            (k, v) for k, v in t.query if k in ("alt", "key") and k not in named
        )
    if req.stream and "alt" not in named and not path.endswith(":generateContent"):
        query += (("alt", "sse"),)
    return path, query


def code_assist_envelope(body: JSON, req: Request, t: Target) -> JSON:
    """``{model, project, user_prompt_id, request: body}``.

    ``project``: the route's, else the one a Code Assist client sent, else left out.
    ``user_prompt_id``: a Code Assist client's own, else a stable id derived from the
    conversation (a digest of its first user message: the same on every turn). Other envelope
    fields of a Code Assist client go along as they were."""
    side = req.extra.get(SIDE) if req.origin == CODE_ASSIST else None
    envelope: JSON = dict(side.get("envelope") or {}) if isinstance(side, dict) else {}
    out: JSON = {"model": bare_model(req.model)}
    project = t.project if t.project is not None else envelope.pop("project", None)
    envelope.pop("project", None)
    if project is not None:
        out["project"] = project
    prompt_id = envelope.pop("user_prompt_id", None)
    out["user_prompt_id"] = prompt_id if isinstance(prompt_id, str) else _prompt_id(req)
    out["request"] = body
    for k, v in envelope.items():
        out.setdefault(k, v)
    return out


def _prompt_id(req: Request) -> str:
    first = next((m for m in req.messages if m.role == "user"), None)
    text = "".join(p.text for p in first.parts if isinstance(p, Text)) if first else ""
    return f"bridge-{_digest(text)}"


def _digest(text: str) -> str:
    """A short stable key of ``text``: of all of it, or for a long one (a pasted file) of its
    length, start and end — without hashing megabytes on every request."""
    if len(text) > 8192:
        text = f"{len(text)}\x02{text[:4096]}\x02{text[-4096:]}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# --------------------------------------------------------------------------- decode


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
        choice = _decode_choice(tool_config)
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
                    self.keep(f"h:{_digest(part.text)}", left)
                case Text():
                    self.keep(f"t:{_digest(part.text)}", left)
                case Image():
                    self.keep(f"i:{_digest(part.url)}", left)
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
    for key, field in _GENERATION.items():
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
    for key in _GENERATION:  # values of a type we do not model stay as they were
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
        thinking = _decode_thinking(thinking_raw)
    return Params(**values), thinking


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if float(value).is_integer() else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _decode_thinking(raw: Any) -> ThinkingConfig | None:
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


def _decode_choice(raw: JSON) -> ToolChoice | None:
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
    for key in ("parametersJsonSchema", "parameters_json_schema", "parameters"):
        schema = decl.get(key)
        if schema is None:
            continue
        own["_schema"] = key
        if isinstance(schema, dict):
            parameters = _json_schema(schema) if key == "parameters" else schema
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


def _json_schema(schema: Any) -> Any:
    """Gemini's OpenAPI-subset ``Schema`` (``"type": "OBJECT"``) as JSON Schema: type names
    lower-cased; everything else as it is. Returns ``schema`` itself when nothing changes."""
    if isinstance(schema, list):
        items = [_json_schema(s) for s in schema]
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
            new = _json_schema(v)
        changed = changed or new is not v
        out[k] = new
    return out if changed else schema


# --------------------------------------------------------------------------- encode


def encode_request(req: Request, notes: Notes) -> JSON:
    """The ``GenerateContentRequest`` body for a Gemini upstream (the model goes in the path,
    or in Code Assist's envelope)."""
    enc = _Encoder(req, notes)
    system, contents = enc.contents()
    body: JSON = {}
    if enc.own and "body_model" in enc.side:
        raw = enc.side["body_model"]
        body["model"] = raw if bare_model(raw) == req.model else req.model
    body["contents"] = contents
    if system:
        instruction: JSON = {"parts": system}
        instruction.update(enc.side.get("system") or {})
        body["systemInstruction"] = instruction
    if req.tools is not None:
        tools = enc.tools(req.tools)
        if tools or enc.own:
            body["tools"] = tools
    tool_config = enc.tool_config(body.get("tools") or [])
    if tool_config is not None:
        body["toolConfig"] = tool_config
    generation = enc.generation()
    if generation:
        body["generationConfig"] = generation
    if enc.own:
        body.update((k, v) for k, v in req.extra.items() if k not in (SIDE, "generationConfig"))
    return body


class _Encoder:
    def __init__(self, req: Request, notes: Notes) -> None:
        self.req = req
        self.notes = notes
        self.own = req.origin in _OWN
        side = req.extra.get(SIDE) if self.own else None
        self.side: JSON = side if isinstance(side, dict) else {}
        table = self.side.get("parts") or {}
        self.table: dict[str, list[JSON]] = {k: list(v) for k, v in table.items()}
        self.names = {
            p.id: p.name for m in req.messages for p in m.parts if isinstance(p, ToolCall)
        }

    def take(self, kind: str, value: str) -> JSON:
        """The next leftover of a part of this kind with this id (call/result) or content
        (text, thought, image), in decode order; ``{}`` when there is none."""
        if not self.table:
            return {}
        key = f"{kind}:{value}" if kind in ("c", "r") else f"{kind}:{_digest(value)}"
        entries = self.table.get(key)
        return entries.pop(0) if entries else {}

    # ------------------------------------------------------------------ contents

    def contents(self) -> tuple[list[JSON], list[JSON]]:
        system: list[JSON] = []
        turns: list[JSON] = []
        for m in self.req.messages:
            role: Literal["user", "model"]
            if m.role in ("system", "developer"):
                if not turns:
                    system.extend(self.system_parts(m))
                    continue
                role, parts = "user", self.mid_system(m)
            elif m.role == "assistant":
                role, parts = "model", self.model_parts(m)
            else:
                role, parts = "user", self.user_parts(m)
            if not parts:
                self.notes["empty message dropped" if not m.parts else "message left empty"] += 1
                continue
            if turns and turns[-1]["role"] == role and not self.own:
                turns[-1]["parts"].extend(parts)  # Gemini wants the roles to alternate
            else:
                turns.append({"role": role, "parts": parts})
        if not self.own:
            self.order_results(turns)
        return system, turns

    def system_parts(self, m: Message) -> list[JSON]:
        out: list[JSON] = []
        for p in m.parts:
            if isinstance(p, Text):
                part = self.text(p)
                if part is not None:
                    out.append(part)
            else:
                self.notes[f"{p.kind} part of a system message dropped (Gemini takes text)"] += 1
        return out

    def mid_system(self, m: Message) -> list[JSON]:
        text = "\n\n".join(p.text for p in m.parts if isinstance(p, Text) and p.text)
        if any(not isinstance(p, Text) for p in m.parts):
            self.notes["non-text parts of a system message dropped (Gemini takes text)"] += 1
        if not text:
            return []
        self.notes["system message after the first turn sent as user text"] += 1
        return [{"text": f"<{SYSTEM_TAG}>\n{text}\n</{SYSTEM_TAG}>"}]

    def user_parts(self, m: Message) -> list[JSON]:
        out: list[JSON] = []
        after: list[JSON] = []
        for p in m.parts:
            match p:
                case Text():
                    part = self.text(p)
                    if part is not None:
                        out.append(part)
                case Image():
                    out.append(self.image(p))
                case ToolResult():
                    out.append(self.result(p, after))
                case Thinking():
                    if p.text and not p.redacted:
                        out.append({"text": p.text})
                case ToolCall():
                    self.notes[f"tool call in a {m.role} message sent as text"] += 1
                    text = json.dumps({"tool_call": p.name, "arguments": p.arguments})
                    out.append({"text": text})
                case Opaque():
                    out.append(self.opaque(p))
        return out + after

    def model_parts(self, m: Message) -> list[JSON]:
        out: list[JSON] = []
        carried: str | None = None
        parts = m.parts
        for k, p in enumerate(parts):
            match p:
                case Thinking():
                    if self.own:
                        out.append(self.thought(p))
                        continue
                    if p.redacted or not p.signature:
                        self.notes["unsigned reasoning dropped (Gemini takes only its own)"] += 1
                        continue
                    call = next((q for q in parts[k + 1 :] if isinstance(q, ToolCall)), None)
                    if call is not None and signature_of(call) is None:
                        # Gemini signs the first call of a step, not its thoughts: put it back.
                        carried = p.signature
                        continue
                    out.append({"text": p.text, "thought": True, SIGNATURE: p.signature})
                case ToolCall():
                    out.append(self.call(p, carried))
                    carried = None
                case Text():
                    part = self.text(p)
                    if part is not None:
                        out.append(part)
                case Image():
                    out.append(self.image(p))
                case Opaque():
                    out.append(self.opaque(p))
                case ToolResult():
                    self.notes["tool result in an assistant message dropped"] += 1
        return out

    def text(self, p: Text) -> JSON | None:
        left = self.take("t", p.text)
        part: JSON = {"text": p.text}
        part.update(left.get("part") or {})
        signature = signature_of(p)
        if signature and SIGNATURE not in part:
            part[SIGNATURE] = signature
        if not p.text and not self.own and SIGNATURE not in part:
            self.notes["empty text parts dropped (Gemini refuses them)"] += 1
            return None
        return part

    def thought(self, p: Thinking) -> JSON:
        left = self.take("h", p.text)
        part: JSON = {"text": p.text, "thought": True}
        if p.signature:
            part[SIGNATURE] = p.signature
        part.update(left.get("part") or {})
        return part

    def image(self, p: Image) -> JSON:
        left = self.take("i", p.url)
        mime = left.get("mime")
        part = encode_image(p, mime or None)
        blob = part.get("inlineData") or part["fileData"]
        if mime == "":  # a fileData image that came without a mimeType
            blob.pop("mimeType", None)
        blob.update(left.get("inner") or {})
        part.update(left.get("part") or {})
        return part

    def opaque(self, p: Opaque) -> JSON:
        if p.origin == NAME:
            return p.data
        self.notes[f"{p.origin} part sent as JSON text"] += 1
        return {"text": json.dumps(p.data, ensure_ascii=False)}

    def call(self, p: ToolCall, carried: str | None) -> JSON:
        left = self.take("c", p.id)
        args, wrapped = args_object(p.arguments, p.custom)
        if wrapped:
            self.notes["unparsable tool arguments kept as _raw_arguments"] += 1
        call: JSON = {"name": p.name, "args": args}
        if not left.get("no_id") and p.id:
            call["id"] = p.id
        call.update(left.get("inner") or {})
        part: JSON = {"functionCall": call}
        part.update(left.get("part") or {})
        signature = carried or signature_of(p)
        if signature and SIGNATURE not in part:
            part[SIGNATURE] = signature
        return part

    def result(self, p: ToolResult, after: list[JSON]) -> JSON:
        name = p.name or self.names.get(p.tool_call_id)
        if not name:
            raise ClientError(
                f"the tool result for call id '{p.tool_call_id}' names no function and answers "
                "no tool call of this conversation; Gemini needs the function's name",
                param="messages",
                code="unknown_tool_call",
            )
        left = self.take("r", p.tool_call_id)
        inner: JSON = dict(left.get("inner") or {})
        response: JSON = {"name": name}
        if not left.get("no_id") and p.tool_call_id:
            response["id"] = p.tool_call_id
        if "response" in left and _same_result(left["response"], inner.get("parts"), p):
            response["response"] = left["response"]
        else:
            inner.pop("parts", None)
            text, images = self.flatten(p.content)
            response["response"] = result_response(text, p.is_error)
            after.extend(self.image(i) for i in images)
        response.update(inner)
        part: JSON = {"functionResponse": response}
        part.update(left.get("part") or {})
        return part

    def flatten(self, content: str | tuple[Part, ...]) -> tuple[str, list[Image]]:
        if isinstance(content, str):
            return content, []
        texts: list[str] = []
        images: list[Image] = []
        for q in content:
            match q:
                case Text() | Thinking():
                    if q.text:
                        texts.append(q.text)
                case Image():
                    images.append(q)
                case Opaque():
                    texts.append(json.dumps(q.data, ensure_ascii=False))
                case ToolCall() | ToolResult():
                    texts.append(json.dumps({"kind": q.kind}, ensure_ascii=False))
        if images:
            self.notes["images of tool results sent as parts beside them"] += 1
        return "\n".join(texts), images

    def order_results(self, turns: list[JSON]) -> None:
        """In each user turn the function responses first, in the order of the calls of the
        model turn before it; the other parts after them, in their order."""
        calls: dict[str, int] = {}
        for turn in turns:
            parts: list[JSON] = turn["parts"]
            if turn["role"] == "model":
                ids = (p["functionCall"].get("id") for p in parts if "functionCall" in p)
                calls = {cid: k for k, cid in enumerate(ids) if cid}
                continue
            last = len(calls)

            def key(part: JSON, calls: dict[str, int] = calls, last: int = last) -> tuple[int, int]:
                response = part.get("functionResponse")
                if response is None:
                    return (1, 0)
                return (0, calls.get(response.get("id", ""), last))

            parts.sort(key=key)

    # ------------------------------------------------------------------ tools

    def tools(self, tools: tuple[Tool | OpaqueTool, ...]) -> list[JSON]:
        entries: list[JSON] = []
        declarations: list[JSON] = []
        for i, t in enumerate(tools):
            if isinstance(t, OpaqueTool):
                if not runs_tool(t):  # left out before (addon.transforms.tools.leave_out_tools)
                    raise unsupported_tool(t, i, "a Gemini upstream")
                entries.append(t.data)
                continue
            if not declarations:
                entries.append({"functionDeclarations": declarations})
            declarations.append(self.declaration(t))
        return entries

    def declaration(self, t: Tool) -> JSON:
        own: JSON = t.extra.get(NAME) or {}
        out: JSON = {"name": t.name}
        if t.description is not None:
            out["description"] = t.description
        key = own.get("_schema")
        if key is not None:
            raw = own.get("_raw_schema")
            unchanged = raw is not None and (
                (_json_schema(raw) if key == "parameters" else raw) == t.parameters
            )
            out[key] = raw if unchanged else t.parameters
        elif not _empty_object(t.parameters):
            out["parameters"] = t.parameters
        out.update((k, v) for k, v in own.items() if not k.startswith("_"))
        return out

    def tool_config(self, tools: list[JSON]) -> JSON | None:
        choice = self.req.tool_choice
        raw = self.side.get("tool_config")
        if isinstance(raw, dict) and _decode_choice(raw) == choice:
            return raw
        kept: JSON = (
            {k: v for k, v in raw.items() if k not in _FC_CONFIG} if isinstance(raw, dict) else {}
        )
        if choice is None:
            return kept or None
        if not any("functionDeclarations" in t for t in tools):
            self.notes["tool_choice dropped (no function tools for Gemini)"] += 1
            return None
        if choice.disable_parallel:
            self.notes["parallel tool calls cannot be turned off for Gemini"] += 1
        config: JSON = {"mode": _MODES[choice.mode]}
        if choice.mode == "tool" and choice.name:
            config["allowedFunctionNames"] = [choice.name]
        kept["functionCallingConfig"] = config
        return kept

    # ------------------------------------------------------------------ generationConfig

    def generation(self) -> JSON:
        req, p = self.req, self.req.params
        base = req.extra.get("generationConfig") if self.own else None
        out: JSON = dict(base) if isinstance(base, dict) else {}
        raw: JSON = self.side.get("generation") or {}
        for key, field in _GENERATION.items():
            value = getattr(p, field)
            if value is None:
                continue
            out[key] = raw[key] if key in raw and raw[key] == value else value
        if p.stop is not None:
            stops = list(p.stop)
            if raw.get("stopSequences") == stops:
                out["stopSequences"] = raw["stopSequences"]
            elif stops or self.own:
                if len(stops) > MAX_STOP_SEQUENCES:
                    self.notes[f"stop sequences cut to {MAX_STOP_SEQUENCES} (Gemini's limit)"] += 1
                    stops = stops[:MAX_STOP_SEQUENCES]
                out["stopSequences"] = stops
        if not self.own:
            if p.user is not None:
                self.notes["user dropped (Gemini has no end-user field)"] += 1
            out.setdefault("candidateCount", 1)
        thinking = self.thinking()
        if thinking is not None:
            out["thinkingConfig"] = thinking
        return out

    def thinking(self) -> JSON | None:
        t = self.req.thinking
        raw = self.side.get("thinking")
        if self.own and raw is not None and _decode_thinking(raw) == t:
            return raw if isinstance(raw, dict) else None
        if t is None or not t.enabled:
            return None
        out: JSON = dict(raw) if isinstance(raw, dict) else {"includeThoughts": True}
        for key in ("thinkingBudget", "thinkingLevel", "thinking_budget", "thinking_level"):
            out.pop(key, None)
        if t.budget_tokens is not None:
            out["thinkingBudget"] = t.budget_tokens
        elif t.effort is not None:
            if _OLD_MODEL.match(self.req.model):
                out["thinkingBudget"] = _EFFORT_BUDGET[t.effort]
            else:
                out["thinkingLevel"] = _LEVEL_OUT[t.effort]
        return out


_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE", "tool": "ANY"}


def _same_result(response: Any, nested: Any, p: ToolResult) -> bool:
    """Whether a result still says what its wire ``response`` (and nested parts) said."""
    return decode_result_content(response, nested) == (p.content, p.is_error)


def _empty_object(schema: JSON) -> bool:
    """An object schema without properties: Gemini refuses it as ``parameters``; no parameters
    say the same."""
    if schema.get("properties") or any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref")):
        return False
    return bool(schema.get("type", "object") == "object")
