"""Whether a 2xx body is the stream its framing promised, and what came instead when it is not
(``not_a_stream``: the status, the content type and the first bytes, cleaned).

Contract: each framing declares its stream in ``FRAMINGS``; used by the whole answer and the
stream on the first bytes that failed to frame. Why: a 200 behind a login or a gateway may be
an HTML page or a JSON error, and a parser's complaint about it tells the user nothing."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from addon.dialects.base import Framing
from addon.redact import clean

QUOTE = 200
"""Characters of the body quoted in the description."""


@dataclass(frozen=True, slots=True)
class StreamKind:
    """What a stream of one framing is."""

    content_type: str
    """The content type it is sent with (compared without parameters)."""
    name: str
    """How a message names it."""
    starts: Callable[[bytes], bool | None]
    """Whether the body's first bytes can begin such a stream (None: too few to tell)."""


def _starts_frames(head: bytes) -> bool | None:
    """An AWS event-stream message begins with its prelude: two lengths and the CRC32 of them
    (an HTML page or JSON never has one)."""
    if len(head) < 12:
        return None
    total, headers, crc = struct.unpack("!III", head[:12])
    return bool(total >= 16 and headers <= total - 16 and zlib.crc32(head[:8]) == crc)


def _first(head: bytes) -> bytes:
    return head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")[:1]


def _starts_sse(head: bytes) -> bool | None:
    """An event stream begins with a field or a comment, never with markup or JSON."""
    first = _first(head)
    return None if not first else first not in (b"<", b"{", b"[")


def _starts_array(head: bytes) -> bool | None:
    first = _first(head)
    return None if not first else first in (b"[", b"{")


FRAMINGS: dict[Framing, StreamKind] = {
    "sse": StreamKind("text/event-stream", "an event stream", _starts_sse),
    "json_array": StreamKind("application/json", "a JSON array stream", _starts_array),
    "aws_eventstream": StreamKind(
        "application/vnd.amazon.eventstream", "an AWS event stream", _starts_frames
    ),
}


def not_a_stream(
    framing: Framing, head: bytes, *, status: int | None = None, content_type: str | None = None
) -> str | None:
    """Why a body whose first bytes are ``head`` is not a stream of ``framing`` — its content
    type (when given) is another, or its first bytes cannot begin one — saying what came
    instead (``status`` too, when given); None when it may be one."""
    kind = FRAMINGS[framing]
    ctype = (content_type or "").split(";", 1)[0].strip().lower()
    answered = f"HTTP {status} with " if status is not None else "with "
    if content_type is not None and ctype != kind.content_type:
        sent = f"{ctype or 'no content type'} instead of {kind.name} ({kind.content_type})"
    elif kind.starts(head) is False:
        sent = f"a body that is not {kind.name}"
        if ctype:
            sent += f", although sent as {ctype}"
    else:
        return None
    return f"the upstream answered {answered}{sent}: {quote(head)}"


def quote(head: bytes) -> str:
    """The first bytes of a body as text fit for a message (cleaned and cut), or ``(empty)``."""
    text = head[: QUOTE * 4].decode("utf-8", "replace").strip()
    return repr(clean(text, QUOTE)) if text else "(an empty body)"
