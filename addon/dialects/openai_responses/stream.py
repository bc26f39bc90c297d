"""OpenAI Responses SSE ↔ unified stream events.

Contract: sans-IO. ``OpenAIResponsesStreamEncoder`` turns unified events into
``(event name, JSON data)`` pairs exactly as the Responses API streams them,
every payload with a ``type`` equal to its event name and a
``sequence_number`` counting from 0:

- ``response.created``, ``response.in_progress``;
- per output item ``response.output_item.added`` … ``response.output_item.done``
  (with the complete item): text as a ``message`` item with
  ``response.content_part.added`` / ``response.output_text.delta`` /
  ``response.output_text.done`` / ``response.content_part.done`` (refusals as
  ``refusal`` parts with ``response.refusal.*``); thinking as a ``reasoning``
  item with ``response.reasoning_summary_part.added`` /
  ``response.reasoning_summary_text.delta`` / ``.done`` /
  ``response.reasoning_summary_part.done`` (a signature becomes the item's
  ``encrypted_content``, so that the client replays it); tool calls as
  ``function_call`` items with ``response.function_call_arguments.delta`` /
  ``.done`` (at the call's ``ToolCallEnd``: a call that never ended gets no ``.done``
  and no ``output_item.done``, whatever follows), custom calls as ``custom_tool_call`` items with
  ``response.custom_tool_call_input.delta`` / ``.done``;
- finally ``response.completed`` with the whole response (output, usage), or
  ``response.incomplete`` for an answer cut at the token limit (or filtered).

Items are addressed by ``output_index`` and ``item_id``, so parallel calls whose
fragments interleave are streamed live, each to its own item; nothing is held
back. A text or thinking item closes when another kind of item starts; a call
item closes at its ``ToolCallEnd`` (or at the end). ``finish()`` is
idempotent and closes whatever is open. ``StreamError`` closes the open text and
reasoning items and ends the stream with ``response.failed`` (preceded by the upstream's own
``error`` event on a Responses → Responses route); a stream that ends with
neither a finish nor an end marker (a cut upstream) ends with
``response.failed`` too, never with a made-up ``response.completed``.
``RawEvent`` of this dialect is re-emitted (renumbered; items it adds, such as
``web_search_call``, become part of the output); other dialects' raw events
are dropped. On a Responses → Responses route the upstream's ids and response
fields are kept.

``OpenAIResponsesStreamDecoder`` does the reverse for a Responses upstream:
text and refusal deltas → ``TextDelta`` (refusals flagged in ``extra``),
reasoning summary (and raw reasoning) deltas → ``ThinkingDelta`` (a new
summary part → ``"\\n\\n"`` flagged as a break), a reasoning item's
``encrypted_content`` → ``ThinkingDelta(signature=…)`` at its
``output_item.done``, calls → ``ToolCallStart`` (``custom=True`` for
``custom_tool_call``) / ``ToolCallArgsDelta`` / ``ToolCallEnd`` (calls
numbered 0, 1, 2 … in the order they start), ``response.completed`` /
``incomplete`` → ``UsageEvent`` + ``Finish`` + ``StreamEnd``,
``response.failed`` and ``error`` → ``StreamError``; every other event
(annotations, hosted-tool progress, keep-alives) → ``RawEvent`` of this
dialect. Text given only in a ``.done`` event (no deltas) is not lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from addon.dialects.base import EncoderFastPath
from addon.jsonio import dumpb, dumps, join_texts, loads
from addon.model import (
    JSON,
    NO_DEFAULTS,
    AnswerDefaults,
    Event,
    Finish,
    FinishReason,
    MessageStart,
    RawEvent,
    StreamEnd,
    StreamError,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UnsupportedShape,
    Usage,
    UsageEvent,
)

from .errors import failed_code, status_of
from .request import NAME
from .response import decode_usage, encode_usage, finish_reason, item_suffix, response_id

type Out = list[tuple[str | None, str]]

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
_RESPONSE_OWN = frozenset({"output", "usage", "status", "error", "incomplete_details"})
"""Fields of a response object the encoder computes itself."""
_CUT = "the upstream stream ended before the answer was complete"


def _pair(name: str, data: JSON) -> tuple[str | None, str]:
    return name, dumps(data)


def _own(extra: JSON) -> JSON:
    value = extra.get(NAME)
    return value if isinstance(value, dict) else {}


# --------------------------------------------------------------------------- encoder


_TEXT_HEAD = (
    b"event: response.output_text.delta\ndata: "
    b'{"type":"response.output_text.delta","item_id":%b,"output_index":%d,"content_index":%d,'
    b'"delta":'
)
_TEXT_TAIL = b',"logprobs":[],"sequence_number":%d}\n\n'
"""A text delta in an open text part, as ``_text`` and ``encode_pairs`` write it: the head
(the same for every delta of a part), the text as JSON, the tail."""


@dataclass(slots=True)
class _Message:
    index: int
    id: str
    parts: list[JSON] = field(default_factory=list)
    kind: Literal["text", "refusal"] | None = None
    """The kind of the open content part (the last of ``parts``), None when none is open."""
    chunks: list[str | bytes] = field(default_factory=list)
    """The open part's text: strings, and plain texts as their JSON strings (``text_sse``)."""
    text_head: tuple[int, bytes] = (-1, b"")
    """The text lane's head of a delta event (``_TEXT_HEAD``) and the content part it is for,
    written once per part (``text_sse``)."""


