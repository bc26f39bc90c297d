"""The relay: a loopback HTTP/1.1 server that answers mitmproxy with what a flow's *leg* gives.

A flow on a route with a ``fallback`` chain or a key pool, and every routed flow's stream (one
upstream path: docs/architecture.md), comes here (127.0.0.1, no key, no body) with a
single-use token naming its leg (asked of the owner: ``take_leg``); the leg's answer is written
back as it comes, so mitmproxy reads it as any upstream's stream. Why: mitmproxy has no
first-byte timeout and cannot take a request back once sent (docs/routes.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus

import h11

from addon.redact import clean

log = logging.getLogger("cursor_bridge")  # the shell's (``notes``); the relay needs nothing more

TOKEN_HEADER = "x-cursor-bridge-relay"
"""The request header that names the leg (a random single-use token)."""
IDLE = 300.0
"""Seconds a kept-alive connection from mitmproxy may wait for its next request."""
READ = 65536
HOLD = 256 * 1024
"""Bytes of an answer held for one write before the relay writes and waits for mitmproxy."""


class BodyCut(ConnectionError):
    """An upstream body ended before its end: ``cause`` says how (``upstream_cut``: the
    connection closed, or TLS without close_notify; ``upstream_reset``; ``upstream_idle``:
    nothing came for ``bridge_stream_idle_timeout``), the stream processor's input
    (``StreamProcessor.upstream_cut``)."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"the body ended before its end ({cause})")
        self.cause = cause


@dataclass(slots=True)
class Relayed:
    """An answer for mitmproxy: the upstream's status line and headers (hop-by-hop ones
    left out) and its body, raw (still content-encoded), as an async iterator."""

    status: int
    reason: bytes
    """The status line's reason phrase (empty: the standard one)."""
    headers: list[tuple[bytes, bytes]]
    body: AsyncIterator[bytes]
    """Its pieces as the upstream's reads give them."""
    close: Callable[[], Awaitable[None]]
    """Lets go of the upstream's connection (called once the body is written or abandoned)."""
    passed: Passed | None = None
    """The body's bytes written to mitmproxy as the upstream framed them (the headers say
    how: ``content-length``, else chunked), instead of ``body`` framed again."""
    cut: Callable[[str], None] | None = None
    """Told the cause when the body breaks off (``BodyCut``): the relay then ends a chunked
    body cleanly (its last chunk), the flow's reader writes the client's ending."""


type Passed = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
"""Writes a body's bytes to mitmproxy's connection as they come, until its end; stops when
mitmproxy closes it (``ConnectionError``); raises when the body ends short."""


type Leg = Callable[[], Awaitable[Relayed]]
"""What the relay runs for one flow: its attempts, then the answer to relay."""


async def _nothing() -> None:
    return None


async def _once(body: bytes) -> AsyncIterator[bytes]:
    if body:
        yield body


