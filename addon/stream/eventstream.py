"""AWS event-stream framing (``application/vnd.amazon.eventstream``): binary frames → events.

Contract: sans-IO and incremental; ``EventStreamSplitter.feed`` returns one ``Frame`` per
complete message as soon as its last byte arrives, checked by botocore (CRCs, bounded sizes);
the raw bytes of the frames plus ``pending()`` equal the input. Kiro streams this way; the
frame layout: docs/streams.md#aws-event-stream."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

PRELUDE = 12
MIN_MESSAGE = PRELUDE + 4
EXCEPTION = ":exception"
ERROR = ":error"


@dataclass(frozen=True, slots=True)
class Frame:
    text: str
    """The payload as text (JSON), or ``{"exceptionType", "message"}`` for an exception."""
    event: str | None
    """``:event-type``; ``:exception`` / ``:error`` for those message types."""
    raw: bytes = field(repr=False)
    """The message's bytes as they came."""


class EventStreamSplitter:
    """bytes → ``Frame``s, one per complete event-stream message, chunks split anywhere; a bad
    message or a cut body is reported in ``error``, nothing after it."""

    __slots__ = ("_buf", "_length", "error")

    def __init__(self) -> None:
        self._buf = bytearray()
        """Bytes not yet returned: the message being assembled (and what follows it)."""
        self._length: int | None = None
        """The total length of the message at the start of ``_buf``, once its prelude passed."""
        self.error: str | None = None
        """Why the framing could not be read; once set, nothing more is returned."""

    def feed(self, chunk: bytes) -> list[Frame]:
        if not chunk or self.error is not None:
            return []
        self._buf += chunk
        out: list[Frame] = []
        start = 0
        buf = self._buf
        while True:
            if self._length is None:
                if len(buf) - start < PRELUDE:
                    break
                length = self._prelude(bytes(buf[start : start + PRELUDE]))
                if length is None:
                    break
                self._length = length
            end = start + self._length
            if len(buf) < end:
                break
            frame = self._message(bytes(buf[start:end]))
            if frame is None:
                break
            out.append(frame)
            start = end
            self._length = None
        if start:
            del buf[:start]
        return out

    def finish(self) -> list[Frame]:
        """The body ended: bytes of an unfinished message are an error (the upstream cut it)."""
        if self.error is None and self._buf:
            self.error = (
                f"the body ended inside an event-stream message ({len(self._buf)} bytes held)"
            )
        return []

    def pending(self) -> bytes:
        """The raw bytes not yet returned as a frame."""
        return bytes(self._buf)

    # ------------------------------------------------------------------ internals

    def _prelude(self, prelude: bytes) -> int | None:
        """The message's total length, once botocore has checked the prelude's CRC and limits."""
        total, headers = struct.unpack("!II", prelude[:8])
        if total < MIN_MESSAGE or headers > total - MIN_MESSAGE:
            self.error = f"bad event-stream prelude: lengths {total} / {headers} do not fit"
            return None
        from botocore.eventstream import EventStreamBuffer, ParserError  # Kiro streams only

        parser = EventStreamBuffer()
        parser.add_data(prelude)
        try:
            next(parser)  # checks the prelude; stops for want of the rest of the message
        except StopIteration:
            pass
        except ParserError as e:
            self.error = f"bad event-stream prelude: {e}"
            return None
        return int(total)

    def _message(self, data: bytes) -> Frame | None:
        from botocore.eventstream import EventStreamBuffer, ParserError

        parser = EventStreamBuffer()
        parser.add_data(data)
        try:
            message = next(parser)
        except ParserError as e:
            self.error = f"bad event-stream message: {e}"
            return None
        except (StopIteration, struct.error, UnicodeDecodeError, KeyError, IndexError) as e:
            self.error = f"bad event-stream message: {type(e).__name__}"
            return None
        headers: dict[str, Any] = message.headers
        payload: bytes = message.payload
        kind = headers.get(":message-type", "event")
        if kind == "event":
            event = headers.get(":event-type")
            return Frame(
                payload.decode("utf-8", "replace"), event if isinstance(event, str) else None, data
            )
        if kind in ("exception", "error"):
            name = headers.get(":exception-type" if kind == "exception" else ":error-code")
            text = _message_text(payload) or headers.get(":error-message")
            body = {
                "exceptionType": name if isinstance(name, str) and name else None,
                "message": text if isinstance(text, str) and text else None,
            }
            event_name = EXCEPTION if kind == "exception" else ERROR
            return Frame(json.dumps(body, ensure_ascii=False), event_name, data)
        return Frame(payload.decode("utf-8", "replace"), f":{kind}", data)


def _message_text(payload: bytes) -> str | None:
    text = payload.decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        data: Any = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict):
        for key in ("message", "Message", "errorMessage"):
            value = data.get(key)
            if isinstance(value, str) and value:
                return value
    return text


def split_all(raw: bytes) -> tuple[list[Frame], str | None]:
    """A whole body's frames, and why the body could not be read to its end (None: it could)."""
    splitter = EventStreamSplitter()
    frames = splitter.feed(raw)
    splitter.finish()
    return frames, splitter.error


def preload() -> None:
    """Load botocore's event-stream parser (~45 ms of imports): for a proxy with a route
    whose upstream answers in these frames, before its first such stream."""
    from botocore.eventstream import EventStreamBuffer  # noqa: F401