@dataclass(slots=True)
class _Reasoning:
    index: int
    id: str
    summary: list[str] = field(default_factory=list)
    open: bool = False
    chunks: list[str] = field(default_factory=list)
    signature: str | None = None
    stored: JSON | None = None
    """The upstream's own item (Responses → Responses), sent as it was."""


@dataclass(slots=True)
class _Call:
    index: int
    item: JSON
    custom: bool
    chunks: list[str] = field(default_factory=list)


class OpenAIResponsesStreamEncoder:
    """Unified events → Responses SSE ``(event, data)`` pairs (see the module docstring)."""

    @property
    def fast_path(self) -> EncoderFastPath:
        """Its own ``text_sse`` and ``text_frame`` (``EncoderFastPath``)."""
        return self

    def __init__(self, defaults: AnswerDefaults = NO_DEFAULTS) -> None:
        self._defaults = defaults
        self._seq = 0
        self._open_text: tuple[list[str | bytes], bytes] | None = None
        """The open text part's chunks and the head of a delta in it, from ``text_sse`` until
        the next ``feed`` or ``finish``."""
        self._started = False
        self._done = False
        self._same = False
        self._response: JSON = {}
        self._stem = item_suffix(response_id(None))
        self._output: list[JSON | None] = []
        self._message: _Message | None = None
        self._reasoning: _Reasoning | None = None
        self._calls: dict[int, _Call] = {}
        self._call_ids: set[str] = set()
        self._raw_index: dict[int, int] = {}
        """Upstream output_index → ours, for items passed through raw."""
        self._raw_open: set[int] = set()
        self._ids: dict[str, int] = {}
        """Item id → our output_index."""
        self._finish: FinishReason | None = None
        self._finish_raw: str | None = None
        self._finish_response: JSON = {}
        self._ended = False
        self._usage: Usage | None = None

    # ------------------------------------------------------------------ plumbing

    def _emit(self, out: Out, name: str, data: JSON) -> None:
        out.append(_pair(name, {"type": name, **data, "sequence_number": self._seq}))
        self._seq += 1

    def _snapshot(self, status: str) -> JSON:
        response: JSON = {
            "id": response_id(None),
            "object": "response",
            "created_at": self._defaults.created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "model": self._defaults.model,
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": None,
        }
        response.update(self._response)
        response["status"] = status
        return response

    def _start(self, out: Out) -> None:
        if self._started:
            return
        self._started = True
        self._emit(out, "response.created", {"response": self._snapshot("in_progress")})
        self._emit(out, "response.in_progress", {"response": self._snapshot("in_progress")})

    def _new_index(self, item_id: str | None) -> int:
        index = len(self._output)
        self._output.append(None)
        if item_id:
            self._ids[item_id] = index
        return index

    def _item_id(self, prefix: str, extra: JSON) -> str:
        own = _own(extra).get("item_id") if self._same else None
        if isinstance(own, str) and own and own not in self._ids:
            return own
        return f"{prefix}_{self._stem}_{len(self._output)}"

    # ------------------------------------------------------------------ text

    def _open_message(self, extra: JSON, out: Out) -> _Message:
        if self._message is not None:
            return self._message
        self._close_reasoning(out)
        item_id = self._item_id("msg", extra)
        m = self._message = _Message(self._new_index(item_id), item_id)
        item = {"id": m.id, "type": "message", "status": "in_progress", "role": "assistant"}
        self._emit(
            out,
            "response.output_item.added",
            {"output_index": m.index, "item": {**item, "content": []}},
        )
        return m

    def _part_json(self, m: _Message) -> JSON:
        text = join_texts(m.chunks)
        m.chunks[:] = [text]
        if m.kind == "refusal":
            return {"type": "refusal", "refusal": text}
        return {**m.parts[-1], "type": "output_text", "text": text}

    def _close_part(self, m: _Message, out: Out) -> None:
        if m.kind is None:
            return
        part = self._part_json(m)
        where = {"item_id": m.id, "output_index": m.index, "content_index": len(m.parts) - 1}
        if m.kind == "refusal":
            self._emit(out, "response.refusal.done", {**where, "refusal": part["refusal"]})
        else:
            self._emit(
                out, "response.output_text.done", {**where, "text": part["text"], "logprobs": []}
            )
        self._emit(out, "response.content_part.done", {**where, "part": part})
        m.parts[-1] = part
        m.kind = None
        m.chunks = []

    def _text(self, event: TextDelta, out: Out) -> None:
        if not event.text:
            return
        self._start(out)
        m = self._open_message(event.extra, out)
        kind: Literal["text", "refusal"] = "refusal" if _own(event.extra).get("refusal") else "text"
        if m.kind != kind:
            self._close_part(m, out)
            part: JSON = (
                {"type": "refusal", "refusal": ""}
                if kind == "refusal"
                else {"type": "output_text", "text": "", "annotations": []}
            )
            m.parts.append(part)
            m.kind = kind
            self._emit(
                out,
                "response.content_part.added",
                {"item_id": m.id, "output_index": m.index, "content_index": len(m.parts) - 1,
                 "part": part},
            )  # fmt: skip
        m.chunks.append(event.text)
        where = {"item_id": m.id, "output_index": m.index, "content_index": len(m.parts) - 1}
        if kind == "refusal":
            self._emit(out, "response.refusal.delta", {**where, "delta": event.text})
        else:
            self._emit(
                out, "response.output_text.delta", {**where, "delta": event.text, "logprobs": []}
            )

    def _close_message(self, out: Out, status: str = "completed") -> None:
        m = self._message
        if m is None:
            return
        self._message = None
        self._close_part(m, out)
        item = {
            "id": m.id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": m.parts,
        }
        self._output[m.index] = item
        self._emit(out, "response.output_item.done", {"output_index": m.index, "item": item})

    # ------------------------------------------------------------------ thinking

    def _open_reasoning(self, extra: JSON, out: Out) -> _Reasoning:
        if self._reasoning is not None:
            return self._reasoning
        self._close_message(out)
        item_id = self._item_id("rs", extra)
        r = self._reasoning = _Reasoning(self._new_index(item_id), item_id)
        self._emit(
            out,
            "response.output_item.added",
            {"output_index": r.index, "item": {"id": r.id, "type": "reasoning", "summary": []}},
        )
        return r

    def _close_summary(self, r: _Reasoning, out: Out) -> None:
        if not r.open:
            return
        r.open = False
        text = "".join(r.chunks)
        r.chunks = []
        r.summary.append(text)
        where = {"item_id": r.id, "output_index": r.index, "summary_index": len(r.summary) - 1}
        self._emit(out, "response.reasoning_summary_text.done", {**where, "text": text})
        part = {"type": "summary_text", "text": text}
        self._emit(out, "response.reasoning_summary_part.done", {**where, "part": part})

    def _thinking(self, event: ThinkingDelta, out: Out) -> None:
        own = _own(event.extra)
        if not event.text and not event.signature and not (self._same and own.get("item")):
            return
        self._start(out)
        r = self._open_reasoning(event.extra, out)
        if self._same and isinstance(own.get("item"), dict):
            r.stored = own["item"]
        if own.get("summary_break"):
            self._close_summary(r, out)  # the next text opens the next summary part
        elif event.text:
            where = {"item_id": r.id, "output_index": r.index, "summary_index": len(r.summary)}
            if not r.open:
                r.open = True
                part = {"type": "summary_text", "text": ""}
                self._emit(out, "response.reasoning_summary_part.added", {**where, "part": part})
            r.chunks.append(event.text)
            self._emit(out, "response.reasoning_summary_text.delta", {**where, "delta": event.text})
        if event.signature:
            r.signature = event.signature

    def _close_reasoning(self, out: Out) -> None:
        r = self._reasoning
        if r is None:
            return
        self._reasoning = None
        self._close_summary(r, out)
        item: JSON = {
            "id": r.id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": t} for t in r.summary],
        }
        if r.stored is not None:
            item = {**r.stored, "id": r.id}
        if r.signature:
            item["encrypted_content"] = r.signature
        self._output[r.index] = item
        self._emit(out, "response.output_item.done", {"output_index": r.index, "item": item})

    # ------------------------------------------------------------------ tool calls

    def _tool_start(self, event: ToolCallStart, out: Out) -> None:
        if event.index in self._calls:  # a repeated start: keep the first, use its fragment
            if event.arguments:
                self._tool_args(ToolCallArgsDelta(event.index, event.arguments), out)
            return
        self._start(out)
        self._close_message(out)
        self._close_reasoning(out)
        call_id = event.id
        if not call_id or call_id in self._call_ids:
            # Calls are told apart by call_id (the SDK refuses two items with one call_id).
            call_id = f"call_{self._stem}_{len(self._output)}"
        self._call_ids.add(call_id)
        item_id = self._item_id("ctc" if event.custom else "fc", event.extra)
        index = self._new_index(item_id)
        item: JSON = {"id": item_id, "type": "custom_tool_call" if event.custom else "function_call",
                      "status": "in_progress", "call_id": call_id, "name": event.name}  # fmt: skip
        item["input" if event.custom else "arguments"] = ""
        self._calls[event.index] = _Call(index, item, event.custom)
        self._emit(out, "response.output_item.added", {"output_index": index, "item": dict(item)})
        if event.arguments:
            self._tool_args(ToolCallArgsDelta(event.index, event.arguments), out)

    def _tool_args(self, event: ToolCallArgsDelta, out: Out) -> None:
        call = self._calls.get(event.index)
        if call is None or not event.delta or call.item["status"] != "in_progress":
            return  # never started, or already done: nothing to address it to
        call.chunks.append(event.delta)
        name = (
            "response.custom_tool_call_input.delta"
            if call.custom
            else "response.function_call_arguments.delta"
        )
        self._emit(
            out,
            name,
            {"item_id": call.item["id"], "output_index": call.index, "delta": event.delta},
        )

    def _tool_end(self, index: int, out: Out, status: str = "completed") -> None:
        call = self._calls.get(index)
        if call is None or call.item["status"] != "in_progress":
            return
        text = "".join(call.chunks)
        where = {"item_id": call.item["id"], "output_index": call.index}
        if call.custom:
            self._emit(out, "response.custom_tool_call_input.done", {**where, "input": text})
            call.item["input"] = text
        else:
            self._emit(out, "response.function_call_arguments.done", {**where, "arguments": text})
            call.item["arguments"] = text
        call.item["status"] = status
        self._output[call.index] = dict(call.item)
        self._emit(
            out, "response.output_item.done", {"output_index": call.index, "item": call.item}
        )

    # ------------------------------------------------------------------ raw events

    def _raw(self, data: JSON, out: Out) -> None:
        kind = data.get("type")
        if (
            not isinstance(kind, str)
            or kind in _TERMINAL
            or kind in ("response.created", "response.in_progress")
        ):
            return
        self._start(out)
        payload = {k: v for k, v in data.items() if k not in ("type", "sequence_number")}
        upstream = payload.get("output_index")
        item = payload.get("item")
        if kind == "response.output_item.added" and isinstance(upstream, int):
            self._close_message(out)
            self._close_reasoning(out)
            item_id = item.get("id") if isinstance(item, dict) else None
            index = self._raw_index[upstream] = self._new_index(
                item_id if isinstance(item_id, str) else None
            )
            self._output[index] = item if isinstance(item, dict) else {}
            self._raw_open.add(index)
            payload["output_index"] = index
        elif isinstance(upstream, int):
            item_id = payload.get("item_id")
            index = self._raw_index.get(
                upstream, self._ids.get(item_id, upstream) if isinstance(item_id, str) else upstream
            )
            payload["output_index"] = index
            if kind == "response.output_item.done":
                if index not in self._raw_open:
                    return  # an item of ours ends with our own done event
                self._raw_open.discard(index)
                if isinstance(item, dict):
                    self._output[index] = item
            elif kind == "response.output_text.annotation.added":
                m = self._message
                if m is None or m.index != index or m.kind != "text":
                    return  # its text went elsewhere: an annotation pointing nowhere is dropped
                payload["item_id"] = m.id
                payload["content_index"] = len(m.parts) - 1
                annotation = payload.get("annotation")
                if annotation is not None:
                    m.parts[-1].setdefault("annotations", []).append(annotation)
        self._emit(out, kind, payload)

    def _close_raw(self, out: Out) -> None:
        for index in sorted(self._raw_open):
            item = self._output[index] or {}
            self._emit(out, "response.output_item.done", {"output_index": index, "item": item})
        self._raw_open.clear()

    # ------------------------------------------------------------------ events

    text_frame: tuple[bytes, bytes] | None = None
    """Never one: each delta has its own sequence number (``StreamEncoder``)."""

    def text_sse(self, text: str | None, quoted: bytes | None = None) -> bytes | None:
        """``feed(TextDelta(text))`` as SSE bytes while a text part is open (``StreamEncoder``)."""
        known = self._open_text
        if known is None:
            m = self._message
            if self._done or not self._started or m is None or m.kind != "text":
                return None
            head, part = m.text_head, len(m.parts) - 1
            if head[0] != part:
                head = m.text_head = (part, _TEXT_HEAD % (dumpb(m.id), m.index, part))
            known = self._open_text = (m.chunks, head[1])
        if text is not None:
            known[0].append(text)
        elif quoted is not None:
            known[0].append(quoted)
        else:
            return None
        seq = self._seq
        self._seq = seq + 1
        return known[1] + (dumpb(text) if quoted is None else quoted) + _TEXT_TAIL % seq

    def feed(self, event: Event) -> Out:
        out: Out = []
        self._open_text = None
        if self._done:
            return out
        match event:
            case MessageStart():
                if self._started:
                    # The upstream started over (a retry spliced into the stream): what it
                    # sent so far stays, cut; the new message's blocks become new items.
                    # (A call item must be done before a response completes: the SDK's
                    # stream refuses it otherwise. With argument repair, an unended call
                    # never gets here: the repair stage drops it.)
                    self._close_all(out, "incomplete")
                    self._calls = {}
                    return out
                self._same = event.origin == NAME
                if self._same and event.envelope:
                    self._response = {
                        k: v for k, v in event.envelope.items() if k not in _RESPONSE_OWN
                    }
                else:
                    self._response = {
                        "id": response_id(event.id),
                        "model": event.model or self._defaults.model,
                    }
                    if event.created is not None:
                        self._response["created_at"] = event.created
                self._stem = item_suffix(str(self._response.get("id", "")))
                self._start(out)
            case TextDelta():
                self._text(event, out)
            case ThinkingDelta():
                self._thinking(event, out)
            case ToolCallStart():
                self._tool_start(event, out)
            case ToolCallArgsDelta():
                self._tool_args(event, out)
            case ToolCallEnd():
                self._tool_end(event.index, out)
            case UsageEvent():
                self._usage = _merge_usage(self._usage, event.usage)
            case Finish():
                self._finish, self._finish_raw = event.reason, event.raw
                response = _own(event.extra).get("response")
                if self._same and isinstance(response, dict):
                    self._finish_response = {
                        k: v for k, v in response.items() if k not in _RESPONSE_OWN
                    }
            case StreamError():
                self._fail(event, out)
            case RawEvent():
                if event.origin == NAME:
                    self._raw(event.data, out)
            case StreamEnd():
                self._ended = True
                out.extend(self.finish())
        return out

    def _close_all(self, out: Out, status: str, calls: bool = True) -> None:
        """Close every open item; without ``calls`` (a failed answer), a call item still open
        never ended: it gets no ``.done`` events and stays out of the output (a client runs a
        ``function_call`` item at its ``output_item.done``)."""
        self._close_message(out, status)
        self._close_reasoning(out)
        for index in list(self._calls):
            if calls:
                self._tool_end(index, out, status)
        self._close_raw(out)

    def _final(self, status: str) -> JSON:
        response = self._snapshot(status)
        response.update(self._finish_response)
        response["status"] = status
        response["output"] = [item for item in self._output if item is not None]
        response["usage"] = encode_usage(self._usage)
        return response

    def _fail(self, event: StreamError, out: Out) -> None:
        self._start(out)
        self._close_all(out, "incomplete", calls=False)
        code = failed_code(event.http_status)
        if event.origin == NAME and event.raw.get("type") == "error":
            raw = {k: v for k, v in event.raw.items() if k not in ("type", "sequence_number")}
            self._emit(out, "error", raw)
            raw_code = raw.get("code")
            code = raw_code if isinstance(raw_code, str) else code
        response = self._final("failed")
        upstream = event.raw.get("response") if event.origin == NAME else None
        error = upstream.get("error") if isinstance(upstream, dict) else None
        response["error"] = (
            error if isinstance(error, dict) else {"code": code, "message": event.message}
        )
        self._emit(out, "response.failed", {"response": response})
        self._done = True

    def finish(self) -> Out:
        self._open_text = None
        if self._done:
            return []
        out: Out = []
        if (self._finish is None and not self._ended) or self._finish == "error":
            message = (
                _CUT if self._finish is None else "the upstream ended the answer with an error"
            )
            self._fail(StreamError(message, "server_error"), out)
            return out
        self._done = True
        self._start(out)
        self._close_all(out, "completed")
        incomplete: JSON | None = None
        if self._finish in ("length", "content_filter"):
            reason = "max_output_tokens" if self._finish == "length" else "content_filter"
            if self._same and self._finish_raw in ("max_output_tokens", "content_filter"):
                reason = str(self._finish_raw)
            incomplete = {"reason": reason}
        response = self._final("incomplete" if incomplete else "completed")
        response["incomplete_details"] = incomplete
        name = "response.incomplete" if incomplete else "response.completed"
        self._emit(out, name, {"response": response})
        return out


