"""The load generator: raw HTTP/1.1 over asyncio, reading the stamps back from what reaches
the client in each dialect (events/s, added delay, lost and reordered events).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

from benchlib.base import (
    CARRY,
    HOST,
    IO_TIMEOUT,
    LAZY_RCVBUF,
    LAZY_READ_S,
    MAX_BODY,
    MAX_EVENTS,
    STAMP,
)


class Delays:
    """Arrival minus send time of every event; those sent in ``window`` (monotonic ns) also
    in ``steady``: after every stream has started and before the first one ends."""

    def __init__(self, window: tuple[int, int] | None) -> None:
        self.all: list[int] = []
        self.steady: list[int] = []
        self.lo, self.hi = window or (0, 2**63)

    def add(self, sent: int, now: int) -> None:
        self.all.append(now - sent)
        if self.lo <= sent < self.hi:
            self.steady.append(now - sent)


class Stamps:
    """Finds the upstream's stamps in a client-dialect body as it arrives (split anywhere)."""

    def __init__(self, events: int, delays: Delays | None = None) -> None:
        self.seen = bytearray(events)
        self.unique = 0
        self.reordered = 0
        self.highest = -1
        self.total: int | None = None
        """How many events the upstream sent (its ``@n=`` at the end), once that arrived."""
        self.delays = delays
        self.carry = b""
        self.sample = bytearray()
        """The first 64 kB as received, for checks (the invoke call) and error messages."""

    @property
    def lost(self) -> int:
        return (self.total if self.total is not None else len(self.seen)) - self.unique

    def feed(self, data: bytes, now: int) -> None:
        if len(self.sample) < 65536:
            self.sample += data[: 65536 - len(self.sample)]
        if self.total is not None and self.unique >= self.total:
            # Every event the upstream sent has arrived: what follows can only repeat them
            # (a Responses stream ends with its whole text four times over), and reading
            # those stamps one by one made the load generator the bottleneck of that column.
            return
        buf = self.carry + data if self.carry else data
        end = 0
        seen, delays = self.seen, self.delays
        for m in STAMP.finditer(buf):
            end = m.end()
            seq_text = m.group(1)
            if seq_text is None:
                self.total = int(m.group(3))
                continue
            seq = int(seq_text)
            if seq >= len(seen):
                if seq >= MAX_EVENTS:
                    continue
                seen.extend(bytes(max(seq + 1 - len(seen), len(seen))))
            if seen[seq]:
                continue  # a repeat (Responses' final events carry the whole text again)
            seen[seq] = 1
            self.unique += 1
            if seq < self.highest:
                self.reordered += 1
            else:
                self.highest = seq
            if delays is not None:
                delays.add(int(m.group(2)), now)
        self.carry = buf[end:][-CARRY:]


