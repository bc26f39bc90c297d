"""Prompt-caching markers removed from a unified request (unified → unified).

Contract: pure. ``strip_cache_control`` returns the request without any ``cache_control``
(``{"type": "ephemeral"}``, with or without ``ttl``) in the places a decoder keeps it: the
``extra`` of parts (inside tool results too), of messages, and of tools (directly or one level
down, ``Tool.extra["anthropic"]``); each removal counted under ``"cache_control removed"``.
``Opaque`` parts and ``OpaqueTool``s are left alone (only their own dialect writes them). A
request without markers is returned as it is (the same object). The plan calls this on a
dialect change unless the route says ``cache_control = "keep"`` (docs/dialects/anthropic.md)."""

from __future__ import annotations

import dataclasses
from typing import Any

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
    ToolResult,
)

KEY = "cache_control"
NOTE = "cache_control removed"


class _Count:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


def strip_cache_control(req: Request, notes: Notes) -> Request:
    """``req`` without ``cache_control`` anywhere it can sit (see the module docstring)."""
    count = _Count()
    messages = tuple(_message(m, count) for m in req.messages)
    tools = None if req.tools is None else tuple(_tool(t, count) for t in req.tools)
    if count.n == 0:
        return req
    notes[NOTE] += count.n
    return dataclasses.replace(req, messages=messages, tools=tools)


def _clean(extra: JSON, count: _Count) -> JSON:
    """``extra`` without the key, at its top level or one level down (dialect-keyed extras);
    the same dict when there is nothing to remove."""
    found = KEY in extra
    nested = [k for k, v in extra.items() if isinstance(v, dict) and KEY in v]
    if not found and not nested:
        return extra
    out: dict[str, Any] = {k: v for k, v in extra.items() if k != KEY}
    if found:
        count.n += 1
    for k in nested:
        inner = {ik: iv for ik, iv in extra[k].items() if ik != KEY}
        count.n += 1
        if inner:
            out[k] = inner
        else:
            del out[k]
    return out


def _message(m: Message, count: _Count) -> Message:
    before = count.n
    parts = tuple(_part(p, count) for p in m.parts)
    extra = _clean(m.extra, count)
    if count.n == before:
        return m
    return dataclasses.replace(m, parts=parts, extra=extra)


def _part(p: Part, count: _Count) -> Part:
    match p:
        case Opaque():
            return p
        case ToolResult():
            before = count.n
            content = (
                p.content
                if isinstance(p.content, str)
                else tuple(_part(q, count) for q in p.content)
            )
            extra = _clean(p.extra, count)
            if count.n == before:
                return p
            return dataclasses.replace(p, content=content, extra=extra)
        case Text() | Image() | ToolCall() | Thinking():
            extra = _clean(p.extra, count)
            return p if extra is p.extra else dataclasses.replace(p, extra=extra)


def _tool(t: Tool | OpaqueTool, count: _Count) -> Tool | OpaqueTool:
    if isinstance(t, OpaqueTool):
        return t
    extra = _clean(t.extra, count)
    return t if extra is t.extra else dataclasses.replace(t, extra=extra)
