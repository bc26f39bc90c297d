"""Unified stream events → Gemini streamed chunks, ``(None, JSON)`` pairs, one chunk each.

Contract: sans-IO. ``GeminiStreamEncoder`` (Gemini CLI, ``@google/genai``) sends one chunk per
part; ``CodeAssistStreamEncoder`` wraps each chunk as ``{"response": {…}}``. ``StreamError`` →
an error body, then nothing. The rules: docs/dialects/gemini.md#streams."""

from __future__ import annotations

import dataclasses
from typing import assert_never

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
from .response import (
    PartWriter,
    encode_usage,
    gemini_finish,
)
from .web_search import GROUNDING

type Out = list[tuple[str | None, str]]


def _dumps(data: JSON) -> str:
    return dumps(data)


@dataclasses.dataclass(slots=True)
class _Pending:
    id: str
    name: str
    extra: JSON
    parts: list[str]


class GeminiStreamEncoder:
    """Chunks for a public-API Gemini client: one per text or thought delta, one per call at its
    ``ToolCallEnd`` (arguments parsed into ``args``); signatures go where Gemini wants them
    (``response.PartWriter``); the last chunk carries ``finishReason`` and ``usageMetadata``."""

    @property
    def fast_path(self) -> EncoderFastPath:
        """Its own ``text_sse`` and ``text_frame`` (``EncoderFastPath``)."""
        return self

    _wrapped = False

    def __init__(self, defaults: AnswerDefaults = NO_DEFAULTS) -> None:
        self._defaults = defaults
        self._done = False
        self._same = False
        self._envelope: JSON = {}
        self._wrapper: JSON = {}
        self._writer = PartWriter(False)
        self._calls: dict[int, _Pending] = {}
        self._finish: Finish | None = None
        self._usage: Usage | None = None
        self._grounding: JSON = {}
        self._frame: tuple[bytes, bytes] | None = None
        """A one-text-part chunk's SSE bytes before and after the text (``text_sse``); what it
        holds (envelope, wrapper) changes only at ``MessageStart``, which forgets it."""
        self.text_frame: tuple[bytes, bytes] | None = None
        """That frame from ``text_sse`` until the next ``feed`` (``StreamEncoder``)."""

    def text_sse(self, text: str | None, quoted: bytes | None = None) -> bytes | None:
        """``feed(TextDelta(text))`` as SSE bytes while no thought signature waits for a part
        (``StreamEncoder``)."""
        if self._done or self._writer.pending:
            return None
        frame = self._frame
        if frame is None:
            # The candidates come before the envelope: the first text is the part's.
            frame = sse_text_frame(self._chunk([{"text": ""}])[1], '{"text":""')
            if frame is None:
                return None
            self._frame = frame
        self.text_frame = frame
        return frame[0] + (dumpb(text) if quoted is None else quoted) + frame[1]

    def _chunk(
        self,
        parts: list[JSON],
        extra: JSON | None = None,
        finish: str | None = None,
        usage: JSON | None = None,
        candidate: JSON | None = None,
    ) -> tuple[str | None, str]:
        """One chunk; ``candidate``: fields of the candidate the encoder adds itself (the bridge's
        searches' ``groundingMetadata``)."""
        own: JSON = extra.get(NAME, {}) if self._same and extra else {}
        candidate = dict(candidate or {})
        if parts:
            candidate["content"] = {"role": "model", "parts": parts}
        if finish is not None:
            candidate["finishReason"] = finish
        candidate["index"] = 0
        candidate.update(own.get("candidate", {}))
        body: JSON = {"candidates": [candidate]}
        body.update(own.get("chunk", {}))
        if usage is not None:
            body["usageMetadata"] = usage
        body.update(self._envelope)
        if self._wrapped:
            body = {"response": body, **self._wrapper}
        return None, _dumps(body)

    def _chunks(self, parts: list[JSON], extra: JSON) -> Out:
        """One chunk per part (the first one carries the event's wire extras)."""
        return [self._chunk([p], extra if i == 0 else None) for i, p in enumerate(parts)]

    def _send_call(self, call: _Pending) -> Out:
        parts = self._writer.call(call.id, call.name, "".join(call.parts), call.extra)
        return self._chunks(parts, call.extra)

    def feed(self, event: Event) -> Out:
        self.text_frame = None
        if self._done:
            return []
        match event:
            case MessageStart():
                self._frame = None
                self._same = event.origin == NAME
                self._writer.same = self._same
                if self._same:
                    self._envelope = dict(event.envelope)
                    self._wrapper = dict(event.extra.get(NAME, {}).get("wrapper", {}))
                else:
                    self._envelope = {}
                    if model := event.model or self._defaults.model:
                        self._envelope["modelVersion"] = model
                    if event.id:
                        self._envelope["responseId"] = event.id
                return []
            case TextDelta():
                return self._chunks(self._writer.text(event.text, event.extra), event.extra)
            case ThinkingDelta():
                parts = self._writer.thinking(event.text, event.signature, event.extra)
                return self._chunks(parts, event.extra)
            case ToolCallStart():
                call = self._calls.get(event.index)
                if call is None:
                    self._calls[event.index] = _Pending(
                        event.id, event.name, event.extra, [event.arguments]
                    )
                elif event.arguments:
                    call.parts.append(event.arguments)
                return []
            case ToolCallArgsDelta():
                call = self._calls.get(event.index)
                if call is not None:
                    call.parts.append(event.delta)
                return []
            case ToolCallEnd():
                call = self._calls.pop(event.index, None)
                return self._send_call(call) if call is not None else []
            case UsageEvent():
                usage = event.usage
                if usage.origin != NAME and self._usage is not None:
                    # Another dialect's usage spread over its stream (Anthropic: input at
                    # message_start, output at message_delta): merged.
                    usage = self._usage.then(usage)
                self._usage = usage
                return []
            case Finish():
                self._finish = event
                return []
            case StreamError():
                self._done = True
                if event.origin == NAME and event.raw:
                    body = event.raw.get("response", event.raw)
                    return [(None, _dumps(body if isinstance(body, dict) else event.raw))]
                return [(None, _dumps(error_body(event.message, event.http_status)))]
            case RawEvent():
                if event.origin == NAME and GROUNDING in event.data:
                    self._grounding = event.data  # the bridge's searches: on the last chunk
                    return []
                if event.origin != NAME or not self._same:
                    return []
                part = event.data.get("part")
                if isinstance(part, dict):
                    return [self._chunk([part])]
                return [self._chunk([], {NAME: event.data})]
            case StreamEnd():
                return self.finish()
            case _:
                assert_never(event)

    def finish(self) -> Out:
        self.text_frame = None
        if self._done:
            return []
        self._done = True
        out: Out = []
        for index in sorted(self._calls):  # calls whose end never came are still whole calls
            out += self._send_call(self._calls[index])
        self._calls.clear()
        out += self._chunks(self._writer.flush(), {})
        f = self._finish
        extra = f.extra if f is not None else {}
        reason = gemini_finish(
            f.reason if f is not None else None, f.raw if f is not None else None, self._same, extra
        )
        if self._same and extra.get(NAME, {}).get("recovered"):
            own = extra.get(NAME, {})
            candidate = {k: v for k, v in own.get("candidate", {}).items() if k != "finishMessage"}
            extra = {NAME: {**own, "candidate": candidate}}
        out.append(
            self._chunk([], extra, reason, encode_usage(self._usage), candidate=self._grounding)
        )
        return out


class CodeAssistStreamEncoder(GeminiStreamEncoder):
    """Chunks wrapped as Code Assist sends them (``{"response": {…}}``)."""

    _wrapped = True
