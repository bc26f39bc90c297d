"""A whole answer as a stream (``sse_from_response``), and a stream as a whole answer
(``response_from_events``).

Contract: sans-IO. Gateways that ignore ``stream: true`` answer with one JSON object, and Kiro
streams even when the client asked for a whole answer: each side gets the shape it asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from addon.dialects.base import Framing, StreamEncoder
from addon.model import (
    Event,
    Finish,
    MessageStart,
    Opaque,
    Part,
    RawEvent,
    Response,
    StreamEnd,
    StreamError,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    UsageEvent,
)
from addon.stream.framing import JsonArrayWriter
from addon.stream.sse import encode_pairs

type OpaqueEvents = Callable[[Opaque, int], list[Event]]
"""A part of the client's dialect the bridge wrote (its web searches' blocks) as the raw
events that carry it (``SearchShape.events``), given its place in the answer."""


def response_events(resp: Response, opaque: OpaqueEvents | None = None) -> list[Event]:
    """The unified events a stream of this answer would have carried (``opaque``: how its
    opaque parts are carried; None: they are not)."""
    events: list[Event] = [
        MessageStart(resp.origin, id=resp.id, model=resp.model, created=resp.created)
    ]
    calls = 0
    for i, part in enumerate(resp.parts):
        if isinstance(part, Opaque) and opaque is not None:
            events += opaque(part, i)
        elif isinstance(part, Thinking) and not part.redacted:
            events.append(ThinkingDelta(part.text, signature=part.signature))
        elif isinstance(part, Text) and part.text:
            events.append(TextDelta(part.text))
        elif isinstance(part, ToolCall):
            start = ToolCallStart(calls, part.id, part.name, part.arguments, custom=part.custom)
            events += [start, ToolCallEnd(calls)]
            calls += 1
    events.append(Finish(resp.finish or ("tool_calls" if calls else "stop"), raw=resp.finish_raw))
    if resp.usage is not None:
        events.append(UsageEvent(resp.usage))
    events.append(StreamEnd())
    return events


def sse_from_response(
    resp: Response,
    encoder: StreamEncoder,
    framing: Framing = "sse",
    opaque: OpaqueEvents | None = None,
) -> bytes:
    """The answer as the client's stream: SSE, or one JSON array (Gemini without ``alt=sse``)."""
    pairs: list[tuple[str | None, str]] = []
    for event in response_events(resp, opaque):
        pairs += encoder.feed(event)
    pairs += encoder.finish()
    if framing == "json_array":
        writer = JsonArrayWriter()
        return b"".join([*writer.pairs(pairs), writer.close()])
    return b"".join(encode_pairs(pairs))


class StreamFailed(Exception):
    """The stream of a whole answer carried an error (``StreamError``)."""

    def __init__(self, error: StreamError) -> None:
        super().__init__(error.message)
        self.error = error
        self.status = error.http_status


def response_from_events(events: Iterable[Event], origin: str) -> Response:
    """One ``Response`` from the events of a whole stream: text and reasoning deltas joined,
    each call where it started, the last ``Finish``, the usage merged; a ``StreamError`` among
    them raises ``StreamFailed`` with the client's HTTP status (``StreamError.http_status``)."""
    start: MessageStart | None = None
    parts: list[Part | int] = []
    """Parts in order; an ``int`` holds the place of the call of that index."""
    text: list[str] = []
    thinking: list[str] = []
    signature: str | None = None
    calls: dict[int, tuple[ToolCallStart, list[str]]] = {}
    finish: Finish | None = None
    usage: Usage | None = None

    def flush() -> None:
        nonlocal signature
        if text:
            parts.append(Text("".join(text)))
            text.clear()
        if thinking or signature:
            parts.append(Thinking("".join(thinking), signature))
            thinking.clear()
            signature = None

    for event in events:
        match event:
            case MessageStart():
                start = start or event
            case TextDelta():
                if thinking or signature:
                    flush()
                text.append(event.text)
            case ThinkingDelta():
                if text:
                    flush()
                thinking.append(event.text)
                signature = event.signature or signature
            case ToolCallStart():
                flush()
                calls[event.index] = (event, [event.arguments])
                parts.append(event.index)
            case ToolCallArgsDelta():
                if event.index in calls:
                    calls[event.index][1].append(event.delta)
            case Finish():
                finish = event
            case UsageEvent():
                usage = event.usage if usage is None else usage.then(event.usage)
            case StreamError():
                raise StreamFailed(event)
            case ToolCallEnd() | RawEvent() | StreamEnd():
                pass
    flush()
    out: list[Part] = []
    for p in parts:
        if isinstance(p, int):
            call, args = calls[p]
            out.append(ToolCall(call.id, call.name, "".join(args), call.extra, call.custom))
        else:
            out.append(p)
    return Response(
        origin=start.origin if start is not None else origin,
        id=start.id if start is not None else None,
        model=start.model if start is not None else None,
        parts=tuple(out),
        finish=finish.reason if finish is not None else None,
        finish_raw=finish.raw if finish is not None else None,
        usage=usage,
        created=start.created if start is not None else None,
    )
