"""Unified stream events → Anthropic Messages SSE ``(event name, JSON data)`` pairs.

Contract: sans-IO. ``AnthropicStreamEncoder`` writes what the Anthropic API streams;
``finish()`` is idempotent and closes whatever is open. One block is open at a time, as with
Anthropic; a parallel call whose fragments interleave with the open call's is held back until
that call is complete, because Claude Code reads a tool block's input at its stop."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, assert_never

from addon import jsonio
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

from .errors import error_body
from .ids import to_anthropic
from .request import NAME
from .response import answer_message_id, stop_reason, usage_fields

type Out = list[tuple[str | None, str]]
type BlockKind = Literal["text", "thinking", "tool", "raw"]


def _pair(name: str, data: JSON) -> tuple[str | None, str]:
    return name, dumps(data)


def _message_start(
    defaults: AnswerDefaults, message_id: str, message: JSON
) -> tuple[str | None, str]:
    """``message_start``: the defaults, overridden by the upstream message's own fields (an id
    only when it names one)."""
    full: JSON = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": defaults.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    full.update(message)
    if not full["id"] or not isinstance(full["id"], str):
        full["id"] = message_id
    return _pair("message_start", {"type": "message_start", "message": full})


def _delta(index: int, delta: JSON) -> tuple[str | None, str]:
    return _pair(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def _args(index: int, fragment: str) -> tuple[str | None, str]:
    return _delta(index, {"type": "input_json_delta", "partial_json": fragment})


def _message_delta(reason: str, u: Usage | None, extra: JSON | None) -> tuple[str | None, str]:
    """``message_delta``: stop reason and usage; ``extra`` the Anthropic upstream's own fields
    (``Finish.extra``) on an Anthropic → Anthropic route."""
    usage: JSON
    if u is not None and u.origin == NAME and u.raw:
        usage = dict(u.raw)
        usage.setdefault("output_tokens", 0)
    else:
        # The counts another dialect gave, only those: the SDK keeps message_start's where
        # message_delta says nothing (output_tokens is required).
        usage = {"output_tokens": 0, **(usage_fields(u) if u else {})}
    delta: JSON = {"stop_reason": reason, "stop_sequence": None}
    event: JSON = {"type": "message_delta", "delta": delta, "usage": usage}
    if extra is not None:
        delta.update(extra.get("delta", {}))
        event.update(extra.get("event", {}))
    return _pair("message_delta", event)


_TEXT_HEAD = (
    b"event: content_block_delta\ndata: "
    b'{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":'
)
_TEXT_TAIL = b"}}\n\n"
"""A text delta in an open text block, as ``_delta`` and ``encode_pairs`` write it: the head
(the same for every delta of a block), the text as JSON, the tail."""

_STRUCTURAL = re.compile(r'["\\{}\[\]]')
"""The characters that change a JSON text's nesting: quotes, backslashes, brackets."""


