"""Kiro's streamed answer (AWS event-stream frames) → unified events; no way back.

Contract: sans-IO. ``KiroStreamDecoder.feed(payload, event_type)`` takes one frame at a time
(its JSON payload and ``:event-type``, as ``addon.stream.eventstream`` splits them);
``finish()`` is idempotent. ``KiroStreamEncoder`` exists for the ``Dialect`` record only.
What each event becomes: docs/dialects/kiro.md#module-notes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from addon.jsonio import loads
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

from .errors import status_of
from .request import NAME
from .response import UPSTREAM_ONLY

CONTEXT_WINDOW = 200_000
"""Tokens in the context window of Kiro's Claude models: ``contextUsagePercentage`` of it is
the input-token estimate when Kiro sends no token counts."""
EXCEPTION = ":exception"
ERROR = ":error"
"""Event types ``addon.stream.eventstream`` gives exception and error frames."""
LENGTH_EXCEPTION = "ContentLengthExceededException"


@dataclass(slots=True)
class _Call:
    index: int
    args: bool = False
    """Arguments were sent."""


class KiroStreamDecoder:
    fast_path: None = None
    """Nothing for the fast path (``StreamDecoder``, ``StreamEncoder``)."""

    def __init__(self) -> None:
        self._started = False
        self._calls: dict[str, _Call] = {}
        """Open calls by ``toolUseId``."""
        self._stopped: set[str] = set()
        self._last: str | None = None
        """The id of the call the last ``toolUseEvent`` was about."""
        self._count = 0
        self._failed = False
        self._finish: Finish | None = None
        self._tokens: JSON | None = None
        self._context: float | None = None
        self._metering: JSON | None = None
        self._ended = False

    def feed(self, data: str, event: str | None) -> list[Event]:
        if self._failed or self._ended:
            return []
        payload = _payload(data, event)
        out: list[Event] = []
        if not self._started:
            self._started = True
            out.append(MessageStart(NAME))
        match event:
            case "assistantResponseEvent":
                content = payload.get("content")
                if isinstance(content, str) and content:
                    out.append(TextDelta(content))
            case "reasoningContentEvent":
                self._reasoning(payload, out)
            case "toolUseEvent":
                self._tool_use(payload, out)
            case "metadataEvent":
                usage = payload.get("tokenUsage")
                if isinstance(usage, dict):
                    self._tokens = usage
            case "contextUsageEvent":
                pct = payload.get("contextUsagePercentage")
                if isinstance(pct, int | float) and not isinstance(pct, bool):
                    self._context = float(pct)
            case "meteringEvent":
                self._metering = payload
            case ":exception" | ":error":
                self._exception(payload, out)
            case _:
                out.append(RawEvent(NAME, {"event": event, "payload": payload}))
        return out

    def finish(self) -> list[Event]:
        """Kiro sends no finish event: here ``Finish``, the usage and ``StreamEnd``, or a
        ``StreamError`` (``upstream_cut``) for a body cut inside a call or empty."""
        if self._ended:
            return []
        self._ended = True
        if self._failed:
            return []
        out: list[Event] = []
        if not self._started:
            message = "the Kiro stream ended without any event (cut short upstream)"
            out.append(StreamError(message, "upstream_cut"))
            return out
        if self._calls:
            self._calls.clear()  # never stopped: no ToolCallEnd (the call is not whole)
            out.append(
                StreamError(
                    "the Kiro stream ended inside a tool call (cut short upstream)",
                    "upstream_cut",
                )
            )
            return out
        out.append(self._finish or Finish("tool_calls" if self._count else "stop"))
        usage = self._usage()
        if usage is not None:
            out.append(UsageEvent(usage))
        out.append(StreamEnd())
        return out

    # ------------------------------------------------------------------ events

    def _reasoning(self, payload: JSON, out: list[Event]) -> None:
        text = payload.get("text")
        signature = payload.get("signature")
        text = text if isinstance(text, str) else ""
        signature = signature if isinstance(signature, str) and signature else None
        if text or signature:
            out.append(ThinkingDelta(text, signature))
        if payload.get("redactedContent"):
            out.append(RawEvent(NAME, {"event": "reasoningContentEvent", "payload": payload}))

    def _tool_use(self, payload: JSON, out: list[Event]) -> None:
        tid = payload.get("toolUseId")
        if not isinstance(tid, str) or not tid:
            tid = self._last if self._last in self._calls else f"tooluse_bridge_{self._count}"
        assert tid is not None
        self._last = tid
        if tid in self._stopped:
            return  # a repeat of a finished call
        fragment = _fragment(payload.get("input"))
        call = self._calls.get(tid)
        if call is None:
            name = payload.get("name")
            if not isinstance(name, str) or not name:
                raise UnsupportedShape("Kiro toolUseEvent without a tool name")
            call = self._calls[tid] = _Call(self._count)
            self._count += 1
            out.append(ToolCallStart(call.index, tid, name, fragment))
        elif fragment:
            out.append(ToolCallArgsDelta(call.index, fragment))
        call.args = call.args or bool(fragment)
        if payload.get("stop") is True:
            if not call.args:
                out.append(ToolCallArgsDelta(call.index, "{}"))
            out.append(ToolCallEnd(call.index))
            del self._calls[tid]
            self._stopped.add(tid)

    def _exception(self, payload: JSON, out: list[Event]) -> None:
        kind = payload.get("exceptionType")
        kind = kind if isinstance(kind, str) and kind else "KiroException"
        message = payload.get("message")
        message = message if isinstance(message, str) and message else kind
        if kind == LENGTH_EXCEPTION:
            self._finish = Finish("length", raw=kind)
            return
        self._calls.clear()  # calls not stopped never ended: no ToolCallEnd for them
        out.append(
            StreamError(
                f"{kind}: {message}", kind, origin=NAME, raw=payload, status=status_of(kind)
            )
        )
        self._failed = True

    def _usage(self) -> Usage | None:
        raw: JSON = {}
        if self._tokens is not None:
            raw["tokenUsage"] = self._tokens
        if self._context is not None:
            raw["contextUsagePercentage"] = self._context
        if self._metering is not None:
            raw["metering"] = self._metering
        if not raw:
            return None
        tokens = self._tokens or {}
        given_in, given_out = _count(tokens.get("inputTokens")), _count(tokens.get("outputTokens"))
        if given_in is None and self._context is not None:
            given_in = round(self._context / 100 * CONTEXT_WINDOW)
        total = _count(tokens.get("totalTokens"))
        if total is None and given_in is not None and given_out is not None:
            total = given_in + given_out
        return Usage(given_in, given_out, total, origin=NAME, raw=raw)


def _payload(data: str, event: str | None) -> JSON:
    if not data.strip():
        return {}
    try:
        payload: Any = loads(data)
    except ValueError as e:
        raise UnsupportedShape(f"Kiro {event or 'event'} payload is not JSON: {data[:60]!r}") from e
    if not isinstance(payload, dict):
        raise UnsupportedShape(f"Kiro {event or 'event'} payload is not a JSON object")
    return payload


def _fragment(value: Any) -> str:
    """A ``toolUseEvent``'s ``input``: a fragment of JSON text, or (some gateways) an object."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class KiroStreamEncoder:
    """Kiro clients are not served: building one raises (``UPSTREAM_ONLY``)."""

    fast_path: None = None
    """Nothing for the fast path (``StreamDecoder``, ``StreamEncoder``)."""

    def __init__(self, defaults: AnswerDefaults = NO_DEFAULTS) -> None:
        raise UnsupportedShape(UPSTREAM_ONLY)

    def feed(self, event: Any) -> list[tuple[str | None, str]]:  # pragma: no cover
        raise UnsupportedShape(UPSTREAM_ONLY)

    def finish(self) -> list[tuple[str | None, str]]:  # pragma: no cover
        raise UnsupportedShape(UPSTREAM_ONLY)
