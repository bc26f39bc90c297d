"""Gemini streamed answers (one ``GenerateContentResponse`` per event) ↔ unified events.

Contract: sans-IO. The decoder takes the JSON of one chunk at a time — an SSE ``data:`` with
``alt=sse``, an item of the JSON array without it (``addon.stream.framing``) — and returns
unified events; the encoder takes unified events and returns ``(None, JSON)`` pairs, one chunk
each. Both read and write parts the way ``response.py`` does for whole answers (see there for
signatures, ids, finish reasons, malformed calls and usage).

Decoder:

- Public chunks and Code Assist's ``{"response": {…}, "traceId"}`` alike; a chunk holding an
  array (an error body ``[{"error": …}]``) is read item by item. ``MessageStart`` comes from the
  first chunk (``responseId``, ``modelVersion``; ``createTime`` and the Code Assist wrapper
  kept for a Gemini client).
- Text and thought parts become deltas as they come. A call is sent whole — ``ToolCallStart``
  with all its arguments, then ``ToolCallEnd`` — because Gemini sends it whole, except Vertex's
  streamed arguments (``streamFunctionCallArguments``): a ``functionCall {name,
  willContinue: true}`` opens the call, parts ``functionCall {partialArgs: [{jsonPath,
  stringValue | numberValue | boolValue | nullValue, willContinue}], willContinue: true}`` fill
  its arguments (a string continues while its ``willContinue`` says so), and a
  ``functionCall`` without ``willContinue`` (``{}``) closes it. The arguments are assembled
  and sent as one JSON text when the call closes (or a new call starts, or the answer
  finishes): clients get one complete call per function call, never fragments to re-join.
  A call still open when the stream is cut or an error chunk comes never closed: it is not
  sent at all.
  A call's ``thoughtSignature`` is in its ``extra`` and, as a copy, in a signature-only
  ``ThinkingDelta`` just before it (``response.CALL_SIGNATURE``); a text part's signature is a
  signature-only ``ThinkingDelta`` before its text, the trailing empty part's one after all.
- ``usageMetadata`` is repeated on every chunk (Vertex's early ones carry no counts): the last
  one with counts goes out as one ``UsageEvent`` at the end.
- The chunk with ``finishReason`` gives the ``Finish``; Gemini has no ``[DONE]``, so
  ``StreamEnd`` (after the usage) comes from ``finish()`` at the end of the body. A body that
  ends without any finish reason was cut: ``finish()`` then ends with a ``StreamError`` (never
  a made-up clean ending). An error chunk ``{"error": {code, message, status}}`` becomes a
  ``StreamError`` (its ``status`` the type).
- Fields the model does not know (``safetyRatings``, ``groundingMetadata``, ``finishMessage``,
  ``promptFeedback`` …) ride in ``extra[NAME]`` of the chunk's ``Finish``, else of its first
  event, else in a ``RawEvent``; parts the model does not know (``inlineData``,
  ``executableCode`` …) are ``RawEvent``s. Only a Gemini client gets them back.

Encoder (for Gemini CLI and ``@google/genai``):

- One chunk per text or thought delta, one chunk per call, sent at ``ToolCallEnd`` with its
  arguments parsed into ``args`` (Gemini clients read a call from one part); calls never ended
  are sent by ``finish()``. Every part goes in a chunk of its own: Gemini CLI leaves a chunk
  with an empty text part out of its history, whatever else the chunk holds.
- Signatures go back where Gemini wants them (``response.PartWriter``): a call's own
  ``thoughtSignature`` from its ``extra``, a signature-only delta on the next text or call part,
  or at the end as ``{"text": "", "thoughtSignature": …}``.
- The last chunk carries ``finishReason`` and ``usageMetadata`` (no content); a Gemini
  upstream's envelope (``responseId``, ``modelVersion``, ``createTime``) is on every chunk, and
  its unknown fields come back where they were.
- ``StreamError`` → ``{"error": {"code", "message", "status"}}`` (the upstream's own when it
  was Gemini), and nothing after it: the SDK throws on it.
- ``CodeAssistStreamEncoder`` wraps each chunk as ``{"response": {…}}`` (with the upstream's
  ``traceId`` on a Code Assist route); errors are not wrapped.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, assert_never

from addon.dialects.base import EncoderFastPath, sse_text_frame
from addon.jsonio import dumpb, dumps, loads
from addon.jsonio import loads as strict_json
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
    UnsupportedShape,
    Usage,
    UsageEvent,
)

from .errors import error_body, status_of
from .request import NAME
from .response import (
    _CANDIDATE_KNOWN,
    _EXPLAINED,
    _TOP_KNOWN,
    CALL_SIGNATURE,
    ENVELOPE,
    MALFORMED,
    SIGNATURE,
    PartWriter,
    blocked_text,
    decode_usage,
    encode_usage,
    error_of,
    failure_text,
    finish_reason,
    first_candidate,
    gemini_finish,
    has_counts,
    made_call_id,
    parse_malformed,
    signature_of,
    synthetic,
    unwrap,
)

type Out = list[tuple[str | None, str]]

_CALL_KNOWN = frozenset({"name", "args", "id", "partialArgs", "willContinue"})
_PATH_STEP = re.compile(
    r"""\.(?P<name>[^.\[]+)|\[(?P<index>\d+)\]|\['(?P<sq>(?:[^'\\]|\\.)*)'\]|\["(?P<dq>(?:[^"\\]|\\.)*)"\]"""
)


