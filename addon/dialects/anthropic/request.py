"""Anthropic ``/v1/messages`` requests (Claude Code, the anthropic SDK) ↔ unified ``Request``.

Contract: JSON object in, ``Request`` out (and back, for an Anthropic
upstream). Lenient on input: top-level fields this codec does not model
(``metadata``, ``service_tier``, ``container``, ``mcp_servers`` …) stay in
``extra`` and are written back only by this dialect's encoder; unknown content
blocks become ``Opaque`` parts. Raises ``UnsupportedShape`` for JSON that is
not a Messages request (the caller passes the body through) and
``ClientError`` for a client's mistake (the caller answers 400 in Anthropic's
error shape, see ``response.encode_error``).

Server tools (``web_search_20250305``, ``bash_20250124``, ``text_editor_…``,
``computer_…``, ``code_execution_…``) run on Anthropic's side. They are decoded
as ``OpaqueTool`` so that an Anthropic upstream still gets them; a route to any
other upstream leaves them out (``addon.transforms.tools.leave_out_tools``), and
the other dialects' encoders refuse any that reach them.

System messages inside ``messages`` (Claude Code's default model, beta
``mid-conversation-system-2026-04-07``: ``{"role": "system", "content": str |
text blocks}`` at any index) are decoded in place as ``Message("system", …)``;
other dialects' encoders write them where they are (OpenAI chat does).

Reasoning: ``thinking`` (``enabled`` with ``budget_tokens``, ``adaptive``) and
``output_config.effort`` become one ``ThinkingConfig`` (``effort`` ``max`` is
the unified ``xhigh``, the highest level the model has); ``output_config`` and
an ``adaptive`` ``thinking`` object also stay in ``extra``, so an Anthropic
upstream gets them back as they were. Effort alone (no ``thinking``) does not
turn reasoning on for other dialects: Anthropic applies it to the whole answer.

Tool ids: the ids a client sends back (``tool_use.id``, ``tool_result.tool_use_id``)
are un-escaped with ``ids.from_anthropic``: answers from other upstreams reach
the client with ids escaped by ``ids.to_anthropic``, so the upstream gets its own
ids (``functions.Read:0``) again.

``encode_request`` writes what the Messages API accepts: leading system
messages as ``system`` text blocks; strictly alternating turns (consecutive
same-role messages are merged, tool results go into the following user turn,
first in its content); no empty text blocks, no unsigned thinking; tool ids
escaped with ``ids.to_anthropic`` (reversible, unlike a character
replacement); ``max_tokens`` always present. System messages after the first
turn stay in place for an Anthropic client (it sent them so, with the beta
header that allows them, and the same-dialect route forwards its headers); for
other dialects' clients they are moved into ``system`` as before, since an
Anthropic upstream without that beta refuses a ``system`` role in ``messages``.
Every such change is counted in ``notes``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

from addon.dialects.anthropic.blocks import decode_block
from addon.dialects.anthropic.ids import from_anthropic, to_anthropic
from addon.dialects.base import unsupported_tool
from addon.jsonio import loads as strict_json
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

NAME = "anthropic"
DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires max_tokens; used when a request from another dialect has none."""
DEFAULT_THINKING_BUDGET = 2048
"""Thinking budget when thinking is on but no budget was given (Anthropic's minimum is 1024)."""
_MIN_ANSWER_TOKENS = 1024
"""Room left for the answer when ``max_tokens`` must be raised above the thinking budget."""
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
"""Per block type, the keys ``blocks.decode_block`` models; the rest (``cache_control``) is kept.

Only for the parts whose ``extra`` no other dialect writes to the wire: the OpenAI
encoder copies ``ToolCall.extra`` and ``Image.extra`` into its own objects, so the
``cache_control`` of those blocks cannot ride along without reaching other upstreams.
"""


# --------------------------------------------------------------------------- decode


def decode_request(body: JSON, notes: Notes) -> Request:
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
        return Text(
            block["text"], extra={k: v for k, v in block.items() if k not in ("type", "text")}
        )
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
        extra = {k: v for k, v in block.items() if k not in modelled}
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
        extra = {
            k: v for k, v in t.items() if k not in ("name", "description", "input_schema", "type")
        }
        if kind is not None:
            extra["type"] = kind
        description = t.get("description")
        out.append(
            Tool(
                name,
                description if isinstance(description, str) else None,
                schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
                extra={NAME: extra} if extra else {},
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


# --------------------------------------------------------------------------- encode


def encode_request(req: Request, notes: Notes) -> JSON:
    """The Messages body for an Anthropic upstream."""
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
    body: JSON = {"model": req.model, "messages": turns}
    if system:
        plain = system_string and all(set(b) == {"type", "text"} for b in system)
        body["system"] = "\n\n".join(b["text"] for b in system) if plain else system
    params = req.params
    max_tokens = params.max_tokens
    if max_tokens is None:
        notes[f"max_tokens {DEFAULT_MAX_TOKENS} added (Anthropic requires it)"] += 1
        max_tokens = DEFAULT_MAX_TOKENS
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
    return {"type": "text", "text": p.text, **p.extra}


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
            return _encode_image(p)
        case ToolCall():
            try:
                args = strict_json(p.arguments or "{}")
            except ValueError:
                args = None
            if not isinstance(args, dict):
                # Never turn a model's broken arguments into {} silently.
                notes["unparsable tool arguments kept as _raw_arguments"] += 1
                args = {"_raw_arguments": p.arguments}
            return {
                "type": "tool_use",
                "id": _tool_id(p.id, notes),
                "name": p.name,
                "input": args,
            }
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
            return block
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
    if p.url.startswith("data:") and ";base64," in p.url:
        media, data = p.url[5:].split(";base64,", 1)
        source: JSON = {"type": "base64", "media_type": media, "data": data}
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