@dataclass(slots=True)
class _Call:
    """A tool call of the answer, by unified index.

    Whether its arguments are complete is followed incrementally (nesting depth,
    inside a string or not), scanning each fragment once and only when asked
    (a call that starts while this one is open): never a re-parse of everything
    received, which interleaving upstreams would make quadratic.
    """

    id: str
    name: str
    wire: JSON
    """Fields of an Anthropic tool_use block the model does not know (``caller``)."""
    parts: list[str] = field(default_factory=list)
    """Argument fragments received so far (kept as a list: joining per fragment is quadratic)."""
    block: int | None = None
    """Its block index once sent; None while held back."""
    ended: bool = False
    depth: int = 0
    opened: bool = False
    in_string: bool = False
    escape: bool = False
    blank: bool = True
    unscanned: list[str] = field(default_factory=list)

    def add(self, fragment: str) -> None:
        self.parts.append(fragment)
        self.unscanned.append(fragment)

    def _scan(self, fragment: str) -> None:
        if self.blank and fragment.strip():
            self.blank = False
        skip = 0
        if self.escape and fragment:
            self.escape, skip = False, 1
        for m in _STRUCTURAL.finditer(fragment, skip):
            pos = m.start()
            if pos < skip:
                continue
            c = m.group()
            if self.in_string:
                if c == "\\":
                    if pos + 1 >= len(fragment):
                        self.escape = True
                    skip = pos + 2
                elif c == '"':
                    self.in_string = False
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
                self.opened = True
            else:
                self.depth -= 1

    def arguments(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""

    def complete(self) -> bool:
        """Ended, or its arguments are a whole JSON value (no more fragments can follow)."""
        if self.ended:
            return True
        for fragment in self.unscanned:
            self._scan(fragment)
        self.unscanned.clear()
        if self.opened:
            return self.depth <= 0 and not self.in_string
        if self.blank or self.in_string:
            return False
        try:  # a bare scalar (not an object): rare, parse it
            jsonio.loads(self.arguments())
        except ValueError:
            return False
        return True


class AnthropicStreamEncoder:
    """Unified events → Anthropic SSE ``(event, data)`` pairs: ``message_start``; per content
    block ``content_block_start`` / ``_delta`` / ``_stop``; then ``message_delta`` (stop
    reason, usage) and ``message_stop``. The rules: docs/dialects/anthropic.md#streams.

    Words: *block* an Anthropic content block, by our own index; *held* a call not yet sent;
    *live* the call whose block is open."""

    @property
    def fast_path(self) -> EncoderFastPath:
        """Its own ``text_sse`` and ``text_frame`` (``EncoderFastPath``)."""
        return self

    def __init__(self, defaults: AnswerDefaults = NO_DEFAULTS) -> None:
        self._defaults = defaults
        self._id = answer_message_id(defaults)
        """The answer's id unless an Anthropic upstream names one (``new_message_id``)."""
        self._done = False
        self._text_head: tuple[int, tuple[bytes, bytes]] = (-1, (b"", b""))
        """The block index and the frame of a text delta event in it (``_TEXT_HEAD``,
        ``_TEXT_TAIL``) for ``text_sse``; it depends on nothing else."""
        self.text_frame: tuple[bytes, bytes] | None = None
        """That frame from ``text_sse`` until the next ``feed`` (``StreamEncoder``)."""
        self._reset()

    def _reset(self) -> None:
        self._started = False
        self._same = False
        self._message: JSON = {}
        self._next_index = 0
        self._open: tuple[BlockKind, int] | None = None
        """The open block: its kind and index."""
        self._live: int | None = None
        """The unified index of the tool call whose block is open."""
        self._calls: dict[int, _Call] = {}
        self._held: list[int] = []
        """Unified indexes of tool calls held back, in the order they started."""
        self._raw_blocks: dict[int, int] = {}
        """Upstream index → our index, for raw (Anthropic-only) blocks."""
        self._finish: FinishReason | None = None
        self._finish_raw: str | None = None
        self._finish_extra: JSON = {}
        self._usage: Usage | None = None

    # ------------------------------------------------------------------ blocks

    def _start(self, out: Out) -> None:
        if self._started:
            return
        self._started = True
        out.append(_message_start(self._defaults, self._id, self._message))

    def _close(self, out: Out) -> None:
        if self._open is not None:
            out.append(
                _pair("content_block_stop", {"type": "content_block_stop", "index": self._open[1]})
            )
            self._open = None
            self._live = None

    def _open_block(self, kind: BlockKind, block: JSON, out: Out) -> int:
        self._start(out)
        self._close(out)
        index = self._next_index
        self._next_index += 1
        self._open = (kind, index)
        out.append(
            _pair(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
        )
        return index

    def _ensure(self, kind: Literal["text", "thinking"], extra: JSON, out: Out) -> int:
        if self._open is not None and self._open[0] == kind:
            return self._open[1]
        self._flush_tools(out)
        block: JSON = (
            {"type": "text", "text": ""}
            if kind == "text"
            else {"type": "thinking", "thinking": "", "signature": ""}
        )
        if self._same:  # the upstream block's own fields (e.g. citations); its text comes as deltas
            block = {**block, **extra.get(NAME, {}).get("block", {}), kind: ""}
        return self._open_block(kind, block, out)

    # ------------------------------------------------------------------ tool calls

    def _send_call(self, index: int, out: Out) -> None:
        """Open the block of a call (held back until now): start, buffered arguments."""
        call = self._calls[index]
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}, **call.wire}
        call.block = self._open_block("tool", block, out)
        self._live = index
        arguments = call.arguments()
        if arguments:
            out.append(_args(call.block, arguments))

    def _live_complete(self) -> bool:
        if self._live is None:
            return True
        return self._calls[self._live].complete()

    def _advance(self, out: Out) -> None:
        """Send held-back calls while the open call is complete (each one becomes the open one)."""
        while self._held and self._live_complete():
            self._send_call(self._held.pop(0), out)
        if self._live is not None and self._calls[self._live].ended:
            self._close(out)

    def _flush_tools(self, out: Out) -> None:
        """Close the open tool block and send every held-back call whole (a non-tool block comes)."""
        if self._open is not None and self._open[0] == "tool":
            self._close(out)
        while self._held:
            self._send_call(self._held.pop(0), out)
            self._close(out)

    def _tool_start(self, event: ToolCallStart, out: Out) -> None:
        if event.index in self._calls:  # a repeated start: keep the first, use its fragment
            if event.arguments:
                self._tool_args(ToolCallArgsDelta(event.index, event.arguments), out)
            return
        wire = event.extra.get(NAME, {}) if self._same else {}
        call = self._calls[event.index] = _Call(to_anthropic(event.id), event.name, wire)
        if event.arguments:
            call.add(event.arguments)
        if self._live is not None and not self._live_complete():
            self._held.append(event.index)  # interleaving upstream: hold this call back
            return
        self._flush_tools(out)
        self._send_call(event.index, out)

    def _tool_args(self, event: ToolCallArgsDelta, out: Out) -> None:
        call = self._calls.get(event.index)
        if call is None or not event.delta:
            return  # a fragment of a call never started: nothing to address it to
        call.add(event.delta)
        if call.block is None:
            return  # held back: sent with its start
        if self._live != event.index and not event.delta.strip():
            return  # whitespace after the block closed changes nothing
        out.append(_args(call.block, event.delta))
        if self._live == event.index and self._held:
            self._advance(out)

    def _tool_end(self, event: ToolCallEnd, out: Out) -> None:
        call = self._calls.get(event.index)
        if call is None or call.ended:
            return
        call.ended = True
        if self._live == event.index:
            self._close(out)
            self._advance(out)

    # ------------------------------------------------------------------ raw blocks

    def _raw(self, data: JSON, out: Out) -> None:
        kind = data.get("type")
        if not isinstance(kind, str):
            return
        upstream = data.get("index")
        if kind == "content_block_start" and isinstance(upstream, int):
            self._flush_tools(out)
            block = data.get("content_block")
            self._raw_blocks[upstream] = self._open_block(
                "raw", block if isinstance(block, dict) else {}, out
            )
            return
        if kind in ("content_block_delta", "content_block_stop") and isinstance(upstream, int):
            index = self._raw_blocks.get(upstream)
            if index is None:
                # A block decoded into unified events: a delta the model does not know
                # (citations_delta) or the end of a text/thinking block. Anthropic has one
                # block open at a time, so it is the block open now. (Tool blocks end with
                # ToolCallEnd.)
                if self._open is None or self._open[0] not in ("text", "thinking"):
                    return
                index = self._open[1]
            if kind == "content_block_stop":
                if self._open is not None and self._open[1] == index:
                    self._close(out)
                return
            out.append(_pair(kind, {**data, "index": index}))
            return
        self._start(out)
        out.append(_pair(kind, data))

    # ------------------------------------------------------------------ events

    def text_sse(self, text: str | None, quoted: bytes | None = None) -> bytes | None:
        """``feed(TextDelta(text))`` as SSE bytes while a text block is open (``StreamEncoder``)."""
        block = self._open
        if self._done or block is None or block[0] != "text":
            return None
        known = self._text_head
        if known[0] != block[1]:
            known = self._text_head = (block[1], (_TEXT_HEAD % block[1], _TEXT_TAIL))
        frame = self.text_frame = known[1]
        return frame[0] + (dumpb(text) if quoted is None else quoted) + frame[1]

    def feed(self, event: Event) -> Out:
        out: Out = []
        self.text_frame = None
        if self._done:
            return out
        match event:
            case MessageStart():
                if self._started:
                    # A second message_start: the upstream started over (a retry spliced into
                    # the stream, see anthropic-…-spliced-EDGECASE). Mirror it: the client
                    # then treats the partial first message as it would from Anthropic.
                    self._flush_tools(out)
                    self._close(out)
                    self._reset()
                self._same = event.origin == NAME
                if self._same:
                    self._message = dict(event.envelope)
                else:
                    self._message = {"model": event.model or self._defaults.model}
                self._start(out)
            case TextDelta():
                if event.text:
                    index = self._ensure("text", event.extra, out)
                    out.append(_delta(index, {"type": "text_delta", "text": event.text}))
            case ThinkingDelta():
                if event.text or event.signature:
                    index = self._ensure("thinking", event.extra, out)
                    if event.text:
                        delta = {"type": "thinking_delta", "thinking": event.text}
                        out.append(_delta(index, delta))
                    if event.signature:
                        delta = {"type": "signature_delta", "signature": event.signature}
                        out.append(_delta(index, delta))
            case ToolCallStart():
                self._tool_start(event, out)
            case ToolCallArgsDelta():
                self._tool_args(event, out)
            case ToolCallEnd():
                self._tool_end(event, out)
            case UsageEvent():
                usage = event.usage
                if usage.origin != NAME and self._usage is not None:
                    usage = self._usage.then(usage)  # its own dialect's: each as it came
                self._usage = usage
            case Finish():
                self._finish, self._finish_raw = event.reason, event.raw
                self._finish_extra = dict(event.extra.get(NAME, {}))
            case StreamError():
                error: JSON = (
                    event.raw
                    if event.origin == NAME and event.raw
                    else error_body(event.message, event.http_status)
                )
                out.append(_pair("error", error))
                self._done = True  # Anthropic ends a stream with its error event
            case RawEvent():
                if event.origin == NAME:
                    self._raw(event.data, out)
            case StreamEnd():
                out.extend(self.finish())
            case _:
                assert_never(event)
        return out

    def finish(self) -> Out:
        self.text_frame = None
        if self._done:
            return []
        self._done = True
        out: Out = []
        self._start(out)
        # An upstream cut at max_tokens leaves its last block without content_block_stop
        # (recording anthropic-…-tool_use-truncated-max_tokens-padded): closed here.
        self._flush_tools(out)
        self._close(out)
        reason = stop_reason(self._finish, self._finish_raw, self._same)
        extra = self._finish_extra if self._same else None
        out.append(_message_delta(reason, self._usage, extra))
        out.append(_pair("message_stop", {"type": "message_stop"}))
        return out
