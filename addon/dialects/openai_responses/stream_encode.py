"""Unified stream events → OpenAI Responses SSE ``(event name, JSON data)`` pairs.

Contract: sans-IO. ``OpenAIResponsesStreamEncoder`` writes the Responses event sequence, each
payload with ``type`` = its event name and a ``sequence_number`` from 0; ``finish()`` is
idempotent. Each item writes its own events and ``Output`` keeps the numbering
(``stream_items.py``). The rules: docs/dialects/openai_responses.md#streams."""

from __future__ import annotations

from addon.dialects.base import EncoderFastPath
from addon.jsonio import dumpb, dumps
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
    Usage,
    UsageEvent,
)

from .errors import failed_code
from .request import NAME
from .response import answer_response_id, encode_usage, item_suffix, response_id
from .stream import CUT, RESPONSE_OWN
from .stream_items import CallItem, MessageItem, Out, Output, ReasoningItem

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def _pair(name: str, data: JSON) -> tuple[str | None, str]:
    return name, dumps(data)


def _own(extra: JSON) -> JSON:
    value = extra.get(NAME)
    return value if isinstance(value, dict) else {}


_TEXT_HEAD = (
    b"event: response.output_text.delta\ndata: "
    b'{"type":"response.output_text.delta","item_id":%b,"output_index":%d,"content_index":%d,'
    b'"delta":'
)
_TEXT_TAIL = b',"logprobs":[],"sequence_number":%d}\n\n'
"""A text delta in an open text part, as ``MessageItem.text`` and ``encode_pairs`` write it: the
head (the same for every delta of a part), the text as JSON, the tail."""


def _snapshot(defaults: AnswerDefaults, rid: str, own: JSON, status: str) -> JSON:
    """A response object: the defaults (``rid`` its id), then the fields of ``own`` (the
    upstream's)."""
    response: JSON = {
        "id": rid,
        "object": "response",
        "created_at": defaults.created,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": defaults.model,
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
    }
    response.update(_kept(own, response))
    response["status"] = status
    return response


def _kept(own: JSON, response: JSON) -> JSON:
    """The upstream's fields of a response object, but a null in place of one we fill."""
    return {k: v for k, v in own.items() if v is not None or k not in response}


def _incomplete(finish: FinishReason | None, same_raw: str | None) -> JSON | None:
    """The ``incomplete_details`` of an answer that finished so (None: it completed);
    ``same_raw`` a Responses upstream's own reason."""
    if finish not in ("length", "content_filter"):
        return None
    reason = "max_output_tokens" if finish == "length" else "content_filter"
    if same_raw in ("max_output_tokens", "content_filter"):
        reason = str(same_raw)
    return {"reason": reason}


# --------------------------------------------------------------------------- encoder


