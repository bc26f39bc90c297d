"""OpenAI Responses SSE (a Responses upstream) → unified stream events.

Contract: sans-IO. ``OpenAIResponsesStreamDecoder.feed`` takes one SSE event's data (and name)
and returns unified events; ``finish()`` ends a cut stream. The encoder is ``stream_encode.py``.
A liberal reader, because real servers leave out or add to what OpenAI sends: both, and what
each event becomes, in docs/dialects/openai_responses.md (#what-real-servers-send, #streams)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from addon.jsonio import loads
from addon.model import (
    JSON,
    Event,
    Finish,
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
    UsageEvent,
)

from .errors import status_of
from .request import NAME
from .response import decode_usage, finish_reason

RESPONSE_OWN = frozenset({"output", "usage", "status", "error", "incomplete_details"})
"""Fields of a response object the encoder computes itself (the decoder leaves them out of
``Finish.extra``)."""
CUT = "the upstream stream ended before the answer was complete"
_log = logging.getLogger("cursor_bridge.openai_responses")
_CALLS = ("function_call", "custom_tool_call")


@dataclass(slots=True)
class _Item:
    kind: str
    id: str | None
    index: int
    """The upstream's ``output_index``, or its place in the output when it sent none."""
    call: int | None = None
    """The unified index of a call item."""
    streamed: bool = False
    """Whether deltas carried its text / arguments (else a .done event carries them)."""
    flagged: bool = False
    """Whether its id went out on a first delta already."""
    done: bool = False


class _Book:
    """The upstream's output items so far. An event finds its item by ``output_index``, else by
    ``item_id``, else (no id either) as the last open item of its kind (llama.cpp and LiteLLM
    send no ``output_index``, and only an ``item_id`` on deltas). An id not known is another
    item: never guessed to be the open one."""

    __slots__ = ("by_id", "by_index", "order")

    def __init__(self) -> None:
        self.by_index: dict[int, _Item] = {}
        self.by_id: dict[str, _Item] = {}
        self.order: list[_Item] = []

    def add(self, kind: str, item_id: str | None, index: object) -> _Item:
        if not isinstance(index, int) or isinstance(index, bool):
            index = len(self.order)
            while index in self.by_index:
                index += 1
        entry = self.by_index[index] = _Item(kind, item_id, index)
        if item_id:
            self.by_id[item_id] = entry
        self.order.append(entry)
        return entry

    def find(self, index: object, item_id: object, kinds: tuple[str, ...] = ()) -> _Item | None:
        if isinstance(index, int) and index in self.by_index:
            return self.by_index[index]
        if isinstance(item_id, str) and item_id:
            return self.by_id.get(item_id)
        for entry in reversed(self.order):
            if not entry.done and entry.kind in kinds:
                return entry
        return None


