"""Gemini's ``googleSearch`` tool (Gemini CLI's ``google_web_search`` makes a request of its
own carrying ``tools: [{"googleSearch": {}}]``) run by the bridge for an upstream that cannot
(docs/tools.md#web-search): the tool read (``ask``: Vertex's ``excludeDomains``), the searches
shown as Gemini grounds an answer — the candidate's ``groundingMetadata`` with the queries
(``webSearchQueries``) and a ``groundingChunks`` entry ``{web: {uri, title}}`` per result
(``answer``; the bridge cannot tell which sentence a result supports, so no
``groundingSupports``) — and, streamed, on the last chunk (``events``: the encoders keep it
for the chunk with ``finishReason``, as Gemini sends it). Shapes: google-genai's
``GoogleSearch``, ``GroundingMetadata``, ``GroundingChunk``, ``GroundingChunkWeb``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from addon.dialects.searches import SearchAsk, Searched, SearchShape
from addon.model import JSON, Event, Opaque, OpaqueTool, RawEvent, Response

from .parts import NAME

KINDS = frozenset(
    {"googleSearch", "google_search", "googleSearchRetrieval", "google_search_retrieval"}
)
"""The search tools' keys in a ``Tool`` (camelCase or the snake_case the API also takes)."""

GROUNDING = "groundingMetadata"
"""The key of the bridge's opaque part that is the candidate's, not a content part."""


def ask(tool: OpaqueTool) -> SearchAsk | None:
    """A ``googleSearch`` tool read; None for another kind."""
    if tool.origin != NAME or tool.type not in KINDS:
        return None
    config = tool.data.get(tool.type)
    excluded = None
    if isinstance(config, dict):
        excluded = config.get("excludeDomains", config.get("exclude_domains"))
    blocked = (
        tuple(d for d in excluded if isinstance(d, str) and d) if isinstance(excluded, list) else ()
    )
    return SearchAsk("web_search", tool.type, blocked_domains=blocked)


def grounding(searched: Sequence[Searched]) -> JSON:
    """The candidate's ``groundingMetadata``: every query the backend ran, every result once."""
    chunks: list[JSON] = []
    seen: set[str] = set()
    for s in searched:
        for f in s.results:
            if f.url not in seen:
                seen.add(f.url)
                chunks.append({"web": {"uri": f.url, "title": f.title}})
    queries = [s.query for s in searched if s.error is None and s.query]
    return {"webSearchQueries": queries, "groundingChunks": chunks}


def answer(last: Response, searched: Sequence[Searched]) -> Response:
    """The model's answer with the searches' grounding (an opaque part the encoders put on the
    candidate)."""
    part = Opaque(NAME, {GROUNDING: grounding(searched)})
    return dataclasses.replace(last, parts=(*last.parts, part))


def events(part: Opaque, index: int) -> list[Event]:
    """The grounding as a raw event the stream encoder keeps for its last chunk."""
    if part.origin != NAME or GROUNDING not in part.data:
        return []
    return [RawEvent(NAME, {GROUNDING: part.data[GROUNDING]})]


SEARCH = SearchShape(ask=ask, answer=answer, events=events)