def _dumps(data: JSON) -> str:
    return dumps(data)


# --------------------------------------------------------------------------- streamed arguments


class _Str(list[str]):
    """A string value assembled from pieces (joined once, when the call closes)."""


def _path(path: str) -> list[str | int] | None:
    """``$.recipe.steps[0]`` → ``["recipe", "steps", 0]`` (RFC 9535 names and indexes); None for
    a path this does not read."""
    if not path.startswith("$"):
        return None
    steps: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = _PATH_STEP.match(path, pos)
        if m is None:
            return None
        if m.group("index") is not None:
            steps.append(int(m.group("index")))
        else:
            quoted = m.group("sq") if m.group("sq") is not None else m.group("dq")
            steps.append(m.group("name") if quoted is None else re.sub(r"\\(.)", r"\1", quoted))
        pos = m.end()
    return steps


def _child(node: Any, step: str | int, want_list: bool) -> Any:
    """The container at ``node[step]``, made (or replaced, when of another type) as needed."""
    kind = list if want_list else dict
    current = node.get(step) if isinstance(node, dict) else node[step]
    if type(current) is not kind:
        current = [] if want_list else {}
        node[step] = current
    return current


def _set(root: JSON, steps: list[str | int], value: Any) -> bool:
    node: Any = root
    for i, step in enumerate(steps):
        if isinstance(step, int):
            if type(node) is not list or step > 100_000:
                return False
            node.extend([None] * (step + 1 - len(node)))
        elif type(node) is not dict:
            return False
        if i == len(steps) - 1:
            node[step] = value
            return True
        node = _child(node, step, isinstance(steps[i + 1], int))
    return False


def _get(root: JSON, steps: list[str | int]) -> Any:
    node: Any = root
    for step in steps:
        if isinstance(step, int):
            if type(node) is not list or step >= len(node):
                return None
        elif type(node) is not dict:
            return None
        node = node[step] if isinstance(step, int) else node.get(step)
    return node


def _materialize(value: Any) -> Any:
    if isinstance(value, _Str):
        return "".join(value)
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_materialize(v) for v in value]
    return value


@dataclasses.dataclass(slots=True)
class _Call:
    """A function call being read (whole, or assembled from Vertex's ``partialArgs``)."""

    name: str
    id: str | None
    signature: str | None
    own: JSON
    """Unknown fields of the ``functionCall`` (``call``) and of its part (``part``)."""
    args: JSON = dataclasses.field(default_factory=dict)
    open_path: str | None = None
    """The path of a string value that continues in the next partial argument."""

    def apply(self, fc: JSON) -> None:
        args = fc.get("args")
        if isinstance(args, dict):
            self.args.update(args)
        partial = fc.get("partialArgs")
        if isinstance(partial, list):
            for pa in partial:
                if isinstance(pa, dict):
                    self._partial(pa)

    def _partial(self, pa: JSON) -> None:
        raw_path = pa.get("jsonPath")
        if not isinstance(raw_path, str):
            return
        steps = _path(raw_path)
        if steps is None or not steps:
            steps = [raw_path]  # a path not read: kept under its own text, not dropped
        if "stringValue" in pa:
            piece = str(pa.get("stringValue") or "")
            current = _get(self.args, steps) if self.open_path == raw_path else None
            if isinstance(current, _Str):
                current.append(piece)
            elif not _set(self.args, steps, _Str([piece])):
                self.args[raw_path] = _Str([piece])
            self.open_path = raw_path if pa.get("willContinue") is True else None
            return
        self.open_path = None
        if "numberValue" in pa:
            value: Any = pa["numberValue"]
        elif "boolValue" in pa:
            value = pa["boolValue"]
        elif "nullValue" in pa:
            value = None
        else:
            return
        if not _set(self.args, steps, value):
            self.args[raw_path] = value


# --------------------------------------------------------------------------- decoder


