"""Unified stream events → OpenAI ``chat.completion.chunk`` SSE ``(event, data)`` pairs.

Contract: sans-IO. ``OpenAIChatStreamEncoder`` stamps the envelope (``id``, ``created``,
``model``, ``system_fingerprint``) on every chunk and, on an OpenAI → OpenAI route, puts back
the fields the decoder kept in ``extra["wire"]``. Tool-call argument fragments are never
merged or re-split. The decoder is ``stream.py``."""

from __future__ import annotations

from addon.dialects.base import EncoderFastPath, sse_text_frame
from addon.jsonio import dumpb, dumps
from addon.model import (
    JSON,
    NO_DEFAULTS,
    AnswerDefaults,
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
    Usage,
    UsageEvent,
)

from .errors import error_body
from .request import NAME
from .response import answer_completion_id, encode_usage

_NO_EXTRA: JSON = {}


class OpenAIChatStreamEncoder:
    """Unified events → ``chat.completion.chunk`` payloads (and the final ``[DONE]``)."""

    @property
    def fast_path(self) -> EncoderFastPath:
        """Its own ``text_sse`` and ``text_frame`` (``EncoderFastPath``)."""
        return self

    def __init__(self, defaults: AnswerDefaults = NO_DEFAULTS) -> None:
        self._defaults = defaults
        self._envelope: JSON = {
            "id": answer_completion_id(defaults),
            "object": "chat.completion.chunk",
            "created": defaults.created,
            "model": defaults.model,
        }
        self._same = False
        self._done = False
        self._started = False
        self.text_frame: tuple[bytes, bytes] | None = None
        """A text chunk's SSE bytes before and after its content string, once ``text_sse``
        wrote one (``StreamEncoder``); the envelope it holds changes only at ``MessageStart``,
        which forgets it."""
        self._usage: Usage | None = None
        """The counts so far (an upstream may spread them over its stream)."""
        self._failed = False
        """An error went out: no ``[DONE]`` made up at the end (an OpenAI client would take
        the stream for complete); only the upstream's own ``[DONE]`` is passed on."""

    def _chunk(self, delta: JSON | None, extra: JSON, finish: str | None = None) -> str:
        wire: JSON = extra.get("wire", _NO_EXTRA) if self._same else _NO_EXTRA
        chunk: JSON = dict(self._envelope)
        if wire:
            chunk.update(wire.get("chunk", _NO_EXTRA))
        if delta is None:
            chunk["choices"] = []
        else:
            if wire:
                delta.update(wire.get("delta", _NO_EXTRA))
            choice: JSON = {"index": 0, "delta": delta}
            if wire:
                choice.update(wire.get("choice", _NO_EXTRA))
            choice["finish_reason"] = finish
            chunk["choices"] = [choice]
        return dumps(chunk)

    def text_sse(self, text: str | None, quoted: bytes | None = None) -> bytes | None:
        """``feed(TextDelta(text))`` as SSE bytes (``StreamEncoder``)."""
        frame = self.text_frame
        if frame is None:
            # The delta comes after the envelope: the last content is the delta's.
            frame = sse_text_frame(
                self._chunk({"content": ""}, _NO_EXTRA), '"content":""', last=True
            )
            if frame is None:
                return None
            self.text_frame = frame
        return frame[0] + (dumpb(text) if quoted is None else quoted) + frame[1]

    def feed(self, event: Event) -> list[tuple[str | None, str]]:
        match event:
            case MessageStart():
                self.text_frame = None
                self._same = event.origin == NAME
                if self._same:
                    known = {"id": event.id, "model": event.model, "created": event.created}
                    fields = {k: v for k, v in known.items() if v is not None}
                    ours = self._envelope["id"]
                    self._envelope = {**self._envelope, **fields, **event.envelope}
                    if not self._envelope["id"]:  # it names none: ours
                        self._envelope["id"] = ours
                else:
                    self._envelope["model"] = event.model or self._defaults.model
                    self._envelope["created"] = event.created or self._defaults.created
                self._started = True
                return [(None, self._chunk({"role": "assistant"}, event.extra))]
            case TextDelta():
                return [(None, self._chunk({"content": event.text}, event.extra))]
            case ThinkingDelta():
                field = (
                    event.extra.get("field", "reasoning_content")
                    if self._same
                    else "reasoning_content"
                )
                return [(None, self._chunk({field: event.text}, event.extra))]
            case ToolCallStart():
                call = {
                    "index": event.index,
                    "id": event.id,
                    "type": "function",
                    "function": {"name": event.name, "arguments": event.arguments},
                }
                if self._same:
                    call.update({k: v for k, v in event.extra.items() if k != "wire"})
                return [(None, self._chunk({"tool_calls": [call]}, event.extra))]
            case ToolCallArgsDelta():
                call = {"index": event.index, "function": {"arguments": event.delta}}
                if self._same:
                    call.update({k: v for k, v in event.extra.items() if k != "wire"})
                return [(None, self._chunk({"tool_calls": [call]}, event.extra))]
            case ToolCallEnd():
                return []
            case Finish():
                reason = event.raw if self._same and event.raw else _finish_str(event.reason)
                return [(None, self._chunk({}, event.extra, finish=reason))]
            case UsageEvent():
                chunk = dict(self._envelope)
                wire = event.extra.get("wire", _NO_EXTRA) if self._same else _NO_EXTRA
                chunk.update(wire.get("chunk", _NO_EXTRA))
                chunk["choices"] = []
                usage = event.usage
                if usage.origin != NAME:  # its own dialect's usage chunks: each as it came
                    self._usage = usage = usage if self._usage is None else self._usage.then(usage)
                chunk["usage"] = encode_usage(usage)
                return [(None, dumps(chunk))]
            case StreamError():
                self._failed = True
                body = (
                    event.raw
                    if event.origin == NAME and event.raw
                    else error_body(event.message, event.http_status)
                )
                return [(None, dumps(body))]
            case RawEvent():
                if event.origin == NAME:
                    return [(None, dumps(event.data))]
                return []
            case StreamEnd():
                return self._end()

    def finish(self) -> list[tuple[str | None, str]]:
        if self._failed:
            self._done = True
        return self._end()

    def _end(self) -> list[tuple[str | None, str]]:
        if self._done:
            return []
        self._done = True
        return [(None, "[DONE]")]


def _finish_str(reason: str) -> str:
    return "stop" if reason in ("other", "error") else reason
