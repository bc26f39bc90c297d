"""The stream pipeline: upstream SSE bytes in, client SSE bytes out.

    bytes ─► [decompress] ─► SSE lines ─► SSE events ─► upstream decoder ─► unified events
          ─► stages (text protocol, tool-call assembly, ...) ─► client encoder ─► SSE ─► bytes

Contract: sans-IO. ``feed(chunk) -> list[bytes]`` may be called with chunks
split anywhere (inside a line, inside a UTF-8 character); it returns ``[]``
when nothing is ready and never an empty ``bytes`` (mitmproxy would end an
HTTP/1 chunked body on it). ``finish()`` flushes and is idempotent.

Never eat a stream: if decoding or rewriting fails, the processor records why
in ``error``, switches to passthrough and returns the raw (decompressed) bytes
of everything not yet emitted: the event that failed, the lines after it and
the unfinished tail. Bytes fed after that are returned as they come.

SSE comments (``: keep-alive``) are forwarded as they are, so that idle
connections stay open through the proxy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from addon.dialects.base import Framing, StreamDecoder, StreamEncoder
from addon.model import Event
from addon.stream.decompress import Decompressor
from addon.stream.sse import (
    EventDecoder,
    LineDecoder,
    SSEComment,
    SSEEvent,
    encode_event,
    encode_pairs,
)


class Stage(Protocol):
    """A step between decoder and encoder: unified events in, unified events out."""

    def feed(self, event: Event) -> list[Event]: ...
    def finish(self) -> list[Event]: ...


class StreamProcessor:
    def __init__(
        self,
        decoder: StreamDecoder,
        encoder: StreamEncoder,
        stages: Sequence[Stage] = (),
        decompressor: Decompressor | None = None,
        framing_in: Framing = "sse",
        framing_out: Framing = "sse",
    ) -> None:
        if framing_in != "sse" or framing_out != "sse":
            raise NotImplementedError("only SSE framing so far")
        self._decoder = decoder
        self._encoder = encoder
        self._stages = tuple(stages)
        self._decompressor = decompressor
        self._lines = LineDecoder()
        self._events = EventDecoder()
        self._pending_raw = bytearray()  # raw lines of the SSE event being assembled
        self._finished = False
        self.passthrough = False
        self.error: str | None = None
        """Why the processor fell back to passthrough, for the shell to log."""
        self.events_in = 0
        self.bytes_in = 0
        self.bytes_out = 0

    # ------------------------------------------------------------------ public

    def feed(self, chunk: bytes) -> list[bytes]:
        if not chunk:
            return []
        if self._decompressor is not None:
            try:
                chunk = self._decompressor.feed(chunk)
            except Exception as e:
                return self._fail(f"cannot decompress the stream: {e}", chunk)
        self.bytes_in += len(chunk)
        if self.passthrough or self._finished:
            return self._out([chunk])
        lines = self._lines.feed(chunk)
        return self._run(lines, final=False)

    def finish(self) -> list[bytes]:
        if self._finished:
            return []
        self._finished = True
        tail = b""
        if self._decompressor is not None:
            try:
                tail = self._decompressor.finish()
            except Exception as e:
                self.error = self.error or f"cannot decompress the end of the stream: {e}"
        if self.passthrough:
            return self._out([tail])
        lines = self._lines.feed(tail) if tail else []
        lines += self._lines.finish()
        return self._run(lines, final=True)

    # ------------------------------------------------------------------ internals

    def _run(self, lines: list[tuple[str, bytes]], final: bool) -> list[bytes]:
        out: list[bytes] = []
        for i, (line, raw) in enumerate(lines):
            self._pending_raw += raw
            try:
                item = self._events.feed_line(line)
                if isinstance(item, SSEComment):
                    del self._pending_raw[len(self._pending_raw) - len(raw) :]
                    out.append(encode_event(item))
                elif item is not None:
                    self._dispatch(item, out)
            except Exception as e:
                rest = b"".join(r for _, r in lines[i + 1 :])
                return self._fail(f"{type(e).__name__}: {e}", bytes(self._pending_raw) + rest, out)
        if final:
            try:
                last = self._events.finish()
                if last is not None:
                    self._dispatch(last, out)
                events = self._decoder.finish()
                for stage in self._stages:
                    events = _feed_all(stage, events) + stage.finish()
                out.extend(self._encode(events))
                out.extend(encode_pairs(self._encoder.finish()))
            except Exception as e:
                return self._fail(f"{type(e).__name__}: {e}", bytes(self._pending_raw), out)
        return self._out(out)

    def _dispatch(self, item: SSEEvent, out: list[bytes]) -> None:
        if not item.data:
            # A named event without data carries nothing a dialect could decode.
            self._pending_raw.clear()
            return
        self.events_in += 1
        events = self._decoder.feed(item.data, item.event)
        for stage in self._stages:
            events = _feed_all(stage, events)
        out.extend(self._encode(events))
        self._pending_raw.clear()

    def _encode(self, events: Iterable[Event]) -> list[bytes]:
        out: list[bytes] = []
        for event in events:
            out.extend(encode_pairs(self._encoder.feed(event)))
        return out

    def _fail(self, why: str, raw: bytes, done: Sequence[bytes] = ()) -> list[bytes]:
        self.passthrough = True
        self.error = why
        self._pending_raw.clear()
        return self._out([*done, *self._drain_stages(), raw, self._lines.pending()])

    def _drain_stages(self) -> list[bytes]:
        """What stages still hold (e.g. text the parser kept back) goes out before the raw rest."""
        out: list[bytes] = []
        try:
            for i, stage in enumerate(self._stages):
                events = stage.finish()
                for later in self._stages[i + 1 :]:
                    events = _feed_all(later, events)
                out.extend(self._encode(events))
        except Exception:  # already failing: keep what could be drained
            pass
        return out

    def _out(self, parts: Sequence[bytes]) -> list[bytes]:
        data = b"".join(parts)
        if not data:
            return []
        self.bytes_out += len(data)
        return [data]


def _feed_all(stage: Stage, events: list[Event]) -> list[Event]:
    out: list[Event] = []
    for event in events:
        out.extend(stage.feed(event))
    return out
