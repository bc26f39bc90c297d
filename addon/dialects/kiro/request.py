"""Kiro requests (CodeWhisperer ``generateAssistantResponse``) → ``addon.model.Request``.

Contract: ``decode_request`` reads a body the Kiro IDE sends, leniently; no I/O. Why it
exists: tests and a same-dialect round trip (no route takes Kiro clients). The other direction,
the one every route to Kiro uses, is ``request_encode``; the path, the ``modelId`` and what a
route adds are ``placement``."""

from __future__ import annotations

import json

from addon.dialects import names
from addon.model import (
    JSON,
    Image,
    Message,
    Notes,
    OpaqueTool,
    Part,
    Request,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    UnsupportedShape,
)

NAME = names.KIRO
SIDE = "__kiro__"
"""Key of the private table in ``Request.extra``: what ``prepare`` adds for the route
(``profile_arn``) and, for a Kiro client, the body's own fields (never sent as such)."""


def decode_request(body: JSON, notes: Notes) -> Request:
    """A body the Kiro IDE sends to ``POST /generateAssistantResponse`` → unified, leniently.
    Raises ``UnsupportedShape`` for JSON that is not a ``generateAssistantResponse`` body. The
    body's shape (from real Kiro IDE 0.11 bodies): docs/dialects/kiro.md#module-notes."""
    state = body.get("conversationState")
    if not isinstance(state, dict):
        raise UnsupportedShape("not a Kiro request (no conversationState)")
    current = state.get("currentMessage")
    current_msg = current.get("userInputMessage") if isinstance(current, dict) else None
    if not isinstance(current_msg, dict):
        raise UnsupportedShape("Kiro conversationState.currentMessage.userInputMessage missing")
    history = state.get("history") or []
    if not isinstance(history, list):
        raise UnsupportedShape("Kiro conversationState.history is not a list")
    messages: list[Message] = []
    names: dict[str, str] = {}
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            raise UnsupportedShape(f"Kiro history[{i}] is not an object")
        if isinstance(entry.get("userInputMessage"), dict):
            messages.append(_decode_user(entry["userInputMessage"], names, f"history[{i}]"))
        elif isinstance(entry.get("assistantResponseMessage"), dict):
            messages.append(_decode_assistant(entry["assistantResponseMessage"], names))
        else:
            raise UnsupportedShape(f"Kiro history[{i}] is neither a user nor an assistant message")
    messages.append(_decode_user(current_msg, names, "currentMessage"))
    context = current_msg.get("userInputMessageContext")
    raw_tools = context.get("tools") if isinstance(context, dict) else None
    tools: list[Tool | OpaqueTool] = []
    for t in raw_tools if isinstance(raw_tools, list) else ():
        spec = t.get("toolSpecification") if isinstance(t, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            tools.append(OpaqueTool(NAME, None, "unknown", t if isinstance(t, dict) else {}))
            continue
        schema = spec.get("inputSchema")
        params = schema.get("json") if isinstance(schema, dict) else None
        description = spec.get("description")
        tools.append(
            Tool(
                spec["name"],
                description if isinstance(description, str) else None,
                params if isinstance(params, dict) else {"type": "object"},
            )
        )
    model = current_msg.get("modelId")
    side: JSON = {
        "state": {
            k: v
            for k, v in state.items()
            if k not in ("currentMessage", "history", "conversationId")
        },
        "top": {k: v for k, v in body.items() if k not in ("conversationState", "profileArn")},
    }
    if isinstance(state.get("conversationId"), str):
        side["conversation_id"] = state["conversationId"]
    if isinstance(body.get("profileArn"), str):
        side["profile_arn"] = body["profileArn"]
    return Request(
        origin=NAME,
        model=model if isinstance(model, str) else "",
        messages=tuple(messages),
        tools=tuple(tools) if raw_tools is not None else None,
        stream=True,
        extra={SIDE: side},
    )


_USER_MODELLED = frozenset({"content", "modelId", "origin", "userInputMessageContext", "images"})


def _decode_user(msg: JSON, names: dict[str, str], where: str) -> Message:
    content = msg.get("content", "")
    if not isinstance(content, str):
        raise UnsupportedShape(f"Kiro {where}.content is not a string")
    parts: list[Part] = []
    context = msg.get("userInputMessageContext")
    results = context.get("toolResults") if isinstance(context, dict) else None
    for r in results if isinstance(results, list) else ():
        if not isinstance(r, dict) or not isinstance(r.get("toolUseId"), str):
            raise UnsupportedShape(f"Kiro {where} has a tool result without a toolUseId")
        text, is_error = decode_result_content(r)
        parts.append(
            ToolResult(
                r["toolUseId"],
                text,
                name=names.get(r["toolUseId"]),
                is_error=is_error,
                extra={NAME: r},
            )
        )
    if content:
        parts.append(Text(content))
    for img in msg.get("images") or ():
        source = img.get("source") if isinstance(img, dict) else None
        data = source.get("bytes") if isinstance(source, dict) else None
        if isinstance(data, str):
            parts.append(Image(f"data:image/{img.get('format') or 'png'};base64,{data}"))
    own: JSON = {}
    rest = {k: v for k, v in msg.items() if k not in _USER_MODELLED}
    if rest:
        own["message"] = rest
    if isinstance(context, dict):
        own["context"] = {k: v for k, v in context.items() if k not in ("toolResults", "tools")}
    return Message("user", tuple(parts), extra={NAME: own} if own else {})


def _decode_assistant(msg: JSON, names: dict[str, str]) -> Message:
    parts: list[Part] = []
    content = msg.get("content")
    if isinstance(content, str) and content:
        parts.append(Text(content))
    for use in msg.get("toolUses") or ():
        if not isinstance(use, dict) or not isinstance(use.get("name"), str):
            raise UnsupportedShape("Kiro toolUses entry without a name")
        use_id = use.get("toolUseId")
        use_id = use_id if isinstance(use_id, str) else ""
        names[use_id] = use["name"]
        args = use.get("input")
        arguments = json.dumps(args if args is not None else {}, ensure_ascii=False)
        parts.append(ToolCall(use_id, use["name"], arguments))
    own: JSON = {}
    rest = {k: v for k, v in msg.items() if k not in ("content", "toolUses")}
    if rest:
        own["message"] = rest
    if msg.get("toolUses") == []:
        own["empty_uses"] = True
    return Message("assistant", tuple(parts), extra={NAME: own} if own else {})


def decode_result_content(r: JSON) -> tuple[str, bool]:
    texts: list[str] = []
    for c in r.get("content") or ():
        if isinstance(c, dict) and isinstance(c.get("text"), str):
            texts.append(c["text"])
        elif isinstance(c, dict) and "json" in c:
            texts.append(json.dumps(c["json"], ensure_ascii=False))
    return "\n".join(texts), r.get("status") == "error"