def _merge_usage(old: Usage | None, new: Usage) -> Usage:
    """Anthropic reports input tokens at the start and output tokens at the end: keep both."""
    if old is None or old.origin != new.origin:
        return new
    return Usage(
        input_tokens=new.input_tokens if new.input_tokens is not None else old.input_tokens,
        output_tokens=new.output_tokens if new.output_tokens is not None else old.output_tokens,
        total_tokens=new.total_tokens if new.total_tokens is not None else old.total_tokens,
        origin=new.origin,
        raw={**old.raw, **new.raw},
    )


# --------------------------------------------------------------------------- decoder


@dataclass(slots=True)
class _Item:
    kind: str
    id: str | None
    call: int | None = None
    """The unified index of a call item."""
    streamed: bool = False
    """Whether deltas carried its text / arguments (else a .done event carries them)."""
    flagged: bool = False
    """Whether its id went out on a first delta already."""


class OpenAIResponsesStreamDecoder:
    """Responses upstream SSE → unified events (see the module docstring)."""

    fast_path: None = None
    """Nothing for the fast path (``StreamDecoder``, ``StreamEncoder``)."""

    def __init__(self) -> None:
        self._items: dict[int, _Item] = {}
        self._open_calls: list[int] = []
        self._calls = 0
        self._ended = False

    def feed(self, data: str, event: str | None) -> list[Event]:
        if data.strip() == "[DONE]":  # some gateways end Responses streams the chat way
            if self._ended:
                return []
            self._ended = True
            return [*self._end_calls(), StreamEnd()]
        try:
            payload: Any = loads(data)
        except ValueError as e:
            raise UnsupportedShape(f"Responses event is not JSON: {data[:60]!r}") from e
        if not isinstance(payload, dict):
            raise UnsupportedShape("Responses event is not an object")
        kind = payload.get("type", event)
        index = payload.get("output_index")
        item = self._items.get(index) if isinstance(index, int) else None
        match kind:
            case "response.created":
                return self._created(payload)
            case "response.in_progress" | "response.queued":
                return []
            case "response.output_item.added":
                return self._added(payload)
            case "response.output_item.done":
                return self._item_done(payload)
            case "response.content_part.added" | "response.content_part.done":
                part = payload.get("part")
                if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                    return []
                return [RawEvent(NAME, payload)]
            case "response.output_text.delta" | "response.refusal.delta":
                refusal = kind == "response.refusal.delta"
                return self._text(item, str(payload.get("delta", "")), refusal)
            case "response.output_text.done" | "response.refusal.done":
                if item is None or item.streamed:
                    return []
                refusal = kind == "response.refusal.done"
                return self._text(
                    item, str(payload.get("refusal" if refusal else "text", "")), refusal
                )
            case "response.reasoning_summary_part.added":
                summary_index = payload.get("summary_index")
                if isinstance(summary_index, int) and summary_index > 0:
                    return [ThinkingDelta("\n\n", extra={NAME: {"summary_break": True}})]
                return []
            case "response.reasoning_summary_text.delta" | "response.reasoning_text.delta":
                return self._thinking(item, str(payload.get("delta", "")))
            case "response.reasoning_summary_text.done" | "response.reasoning_text.done":
                if item is None or item.streamed:
                    return []
                return self._thinking(item, str(payload.get("text", "")))
            case "response.reasoning_summary_part.done":
                return []
            case "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta":
                if item is None or item.call is None:
                    return [RawEvent(NAME, payload)]
                item.streamed = True
                delta = payload.get("delta")
                return (
                    [ToolCallArgsDelta(item.call, delta)]
                    if isinstance(delta, str) and delta
                    else []
                )
            case "response.function_call_arguments.done" | "response.custom_tool_call_input.done":
                if item is None or item.call is None:
                    return [RawEvent(NAME, payload)]
                full = payload.get("input" if kind.startswith("response.custom") else "arguments")
                if item.streamed or not isinstance(full, str) or not full:
                    return []
                item.streamed = True
                return [ToolCallArgsDelta(item.call, full)]
            case "response.completed" | "response.incomplete" | "response.failed":
                return self._terminal(kind, payload)
            case "error":
                self._ended = True
                self._open_calls = []  # never ended: no ToolCallEnd for them
                err = payload.get("error")
                err = err if isinstance(err, dict) else payload
                code = err.get("code") or err.get("type")
                return [
                    StreamError(
                        str(err.get("message") or "upstream error"),
                        code if isinstance(code, str) else None,
                        origin=NAME,
                        raw=payload,
                        status=status_of(err.get("code"), err.get("type")),
                    )
                ]
        return [RawEvent(NAME, payload)]

    def _created(self, payload: JSON) -> list[Event]:
        response = payload.get("response")
        if not isinstance(response, dict):
            raise UnsupportedShape("response.created without a response")
        created = response.get("created_at")
        return [
            MessageStart(
                NAME,
                id=response.get("id") if isinstance(response.get("id"), str) else None,
                model=response.get("model") if isinstance(response.get("model"), str) else None,
                created=int(created) if isinstance(created, int | float) else None,
                envelope=response,
            )
        ]

    def _added(self, payload: JSON) -> list[Event]:
        index, item = payload.get("output_index"), payload.get("item")
        if not isinstance(index, int) or not isinstance(item, dict):
            raise UnsupportedShape("response.output_item.added without an index or an item")
        kind = str(item.get("type"))
        item_id = item.get("id") if isinstance(item.get("id"), str) else None
        entry = self._items[index] = _Item(kind, item_id)
        if kind in ("message", "reasoning"):
            return []
        if kind in ("function_call", "custom_tool_call"):
            custom = kind == "custom_tool_call"
            entry.call = self._calls
            self._calls += 1
            self._open_calls.append(entry.call)
            first = item.get("input" if custom else "arguments")
            first = first if isinstance(first, str) else ""
            entry.streamed = bool(first)
            return [
                ToolCallStart(
                    entry.call,
                    str(item.get("call_id") or item_id or ""),
                    str(item.get("name") or ""),
                    first,
                    extra={NAME: {"item_id": item_id}} if item_id else {},
                    custom=custom,
                )
            ]
        return [RawEvent(NAME, payload)]

    def _first(self, item: _Item | None) -> JSON:
        """The item id, on the first delta of an item (the Responses encoder reuses it)."""
        if item is None or item.flagged or item.id is None:
            return {}
        item.flagged = True
        return {"item_id": item.id}

    def _text(self, item: _Item | None, text: str, refusal: bool) -> list[Event]:
        if item is not None:
            item.streamed = True
        if not text:
            return []
        own = self._first(item)
        if refusal:
            own["refusal"] = True
        return [TextDelta(text, extra={NAME: own} if own else {})]

    def _thinking(self, item: _Item | None, text: str) -> list[Event]:
        if item is not None:
            item.streamed = True
        if not text:
            return []
        own = self._first(item)
        return [ThinkingDelta(text, extra={NAME: own} if own else {})]

    def _item_done(self, payload: JSON) -> list[Event]:
        index, item = payload.get("output_index"), payload.get("item")
        if not isinstance(index, int) or not isinstance(item, dict):
            raise UnsupportedShape("response.output_item.done without an index or an item")
        entry = self._items.get(index)
        if entry is None:  # done without added: take the item whole
            self._added({"output_index": index, "item": {**item, "arguments": "", "input": ""}})
            entry = self._items[index]
        out: list[Event] = []
        match entry.kind:
            case "function_call" | "custom_tool_call" if entry.call is not None:
                full = item.get("input" if entry.kind == "custom_tool_call" else "arguments")
                if not entry.streamed and isinstance(full, str) and full:
                    out.append(ToolCallArgsDelta(entry.call, full))
                if entry.call in self._open_calls:
                    self._open_calls.remove(entry.call)
                    out.append(ToolCallEnd(entry.call))
            case "message":
                if not entry.streamed:
                    for part in item.get("content") or []:
                        if isinstance(part, dict):
                            refusal = part.get("type") == "refusal"
                            text = part.get("refusal" if refusal else "text")
                            if isinstance(text, str):
                                out.extend(self._text(entry, text, refusal))
            case "reasoning":
                if not entry.streamed:
                    texts = [
                        s["text"]
                        for s in item.get("summary") or []
                        if isinstance(s, dict) and isinstance(s.get("text"), str)
                    ]
                    out.extend(self._thinking(entry, "\n\n".join(texts)))
                encrypted = item.get("encrypted_content")
                if isinstance(encrypted, str) and encrypted:
                    own = {**self._first(entry), "item": item}
                    out.append(ThinkingDelta("", signature=encrypted, extra={NAME: own}))
            case _:
                out.append(RawEvent(NAME, payload))
        return out

    def _terminal(self, kind: str, payload: JSON) -> list[Event]:
        self._ended = True
        response = payload.get("response")
        response = response if isinstance(response, dict) else {}
        # Calls still open end with a response that ended; a failed one never ended them.
        out: list[Event] = [] if kind == "response.failed" else list(self._end_calls())
        self._open_calls = []
        usage = response.get("usage")
        if isinstance(usage, dict):
            out.append(UsageEvent(decode_usage(usage)))
        if kind == "response.failed":
            err = response.get("error")
            err = err if isinstance(err, dict) else {}
            code = err.get("code")
            message = err.get("message")
            out.append(
                StreamError(
                    message if isinstance(message, str) and message else "the response failed",
                    code if isinstance(code, str) else None,
                    origin=NAME,
                    raw=payload,
                    status=status_of(code),
                )
            )
        else:
            status = response.get("status")
            reason, raw = finish_reason(
                status if isinstance(status, str) else kind.removeprefix("response."),
                response.get("incomplete_details"),
                self._calls > 0,
            )
            top = {k: v for k, v in response.items() if k not in _RESPONSE_OWN}
            out.append(Finish(reason, raw=raw, extra={NAME: {"response": top}}))
        out.append(StreamEnd())
        return out

    def _end_calls(self) -> list[Event]:
        ended: list[Event] = [ToolCallEnd(i) for i in self._open_calls]
        self._open_calls = []
        return ended

    def finish(self) -> list[Event]:
        """A stream that ended without a terminal event, ``[DONE]`` or an error was cut."""
        if self._ended:
            return self._end_calls()
        self._ended = True
        self._open_calls = []  # cut: a call still open never ended (no ToolCallEnd)
        return [StreamError(_CUT, "upstream_cut")]
