"""Prompt-cache breakpoints of a unified request: removed, or placed where the client put none.

Contract: pure, unified → unified. ``strip_cache_control`` removes every breakpoint;
``place_breakpoints`` adds the bridge's own (docs/caching.md). A request with nothing to
change is returned as it is (the same object)."""

from __future__ import annotations

import dataclasses
from typing import Any

from addon.model import (
    JSON,
    CacheMark,
    CacheMarks,
    CacheTTL,
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
    """``req`` without ``cache_control`` anywhere it can sit: the ``cache`` marks of parts
    (inside tool results too) and tools, and any ``cache_control`` a decoder kept in an
    ``extra`` (messages, thinking blocks, a malformed one), counted under
    ``"cache_control removed"``; ``Opaque`` parts and ``OpaqueTool``s are left alone (only
    their own dialect writes them)."""
    count = _Count()
    messages = tuple(_message(m, count) for m in req.messages)
    tools = None if req.tools is None else tuple(_tool(t, count) for t in req.tools)
    extra = _clean(req.extra, count) if KEY in req.extra else req.extra  # automatic caching
    if count.n == 0:
        return req
    notes[NOTE] += count.n
    return dataclasses.replace(req, messages=messages, tools=tools, extra=extra)


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
            count.n += p.cache is not None
            if count.n == before:
                return p
            return dataclasses.replace(p, content=content, extra=extra, cache=None)
        case Text() | Image() | ToolCall():
            extra = _clean(p.extra, count)
            if extra is p.extra and p.cache is None:
                return p
            count.n += p.cache is not None
            return dataclasses.replace(p, extra=extra, cache=None)
        case Thinking():
            extra = _clean(p.extra, count)
            return p if extra is p.extra else dataclasses.replace(p, extra=extra)


def _tool(t: Tool | OpaqueTool, count: _Count) -> Tool | OpaqueTool:
    if isinstance(t, OpaqueTool):
        return t
    extra = _clean(t.extra, count)
    if extra is t.extra and t.cache is None:
        return t
    count.n += t.cache is not None
    return dataclasses.replace(t, extra=extra, cache=None)


# --------------------------------------------------------------------------- placing

MAX_BREAKPOINTS = 4
"""Anthropic refuses a request with more (``A maximum of 4 blocks with cache_control``)."""
PLACED = "cache breakpoint(s) placed"

type Spot = tuple[int, int]
"""Where a mark sits: ``(-1, i)`` the i-th tool, ``(m, p)`` part p of message m; in the order
Anthropic reads a prompt (tools, system, messages)."""


def place_breakpoints(req: Request, marks: CacheMarks, ttl: CacheTTL, notes: Notes) -> Request:
    """``req`` with the bridge's breakpoints where the client placed none, at most
    ``MAX_BREAKPOINTS`` in all with the client's (theirs count first), in this order of need:

    1. the end of the request (the last part a mark can sit on): this turn writes the whole
       conversation, the next one reads it;
    2. the end of the prefix every turn repeats (the leading system prompt, else the last
       tool): read even when the conversation was cut or compacted;
    3. the end of the previous turn (the last part before the last assistant message): where
       the previous request wrote, read again even when this turn added more than the 20
       blocks Anthropic looks back from a breakpoint (parallel tool calls).

    The client's own marks in the prefix (tools, system) stand for 2; in the messages, for 1
    and 3. A 1h mark must not follow a 5m one: a mark of the bridge takes the ttl the
    client's own marks around it allow."""
    client = _client_marks(req)
    # Anthropic's automatic caching (a top-level cache_control) takes a slot and moves a
    # breakpoint to the end of the request itself: it stands for 1 and 3.
    automatic = isinstance(req.extra.get(KEY), dict)
    room = MAX_BREAKPOINTS - len(client) - automatic
    if room <= 0:
        return req
    lead = next((i for i, m in enumerate(req.messages) if m.role not in _SYSTEM), len(req.messages))
    prefix_marked = any(m < lead for m, _ in client)
    history_marked = automatic or any(m >= lead for m, _ in client)
    spots: list[Spot] = []
    if not history_marked:
        spots.append(_last_spot(req, marks, lead, len(req.messages)))
    if not prefix_marked:
        spot = _last_spot(req, marks, 0, lead)
        if spot == _NONE and marks.tools and req.tools:
            last = max((i for i, t in enumerate(req.tools) if isinstance(t, Tool)), default=None)
            spot = _NONE if last is None else (-1, last)
        spots.append(spot)
    if not history_marked:
        assistant = max(
            (i for i, m in enumerate(req.messages) if m.role == "assistant"), default=None
        )
        if assistant is not None:
            spots.append(_last_spot(req, marks, lead, assistant))
    chosen = sorted({s for s in spots if s != _NONE and s not in client}, key=spots.index)[:room]
    if not chosen:
        return req
    notes[PLACED] += len(chosen)
    return _with_marks(req, {s: CacheMark(_ttl(s, ttl, client), by_bridge=True) for s in chosen})


_SYSTEM = ("system", "developer")
_NONE: Spot = (-2, -2)


def _markable(p: Part, marks: CacheMarks) -> bool:
    if p.kind not in marks.parts:
        return False
    # Anthropic refuses cache_control on an empty or blank text block.
    return not isinstance(p, Text) or bool(p.text.strip())


def _last_spot(req: Request, marks: CacheMarks, start: int, stop: int) -> Spot:
    """The last part a mark can sit on in messages ``start`` to ``stop`` (excluded)."""
    for m in range(stop - 1, start - 1, -1):
        parts = req.messages[m].parts
        for p in range(len(parts) - 1, -1, -1):
            if _markable(parts[p], marks):
                return (m, p)
    return _NONE


def _client_marks(req: Request) -> dict[Spot, CacheMark]:
    """The client's marks by where they sit (a mark inside a tool result counts for it)."""
    found: dict[Spot, CacheMark] = {}
    for i, t in enumerate(req.tools or ()):
        if isinstance(t, Tool) and t.cache is not None:
            found[(-1, i)] = t.cache
    for m, message in enumerate(req.messages):
        for p, part in enumerate(message.parts):
            mark = _mark_of(part)
            if mark is not None:
                found[(m, p)] = mark
    return found


def _mark_of(p: Part) -> CacheMark | None:
    match p:
        case Text() | Image() | ToolCall():
            return p.cache
        case ToolResult():
            if p.cache is not None or isinstance(p.content, str):
                return p.cache
            return next((m for q in p.content if (m := _mark_of(q)) is not None), None)
        case Thinking() | Opaque():
            return None


def _ttl(spot: Spot, ttl: CacheTTL, client: dict[Spot, CacheMark]) -> CacheTTL | None:
    """The route's ttl, made to fit the client's marks (longer ttls come first); None: 5m,
    written as Anthropic's default (no ``ttl`` key)."""
    if any(s > spot and m.ttl == "1h" for s, m in client.items()):
        return "1h"
    if any(s < spot and m.ttl != "1h" for s, m in client.items()):
        return None
    return None if ttl == "5m" else ttl


def _with_marks(req: Request, spots: dict[Spot, CacheMark]) -> Request:
    tools = req.tools
    if tools is not None and any(m == -1 for m, _ in spots):
        tools = tuple(
            dataclasses.replace(t, cache=spots[(-1, i)])
            if (-1, i) in spots and isinstance(t, Tool)
            else t
            for i, t in enumerate(tools)
        )
    messages = list(req.messages)
    for (m, p), mark in spots.items():
        if m < 0:
            continue
        parts = list(messages[m].parts)
        part = parts[p]
        assert isinstance(part, Text | Image | ToolCall | ToolResult)  # _markable's kinds
        parts[p] = dataclasses.replace(part, cache=mark)
        messages[m] = dataclasses.replace(messages[m], parts=tuple(parts))
    return dataclasses.replace(req, tools=tools, messages=tuple(messages))