class OpenAIResponsesStreamEncoder:
    """Unified events → Responses SSE ``(event, data)`` pairs: ``response.created`` /
    ``in_progress``, per output item ``output_item.added`` … ``.done``, then
    ``response.completed`` / ``incomplete`` / ``failed``.

    Words: *item* an output item (``message``, ``reasoning``, ``function_call`` …), addressed
    by ``output_index`` and ``item_id``; *part* a content part of a message; *same* a Responses
    upstream (its ids and fields are kept)."""

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
        self._id = answer_response_id(defaults)
        """The answer's id unless a Responses upstream names one; its items' ids from it."""
        self._output = Output(item_suffix(self._id))
        self._message: MessageItem | None = None
        self._reasoning: ReasoningItem | None = None
        self._calls: dict[int, CallItem] = {}
        self._finish: FinishReason | None = None
        self._finish_raw: str | None = None
        self._finish_response: JSON = {}
        self._ended = False
        self._usage: Usage | None = None

    # ------------------------------------------------------------------ plumbing

    def _emit(self, out: Out, name: str, data: JSON) -> None:
        out.append(_pair(name, {"type": name, **data, "sequence_number": self._seq}))
        self._seq += 1

    def _start(self, out: Out) -> None:
        if self._started:
            return
        self._started = True
        for name in ("response.created", "response.in_progress"):
            response = _snapshot(self._defaults, self._id, self._response, "in_progress")
            self._emit(out, name, {"response": response})

    def _item_id(self, prefix: str, extra: JSON) -> str:
        return self._output.item_id(prefix, _own(extra).get("item_id") if self._same else None)

    # ------------------------------------------------------------------ items

    def _text(self, event: TextDelta, out: Out) -> None:
        if not event.text:
            return
        self._start(out)
        m = self._message
        if m is None:
            self._close_reasoning(out)
            item_id = self._item_id("msg", event.extra)
            m = self._message = MessageItem(self._output.new_index(item_id), item_id)
            m.added(self._emit, out)
        refusal = _own(event.extra).get("refusal")
        m.text(event.text, "refusal" if refusal else "text", self._emit, out)

    def _close_message(self, out: Out, status: str = "completed") -> None:
        m = self._message
        if m is not None:
            self._message = None
            self._output.items[m.index] = m.done(status, self._emit, out)

    def _thinking(self, event: ThinkingDelta, out: Out) -> None:
        own = _own(event.extra)
        if not event.text and not event.signature and not (self._same and own.get("item")):
            return
        self._start(out)
        r = self._reasoning
        if r is None:
            self._close_message(out)
            item_id = self._item_id("rs", event.extra)
            r = self._reasoning = ReasoningItem(self._output.new_index(item_id), item_id)
            r.added(self._emit, out)
        if self._same and isinstance(own.get("item"), dict):
            r.stored = own["item"]
        if own.get("summary_break"):
            r.close_summary(self._emit, out)  # the next text opens the next summary part
        elif event.text:
            r.text(event.text, self._emit, out)
        if event.signature:
            r.signature = event.signature

    def _close_reasoning(self, out: Out) -> None:
        r = self._reasoning
        if r is not None:
            self._reasoning = None
            self._output.items[r.index] = r.done(self._emit, out)

    def _tool_start(self, event: ToolCallStart, out: Out) -> None:
        if event.index in self._calls:  # a repeated start: keep the first, use its fragment
            if event.arguments:
                self._tool_args(ToolCallArgsDelta(event.index, event.arguments), out)
            return
        self._start(out)
        self._close_message(out)
        self._close_reasoning(out)
        call_id = self._output.call_id(event.id)
        item_id = self._item_id("ctc" if event.custom else "fc", event.extra)
        index = self._output.new_index(item_id)
        item: JSON = {"id": item_id, "type": "custom_tool_call" if event.custom else "function_call",
                      "status": "in_progress", "call_id": call_id, "name": event.name}  # fmt: skip
        item["input" if event.custom else "arguments"] = ""
        self._calls[event.index] = CallItem(index, item, event.custom)
        self._emit(out, "response.output_item.added", {"output_index": index, "item": dict(item)})
        if event.arguments:
            self._tool_args(ToolCallArgsDelta(event.index, event.arguments), out)

    def _tool_args(self, event: ToolCallArgsDelta, out: Out) -> None:
        call = self._calls.get(event.index)
        if call is None or not event.delta or not call.open:
            return  # never started, or already done: nothing to address it to
        call.delta(event.delta, self._emit, out)

    def _tool_end(self, index: int, out: Out, status: str = "completed") -> None:
        call = self._calls.get(index)
        if call is not None and call.open:
            self._output.items[call.index] = call.done(status, self._emit, out)

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
        output = self._output
        if kind == "response.output_item.added" and isinstance(upstream, int):
            self._close_message(out)
            self._close_reasoning(out)
            payload["output_index"] = output.raw_added(upstream, item)
        elif isinstance(upstream, int):
            index = payload["output_index"] = output.raw_index_of(upstream, payload.get("item_id"))
            if kind == "response.output_item.done":
                if not output.raw_done(index, item):
                    return  # an item of ours ends with our own done event
            elif kind == "response.output_text.annotation.added":
                m = self._message
                if m is None or not m.annotate(index, payload):
                    return  # its text went elsewhere: an annotation pointing nowhere is dropped
        self._emit(out, kind, payload)

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
                        k: v for k, v in event.envelope.items() if k not in RESPONSE_OWN
                    }
                    if not event.id:  # it names none: ours
                        self._response.pop("id", None)
                else:
                    self._response = {"model": event.model or self._defaults.model}
                    if self._same and event.id:
                        self._response["id"] = response_id(event.id)
                    if event.created is not None:
                        self._response["created_at"] = event.created
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
                self._usage = event.usage if self._usage is None else self._usage.then(event.usage)
            case Finish():
                self._finish, self._finish_raw = event.reason, event.raw
                response = _own(event.extra).get("response")
                if self._same and isinstance(response, dict):
                    self._finish_response = {
                        k: v for k, v in response.items() if k not in RESPONSE_OWN
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
        self._output.close_raw(self._emit, out)

    def _final(self, status: str) -> JSON:
        response = _snapshot(self._defaults, self._id, self._response, status)
        response.update(_kept(self._finish_response, response))
        response["status"] = status
        response["output"] = self._output.done()
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
            message = CUT if self._finish is None else "the upstream ended the answer with an error"
            self._fail(StreamError(message, "server_error"), out)
            return out
        self._done = True
        self._start(out)
        self._close_all(out, "completed")
        incomplete = _incomplete(self._finish, self._finish_raw if self._same else None)
        response = self._final("incomplete" if incomplete else "completed")
        response["incomplete_details"] = incomplete
        name = "response.incomplete" if incomplete else "response.completed"
        self._emit(out, name, {"response": response})
        return out
