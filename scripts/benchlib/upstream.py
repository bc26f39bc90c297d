"""The scripted upstream: a child process that answers every POST like an OpenAI
chat-completions server, its events stamped with their send time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass

from benchlib.base import (
    ANSWER,
    BATCH,
    EVENT,
    FIRST_EVENT,
    HOST,
    IO_TIMEOUT,
    LAST_EVENTS,
    MAX_BODY,
    MAX_EVENTS,
    SLOTS,
    TEXT_EVENT,
    TRIGGER_RE,
    UPSTREAM_LIFETIME,
)


@dataclass(eq=False)
class _PacedStream:
    writer: asyncio.StreamWriter
    events: int
    tail: bytes
    done: asyncio.Future[None]
    seq: int = 0


class ScriptedUpstream:
    """The OpenAI-shaped upstream; runs in its own process (``--serve-upstream``)."""

    MAX_PACE = 1000.0
    """Events/s per paced stream, at most."""

    def __init__(self) -> None:
        self.slots: list[set[_PacedStream]] = [set() for _ in range(SLOTS)]
        self.next_slot = 0
        self.pace = 0.0
        self.wake = asyncio.Event()

    async def serve(self) -> None:
        server = await asyncio.start_server(self.handle, HOST, 0, backlog=2048)
        port = server.sockets[0].getsockname()[1]
        print(f"listening {port}", flush=True)
        ticker = asyncio.create_task(self.tick())
        try:
            async with server:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(server.serve_forever(), UPSTREAM_LIFETIME)
        finally:
            ticker.cancel()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for _ in range(1_000_000):  # requests on one keep-alive connection
                request = await self.read_request(reader)
                if request is None:
                    break
                headers, body, received = request
                if b'"stream":true' in body or b'"stream": true' in body:
                    await self.stream(writer, headers, body)
                else:
                    answer = ANSWER % received
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(answer), answer)
                    )
                    await asyncio.wait_for(writer.drain(), IO_TIMEOUT)
                if headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def read_request(
        reader: asyncio.StreamReader,
    ) -> tuple[dict[str, str], bytes, int] | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 300)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            return None
        headers: dict[str, str] = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            size = int(headers["content-length"])
            if size > MAX_BODY:
                raise ValueError("request body too large")
            body = await asyncio.wait_for(reader.readexactly(size), IO_TIMEOUT)
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            parts: list[bytes] = []
            total = 0
            for _ in range(MAX_BODY):
                size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), IO_TIMEOUT)
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    for _ in range(100):  # trailers, then the empty line
                        if await asyncio.wait_for(reader.readuntil(b"\r\n"), IO_TIMEOUT) == b"\r\n":
                            break
                    break
                total += size
                if total > MAX_BODY:
                    raise ValueError("request body too large")
                parts.append(await asyncio.wait_for(reader.readexactly(size + 2), IO_TIMEOUT))
            body = b"".join(p[:-2] for p in parts)
        else:
            body = b""
        return headers, body, time.monotonic_ns()

    async def stream(
        self, writer: asyncio.StreamWriter, headers: dict[str, str], body: bytes
    ) -> None:
        """``x-bench-events`` events at ``x-bench-pace`` per second, or (pace 0) as fast as
        the proxy takes them, ``x-bench-per-chunk`` events per HTTP chunk (1, as OpenAI and
        Anthropic send them, unless a burst is asked for)."""
        events = max(0, min(MAX_EVENTS, int(headers.get("x-bench-events", "100"))))
        pace = float(headers.get("x-bench-pace", "0"))
        per_chunk = max(1, min(BATCH, int(headers.get("x-bench-per-chunk", "1"))))
        call = b""
        if b"<<CALL_" in body and (m := TRIGGER_RE.search(body)):
            # The model's side of the invoke protocol: a call after the text.
            text = f'\n{m.group().decode()}\n<invoke name="read_file">{{"path": "src/main.py"}}</invoke>'
            pieces = [text[i : i + 12] for i in range(0, len(text), 12)]
            call = b"".join(TEXT_EVENT % json.dumps(p).encode() for p in pieces)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        _write_chunk(writer, FIRST_EVENT)
        if pace > 0:
            self.pace = pace
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            st = _PacedStream(writer, events, _tail(events, call), done)
            slot = self.slots[self.next_slot % SLOTS]
            self.next_slot += 1
            slot.add(st)
            self.wake.set()
            try:
                await asyncio.wait_for(done, events / pace + 120)
            finally:
                slot.discard(st)
        else:
            seq = 0
            for _ in range(events):  # bounded: at least one event per turn
                if seq >= events:
                    break
                n = min(BATCH, events - seq)
                now = time.monotonic_ns()
                events_now = [EVENT % (s, now) for s in range(seq, seq + n)]
                chunks = [b"".join(events_now[i : i + per_chunk]) for i in range(0, n, per_chunk)]
                writer.write(b"".join([b"%x\r\n%s\r\n" % (len(c), c) for c in chunks]))
                seq += n
                await asyncio.wait_for(writer.drain(), IO_TIMEOUT)
                await asyncio.sleep(0)  # let the other streams write too
            _write_chunk(writer, _tail(seq, call))
        writer.write(b"0\r\n\r\n")
        await asyncio.wait_for(writer.drain(), IO_TIMEOUT)

    async def tick(self) -> None:
        """Every paced stream gets one event per 1/pace s, in its slot of that period; idle
        (no paced stream) it sleeps until one comes."""
        loop = asyncio.get_running_loop()
        n = 0
        start = loop.time()
        for _ in range(int(UPSTREAM_LIFETIME * self.MAX_PACE * SLOTS)):
            if not any(self.slots):
                self.wake.clear()
                await self.wake.wait()
                start, n = loop.time(), 0
            period = 1.0 / min(self.MAX_PACE, self.pace or 100.0) / SLOTS
            next_at = start + (n + 1) * period
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -1.0:  # far behind (paused, or overloaded): start afresh
                start, n = loop.time(), 0
                continue
            slot = self.slots[n % SLOTS]
            n += 1
            for st in list(slot):
                if st.done.done() or st.writer.is_closing():
                    slot.discard(st)
                    if not st.done.done():
                        st.done.set_exception(ConnectionError("client went away"))
                    continue
                if st.seq < st.events:
                    _write_chunk(st.writer, EVENT % (st.seq, time.monotonic_ns()))
                    st.seq += 1
                if st.seq >= st.events:
                    _write_chunk(st.writer, st.tail)
                    slot.discard(st)
                    st.done.set_result(None)


def _tail(count: int, call: bytes) -> bytes:
    """The stream's end: how many events it had (``@n=COUNT;``), the call, finish, [DONE]."""
    return TEXT_EVENT % (b'"@n=%d;"' % count) + call + LAST_EVENTS % (count, count + 50)


def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    if data:
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))


def serve_upstream() -> None:
    asyncio.run(ScriptedUpstream().serve())
