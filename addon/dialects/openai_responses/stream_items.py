"""The output items of a streamed Responses answer, each writing its own events.

Contract: no I/O. ``MessageItem``, ``ReasoningItem`` and ``CallItem`` are the items the
encoder (``stream_encode.py``) has open; each writes its ``.delta`` / ``.done`` events through
the encoder's ``Emit`` and returns its finished item for the output. ``Output`` keeps the
output list in order and what addresses it: item ids, call ids, the upstream's raw items."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from addon.jsonio import join_texts
from addon.model import JSON

type Out = list[tuple[str | None, str]]
type Emit = Callable[[Out, str, JSON], None]
"""The encoder's ``_emit``: appends one event, numbered."""


@dataclass(slots=True)
class MessageItem:
    """A ``message`` item: its content parts and the open part's text."""

    index: int
    id: str
    parts: list[JSON] = field(default_factory=list)
    kind: Literal["text", "refusal"] | None = None
    """The kind of the open content part (the last of ``parts``), None when none is open."""
    chunks: list[str | bytes] = field(default_factory=list)
    """The open part's text: strings, and plain texts as their JSON strings (``text_sse``)."""
    text_head: tuple[int, bytes] = (-1, b"")
    """The text lane's head of a delta event (``stream_encode._TEXT_HEAD``) and the content part it is for,
    written once per part (``text_sse``)."""

    def added(self, emit: Emit, out: Out) -> None:
        item = {"id": self.id, "type": "message", "status": "in_progress", "role": "assistant"}
        emit(
            out,
            "response.output_item.added",
            {"output_index": self.index, "item": {**item, "content": []}},
        )

    def _where(self) -> JSON:
        return {
            "item_id": self.id,
            "output_index": self.index,
            "content_index": len(self.parts) - 1,
        }

    def _part_json(self) -> JSON:
        text = join_texts(self.chunks)
        self.chunks[:] = [text]
        if self.kind == "refusal":
            return {"type": "refusal", "refusal": text}
        return {**self.parts[-1], "type": "output_text", "text": text}

    def close_part(self, emit: Emit, out: Out) -> None:
        if self.kind is None:
            return
        part = self._part_json()
        where = self._where()
        if self.kind == "refusal":
            emit(out, "response.refusal.done", {**where, "refusal": part["refusal"]})
        else:
            emit(out, "response.output_text.done", {**where, "text": part["text"], "logprobs": []})
        emit(out, "response.content_part.done", {**where, "part": part})
        self.parts[-1] = part
        self.kind = None
        self.chunks = []

    def text(self, text: str, kind: Literal["text", "refusal"], emit: Emit, out: Out) -> None:
        if self.kind != kind:
            self.close_part(emit, out)
            part: JSON = (
                {"type": "refusal", "refusal": ""}
                if kind == "refusal"
                else {"type": "output_text", "text": "", "annotations": []}
            )
            self.parts.append(part)
            self.kind = kind
            emit(out, "response.content_part.added", {**self._where(), "part": part})
        self.chunks.append(text)
        where = self._where()
        if kind == "refusal":
            emit(out, "response.refusal.delta", {**where, "delta": text})
        else:
            emit(out, "response.output_text.delta", {**where, "delta": text, "logprobs": []})

    def annotate(self, index: int, payload: JSON) -> bool:
        """Address an upstream's ``output_text.annotation.added`` (``payload``, for output
        ``index``) to the open text part and keep its annotation; False when that is not this
        item's open text part."""
        if self.index != index or self.kind != "text":
            return False
        payload["item_id"] = self.id
        payload["content_index"] = len(self.parts) - 1
        annotation = payload.get("annotation")
        if annotation is not None:
            self.parts[-1].setdefault("annotations", []).append(annotation)
        return True

    def done(self, status: str, emit: Emit, out: Out) -> JSON:
        """Close the open part and the item; the item as it goes into the output."""
        self.close_part(emit, out)
        item = {
            "id": self.id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": self.parts,
        }
        emit(out, "response.output_item.done", {"output_index": self.index, "item": item})
        return item