class Collect:
    """Keeps a (small) body whole."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def feed(self, data: bytes, now: int) -> None:
        self.size += len(data)
        if self.size > MAX_BODY:
            raise ValueError("response body too large")
        self.parts.append(data)

    @property
    def body(self) -> bytes:
        return b"".join(self.parts)


type Sink = Stamps | Collect


class ResponseParser:
    """Incremental HTTP/1.1 response parser: content-length, chunked or until close."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.buf = bytearray()
        self.state = "head"
        self.remaining = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.body: list[bytes] = []
        """Body bytes of the read being parsed, for the sink."""

    def feed(self, data: bytes, now: int) -> bool:
        """True once the response is complete. The body bytes of one read go to the sink in
        one piece (a read holds many HTTP chunks: the sink scans them once), and the read is
        walked by offset, never copied per chunk."""
        try:
            return self._feed(bytes(self.buf) + data if self.buf else data)
        finally:
            if self.body:
                self.sink.feed(self.body[0] if len(self.body) == 1 else b"".join(self.body), now)
                self.body.clear()

    def _feed(self, buf: bytes) -> bool:
        pos, end = 0, len(buf)
        for _ in range(end + 2):  # each turn consumes bytes or stops
            state = self.state
            if state == "head":
                i = buf.find(b"\r\n\r\n", pos)
                if i < 0:
                    if end - pos > 65536:
                        raise ValueError("response head too long")
                    break
                self._head(buf[pos:i].decode("latin-1"))
                pos = i + 4
            elif state == "close":
                if pos < end:
                    self.body.append(buf[pos:])
                pos = end
                break
            elif state in ("length", "data"):
                if pos >= end:
                    break
                take = min(self.remaining, end - pos)
                self.body.append(buf[pos : pos + take])
                pos += take
                self.remaining -= take
                if self.remaining == 0:
                    self.state = "crlf" if state == "data" else "done"
            elif state == "crlf":
                if end - pos < 2:
                    break
                pos += 2
                self.state = "size"
            elif state == "size":
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    break
                size = int(buf[pos:i].split(b";")[0], 16)
                pos = i + 2
                self.state, self.remaining = ("trailer", 0) if size == 0 else ("data", size)
            elif state == "trailer":
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    break
                if i == pos:
                    self.state = "done"
                pos = i + 2
            if self.state == "done":
                break
        else:
            raise AssertionError("parser made no progress")
        self.buf = bytearray(buf[pos:]) if pos < end else bytearray()
        return self.state == "done"

    def _head(self, head: str) -> None:
        lines = head.split("\r\n")
        version, _, rest = lines[0].partition(" ")
        self.status = int(rest.split(" ", 1)[0])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        conn = self.headers.get("connection", "").lower()
        self.keep_alive = conn != "close" and not (version == "HTTP/1.0" and conn != "keep-alive")
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.state = "size"
        elif "content-length" in self.headers:
            self.remaining = int(self.headers["content-length"])
            self.state = "length" if self.remaining else "done"
        elif self.status in (204, 304):
            self.state = "done"
        else:
            self.state, self.keep_alive = "close", False

    def closed(self) -> bool:
        """The connection ended: True if that completes the response."""
        if self.state == "close":
            self.state = "done"
        return self.state == "done"


class Conn(asyncio.Protocol):
    """One client connection; requests one at a time (keep-alive).

    ``lazy`` (unpaced runs): after each read the connection rests ``LAZY_READ_S`` before it
    reads again, so that a read takes what arrived meanwhile. An eager reader wakes for every
    chunk the proxy writes: on a 2-core machine its system calls would take the CPU the proxy
    is measured on. Paced runs read eagerly (the delay of each event is measured)."""

    def __init__(self, lazy: bool = False) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None
        self.waiter: asyncio.Future[ResponseParser] | None = None
        self.open = False
        self.lazy = lazy

    @classmethod
    async def connect(cls, port: int, lazy: bool = False) -> Conn:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: cls(lazy), HOST, port), IO_TIMEOUT
        )
        return conn

    def _rest(self) -> None:
        transport = self.transport
        if transport is not None and self.open:
            transport.pause_reading()
            asyncio.get_running_loop().call_later(LAZY_READ_S, self._wake)

    def _wake(self) -> None:
        if self.transport is not None and self.open and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.open = True
        sock = transport.get_extra_info("socket")
        if self.lazy and sock is not None:
            # What the proxy writes while this connection rests must fit in the kernel's
            # buffer, or the proxy waits for the load generator (mitmproxy reads nothing more
            # while a client's writes are pending). With the default buffer the Responses
            # column's one-stream windows measured 0.79 times bare's events/s, 0.88 with this
            # one (its CPU per event 1.19 and 1.07 times bare's); OpenAI→OpenAI and
            # Anthropic→OpenAI moved by 0.02 at most.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, LAZY_RCVBUF)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        parser, waiter = self.parser, self.waiter
        if parser is None or waiter is None or waiter.done():
            return
        try:
            if parser.feed(data, now):
                waiter.set_result(parser)
            elif self.lazy:
                self._rest()
        except Exception as e:
            waiter.set_exception(e)

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        parser, waiter = self.parser, self.waiter
        if parser is None or waiter is None or waiter.done():
            return
        if parser.closed():
            waiter.set_result(parser)
        else:
            waiter.set_exception(ConnectionError(f"connection closed mid-response ({exc})"))

    async def request(self, raw: bytes, sink: Sink, timeout: float) -> ResponseParser:
        assert self.transport is not None
        if not self.open:
            raise ConnectionError("connection closed")
        self.parser = ResponseParser(sink)
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return await asyncio.wait_for(self.waiter, timeout)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()
