"""Server-sent events: bytes ↔ lines ↔ events, per the WHATWG event-stream rules.

Contract: sans-IO and incremental. ``LineDecoder`` turns byte chunks split
anywhere into complete lines, decoding UTF-8 only on whole lines (so a
character cut across two chunks survives) and holding back only the
unfinished line; lines end at LF, CR or CRLF, and a CRLF split across two
chunks is one terminator. ``EventDecoder`` turns lines into events and
comments. ``encode_event`` / ``encode_data`` write events back with LF
endings. Nothing here knows JSON, dialects, mitmproxy or sockets.

Each decoded line comes with its raw bytes (terminator included), so the
stream processor can hand back the exact original bytes if it has to give up:
the raw parts of all lines plus ``pending()`` always equal the input.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None


@dataclass(frozen=True, slots=True)
class SSEComment:
    text: str
    """Everything after the leading ``:``, verbatim."""


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class LineDecoder:
    """bytes → ``(line, raw)`` pairs, ``raw`` being the line's bytes with its terminator."""

    def __init__(self) -> None:
        # The unfinished line, in pieces: joined once, when its terminator arrives, so a
        # long line fed in small chunks costs linear time. Only the last piece may end in
        # CR (a terminator whose LF may still follow); no piece holds any other terminator.
        self._held: list[bytes] = []

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        if not chunk:
            return []
        if self._held:
            if not self._held[-1].endswith(b"\r") and b"\n" not in chunk and b"\r" not in chunk:
                self._held.append(chunk)
                return []
            data = b"".join(self._held) + chunk
            self._held = []
        else:
            data = chunk
        out: list[tuple[str, bytes]] = []
        pos = 0
        n = len(data)
        has_cr = b"\r" in data
        while pos < n:
            lf = data.find(b"\n", pos)
            if has_cr:
                cr = data.find(b"\r", pos, n if lf == -1 else lf)
                if cr != -1:
                    if cr + 1 == n:
                        break  # CR at the very end: it may be the first half of a CRLF
                    stop = cr + 2 if data[cr + 1] == 0x0A else cr + 1
                    out.append((_text(data[pos:cr]), data[pos:stop]))
                    pos = stop
                    continue
            if lf == -1:
                break
            out.append((_text(data[pos:lf]), data[pos : lf + 1]))
            pos = lf + 1
        if pos < n:
            self._held.append(data[pos:])
        return out

    def finish(self) -> list[tuple[str, bytes]]:
        """The last line if the input did not end with a terminator; idempotent."""
        if not self._held:
            return []
        raw = b"".join(self._held)
        self._held = []
        return [(_text(raw[:-1] if raw.endswith(b"\r") else raw), raw)]

    def pending(self) -> bytes:
        """The raw bytes held back, not yet returned as a line."""
        return b"".join(self._held)


class EventDecoder:
    """Lines → events. ``data:`` lines join with LF; a blank line dispatches."""

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None

    def feed_line(self, line: str) -> SSEEvent | SSEComment | None:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return SSEComment(line[1:])
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        # Any other field is ignored, as the spec says.
        return None

    def finish(self) -> SSEEvent | None:
        """An event the upstream closed without its blank line is still delivered; idempotent."""
        return self._dispatch()

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            # No data: nothing is dispatched (WHATWG), and the event name is reset.
            self._event = self._id = self._retry = None
            return None
        event = SSEEvent("\n".join(self._data), self._event, self._id, self._retry)
        self._data = []
        self._event = self._id = self._retry = None
        return event


def encode_event(item: SSEEvent | SSEComment) -> bytes:
    if isinstance(item, SSEComment):
        return f":{item.text}\n\n".encode()
    lines = []
    if item.event is not None:
        lines.append(f"event: {item.event}\n")
    if item.id is not None:
        lines.append(f"id: {item.id}\n")
    if item.retry is not None:
        lines.append(f"retry: {item.retry}\n")
    for part in item.data.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        lines.append(f"data: {part}\n")
    lines.append("\n")
    return "".join(lines).encode()


def encode_data(data: str) -> bytes:
    """``data: …`` plus a blank line: the common case of an unnamed single-line event."""
    if "\n" in data or "\r" in data:
        return encode_event(SSEEvent(data))
    return b"data: " + data.encode() + b"\n\n"
