"""Server-sent events: bytes ↔ lines ↔ events, per the WHATWG event-stream rules.

Contract: sans-IO and incremental; ``LineDecoder`` gives whole lines with their raw bytes (so a
caller can give back the exact original bytes), ``EventDecoder`` events and comments,
``encode_event`` / ``encode_data`` write them back with LF endings. UTF-8 is decoded only on
whole lines: a character split across two chunks survives."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    """Its ``data:`` lines, joined with LF."""
    event: str | None = None
    """Its ``event:`` name (None: unnamed, a ``message``)."""
    id: str | None = None
    """The ``id:`` set since the previous event (not the persistent last event id)."""
    retry: int | None = None
    """The ``retry:`` set since the previous event."""


@dataclass(frozen=True, slots=True)
class SSEForeign:
    """A line that cannot belong to an event stream: the body is something else (a JSON error
    object, an HTML page, plain text) sent as ``text/event-stream``."""

    line: str
    """The line, as text."""


@dataclass(frozen=True, slots=True)
class SSEComment:
    text: str
    """Everything after the leading ``:``, verbatim (a leading space is kept)."""


_LINE_ENDS = "\r\n"
_BOM = "\ufeff"
_BOM_BYTES = _BOM.encode()


class LineDecoder:
    """bytes → ``(line, raw)`` pairs, ``raw`` being the line's bytes with its terminator.

    UTF-8 is decoded only on whole lines (a character cut across two chunks survives) and only
    the unfinished line is held; lines end at LF, CR or CRLF, and a CRLF split across two
    chunks is one terminator. The raw parts of all lines returned so far plus ``pending()``
    always equal the input. A byte-order mark at the very start of the stream is dropped from the first
    line's text (WHATWG), never from its raw bytes. ``held`` is the size of the
    unfinished line, for the caller to bound.
    """

    __slots__ = ("_held", "held", "started")

    def __init__(self) -> None:
        # The unfinished line, in pieces, joined once when its terminator arrives: a long
        # line fed in small chunks costs linear time. No piece holds a terminator, except
        # that the last one may end in CR (the first half of a CRLF, perhaps).
        self._held: list[bytes] = []
        self.started = False
        """Past the stream's start (where a byte-order mark may come)."""
        self.held = 0
        """How many bytes of an unfinished line are held (0: none)."""

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        if not chunk:
            return []
        held = self._held
        if held:
            if b"\n" not in chunk and b"\r" not in chunk and not held[-1].endswith(b"\r"):
                held.append(chunk)
                self.held += len(chunk)
                return []
            held.append(chunk)
            data = b"".join(held)
            held.clear()
        else:
            data = chunk
        # bytes.splitlines splits at exactly LF, CR and CRLF, in C.
        raws = data.splitlines(keepends=True)
        self.held = 0
        if raws[-1][-1] != 0x0A:  # unterminated, or ending in a CR whose LF may follow
            held.append(raws.pop())
            self.held = len(held[0])
        # A line's content holds no CR or LF, so stripping them removes just the terminator.
        lines = [(raw.decode("utf-8", "replace").rstrip(_LINE_ENDS), raw) for raw in raws]
        if not self.started and lines:
            self.started = True
            lines[0] = (lines[0][0].removeprefix(_BOM), lines[0][1])
        return lines

    def finish(self) -> list[tuple[str, bytes]]:
        """The last line if the input did not end with a terminator; idempotent."""
        if not self._held:
            return []
        raw = b"".join(self._held)
        self._held.clear()
        self.held = 0
        text = raw.decode("utf-8", "replace").rstrip(_LINE_ENDS)
        if not self.started:
            self.started = True
            text = text.removeprefix(_BOM)
        return [(text, raw)]

    def pending(self) -> bytes:
        """The raw bytes held back, not yet returned as a line."""
        held = self._held
        if len(held) > 1:
            held[:] = [b"".join(held)]
        return held[0] if held else b""

    def clear(self) -> None:
        """Forget the unfinished line (its memory returns)."""
        self._held.clear()
        self.held = 0

    def take_line_start(self, chunk: bytes) -> bytes | None:
        """The unfinished line held (``b""`` for none), handed over and forgotten — for a
        reader that reads whole lines itself, ``chunk`` being the bytes that follow; None
        (nothing handed over) before the start (while a byte-order mark may come) or when it
        ends in a CR whose LF may follow."""
        held = self._held
        if not self.started and not held and not chunk.startswith(_BOM_BYTES[: len(chunk)]):
            self.started = True  # the stream's first bytes, and no byte-order mark in them
        if not self.started or (held and held[-1].endswith(b"\r")):
            return None
        data = b"".join(held)
        held.clear()
        self.held = 0
        return data


