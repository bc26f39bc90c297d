"""Web search run by the bridge, as plain values a dialect reads and writes: what a client's
search tool asks (``SearchAsk``), what one search found (``Found``, ``Searched``) and how a
client dialect shows searches in its own answer shape (``SearchShape``, a ``Dialect`` field).
The rules: docs/tools.md#web-search."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from addon.model import Event, Opaque, OpaqueTool, Response, Usage

SEARCH_TOOL = "web_search"
"""The function tool the model is offered in place of the client's search tool."""


@dataclass(frozen=True, slots=True)
class SearchAsk:
    """What a client's search tool asks of the searches made for one request."""

    name: str
    """The client's tool name (Anthropic: ``web_search``)."""
    type: str
    """Its kind (``web_search_20250305``)."""
    max_uses: int | None = None
    """At most this many searches in the answer; None: the bridge's own bound."""
    allowed_domains: tuple[str, ...] = ()
    """Only results from these domains (and their subdomains); empty: any."""
    blocked_domains: tuple[str, ...] = ()
    """Never results from these domains (and their subdomains)."""


@dataclass(frozen=True, slots=True)
class Found:
    """One result of a search."""

    url: str
    title: str
    content: str = ""
    page_age: str | None = None


@dataclass(frozen=True, slots=True)
class Searched:
    """One search the bridge ran for the model: the model's call, the query, the results or
    why there are none (``error``: Anthropic's codes, ``max_uses_exceeded``, ``unavailable``,
    ``invalid_tool_input``)."""

    call_id: str
    query: str
    results: tuple[Found, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SearchShape:
    """How a client dialect asks for web search and shows the searches in its answer."""

    ask: Callable[[OpaqueTool], SearchAsk | None]
    """The client's tool read as a search tool; None: it is another kind."""
    answer: Callable[[Response, Sequence[Searched]], Response]
    """The model's last answer with the searches before it, in this dialect's shape (an
    Anthropic ``server_tool_use`` + ``web_search_tool_result`` per search, and the usage's
    ``server_tool_use.web_search_requests``)."""
    events: Callable[[Opaque, int], list[Event]]
    """A part ``answer`` wrote (the ``int``-th of the answer), as the stream events that carry
    it: for a whole answer sent as the client's stream."""
    items: frozenset[str] = frozenset()
    """The ``type``s of the search parts a client sends back in its next turns (Anthropic's
    blocks, Responses' ``web_search_call`` items): left out for an upstream that cannot read
    them."""


def summed(usages: Sequence[Usage | None]) -> Usage | None:
    """The usage of every upstream call of one answer added up (None: none said any)."""
    known = [u for u in usages if u is not None]
    if not known:
        return None

    def total(name: str) -> int | None:
        values = [getattr(u, name) for u in known if getattr(u, name) is not None]
        return sum(values) if values else None

    return Usage(
        input_tokens=total("input_tokens"),
        output_tokens=total("output_tokens"),
        cache_read_tokens=total("cache_read_tokens"),
        cache_write_tokens=total("cache_write_tokens"),
        reasoning_tokens=total("reasoning_tokens"),
        origin=known[-1].origin,
    )