class OpenAIResponsesStreamDecoder:
    """Responses upstream SSE → unified events: text and reasoning deltas, calls (numbered 0,
    1, 2 … as they start), ``response.completed`` / ``incomplete`` → usage, ``Finish``,
    ``StreamEnd``; ``response.failed`` and ``error`` → ``StreamError``; every other event a
    ``RawEvent``. An event finds its item through ``_Book``."""

    fast_path: None = None
    """Nothing for the fast path (``StreamDecoder``, ``StreamEncoder``)."""

    def __init__(self) -> None:
        self._book = _Book()
        self._open_calls: list[int] = []
        self._calls = 0
        self._ended = False
        self._loose: dict[str, list[str]] = {}
        """Argument fragments of an item id no call item is known for (yet)."""
        self._loose_text = False
        """Whether text went out that no item could be found for."""
        self._noted = False

    def feed(self, data: str, event: str | None) -> list[Event]:
        if data.strip() == "[DONE]":  # some gateways end Responses streams the chat way
            if self._ended:
                return []
            self._ended = True
            return [*self._loose_args(), *self._end_calls(), StreamEnd()]
        try:
            payload: Any = loads(data)
        except ValueError as e:
            raise UnsupportedShape(f"Responses event is not JSON: {data[:60]!r}") from e
        if not isinstance(payload, dict):
            raise UnsupportedShape("Responses event is not an object")
        kind = payload.get("type", event)
        if kind is None and isinstance(payload.get("error"), dict):  # chat-style, no event line
            return self._error(payload)
        find = self._book.find
        where = payload.get("output_index"), payload.get("item_id")
        match kind:
            case "response.created":
                return [_message_start(payload)]
            case (
                "response.in_progress" | "response.queued" | "response.reasoning_summary_part.done"
            ):
                return []
            case "response.output_item.added":
                return self._added(payload)
            case "response.output_item.done":
                return self._item_done(payload)
            case "response.content_part.added" | "response.content_part.done":
                part = payload.get("part")
                if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                    return []
            case "response.output_text.delta" | "response.refusal.delta":
                refusal = kind == "response.refusal.delta"
                item = self._placed(find(*where, ("message",)), kind)
                return self._text(item, str(payload.get("delta", "")), refusal)
            case "response.output_text.done" | "response.refusal.done":
                refusal = kind == "response.refusal.done"
                text = str(payload.get("refusal" if refusal else "text", ""))
                item = find(*where, ("message",))
                if item is None and not self._loose_text:
                    return self._text(self._placed(item, kind), text, refusal)
                return [] if item is None or item.streamed else self._text(item, text, refusal)
            case "response.reasoning_summary_part.added":
                summary_index = payload.get("summary_index")
                if isinstance(summary_index, int) and summary_index > 0:
                    return [ThinkingDelta("\n\n", extra={NAME: {"summary_break": True}})]
                return []
            case "response.reasoning_summary_text.delta" | "response.reasoning_text.delta":
                item = self._placed(find(*where, ("reasoning",)), kind)
                return self._thinking(item, str(payload.get("delta", "")))
            case "response.reasoning_summary_text.done" | "response.reasoning_text.done":
                text = str(payload.get("text", ""))
                item = find(*where, ("reasoning",))
                return [] if item is None or item.streamed else self._thinking(item, text)
            case "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta":
                item = find(*where, _CALLS)
                return self._args(item, payload, payload.get("delta"), done=False)
            case "response.function_call_arguments.done" | "response.custom_tool_call_input.done":
                full = payload.get("input" if kind.startswith("response.custom") else "arguments")
                return self._args(find(*where, _CALLS), payload, full, done=True)
            case "response.completed" | "response.incomplete" | "response.failed":
                return self._terminal(kind, payload)
            case "error":
                return self._error(payload)
        return [self._raw(payload, find(*where))]

    def _raw(self, payload: JSON, item: _Item | None) -> RawEvent:
        """An event passed on as it came, with the ``output_index`` of its item when it had
        none (a Responses client needs it)."""
        if item is not None and not isinstance(payload.get("output_index"), int):
            payload = {**payload, "output_index": item.index}
        return RawEvent(NAME, payload)

    def _note(self, what: str) -> None:
        """Once a stream: something the upstream sent that no output item could be found for."""
        if not self._noted:
            self._noted = True
            _log.warning("Responses upstream: %s", what)

    def _placed(self, item: _Item | None, kind: str) -> _Item | None:
        """``item``; when None, the text goes out all the same (noted)."""
        if item is None:
            self._loose_text = True
            self._note(f"{kind} for no known output item (its text is passed on)")
        return item

    def _args(self, item: _Item | None, payload: JSON, text: object, done: bool) -> list[Event]:
        """A call's arguments: a fragment, or (``done``) all of them, used when none streamed.
        Fragments no call item is known for are kept by item id until its ``output_item.done``
        (or the end: then they go out as text)."""
        if item is None or item.call is None:
            item_id = payload.get("item_id")
            if isinstance(text, str) and text:
                key = item_id if isinstance(item_id, str) else ""
                loose = self._loose.setdefault(key, [])
                loose[:] = [text] if done else [*loose, text]
            return []
        given = isinstance(text, str) and bool(text)
        if done and (item.streamed or not given):
            return []
        item.streamed = True
        return [ToolCallArgsDelta(item.call, str(text))] if given else []

    def _error(self, payload: JSON) -> list[Event]:
        self._ended = True
        self._open_calls = []  # never ended: no ToolCallEnd for them
        return [_upstream_error(payload)]

    def _added(self, payload: JSON) -> list[Event]:
        item = payload.get("item")
        if not isinstance(item, dict):
            raise UnsupportedShape("response.output_item.added without an item")
        entry, events = self._open(item, payload.get("output_index"))
        return [self._raw(payload, entry)] if events is None else events

    def _open(self, item: JSON, index: object) -> tuple[_Item, list[Event] | None]:
        """A new output item; its events (None: an item of a kind passed on raw)."""
        kind = str(item.get("type"))
        item_id = item.get("id") if isinstance(item.get("id"), str) else None
        entry = self._book.add(kind, item_id, index)
        if kind in ("message", "reasoning"):
            return entry, []
        if kind in _CALLS:
            custom = kind == "custom_tool_call"
            entry.call = self._calls
            self._calls += 1
            self._open_calls.append(entry.call)
            first = item.get("input" if custom else "arguments")
            first = first if isinstance(first, str) else ""
            entry.streamed = bool(first)
            return entry, [
                ToolCallStart(
                    entry.call,
                    str(item.get("call_id") or item_id or ""),
                    str(item.get("name") or ""),
                    first,
                    extra={NAME: {"item_id": item_id}} if item_id else {},
                    custom=custom,
                )
            ]
        return entry, None

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
        if not isinstance(item, dict):
            raise UnsupportedShape("response.output_item.done without an item")
        entry = self._book.find(index, item.get("id"), (str(item.get("type")),))
        out: list[Event] = []
        if entry is None:  # done without added: take the item whole
            entry, started = self._open({**item, "arguments": "", "input": ""}, index)
            out.extend(started or [])
        entry.done = True
        match entry.kind:
            case "function_call" | "custom_tool_call" if entry.call is not None:
                full = item.get("input" if entry.kind == "custom_tool_call" else "arguments")
                loose = self._loose.pop(entry.id or "", None)
                if not entry.streamed and not (isinstance(full, str) and full) and loose:
                    full = "".join(loose)
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
                out.append(self._raw(payload, entry))
        return out

    def _terminal(self, kind: str, payload: JSON) -> list[Event]:
        self._ended = True
        response = payload.get("response")
        response = response if isinstance(response, dict) else {}
        # Calls still open end with a response that ended; a failed one never ended them.
        out: list[Event] = self._loose_args()
        out += [] if kind == "response.failed" else self._end_calls()
        self._open_calls = []
        usage = response.get("usage")
        if isinstance(usage, dict):
            out.append(UsageEvent(decode_usage(usage)))
        if kind == "response.failed":
            out.append(_failed(payload, response))
        else:
            status = response.get("status")
            reason, raw = finish_reason(
                status if isinstance(status, str) else kind.removeprefix("response."),
                response.get("incomplete_details"),
                self._calls > 0,
            )
            top = {k: v for k, v in response.items() if k not in RESPONSE_OWN}
            out.append(Finish(reason, raw=raw, extra={NAME: {"response": top}}))
        out.append(StreamEnd())
        return out

    def _loose_args(self) -> list[Event]:
        """Argument fragments no call item ever came for: passed on as text (noted)."""
        texts = ["".join(v) for v in self._loose.values() if v]
        self._loose = {}
        if not texts:
            return []
        self._note("call arguments for no known call item (passed on as text)")
        return [TextDelta(t) for t in texts]

    def _end_calls(self) -> list[Event]:
        ended: list[Event] = [ToolCallEnd(i) for i in self._open_calls]
        self._open_calls = []
        return ended

    def finish(self) -> list[Event]:
        """A stream that ended without a terminal event, ``[DONE]`` or an error was cut: a
        ``StreamError``."""
        if self._ended:
            return self._end_calls()
        self._ended = True
        self._open_calls = []  # cut: a call still open never ended (no ToolCallEnd)
        return [StreamError(CUT, "upstream_cut")]


