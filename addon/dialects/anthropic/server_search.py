"""Anthropic's web search server tool (``web_search_20250305`` and later) run by the bridge for
an upstream that cannot (docs/tools.md#web-search): the tool read (``ask``), the searches shown
as Anthropic shows its own — a ``server_tool_use`` block and a ``web_search_tool_result`` block
of ``web_search_result``s per search before the model's answer, and
``usage.server_tool_use.web_search_requests`` (``answer``) — and those blocks as stream events
(``events``). Shapes: the anthropic SDK's ``WebSearchTool20250305Param``,
``ServerToolUseBlock``, ``WebSearchToolResultBlock``, ``WebSearchResultBlock``,
``WebSearchToolResultErrorObject``, ``ServerToolUsage``."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from collections.abc import Sequence

from addon.dialects.searches import SearchAsk, Searched, SearchShape
from addon.model import JSON, Event, Opaque, OpaqueTool, RawEvent, Response, Usage

from .request import NAME
from .response import usage_fields


def ask(tool: OpaqueTool) -> SearchAsk | None:
    """A ``web_search_…`` server tool read; None for another kind."""
    if tool.origin != NAME or not tool.type.startswith("web_search_"):
        return None
    data = tool.data
    max_uses = data.get("max_uses")
    return SearchAsk(
        tool.name or "web_search",
        tool.type,
        max_uses if isinstance(max_uses, int) and not isinstance(max_uses, bool) else None,
        _strings(data.get("allowed_domains")),
        _strings(data.get("blocked_domains")),
    )


def _strings(v: object) -> tuple[str, ...]:
    return tuple(s for s in v if isinstance(s, str) and s) if isinstance(v, list) else ()


def server_tool_id(call_id: str) -> str:
    """The ``srvtoolu_…`` id of the search the model's call ``call_id`` asked for (the same call
    always gets the same id)."""
    digest = hashlib.sha256(call_id.encode()).digest()
    return "srvtoolu_" + base64.b32encode(digest).decode().rstrip("=").lower()[:24]


def blocks(s: Searched) -> tuple[JSON, JSON]:
    """One search as Anthropic's two blocks."""
    tool_id = server_tool_id(s.call_id)
    use: JSON = {
        "type": "server_tool_use",
        "id": tool_id,
        "name": "web_search",
        "input": {"query": s.query},
    }
    content: JSON | list[JSON]
    if s.error is not None:
        content = {"type": "web_search_tool_result_error", "error_code": s.error}
    else:
        content = [
            {
                "type": "web_search_result",
                "url": f.url,
                "title": f.title,
                # Anthropic's is opaque to clients; the bridge's carries the snippet (as UTF-8:
                # half an emoji, a lone surrogate a backend's JSON may hold, becomes "?").
                "encrypted_content": base64.b64encode(f.content.encode(errors="replace")).decode(),
                "page_age": f.page_age,
            }
            for f in s.results
        ]
    result: JSON = {"type": "web_search_tool_result", "tool_use_id": tool_id, "content": content}
    return use, result


def answer(last: Response, searched: Sequence[Searched]) -> Response:
    """The model's answer after the searches: their blocks first, the usage Anthropic's with
    ``server_tool_use`` (every search the model asked for that ran)."""
    parts = [Opaque(NAME, b) for s in searched for b in blocks(s)]
    ran = sum(1 for s in searched if s.error is None)
    u = last.usage or Usage()
    raw: JSON = {
        "input_tokens": 0,
        "output_tokens": 0,
        **usage_fields(u),
        "server_tool_use": {"web_search_requests": ran, "web_fetch_requests": 0},
    }
    usage = dataclasses.replace(u, origin=NAME, raw=raw)
    return dataclasses.replace(last, parts=(*parts, *last.parts), usage=usage)


def events(part: Opaque, index: int) -> list[Event]:
    """One block as the stream carries it: ``content_block_start`` (whole) and
    ``content_block_stop``."""
    if part.origin != NAME:
        return []
    start: JSON = {"type": "content_block_start", "index": index, "content_block": part.data}
    return [RawEvent(NAME, start), RawEvent(NAME, {"type": "content_block_stop", "index": index})]


SEARCH = SearchShape(
    ask=ask,
    answer=answer,
    events=events,
    items=frozenset({"server_tool_use", "web_search_tool_result"}),
)
