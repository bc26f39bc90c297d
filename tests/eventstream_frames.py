"""Writes AWS event-stream messages for tests (Kiro's answers), from the format itself.

Written from the specification (not with botocore, which the bridge decodes with), so that the
two check each other::

    [total length u32][headers length u32][CRC32 of those 8 bytes]
    [headers][payload][CRC32 of everything before it]

A header is ``[name length u8][name][type u8][value]``; strings (type 7) are
``[length u16][UTF-8 bytes]``.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

CONTENT_TYPE = "application/vnd.amazon.eventstream"


def header(name: str, value: str | bool | int) -> bytes:
    raw = name.encode()
    out = struct.pack("!B", len(raw)) + raw
    if isinstance(value, bool):
        return out + struct.pack("!B", 0 if value else 1)
    if isinstance(value, int):
        return out + struct.pack("!Bi", 4, value)
    data = value.encode()
    return out + struct.pack("!BH", 7, len(data)) + data


def message(headers: Mapping[str, str | bool | int], payload: bytes) -> bytes:
    head = b"".join(header(k, v) for k, v in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack("!II", total, len(head))
    prelude += struct.pack("!I", zlib.crc32(prelude) & 0xFFFFFFFF)
    body = prelude + head + payload
    return body + struct.pack("!I", zlib.crc32(body) & 0xFFFFFFFF)


def event(event_type: str, payload: Any) -> bytes:
    """One ``event`` message with a JSON payload, headers as Kiro sends them."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return message(
        {
            ":event-type": event_type,
            ":content-type": "application/json",
            ":message-type": "event",
        },
        data,
    )


def exception(exception_type: str, text: str) -> bytes:
    return message(
        {
            ":exception-type": exception_type,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps({"message": text}).encode(),
    )


def error(code: str, text: str) -> bytes:
    return message({":error-code": code, ":error-message": text, ":message-type": "error"}, b"")


def stream(events: Iterable[tuple[str, Any]]) -> bytes:
    return b"".join(event(name, payload) for name, payload in events)


def text_events(text: str, pieces: int = 3) -> list[tuple[str, Any]]:
    """``text`` as ``assistantResponseEvent``s of about equal size."""
    size = max(1, -(-len(text) // pieces))
    return [
        ("assistantResponseEvent", {"content": text[i : i + size]})
        for i in range(0, len(text), size)
    ]


def tool_events(tool_id: str, name: str, arguments: str, pieces: int = 3) -> list[tuple[str, Any]]:
    """A call as Kiro streams it: ``toolUseEvent``s with input fragments, then ``stop``."""
    size = max(1, -(-len(arguments) // pieces))
    out: list[tuple[str, Any]] = [
        ("toolUseEvent", {"name": name, "toolUseId": tool_id, "input": arguments[i : i + size]})
        for i in range(0, len(arguments), size)
    ]
    out.append(("toolUseEvent", {"name": name, "toolUseId": tool_id, "stop": True}))
    return out


def usage_events(percentage: float = 1.5, credits: float = 0.02) -> list[tuple[str, Any]]:
    return [
        ("meteringEvent", {"unit": "credit", "unitPlural": "credits", "usage": credits}),
        ("contextUsageEvent", {"contextUsagePercentage": percentage}),
    ]