# --------------------------------------------------------------------------- the envelope


def _message_start(payload: JSON) -> MessageStart:
    """``response.created``: its response may hold only ``id``, ``object``, ``status``."""
    response = payload.get("response")
    if not isinstance(response, dict):
        raise UnsupportedShape("response.created without a response")
    created = response.get("created_at")
    return MessageStart(
        NAME,
        id=response.get("id") if isinstance(response.get("id"), str) else None,
        model=response.get("model") if isinstance(response.get("model"), str) else None,
        created=int(created) if isinstance(created, int | float) else None,
        envelope=response,
    )


def _upstream_error(payload: JSON) -> StreamError:
    """An ``error`` event, or a chat-style ``{"error": {…}}`` (llama-server, LiteLLM)."""
    err = payload.get("error")
    err = err if isinstance(err, dict) else payload
    code = err.get("code")  # a number from llama-server and LiteLLM: the type says more
    code = code if isinstance(code, str) and not code.isdigit() else err.get("type")
    return StreamError(
        str(err.get("message") or "upstream error"),
        code if isinstance(code, str) else None,
        origin=NAME,
        raw=payload,
        status=status_of(err.get("code"), err.get("type")),
    )


def _failed(payload: JSON, response: JSON) -> StreamError:
    """``response.failed``: the error its response names."""
    err = response.get("error")
    err = err if isinstance(err, dict) else {}
    code = err.get("code")
    message = err.get("message")
    return StreamError(
        message if isinstance(message, str) and message else "the response failed",
        code if isinstance(code, str) else None,
        origin=NAME,
        raw=payload,
        status=status_of(code),
    )
