"""A model list in the shape of the client's dialect (sans-IO): the upstream's own list merged
with the names the bridge adds, for ``GET …/models`` (``addon.plan.model_lists``).

Contract: plain values. ``SHAPES`` says, per client dialect, how its official SDK reads a list
(``client.models.list()``): OpenAI's ``{"object": "list", "data": [{"id", "object",
"created", "owned_by"}]}``, Anthropic's ``{"data": [{"type", "id", "display_name",
"created_at", …}], "has_more", "first_id", "last_id"}``, Gemini's ``{"models": [{"name":
"models/…", …}]}``; ``merged_list`` writes the answer. An upstream list of another shape is
read by its items' names and written again in the client's; one of the client's own shape
keeps its items (and its paging) as they came."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from addon.dialects import ANTHROPIC, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES, DialectName
from addon.plan.values import dump, load_json

type Family = Literal["object_list", "paged", "named"]
"""How a list is laid out: ``{"object": "list", "data"}`` (OpenAI), ``data`` with paging
(Anthropic), ``models`` named ``models/…`` (Gemini)."""
EPOCH = "1970-01-01T00:00:00Z"
"""Anthropic's ``created_at`` for a model whose release date is not known (what its API
documents for that case)."""
OWNER = "cursor-bridge"
GEMINI_METHODS = ("generateContent", "streamGenerateContent", "countTokens")


def _openai_item(name: str, display: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": OWNER}


def _anthropic_item(name: str, display: str) -> dict[str, Any]:
    return {
        "type": "model",
        "id": name,
        "display_name": display,
        "created_at": EPOCH,
        "lifecycle": "active",
    }


def _gemini_item(name: str, display: str) -> dict[str, Any]:
    return {
        "name": f"models/{name}",
        "displayName": display,
        "supportedGenerationMethods": list(GEMINI_METHODS),
    }


@dataclass(frozen=True, slots=True)
class Shape:
    """How one family of clients reads a model list."""

    family: Family
    item: Callable[[str, str], dict[str, Any]]
    """One model written for this family (its id, its display name)."""
    later_page: tuple[str, ...]
    """Query parameters asking for a page after the first: such a page is left as it came
    (the names are added to the first)."""


SHAPES: dict[DialectName, Shape] = {
    OPENAI_CHAT: Shape("object_list", _openai_item, ()),
    OPENAI_RESPONSES: Shape("object_list", _openai_item, ()),
    ANTHROPIC: Shape("paged", _anthropic_item, ("after_id", "before_id")),
    GEMINI: Shape("named", _gemini_item, ("pageToken",)),
}
"""The client dialects that list models, and how (Code Assist lists none)."""


def _family_of(body: dict[str, Any]) -> Family | None:
    """The shape an upstream answered in, or None: no model list."""
    if isinstance(body.get("models"), list):
        return "named"
    data = body.get("data")
    if not isinstance(data, list):
        return None
    typed = any(isinstance(m, dict) and m.get("type") == "model" for m in data)
    return "paged" if typed or "has_more" in body else "object_list"


def _item_name(item: object) -> str | None:
    if not isinstance(item, dict):
        return None
    name = item.get("id", item.get("name"))
    return name.removeprefix("models/") if isinstance(name, str) and name else None


def _item_display(item: dict[str, Any], name: str) -> str:
    shown = item.get("display_name", item.get("displayName"))
    return shown if isinstance(shown, str) and shown else name


@dataclass(frozen=True, slots=True)
class ListAnswer:
    """The list a client gets: ``body`` (JSON bytes, status 200), how many names the bridge
    added, and whether the upstream's own list was merged."""

    body: bytes
    added: int
    merged: bool


def merged_list(
    shape: Shape,
    upstream: tuple[int, bool, bytes],
    names: tuple[str, ...],
    display: Mapping[str, str],
) -> ListAnswer:
    """The client's list: the upstream's (``upstream``: status, whether it is JSON, body) when
    it answered one, its items kept in the client's shape, then ``names`` it does not hold
    (``display``: a name's display name where it is not the name)."""
    status, is_json, content = upstream
    body: dict[str, Any] = {}
    if 200 <= status < 300 and is_json:
        try:
            read = load_json(content or b"")
            if isinstance(read, dict) and _family_of(read) is not None:
                dump(read)  # what cannot be written back strictly is not kept
                body = read
        except (ValueError, RecursionError):
            body = {}
    family = _family_of(body) if body else None
    items: list[Any] = []
    if family == shape.family:
        items = list(body["models" if family == "named" else "data"])
    elif family is not None:  # another API's list: each of its models in the client's shape
        for item in body["models" if family == "named" else "data"]:
            name = _item_name(item)
            if name is not None:
                items.append(shape.item(name, _item_display(item, name)))
    known = {_item_name(m) for m in items}
    added = [shape.item(n, display.get(n, n)) for n in names if n not in known]
    out = _envelope(shape.family, body if family == shape.family else {}, items, added)
    return ListAnswer(dump(out), len(added), family is not None)


def _envelope(
    family: Family, own: dict[str, Any], items: list[Any], added: list[dict[str, Any]]
) -> dict[str, Any]:
    """The list's top level: the upstream's own (``own``: its paging) where it was of the
    client's shape. Anthropic's ``last_id`` stays the upstream's while it has more pages, so
    that the next page starts after its last model."""
    data = [*items, *added]
    if family == "object_list":
        return {"object": "list", "data": data}
    if family == "named":
        return {**own, "models": data}
    ids = [m.get("id") for m in data if isinstance(m, dict)]
    more = own.get("has_more") is True
    last = own.get("last_id") if more else (ids[-1] if ids else None)
    return {**own, "data": data, "has_more": more, "first_id": ids[0] if ids else None,
            "last_id": last}  # fmt: skip