class EventDecoder:
    """Lines → events and comments. ``data:`` lines join with LF; a blank line dispatches.

    A block with neither data lines nor an event name is not dispatched; an
    ``id`` or ``retry`` it set is kept for the next event that is, so that
    re-encoding loses neither. ``SSEEvent.id`` is the id set since the previous
    event, not the persistent last-event-id of the WHATWG processing model.

    WHATWG ignores unknown fields; a body that is not an event stream at all would
    then vanish without a trace. So a line that cannot be a field of this stream
    comes back as ``SSEForeign``: before the first event, any field other than
    ``data``/``event``/``id``/``retry``; after it, a line whose field name is not a
    plain token (``{"error": …``, ``<html>``, a sentence). ``size`` is the length of
    the data lines of the event being assembled, for the caller to bound.
    """

    __slots__ = ("_data", "_event", "_id", "_retry", "_seen", "size")

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None
        self._seen = False
        self.size = 0

    def feed_line(self, line: str) -> SSEEvent | SSEComment | SSEForeign | None:
        if line.startswith("data: "):  # the common case, first
            self._data.append(line[6:])
            self.size += len(line)
            return None
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return SSEComment(line[1:])
        name, _, value = line.partition(":")  # no colon: the whole line names the field
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self.size += len(value)
        elif name not in _FIELDS and (not self._seen or not _token(name)):
            return SSEForeign(line)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        # Any other field is ignored.
        return None

    @property
    def idle(self) -> bool:
        """Between events: nothing of the next one read yet."""
        return not self._data and self._event is None and self._id is None and self._retry is None

    def saw_event(self) -> None:
        """Events were read past this decoder (``simple_events``): the stream has begun."""
        self._seen = True

    def finish(self) -> SSEEvent | None:
        """The event the upstream closed without its blank line, if any; idempotent."""
        event = self._dispatch()
        self._id = self._retry = None
        return event

    def _dispatch(self) -> SSEEvent | None:
        if not self._data and not self._event:
            self._event = None
            return None
        event = SSEEvent("\n".join(self._data), self._event, self._id, self._retry)
        self._seen = True
        self.size = 0
        self._data = []
        self._event = self._id = self._retry = None
        return event


_FIELDS = frozenset({"data", "event", "id", "retry"})


def simple_events(chunk: bytes) -> list[tuple[str, bytes]] | None:
    """The common chunk of a streamed answer, read in one pass: nothing but whole events of
        one ``data: …`` line each, LF line ends, one blank line after each. Returns each event's
        data and raw bytes, or None for any other chunk (the line and event decoders read it,
        with the same result). Only for an event decoder between events (``idle``), with no
    unfinished line held before the chunk."""
    if chunk[-2:] != b"\n\n" or b"\r" in chunk:
        return None
    parts = chunk[:-2].split(b"\n\n")
    out: list[tuple[str, bytes]] = []
    for part in parts:
        if part[:6] != b"data: " or b"\n" in part:
            return None
        raw = chunk if len(parts) == 1 else part + b"\n\n"
        out.append((part[6:].decode("utf-8", "replace"), raw))
    return out


def _token(name: str) -> bool:
    """A name an event-stream field could have: letters, digits, ``-`` and ``_``."""
    return bool(name) and name.isascii() and name.replace("-", "").replace("_", "").isalnum()


def _one_line_breaks(text: str) -> str:
    """CR and CRLF as LF, so that splitting at LF finds every line the decoder would."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def encode_event(item: SSEEvent | SSEComment) -> bytes:
    """The item as SSE bytes: fields, one ``data:`` line per line of data, a blank line."""
    if isinstance(item, SSEComment):
        return (":" + _one_line_breaks(item.text).replace("\n", "\n:") + "\n\n").encode()
    head = ""
    if item.event is not None:
        head = f"event: {item.event}\n"
    if item.id is not None:
        head += f"id: {item.id}\n"
    if item.retry is not None:
        head += f"retry: {item.retry}\n"
    data = _one_line_breaks(item.data).replace("\n", "\ndata: ")
    return f"{head}data: {data}\n\n".encode()


def encode_data(data: str) -> bytes:
    """``data: …`` and a blank line: the common unnamed event, fast when ``data`` is one line."""
    if "\n" in data or "\r" in data:
        return encode_event(SSEEvent(data))
    return f"data: {data}\n\n".encode()


def encode_pairs(pairs: list[tuple[str | None, str]]) -> list[bytes]:
    """What dialect stream encoders return — ``(event name or None, data)`` — as SSE bytes."""
    return [encode_data(data) if name is None else _named(name, data) for name, data in pairs]


def _named(name: str, data: str) -> bytes:
    """``event: …`` then ``data: …``: in one step when neither holds a line break (JSON data
    never does), else line by line as ``encode_event`` writes them."""
    if "\n" in data or "\r" in data or "\n" in name or "\r" in name:
        return encode_event(SSEEvent(data=data, event=name))
    return f"event: {name}\ndata: {data}\n\n".encode()
