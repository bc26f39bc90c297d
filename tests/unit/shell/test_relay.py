"""The fallback relay on loopback (``addon.shell.outbound.relay``), asked as mitmproxy asks it (HTTP/1.1,
one connection kept alive): a leg's body arrives piece by piece as the leg gives it, a token
serves once, a client that goes away cancels the leg and lets go of its upstream, a body that
fails mid-way cuts the connection (the client never reads a short answer as a whole one), and
the same connection serves the next flow's leg. Then ``Retry.open``, the attempt the legs make,
against loopback servers: refused, no TLS where TLS was asked, no first byte in time, and only
the request's own headers sent."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from addon.plan.fallback import NoAnswer, Reason
from addon.shell.outbound.chunks import Chunks
from addon.shell.outbound.http1 import Opened
from addon.shell.outbound.relay import TOKEN_HEADER, Leg, Relay, Relayed, whole
from addon.shell.outbound.retry import Retry

TIMEOUT = 10.0


def run[T](make: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(make(), 30))


class Pieces:
    """A body given piece by piece, each only when the test lets it go (``release``)."""

    def __init__(self, *pieces: bytes, fail_after: int | None = None) -> None:
        self.pieces = list(pieces)
        self.fail_after = fail_after
        self.gate = asyncio.Queue[None]()
        self.closed = asyncio.Event()
        self.given = 0

    async def body(self) -> AsyncIterator[bytes]:
        for i, piece in enumerate(self.pieces):
            if i == self.fail_after:
                raise httpx.RemoteProtocolError("peer closed connection")
            await self.gate.get()
            self.given += 1
            yield piece

    def release(self) -> None:
        self.gate.put_nowait(None)

    async def close(self) -> None:
        self.closed.set()

    def relayed(self, status: int = 200) -> Relayed:
        headers = [(b"content-type", b"text/event-stream")]
        return Relayed(status, b"OK", headers, self.body(), self.close)


class Legs:
    """What the relay asks its owner for: each token's leg, once (the flows table's part)."""

    def __init__(self) -> None:
        self._legs: dict[str, Leg] = {}

    def add(self, leg: Leg) -> str:
        token = f"t{len(self._legs)}"
        self._legs[token] = leg
        return token

    def take(self, token: str) -> Leg | None:
        return self._legs.pop(token, None)


def test_a_legs_body_arrives_as_it_comes_and_the_connection_serves_the_next_flow() -> None:
    async def go() -> None:
        legs = Legs()
        relay = Relay(legs.take)
        port = await relay.start()
        pieces = Pieces(b"data: 1\n\n", b"data: 2\n\n")

        async def leg() -> Relayed:
            return pieces.relayed()

        token = legs.add(leg)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=TIMEOUT) as c:
            async with c.stream("POST", "/v1/x", headers={TOKEN_HEADER: token}) as got:
                assert got.status_code == 200
                assert got.headers["content-type"] == "text/event-stream"
                assert got.headers["transfer-encoding"] == "chunked"
                reading = got.aiter_raw()
                pieces.release()
                assert await anext(reading) == b"data: 1\n\n"  # before the second exists
                pieces.release()
                assert await anext(reading) == b"data: 2\n\n"
                with pytest.raises(StopAsyncIteration):
                    await anext(reading)
            assert pieces.closed.is_set()
            # A token serves once.
            again = await c.post("/v1/x", headers={TOKEN_HEADER: token})
            assert again.status_code == 404
            # The same kept-alive connection serves the next flow's leg.
            second = legs.add(lambda: _whole(b'{"ok": true}'))
            got2 = await c.post("/v1/x", headers={TOKEN_HEADER: second})
            assert got2.status_code == 201 and got2.json() == {"ok": True}
            assert (await c.post("/v1/x")).status_code == 404  # no token at all
        await relay.stop()

    run(go)


async def _whole(body: bytes) -> Relayed:
    return whole(201, [(b"content-type", b"application/json")], body)


def test_a_client_that_goes_away_cancels_the_leg() -> None:
    async def go() -> None:
        legs = Legs()
        relay = Relay(legs.take)
        port = await relay.start()
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def leg() -> Relayed:
            started.set()
            try:
                await asyncio.sleep(60)  # an upstream that sends no first byte
            except asyncio.CancelledError:
                cancelled.set()
                raise
            raise AssertionError("not reached")

        token = legs.add(leg)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST / HTTP/1.1\r\nhost: x\r\n{TOKEN_HEADER}: {token}\r\ncontent-length: 0\r\n\r\n".encode()
        )
        await writer.drain()
        await asyncio.wait_for(started.wait(), TIMEOUT)
        writer.close()  # mitmproxy closes: its client hung up
        await asyncio.wait_for(cancelled.wait(), TIMEOUT)
        await relay.stop()

    run(go)


def test_a_client_that_goes_away_mid_answer_stops_the_upstreams_reading() -> None:
    async def go() -> None:
        legs = Legs()
        relay = Relay(legs.take)
        port = await relay.start()
        pieces = Pieces(b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n")

        async def leg() -> Relayed:
            return pieces.relayed()

        token = legs.add(leg)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST / HTTP/1.1\r\nhost: x\r\n{TOKEN_HEADER}: {token}\r\ncontent-length: 0\r\n\r\n".encode()
        )
        pieces.release()
        head = await asyncio.wait_for(reader.readuntil(b"data: 1\n\n"), TIMEOUT)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        writer.close()  # mitmproxy closes: its client hung up mid-answer
        # The body is stopped where it waits (an upstream read, a web search: ``search_leg``),
        # not at its next piece: the upstream is let go before it sends one.
        await asyncio.wait_for(pieces.closed.wait(), TIMEOUT)
        pieces.release()  # the upstream's next piece comes: nobody is there for it
        await asyncio.sleep(0.2)
        assert pieces.given == 1  # the second was never taken
        await relay.stop()

    run(go)


def test_a_body_that_fails_mid_way_cuts_the_connection() -> None:
    async def go() -> None:
        legs = Legs()
        relay = Relay(legs.take)
        port = await relay.start()
        pieces = Pieces(b"data: 1\n\n", b"never", fail_after=1)

        async def leg() -> Relayed:
            return pieces.relayed()

        token = legs.add(leg)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=TIMEOUT) as c:
            pieces.release()
            with pytest.raises(httpx.RemoteProtocolError):
                async with c.stream("POST", "/", headers={TOKEN_HEADER: token}) as got:
                    assert [p async for p in got.aiter_raw()] == [b"data: 1\n\n"]
        assert pieces.closed.is_set()
        await relay.stop()

    run(go)


# ---------------------------------------------------------------------- Retry.open


@contextlib.asynccontextmanager
async def server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[int]:
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield int(srv.sockets[0].getsockname()[1])
    finally:
        srv.close()


def request_to(url: str, **headers: str) -> http.Request:
    req = tutils.treq()
    req.url = url
    req.method = "POST"
    req.headers = http.Headers(**{"content-type": "application/json", **headers})
    req.content = b'{"model": "m"}'
    return req


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def opened(url: str, timeout: float = 5.0, **headers: str) -> Opened | NoAnswer:
    retry = Retry()
    try:
        return await retry.open(tflow.tflow(), request_to(url, **headers), timeout)
    finally:
        await retry.done()


def test_open_says_why_no_answer_came() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.sleep(30)  # reads the request, answers nothing

    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()

    async def go() -> None:
        refused = NoAnswer(Reason.UNREACHABLE, "connection refused")
        assert await opened(f"http://127.0.0.1:{free_port()}/v1") == refused
        async with server(plain) as port:
            got = await opened(f"https://127.0.0.1:{port}/v1")
            assert got == NoAnswer(Reason.UNREACHABLE, "TLS handshake failed")
        async with server(silent) as port:
            got = await opened(f"https://127.0.0.1:{port}/v1", timeout=0.5)
            # the TLS handshake never ends
            assert got == NoAnswer(Reason.TIMED_OUT, "connect timed out")
            started = asyncio.get_running_loop().time()
            got = await opened(f"http://127.0.0.1:{port}/v1", timeout=0.5)
            assert got == NoAnswer(Reason.TIMED_OUT, "timed out before the first byte")
            assert asyncio.get_running_loop().time() - started < 5

    with taddons.context():
        run(go)


def test_open_sends_the_requests_own_headers_and_leaves_the_body_to_read() -> None:
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def go() -> None:
        retry = Retry()
        async with server(answer) as port:
            url = f"http://127.0.0.1:{port}/v1"
            got = await retry.open(tflow.tflow(), request_to(url, authorization="Bearer k"), 5.0)
            assert isinstance(got, Opened) and got.status_code == 200
            assert b"".join([c async for c in got.aiter_raw()]) == b"data: 1\n\n"
            await got.aclose()
        await retry.done()
        head = seen[0].decode().lower()
        assert "authorization: bearer k" in head
        for added in ("user-agent", "accept-encoding", "accept:"):
            assert added not in head

    with taddons.context():
        run(go)


# ---------------------------------------------------------------------- the body passed through


def test_a_chunked_answer_passes_through_as_its_bytes_and_the_connection_is_kept() -> None:
    """The upstream's chunks reach mitmproxy as the upstream wrote them (sizes, extensions
    and the last chunk's trailer included: read only to find the end), and the next attempt
    to the same origin goes on the same connection."""
    connections: list[int] = []
    body = b"9;x=1\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\nx-t: 1\r\n\r\n"

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        for _ in range(2):
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(len(b'{"model": "m"}'))
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + body[:20])
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(body[20:])
            await writer.drain()

    async def go() -> None:
        retry = Retry()
        legs = Legs()
        relay = Relay(legs.take)
        port = await relay.start()
        async with server(answer) as up:
            for _ in range(2):
                got = await retry.open(tflow.tflow(), request_to(f"http://127.0.0.1:{up}/v1"), 5.0)
                assert isinstance(got, Opened) and got.framing == "chunked"

                async def leg(got: Opened = got) -> Relayed:
                    return Relayed(200, b"OK", [], got.aiter_raw(), got.aclose, got.passed_to)

                token = legs.add(leg)
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(
                    f"GET / HTTP/1.1\r\nhost: x\r\n{TOKEN_HEADER}: {token}\r\n\r\n".encode()
                )
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
                assert b"transfer-encoding: chunked" in head
                got_body = await asyncio.wait_for(reader.readuntil(b"x-t: 1\r\n\r\n"), TIMEOUT)
                assert got_body == body
                writer.close()
                await asyncio.sleep(0.1)  # the relay lets go of the upstream's connection
        assert len(connections) == 1
        await retry.done()
        await relay.stop()

    with taddons.context():
        run(go)


def test_a_chunked_answer_rechunked_reaches_mitmproxy_as_one_chunk_per_upstream_read() -> None:
    """One upstream path: a chunked body's data goes on as ONE chunk per upstream read, so
    mitmproxy hands the stream callable one read of many events, not one pass per chunk
    (docs/speed.md "One upstream path"); the data is the upstream's, byte for byte, and the
    body ends with the last chunk."""
    events = [b"data: %d\n\n" % i for i in range(6)]
    first = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events[:4])
    second = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events[4:]) + b"0\r\n\r\n"
    go_on = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(len(b'{"model": "m"}'))
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + first)
        await writer.drain()
        await asyncio.wait_for(go_on.wait(), TIMEOUT)
        writer.write(second)
        await writer.drain()

    async def go() -> None:
        retry = Retry()
        legs = Legs()
        relay = Relay(legs.take)
        port = await relay.start()
        async with server(answer) as up:
            got = await retry.open(tflow.tflow(), request_to(f"http://127.0.0.1:{up}/v1"), 5.0)
            assert isinstance(got, Opened) and got.framing == "chunked"

            async def leg() -> Relayed:
                return Relayed(200, b"OK", [], got.aiter_raw(), got.aclose, got.rechunked_to)

            token = legs.add(leg)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET / HTTP/1.1\r\nhost: x\r\n{TOKEN_HEADER}: {token}\r\n\r\n".encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
            assert b"transfer-encoding: chunked" in head
            data = b"".join(events[:4])
            one = await asyncio.wait_for(reader.readexactly(len(data) + 6), TIMEOUT)
            assert one == b"%x\r\n%s\r\n" % (len(data), data)  # four chunks, one read: one
            go_on.set()
            data = b"".join(events[4:])
            rest = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), TIMEOUT)
            assert rest == b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
            writer.close()
        await retry.done()
        await relay.stop()

    with taddons.context():
        run(go)


def test_an_upstream_that_cuts_its_body_cuts_the_relayed_one() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()  # 90 bytes short

    async def go() -> None:
        retry, legs = Retry(), Legs()
        relay = Relay(legs.take)
        port = await relay.start()
        async with server(answer) as up:
            got = await retry.open(tflow.tflow(), request_to(f"http://127.0.0.1:{up}/v1"), 5.0)
            assert isinstance(got, Opened) and got.framing == "length"
            headers = [(b"content-length", b"100")]
            relayed = Relayed(200, b"OK", headers, got.aiter_raw(), got.aclose, got.passed_to)

            async def leg() -> Relayed:
                return relayed

            token = legs.add(leg)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=TIMEOUT) as c:
                with pytest.raises(httpx.RemoteProtocolError):
                    async with c.stream("GET", "/", headers={TOKEN_HEADER: token}) as r:
                        assert b"".join([p async for p in r.aiter_raw()]) == b"0123456789"
        await retry.done()
        await relay.stop()

    with taddons.context():
        run(go)


def test_a_client_gone_mid_answer_closes_the_upstreams_connection() -> None:
    upstream_saw_close = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        await reader.read()  # the body's bytes: until the relay closes the connection
        upstream_saw_close.set()

    async def go() -> None:
        retry, legs = Retry(), Legs()
        relay = Relay(legs.take)
        port = await relay.start()
        async with server(answer) as up:
            got = await retry.open(tflow.tflow(), request_to(f"http://127.0.0.1:{up}/v1"), 5.0)
            assert isinstance(got, Opened)
            relayed = Relayed(200, b"OK", [], got.aiter_raw(), got.aclose, got.passed_to)

            async def leg() -> Relayed:
                return relayed

            token = legs.add(leg)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET / HTTP/1.1\r\nhost: x\r\n{TOKEN_HEADER}: {token}\r\n\r\n".encode())
            await asyncio.wait_for(reader.readuntil(b"data: 1\n\n\r\n"), TIMEOUT)
            writer.close()  # mitmproxy closes: its client hung up mid-answer
            await asyncio.wait_for(upstream_saw_close.wait(), TIMEOUT)
        await retry.done()
        await relay.stop()

    with taddons.context():
        run(go)


# ---------------------------------------------------------------------- the chunk sizes


@given(
    pieces=st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    ext=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=6),
)
def test_chunks_find_the_end_and_the_data_however_the_reads_split_the_body(
    pieces: list[bytes], ext: bool, cuts: list[int]
) -> None:
    """``Chunks.feed`` (its whole-chunk shortcut included) gives the body's data and where it
    ends, whatever bytes each read holds: sizes in any case, extensions, a trailer."""
    body = (
        b"".join(
            b"%x%s\r\n%s\r\n" % (len(p), b";e=1" if ext else b"", p)
            if i % 2
            else b"%X\r\n%s\r\n" % (len(p), p)
            for i, p in enumerate(pieces)
        )
        + b"0\r\nx-t: 1\r\n\r\n"
    )
    wire = body + b"NEXT"
    points = sorted({c for c in cuts if c < len(wire)} | {0, len(wire)})
    chunks, out, end = Chunks(), [], -1
    for a, b in itertools.pairwise(points):
        at = chunks.feed(wire[a:b], out)
        if at >= 0:
            end = a + at
            break
    assert end == len(body)
    assert b"".join(out) == b"".join(pieces)