class GeminiStreamDecoder:
    """Public and Code Assist-wrapped chunks (``{"response": {…}, "traceId"}``) alike."""

    fast_path: None = None
    """Nothing for the fast path (``StreamDecoder``, ``StreamEncoder``)."""

    def __init__(self) -> None:
        self._started = False
        self._response_id: str | None = None
        self._calls = 0
        self._ids: set[str] = set()
        self._active: _Call | None = None
        self._finished = False
        """A finish reason was read."""
        self._failed = False
        """An error chunk was read."""
        self._usage: JSON | None = None
        self._ended = False

    def feed(self, data: str, event: str | None) -> list[Event]:
        if not data.strip() or data == "[DONE]":
            return []
        try:
            payload: Any = loads(data)
        except ValueError as e:
            raise UnsupportedShape(f"Gemini chunk is not JSON: {data[:60]!r}") from e
        out: list[Event] = []
        for item in payload if isinstance(payload, list) else [payload]:
            if not isinstance(item, dict):
                raise UnsupportedShape("Gemini chunk is not a JSON object")
            self._chunk(item, out)
        return out

    def finish(self) -> list[Event]:
        if self._ended:
            return []
        self._ended = True
        if self._failed:
            return []
        if not self._finished:
            # Cut: a streamed call still open (``willContinue``) never closed: it is not
            # sent (a ``ToolCallStart`` would reach the client as a whole call).
            self._active = None
            return [
                StreamError(
                    "the Gemini stream ended without a finish reason (cut short upstream)",
                    "upstream_cut",
                )
            ]
        out = self._close_active()
        if self._usage is not None:
            out.append(UsageEvent(decode_usage(self._usage)))
        out.append(StreamEnd())
        return out

    # ------------------------------------------------------------------ chunks

    def _chunk(self, body: JSON, out: list[Event]) -> None:
        inner, wrapper = unwrap(body)
        err = error_of(inner)
        if err is not None and "candidates" not in inner:
            self._active = None  # a streamed call still open never closed: not sent
            status = err.get("status")
            message = err.get("message")
            out.append(
                StreamError(
                    message if isinstance(message, str) else json.dumps(err),
                    status if isinstance(status, str) else None,
                    origin=NAME,
                    raw=body,
                    status=status_of(err),
                )
            )
            self._failed = True
            return
        if not self._started:
            self._started = True
            rid, model = inner.get("responseId"), inner.get("modelVersion")
            self._response_id = rid if isinstance(rid, str) and rid else None
            out.append(
                MessageStart(
                    NAME,
                    id=self._response_id,
                    model=model if isinstance(model, str) else None,
                    envelope={k: inner[k] for k in ENVELOPE if k in inner},
                    extra={NAME: {"wrapper": wrapper}} if wrapper else {},
                )
            )
        first = len(out)
        usage = inner.get("usageMetadata")
        if isinstance(usage, dict) and has_counts(usage):
            self._usage = usage
        candidate = first_candidate(inner)
        cand_extra: JSON = {}
        if candidate is not None:
            cand_extra = {k: v for k, v in candidate.items() if k not in _CANDIDATE_KNOWN}
            content = candidate.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            for part in parts if isinstance(parts, list) else []:
                if isinstance(part, dict):
                    self._part(part, out)
            raw = candidate.get("finishReason")
            if isinstance(raw, str) and not self._finished:
                self._finish(raw, candidate, out)
        else:
            feedback = inner.get("promptFeedback")
            if isinstance(feedback, dict) and feedback.get("blockReason") and not self._finished:
                self._finished = True
                out.append(TextDelta(blocked_text(feedback), extra=synthetic()))
                out.append(Finish("content_filter", raw=None))
        chunk_extra = {k: v for k, v in inner.items() if k not in _TOP_KNOWN and k not in ENVELOPE}
        if cand_extra or chunk_extra:
            self._ride(out, first, cand_extra, chunk_extra)

    def _ride(self, out: list[Event], first: int, candidate: JSON, chunk: JSON) -> None:
        """The chunk's unknown fields onto its ``Finish``, else its first event, else raw."""
        wire: JSON = {}
        if candidate:
            wire["candidate"] = candidate
        if chunk:
            wire["chunk"] = chunk
        target = next((i for i in range(first, len(out)) if isinstance(out[i], Finish)), None)
        if target is None:
            target = next(
                (
                    i
                    for i in range(first, len(out))
                    if isinstance(out[i], TextDelta | ThinkingDelta | ToolCallStart)
                ),
                None,
            )
        if target is None:
            out.append(RawEvent(NAME, wire))
            return
        ev = out[target]
        assert isinstance(ev, Finish | TextDelta | ThinkingDelta | ToolCallStart)
        own = {**ev.extra.get(NAME, {}), **wire}
        out[target] = dataclasses.replace(ev, extra={**ev.extra, NAME: own})

    def _part(self, part: JSON, out: list[Event]) -> None:
        sig = signature_of(part)
        fc = part.get("functionCall")
        if isinstance(fc, dict):
            self._function_call(fc, sig, part, out)
            return
        text = part.get("text")
        if part.get("thought") is True and (isinstance(text, str) or sig):
            text = text if isinstance(text, str) else ""
            rest = {k: v for k, v in part.items() if k not in ("text", "thought", SIGNATURE)}
            if text or sig or rest:
                out.append(ThinkingDelta(text, sig, extra={NAME: {"part": rest}} if rest else {}))
            return
        if isinstance(text, str):
            # A text part's signature signs the reasoning before it (or, on the trailing
            # empty part, the turn): a signature-only thinking delta, before the text.
            if sig:
                out.append(ThinkingDelta("", sig))
            rest = {k: v for k, v in part.items() if k not in ("text", SIGNATURE)}
            if text or rest:
                out.append(TextDelta(text, extra={NAME: {"part": rest}} if rest else {}))
            return
        out.append(RawEvent(NAME, {"part": part}))

    def _function_call(self, fc: JSON, sig: str | None, part: JSON, out: list[Event]) -> None:
        name = fc.get("name")
        if isinstance(name, str) and name:
            out.extend(self._close_active())
            own: JSON = {}
            rest_call = {k: v for k, v in fc.items() if k not in _CALL_KNOWN}
            rest_part = {k: v for k, v in part.items() if k not in ("functionCall", SIGNATURE)}
            if rest_call:
                own["call"] = rest_call
            if rest_part:
                own["part"] = rest_part
            call_id = fc.get("id")
            call = _Call(name, call_id if isinstance(call_id, str) else None, sig, own)
            call.apply(fc)
            if fc.get("willContinue") is True:
                self._active = call
            else:
                out.extend(self._emit(call))
            return
        # No name: the continuation (or the end) of the streamed call.
        active = self._active
        if active is None:
            if not fc.get("partialArgs") and not fc.get("args"):
                return  # an empty closing part of nothing
            active = self._active = _Call("", None, sig, {})  # arguments are never dropped
        if sig and not active.signature:
            active.signature = sig
        active.apply(fc)
        if fc.get("willContinue") is not True:
            out.extend(self._close_active())

    def _close_active(self) -> list[Event]:
        call, self._active = self._active, None
        return self._emit(call) if call is not None else []

    def _emit(self, call: _Call) -> list[Event]:
        arguments = json.dumps(_materialize(call.args), ensure_ascii=False)
        index = self._calls
        self._calls += 1
        own = dict(call.own)
        call_id = call.id
        if not call_id or call_id in self._ids:
            call_id = made_call_id(self._response_id, index, call.name, arguments)
            own["made_id"] = True
        self._ids.add(call_id)
        extra: JSON = {}
        out: list[Event] = []
        if call.signature:
            extra[SIGNATURE] = call.signature
            out.append(ThinkingDelta("", call.signature, extra=CALL_SIGNATURE))
        if own:
            extra[NAME] = own
        out += [
            ToolCallStart(index, call_id, call.name, arguments, extra=extra),
            ToolCallEnd(index),
        ]
        return out

    def _finish(self, raw: str, candidate: JSON, out: list[Event]) -> None:
        self._finished = True
        out.extend(self._close_active())
        message = candidate.get("finishMessage")
        message = message if isinstance(message, str) else None
        call = parse_malformed(message) if raw == MALFORMED else None
        if call is not None:
            name, arguments = call
            out.extend(self._emit(_Call(name, None, None, {}, args=strict_json(arguments))))
            out.append(Finish("tool_calls", raw=raw, extra={NAME: {"recovered": True}}))
            return
        if raw in _EXPLAINED:
            out.append(TextDelta(failure_text(raw, message), extra=synthetic()))
        out.append(Finish(finish_reason(raw, self._calls > 0), raw=raw))


# --------------------------------------------------------------------------- encoder


@dataclasses.dataclass(slots=True)
class _Pending:
    id: str
    name: str
    extra: JSON
    parts: list[str]


class GeminiStreamEncoder:
    """Chunks for a public-API Gemini client."""

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
    ) -> tuple[str | None, str]:
        own: JSON = extra.get(NAME, {}) if self._same and extra else {}
        candidate: JSON = {}
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
                self._usage = event.usage
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
        out.append(self._chunk([], extra, finish=reason, usage=encode_usage(self._usage)))
        return out


class CodeAssistStreamEncoder(GeminiStreamEncoder):
    """Chunks wrapped as Code Assist sends them (``{"response": {…}}``)."""

    _wrapped = True