@dataclass(slots=True)
class ReasoningItem:
    """A ``reasoning`` item: its summary parts, the open one's text and the signature."""

    index: int
    id: str
    summary: list[str] = field(default_factory=list)
    open: bool = False
    chunks: list[str] = field(default_factory=list)
    signature: str | None = None
    stored: JSON | None = None
    """The upstream's own item (Responses → Responses), sent as it was."""

    def added(self, emit: Emit, out: Out) -> None:
        item = {"id": self.id, "type": "reasoning", "summary": []}
        emit(out, "response.output_item.added", {"output_index": self.index, "item": item})

    def close_summary(self, emit: Emit, out: Out) -> None:
        if not self.open:
            return
        self.open = False
        text = "".join(self.chunks)
        self.chunks = []
        self.summary.append(text)
        where = {
            "item_id": self.id,
            "output_index": self.index,
            "summary_index": len(self.summary) - 1,
        }
        emit(out, "response.reasoning_summary_text.done", {**where, "text": text})
        part = {"type": "summary_text", "text": text}
        emit(out, "response.reasoning_summary_part.done", {**where, "part": part})

    def text(self, text: str, emit: Emit, out: Out) -> None:
        where = {"item_id": self.id, "output_index": self.index, "summary_index": len(self.summary)}
        if not self.open:
            self.open = True
            part = {"type": "summary_text", "text": ""}
            emit(out, "response.reasoning_summary_part.added", {**where, "part": part})
        self.chunks.append(text)
        emit(out, "response.reasoning_summary_text.delta", {**where, "delta": text})

    def done(self, emit: Emit, out: Out) -> JSON:
        """Close the open summary part and the item; the item as it goes into the output."""
        self.close_summary(emit, out)
        item: JSON = {
            "id": self.id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": t} for t in self.summary],
        }
        if self.stored is not None:
            item = {**self.stored, "id": self.id}
        if self.signature:
            item["encrypted_content"] = self.signature
        emit(out, "response.output_item.done", {"output_index": self.index, "item": item})
        return item


@dataclass(slots=True)
class CallItem:
    """A ``function_call`` or ``custom_tool_call`` item and its arguments so far."""

    index: int
    item: JSON
    custom: bool
    chunks: list[str] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return bool(self.item["status"] == "in_progress")

    def delta(self, text: str, emit: Emit, out: Out) -> None:
        self.chunks.append(text)
        name = (
            "response.custom_tool_call_input.delta"
            if self.custom
            else "response.function_call_arguments.delta"
        )
        emit(out, name, {"item_id": self.item["id"], "output_index": self.index, "delta": text})

    def done(self, status: str, emit: Emit, out: Out) -> JSON:
        """The ``.done`` events; the item as it goes into the output."""
        text = "".join(self.chunks)
        where = {"item_id": self.item["id"], "output_index": self.index}
        if self.custom:
            emit(out, "response.custom_tool_call_input.done", {**where, "input": text})
            self.item["input"] = text
        else:
            emit(out, "response.function_call_arguments.done", {**where, "arguments": text})
            self.item["arguments"] = text
        self.item["status"] = status
        emit(out, "response.output_item.done", {"output_index": self.index, "item": self.item})
        return dict(self.item)


class Output:
    """The response's output items in order (None while one is open) and what addresses them."""

    __slots__ = ("call_ids", "ids", "items", "raw_index", "raw_open", "stem")

    def __init__(self, stem: str) -> None:
        self.stem = stem
        """The stem of the item ids we make, one per answer (``response.item_suffix``)."""
        self.items: list[JSON | None] = []
        self.ids: dict[str, int] = {}
        """Item id → our output_index."""
        self.call_ids: set[str] = set()
        self.raw_index: dict[int, int] = {}
        """Upstream output_index → ours, for items passed through raw."""
        self.raw_open: set[int] = set()

    def new_index(self, item_id: str | None) -> int:
        index = len(self.items)
        self.items.append(None)
        if item_id:
            self.ids[item_id] = index
        return index

    def item_id(self, prefix: str, own: object) -> str:
        """The upstream's item id (``own``) when it is one not used yet, else one of ours."""
        if isinstance(own, str) and own and own not in self.ids:
            return own
        return f"{prefix}_{self.stem}_{len(self.items)}"

    def call_id(self, upstream: str) -> str:
        # Calls are told apart by call_id (the SDK refuses two items with one call_id).
        call_id = upstream
        if not call_id or call_id in self.call_ids:
            call_id = f"call_{self.stem}_{len(self.items)}"
        self.call_ids.add(call_id)
        return call_id

    def raw_added(self, upstream: int, item: object) -> int:
        """Our output_index for an item the upstream adds raw (``web_search_call`` …)."""
        item_id = item.get("id") if isinstance(item, dict) else None
        index = self.raw_index[upstream] = self.new_index(
            item_id if isinstance(item_id, str) else None
        )
        self.items[index] = item if isinstance(item, dict) else {}
        self.raw_open.add(index)
        return index

    def raw_index_of(self, upstream: int, item_id: object) -> int:
        return self.raw_index.get(
            upstream, self.ids.get(item_id, upstream) if isinstance(item_id, str) else upstream
        )

    def raw_done(self, index: int, item: object) -> bool:
        """A raw item's ``output_item.done``: whether it is one (else an item of ours)."""
        if index not in self.raw_open:
            return False
        self.raw_open.discard(index)
        if isinstance(item, dict):
            self.items[index] = item
        return True

    def close_raw(self, emit: Emit, out: Out) -> None:
        """``output_item.done`` for the raw items the upstream never closed."""
        for index in sorted(self.raw_open):
            item = self.items[index] or {}
            emit(out, "response.output_item.done", {"output_index": index, "item": item})
        self.raw_open.clear()

    def done(self) -> list[JSON]:
        return [item for item in self.items if item is not None]
