"""A whole answer as a stream: for clients that asked to stream from an upstream that did not.

Contract: sans-IO. ``response_events`` lists the unified events a stream of
this answer would have carried; ``sse_from_response`` runs them through a
client encoder and the SSE encoder. Some gateways ignore ``stream: true`` and
answer with one JSON object; an SDK waiting for SSE would fail on it.
"""

from __future__ import annotations

from addon.dialects.base import Framing, StreamEncoder
from addon.model import (
    Event,
    Finish,
    MessageStart,
    Response,
    StreamEnd,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallEnd,
    ToolCallStart,
    UsageEvent,
)
from addon.stream.framing import JsonArrayWriter
from addon.stream.sse import encode_pairs


def response_events(resp: Response) -> list[Event]:
    events: list[Event] = [
        MessageStart(resp.origin, id=resp.id, model=resp.model, created=resp.created)
    ]
    calls = 0
    for part in resp.parts:
        if isinstance(part, Thinking) and not part.redacted:
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


def sse_from_response(resp: Response, encoder: StreamEncoder, framing: Framing = "sse") -> bytes:
    """The answer as the client's stream: SSE, or one JSON array (Gemini without ``alt=sse``)."""
    pairs: list[tuple[str | None, str]] = []
    for event in response_events(resp):
        pairs += encoder.feed(event)
    pairs += encoder.finish()
    if framing == "json_array":
        writer = JsonArrayWriter()
        return b"".join([*writer.pairs(pairs), writer.close()])
    return b"".join(encode_pairs(pairs))
