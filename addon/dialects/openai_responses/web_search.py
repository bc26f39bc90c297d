"""OpenAI's hosted ``web_search`` tool (Codex CLI's, beside its function tools) run by the
bridge for an upstream that cannot (docs/tools.md#web-search): the tool read (``ask``: its
``filters.allowed_domains``), the searches shown as OpenAI shows its own — a ``web_search_call``
output item per search before the model's message (``answer``) — and each item as the stream
events OpenAI sends for it (``events``: ``output_item.added``, ``web_search_call.in_progress`` /
``searching`` / ``completed``, ``output_item.done``). Shapes: the openai SDK's
``WebSearchTool`` / ``WebSearchPreviewTool``, ``ResponseFunctionWebSearch`` (``ActionSearch``
with its ``sources``) and ``ResponseWebSearchCall*Event``."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

from addon.dialects.searches import SearchAsk, Searched, SearchShape
from addon.model import JSON, Event, Opaque, OpaqueTool, RawEvent, Response

from .request import NAME

KINDS = frozenset(
    {"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"}
)
"""The hosted search tool's ``type``s (``WebSearchTool``, ``WebSearchPreviewTool``)."""


def ask(tool: OpaqueTool) -> SearchAsk | None:
    """A hosted ``web_search`` tool read; None for another kind. It has no name and no
    ``max_uses``: the model's function tool is ``web_search``, the bridge's bound applies."""
    if tool.origin != NAME or tool.type not in KINDS:
        return None
    filters = tool.data.get("filters")
    allowed = filters.get("allowed_domains") if isinstance(filters, dict) else None
    domains = (
        tuple(d for d in allowed if isinstance(d, str) and d) if isinstance(allowed, list) else ()
    )
    return SearchAsk("web_search", tool.type, allowed_domains=domains)


def call_id(model_call: str) -> str:
    """The ``ws_…`` id of the search the model's call ``model_call`` asked for (the same call
    always gets the same id)."""
    return "ws_" + hashlib.sha256(model_call.encode()).hexdigest()[:32]


def item(s: Searched) -> JSON:
    """One search as a ``web_search_call`` item: its query and the URLs it found (``sources``,
    which OpenAI gives with ``include: ["web_search_call.action.sources"]``); ``failed`` when the
    backend could not run it or the model gave no query."""
    action: JSON = {"type": "search", "query": s.query}
    if s.error is None:
        action["sources"] = [{"type": "url", "url": f.url} for f in s.results]
    return {
        "type": "web_search_call",
        "id": call_id(s.call_id),
        "status": "completed" if s.error is None else "failed",
        "action": action,
    }


def answer(last: Response, searched: Sequence[Searched]) -> Response:
    """The model's answer after the searches: a ``web_search_call`` item each, first."""
    parts = tuple(Opaque(NAME, item(s)) for s in searched)
    return dataclasses.replace(last, parts=(*parts, *last.parts))


def events(part: Opaque, index: int) -> list[Event]:
    """One ``web_search_call`` item as OpenAI streams it (``index``: its place in the answer,
    which the encoder maps to its own ``output_index``)."""
    data = part.data
    if part.origin != NAME or data.get("type") != "web_search_call":
        return []
    where: JSON = {"output_index": index, "item_id": data["id"]}
    added: JSON = {**data, "status": "in_progress", "action": {"type": "search"}}
    out: list[JSON] = [
        {"type": "response.output_item.added", "output_index": index, "item": added},
        {"type": "response.web_search_call.in_progress", **where},
        {"type": "response.web_search_call.searching", **where},
    ]
    if data.get("status") == "completed":
        out.append({"type": "response.web_search_call.completed", **where})
    out.append({"type": "response.output_item.done", "output_index": index, "item": data})
    return [RawEvent(NAME, e) for e in out]


SEARCH = SearchShape(ask=ask, answer=answer, events=events, items=frozenset({"web_search_call"}))
