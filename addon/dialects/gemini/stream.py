"""Gemini streamed answers (one ``GenerateContentResponse`` a chunk) → unified events.

Contract: sans-IO. ``GeminiStreamDecoder.feed`` takes the JSON of one chunk (an SSE ``data:``
with ``alt=sse``, an item of the JSON array without it) and returns unified events; parts are
read as ``response.py`` reads whole answers. The encoder is ``stream_encode.py``; the rules:
docs/dialects/gemini.md#streams."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from addon import jsonio
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
    ToolCallEnd,
    ToolCallStart,
    UnsupportedShape,
    UsageEvent,
)

from .errors import status_of
from .request import NAME
from .response import (
    _CANDIDATE_KNOWN,
    _EXPLAINED,
    _TOP_KNOWN,
    CALL_SIGNATURE,
    ENVELOPE,
    MALFORMED,
    SIGNATURE,
    blocked_text,
    decode_usage,
    error_of,
    failure_text,
    finish_reason,
    first_candidate,
    has_counts,
    made_call_id,
    parse_malformed,
    signature_of,
    synthetic,
    unwrap,
)

_CALL_KNOWN = frozenset({"name", "args", "id", "partialArgs", "willContinue"})
_PATH_STEP = re.compile(
    r"""\.(?P<name>[^.\[]+)|\[(?P<index>\d+)\]|\['(?P<sq>(?:[^'\\]|\\.)*)'\]|\["(?P<dq>(?:[^"\\]|\\.)*)"\]"""
)


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
    """Public and Code Assist-wrapped chunks (``{"response": {…}, "traceId"}``) alike. A call
    goes out whole (``ToolCallStart`` with all its arguments, ``ToolCallEnd``); Vertex's
    streamed arguments (``partialArgs``) are assembled first."""

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
        """The usage and ``StreamEnd``, or a ``StreamError`` for a cut body."""
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
            out.extend(self._emit(_Call(name, None, None, {}, args=jsonio.loads(arguments))))
            out.append(Finish("tool_calls", raw=raw, extra={NAME: {"recovered": True}}))
            return
        if raw in _EXPLAINED:
            out.append(TextDelta(failure_text(raw, message), extra=synthetic()))
        out.append(Finish(finish_reason(raw, self._calls > 0), raw=raw))