def whole(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> Relayed:
    """An answer whose body is already read (an error, the bridge's own)."""
    return Relayed(status, b"", headers, _once(body), _nothing)


class Relay:
    """The loopback server; the legs are its owner's (``take_leg``: a token's leg, once)."""

    def __init__(self, take_leg: Callable[[str], Leg | None]) -> None:
        self._take_leg = take_leg
        self._server: asyncio.Server | None = None
        self._lock = asyncio.Lock()
        self.port = 0

    async def start(self) -> int:
        """The relay's port, the server started on first use (in mitmproxy's event loop)."""
        async with self._lock:
            if self._server is None:
                server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
                self.port = int(server.sockets[0].getsockname()[1])
                self._server = server
                log.debug("cursor-bridge: fallback relay on 127.0.0.1:%d", self.port)
        return self.port

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 2.0)

    # ------------------------------------------------------------------ one connection

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        left = b""
        try:
            while True:  # one request at a time (mitmproxy does not pipeline), kept alive
                conn = h11.Connection(h11.SERVER)
                if left:
                    conn.receive_data(left)  # (b"" would tell h11 the connection closed)
                request = await asyncio.wait_for(_request(conn, reader), IDLE)
                if request is None or not await self._answer(request, reader, writer):
                    return
                left, closed = conn.trailing_data
                if closed or _header(request, "connection").lower() == "close":
                    return
        except (TimeoutError, ConnectionError, OSError, h11.ProtocolError):
            return  # mitmproxy went away, or spoke no HTTP/1.1 we serve: the connection ends
        except Exception as e:
            log.error(
                "cursor-bridge: fallback relay: internal error (%s: %s)",
                type(e).__name__,
                clean(e, 300),
            )
        finally:
            writer.close()

    async def _answer(
        self, request: h11.Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """The leg's answer written to mitmproxy; False when the connection must end."""
        token = _header(request, TOKEN_HEADER)
        leg = self._take_leg(token) if token else None
        if leg is None:
            body = b"cursor-bridge relay: unknown or used token\n"
            relayed = whole(404, [(b"content-type", b"text/plain")], body)
        else:
            got = await _unless_gone(leg(), reader)
            if got is None:
                return False  # mitmproxy closed the connection: its client went away
            relayed = got
        try:
            await _write(relayed, reader, writer)
            return True
        except BodyCut as e:  # no way to tell mitmproxy but to cut its connection too
            log.debug("cursor-bridge: relay: answer cut off (%s)", e.cause)  # the flow's line
            return False
        except (ConnectionError, OSError):
            return False
        except Exception as e:  # the upstream's body failed mid-way (its connection): cut it off
            log.info("cursor-bridge: fallback relay: answer cut off (%s)", type(e).__name__)
            return False
        finally:
            await relayed.close()


async def _write(
    relayed: Relayed, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """The answer as HTTP/1.1: its head, then its body as it comes — as is when it has a
    length, else in chunks. The pieces the upstream's reads give at once are written at once
    (one write when the loop next runs, not one per piece). mitmproxy closing the connection
    (its client went away) stops it: the upstream is not read on for nobody."""
    names = {k.lower() for k, _ in relayed.headers}
    chunked = b"content-length" not in names
    reason = relayed.reason or _reason(relayed.status)
    head = [b"HTTP/1.1 %d %s\r\n" % (relayed.status, reason)]
    head += [k + b": " + v + b"\r\n" for k, v in relayed.headers]
    head.append(b"transfer-encoding: chunked\r\n\r\n" if chunked else b"\r\n")
    writer.write(b"".join(head))
    ended = False
    try:
        ended = await _body(relayed, reader, writer, chunked)
    except BodyCut as e:  # the cause to the flow (its line); a clean end for mitmproxy, if it can
        if relayed.cut is not None:
            relayed.cut(e.cause)
        if relayed.cut is None or not chunked:
            raise
    if chunked and not ended:
        writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _body(
    relayed: Relayed, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, chunked: bool
) -> bool:
    """The body written; True when ``passed`` wrote it whole, its end included. mitmproxy
    closing the connection (its client hung up) stops the body where it waits — an upstream
    read, a web search, the call after it (``search_leg``) — not at its next piece."""
    if relayed.passed is not None:
        await relayed.passed(reader, writer)
        return True
    pieces = asyncio.ensure_future(_pieces(relayed, reader, writer, chunked))
    gone = asyncio.ensure_future(reader.read(1))
    try:
        await asyncio.wait({pieces, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await stop_reading(gone)
        if not pieces.done():
            pieces.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pieces
    if pieces.cancelled():
        raise ConnectionResetError("mitmproxy closed the relay's connection")
    pieces.result()
    return False


async def _pieces(
    relayed: Relayed, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, chunked: bool
) -> None:
    """The body's pieces written as they come (``_body``)."""
    pending: list[bytes] = []
    held = 0

    def flush() -> None:
        nonlocal held
        if pending and not writer.is_closing():
            writer.write(b"".join(pending))
        pending.clear()
        held = 0

    loop = asyncio.get_running_loop()
    try:
        async for piece in relayed.body:
            if reader.at_eof() or writer.is_closing():
                raise ConnectionResetError("mitmproxy closed the relay's connection")
            if not piece:
                continue
            if not pending:
                loop.call_soon(flush)
            pending.append(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            held += len(piece)
            if held >= HOLD:
                flush()
                await writer.drain()
    finally:
        flush()  # what came before a failure still goes (the cut follows it)


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b"Status"


async def _request(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    """The next request, its body read and let go; None when mitmproxy closed the connection."""
    request: h11.Request | None = None
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(READ))
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed):
            return None


async def _unless_gone(leg: Awaitable[Relayed], reader: asyncio.StreamReader) -> Relayed | None:
    """The leg's answer, or None when mitmproxy closes the connection first (the client hung
    up while the attempts ran: they are cancelled)."""
    task = asyncio.ensure_future(leg)
    gone = asyncio.ensure_future(reader.read(1))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await stop_reading(gone)
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        late = await task
        await late.close()
    return None


async def stop_reading(gone: asyncio.Future[bytes]) -> None:
    """A ``reader.read`` watching for mitmproxy's close, stopped: its end awaited, so that the
    next read of the connection does not find it still waiting."""
    gone.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await gone


def _header(request: h11.Request, name: str) -> str:
    wanted = name.encode()
    for key, value in request.headers:
        if key == wanted:
            return value.decode("latin-1")
    return ""
