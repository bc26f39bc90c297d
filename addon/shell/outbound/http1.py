"""The relay's HTTP/1.1 client: an attempt's answer, its head parsed, its body's bytes passed on.

Contract: one asyncio ``Protocol`` per upstream connection (direct, or through ``--mode
upstream``'s proxy); connections kept alive per origin. Why: httpx parsed every chunk into an
event and the relay framed it again, about twice a plain route's CPU per event (docs/speed.md,
"A route with a fallback")."""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import certifi

from addon.shell.outbound.chunks import Chunks
from addon.shell.outbound.relay import BodyCut, stop_reading

HOLD = 256 * 1024
"""Bytes the relay's writer may hold before the upstream's reading pauses."""
MAX_HEAD = 256 * 1024
"""An answer's head longer than this is not HTTP we read."""
IDLE_EXPIRY = 5.0
"""Seconds a kept-alive connection may wait in the pool before it is not reused."""
MAX_IDLE = 100
"""Kept-alive connections held per origin."""


class UpstreamClosed(ConnectionError):
    """The upstream closed the connection, or spoke no HTTP/1.1 we read."""


def _cause(exc: BaseException | None) -> str:
    return "upstream_reset" if isinstance(exc, ConnectionResetError) else "upstream_cut"


class ProxyRefused(ConnectionError):
    """The upstream proxy answered the CONNECT with other than 2xx."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a connection goes: the upstream, and the proxy it goes through (or None)."""

    scheme: str
    host: str
    port: int
    proxy: str | None
    """The upstream proxy's URL (``--mode upstream``): absolute-form for ``http://``, a CONNECT
    tunnel for ``https://``."""
    proxy_auth: str
    """Its ``Proxy-Authorization`` value, or ""."""
    insecure: bool


class Wire(asyncio.Protocol):
    """One upstream connection: a request's answer head, then its body to a sink (the relay's
    writer) as each read gives it, chunk framing included, read only for the chunk sizes that
    say where the answer ends (``Chunks``)."""

    def __init__(self, origin: Origin, pool: Pool | None) -> None:
        self.origin = origin
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.head: asyncio.Future[tuple[int, bytes, list[tuple[bytes, bytes]]]] | None = None
        self.got_bytes = False
        self.framing = "none"
        """How the body ends: ``chunked``, ``length``, ``close`` (at EOF) or ``none``."""
        self.left = 0
        """``length``: bytes of the body still to come."""
        self.chunks = Chunks()
        self.keep = False
        """The connection may serve another request once this body ended."""
        self.decode = False
        """The sink gets the body's data (its framing read off), not its bytes."""
        self.sink: Callable[[bytes], None] | None = None
        self.held: list[bytes] = []
        """The body's bytes come before a sink, read once one is there."""
        self.eof = False
        """The upstream closed the connection before a sink was there."""
        self.method = "GET"
        self.end: asyncio.Future[object] | None = None
        self.ended = False
        self.idle_since = 0.0
        self.paused = False
        self.resuming: asyncio.Future[None] | None = None
        """Waits for the relay's writer to drain, then reads on."""
        self.idle = 0.0
        """Seconds the body may send nothing before it is cut (``upstream_idle``); 0: none."""
        self.last_read = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.lost_by: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        """Woken by the body's first bytes, or its end, before its reader is there."""

    # ------------------------------------------------------------------ asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        if self.timer is not None:
            self.last_read = time.monotonic()
        if self.head is not None and not self.head.done():
            self._head_bytes(data)
        elif self.end is not None and not self.ended:
            self._body_bytes(data)
        else:  # bytes on an idle connection: not reusable
            self._close()

    def eof_received(self) -> bool | None:
        self._lost(_eof(self.transport))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc or UpstreamClosed("the upstream closed the connection"))
        if self.pool is not None:
            self.pool.forget(self)

    def _lost(self, exc: BaseException) -> None:
        if self.head is not None and not self.head.done():
            self.head.set_exception(exc)
        elif self.end is not None and not self.ended:
            if self.sink is None:
                self.eof, self.lost_by = True, exc
                _wake(self.waiter)
            elif self.framing == "close" and (isinstance(exc, UpstreamClosed) or exc is None):
                self._ended(b"", keep=False)  # a reset, TLS without close_notify: a cut
            else:
                self._cut(_cause(exc))

    def _cut(self, cause: str) -> None:
        self.ended = True
        self.keep = False
        if self.end is not None and not self.end.done():
            self.end.set_exception(BodyCut(cause))

    # ------------------------------------------------------------------ one request

    def ask(
        self, request: bytes, method: str
    ) -> asyncio.Future[tuple[int, bytes, list[tuple[bytes, bytes]]]]:
        """Sends ``request``; the answer's head (status, reason, headers) when it comes."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.head, self.end = loop.create_future(), loop.create_future()
        self.buf.clear()
        self.got_bytes, self.ended, self.sink, self.held, self.eof = False, False, None, [], False
        self.lost_by = None
        self.chunks, self.decode, self.method = Chunks(), False, method
        self.transport.write(request)
        return self.head

    def _head_bytes(self, data: bytes) -> None:
        assert self.head is not None
        self.buf += data
        while True:
            at = self.buf.find(b"\r\n\r\n")
            if at < 0:
                if len(self.buf) > MAX_HEAD:
                    self.head.set_exception(UpstreamClosed("head too long"))
                    self._close()
                return
            raw, rest = bytes(self.buf[:at]), bytes(self.buf[at + 4 :])
            self.buf.clear()
            try:
                status, reason, headers, keep = _parse_head(raw)
            except ValueError:
                self.head.set_exception(UpstreamClosed("no HTTP/1.1 answer"))
                self._close()
                return
            if 100 <= status < 200 and status != 101:
                self.buf += rest  # an interim answer (100 Continue): the real one follows
                continue
            self._framing(status, headers, keep)
            self.head.set_result((status, reason, headers))
            if self.framing == "none":
                self._ended(b"", keep=self.keep)
            elif rest:
                self._body_bytes(rest)
            return

    def _framing(self, status: int, headers: list[tuple[bytes, bytes]], keep: bool) -> None:
        names = {k.lower(): v for k, v in headers}
        self.keep = keep
        if self.method == "HEAD" or status in (204, 304) or self.method == "CONNECT":
            self.framing = "none"
        elif b"chunked" in names.get(b"transfer-encoding", b"").lower():
            self.framing = "chunked"
        elif b"content-length" in names and b"transfer-encoding" not in names:
            self.framing, self.left = "length", int(names[b"content-length"])
            self.framing = "length" if self.left > 0 else "none"
        else:
            self.framing, self.keep = "close", False

    def _body_bytes(self, data: bytes) -> None:
        if self.sink is None:
            self.held.append(data)
            _wake(self.waiter)
            return
        try:
            if self.framing == "chunked":
                out: list[bytes] | None = [] if self.decode else None
                at = self.chunks.feed(data, out)
                piece = data if at < 0 else data[:at]
                self._give(b"".join(out) if out is not None else piece)
                if at >= 0:
                    self._ended(b"", keep=self.keep and at == len(data))
            elif self.framing == "length":
                piece = data[: self.left]
                self.left -= len(piece)
                self._give(piece)
                if not self.left:
                    self._ended(b"", keep=self.keep and len(piece) == len(data))
            else:
                self._give(data)
        except ValueError:
            self._lost(UpstreamClosed("no chunked framing"))
            self._close()

    def _give(self, piece: bytes) -> None:
        if piece and self.sink is not None:
            self.sink(piece)

    def _attach(self, sink: Callable[[bytes], None], decode: bool) -> None:
        """The body's reader is there: what came before it is read now."""
        self.sink, self.decode = sink, decode
        held, self.held = self.held, []
        for data in held:
            if self.ended:
                self._close()  # bytes past the answer's end: not reusable
                break
            self._body_bytes(data)
        if self.eof and not self.ended:
            self._lost(self.lost_by or UpstreamClosed("the upstream closed the connection"))
        _watch(self)

    def _ended(self, _: bytes, keep: bool) -> None:
        self.ended, self.keep = True, keep
        if self.end is not None and not self.end.done():
            self.end.set_result(None)

    def _close(self) -> None:
        self.keep = False
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ the body's readers

    async def passed_to(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rechunk: bool = False
    ) -> None:
        """The body's bytes, framing included, written to ``writer`` as they come; mitmproxy
        closing the connection (``reader`` at its end) stops the reading. Raises ``BodyCut``
        when the body ends before its end (the relay then ends it cleanly, naming the cause).

        ``rechunk``: its data written again as ONE chunk per upstream read (a body of a
        length, or to the connection's close, too: a cut one can still end cleanly), then the
        last chunk. Why: mitmproxy hands each chunk it parses to the stream callable
        as one event through its layers (~µs each); an upstream that sends one SSE event per
        chunk (OpenAI, Anthropic) then costs one pass per event, a read of many events one
        pass (docs/speed.md, "One upstream path")."""
        assert self.end is not None
        out = writer.transport
        rechunk = rechunk and self.framing != "none"

        def sink(piece: bytes) -> None:
            out.write(b"%x\r\n%b\r\n" % (len(piece), piece) if rechunk else piece)
            if out.get_write_buffer_size() > HOLD and not self.paused and self.transport:
                self.paused = True
                self.transport.pause_reading()
                self.resuming = asyncio.ensure_future(self._resume(writer))

        self._attach(sink, decode=rechunk)
        gone = asyncio.ensure_future(reader.read(1))
        try:
            both: set[asyncio.Future[Any]] = {self.end, gone}
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await stop_reading(gone)
        if not self.end.done():
            raise ConnectionResetError("mitmproxy closed the relay's connection")
        self.end.result()
        if rechunk and not out.is_closing():
            out.write(b"0\r\n\r\n")  # the upstream's trailer, if any, is not passed on

    async def _resume(self, writer: asyncio.StreamWriter) -> None:
        try:
            await writer.drain()
        except (ConnectionError, OSError):
            self._close()
            return
        self.paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body's data (its framing read off, still content-encoded) as it comes."""
        assert self.end is not None
        queue: collections.deque[bytes] = collections.deque()
        more = asyncio.Event()

        def sink(piece: bytes) -> None:
            queue.append(piece)
            more.set()

        self._attach(sink, decode=True)
        while True:
            while queue:
                yield queue.popleft()
            if self.end.done():
                self.end.result()
                return
            more.clear()
            waiter: asyncio.Future[object] = asyncio.ensure_future(more.wait())
            try:
                await asyncio.wait({self.end, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()

    def release(self) -> None:
        """The request is done with the connection: back to the pool when its answer ended
        whole and it may be kept alive, else closed."""
        self.sink, self.held = None, []
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.paused:
            self._close()
        t = self.transport
        if self.ended and self.keep and self.pool is not None and t and not t.is_closing():
            self.idle_since = time.monotonic()
            self.head = self.end = None
            self.pool.keep(self)
            return
        self._close()


def _eof(transport: asyncio.Transport | None) -> BaseException:
    """How the upstream closed: cleanly, or TLS without close_notify (asyncio's TLS layer
    reports both as an end: only its own flag, the TCP connection's end seen before a
    close_notify, tells them apart; without the flag, an end)."""
    tls = getattr(transport, "_ssl_protocol", None)
    if tls is not None and getattr(tls, "_eof_received", False) is True:
        return ssl.SSLEOFError("TLS closed without close_notify")
    return UpstreamClosed("the upstream closed the connection")


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _watch(wire: Wire) -> None:
    """The idle timeout starts with the body's reading (``idle`` seconds, if any)."""
    if wire.idle > 0 and wire.timer is None and not wire.ended:
        wire.last_read = time.monotonic()
        wire.timer = asyncio.get_running_loop().call_later(wire.idle, _idle_check, wire)


def _idle_check(wire: Wire) -> None:
    """Nothing read for ``idle`` seconds (the relay's writer not holding it back): the body is
    cut (``upstream_idle``) and the connection closed."""
    wire.timer = None
    if wire.ended or wire.end is None:
        return
    left = wire.last_read + wire.idle - time.monotonic()
    if left > 0 or wire.paused:
        wait = left if left > 0 else wire.idle
        wire.timer = asyncio.get_running_loop().call_later(wait, _idle_check, wire)
        return
    wire._cut("upstream_idle")
    wire._close()


def _parse_head(raw: bytes) -> tuple[int, bytes, list[tuple[bytes, bytes]], bool]:
    """Status, reason, headers and whether the connection may be kept alive."""
    lines = raw.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code, _, reason = rest.partition(b" ")
    if not version.startswith(b"HTTP/1.") or len(code) != 3:
        raise ValueError("no status line")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise ValueError("bad header line")
        headers.append((name, value.strip()))
    conn = b",".join(v for k, v in headers if k.lower() == b"connection").lower()
    keep = version == b"HTTP/1.1" and b"close" not in conn
    return int(code), reason, headers, keep


class Pool:
    """Kept-alive connections per origin; TLS contexts per ``ssl_insecure``."""

    def __init__(self) -> None:
        self._idle: dict[Origin, list[Wire]] = {}
        self._contexts: dict[bool, ssl.SSLContext] = {}

    def take(self, origin: Origin) -> Wire | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            wire = idle.pop()
            t = wire.transport
            if t is not None and not t.is_closing() and now - wire.idle_since < IDLE_EXPIRY:
                return wire
            wire._close()
        return None

    def keep(self, wire: Wire) -> None:
        idle = self._idle.setdefault(wire.origin, [])
        if len(idle) >= MAX_IDLE:
            wire._close()
            return
        idle.append(wire)

    def forget(self, wire: Wire) -> None:
        idle = self._idle.get(wire.origin)
        if idle and wire in idle:
            idle.remove(wire)

    def close(self) -> None:
        idle, self._idle = self._idle, {}
        for wires in idle.values():
            for wire in wires:
                wire._close()

    def context(self, insecure: bool) -> ssl.SSLContext:
        ctx = self._contexts.get(insecure)
        if ctx is None:
            ctx = ssl.create_default_context(cafile=certifi.where())
            if insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["http/1.1"])
            self._contexts[insecure] = ctx
        return ctx

    async def connect(self, origin: Origin) -> Wire:
        """A new connection to ``origin``: TCP, the proxy's tunnel when https goes through
        one, TLS when https."""
        loop = asyncio.get_running_loop()
        tls = origin.scheme == "https"
        if origin.proxy is None:
            ctx = self.context(origin.insecure) if tls else None
            _, wire = await loop.create_connection(
                lambda: Wire(origin, self), origin.host, origin.port, ssl=ctx,
                server_hostname=origin.host if tls else None,
            )  # fmt: skip
            return wire
        proxy = urlsplit(origin.proxy)
        ptls = proxy.scheme == "https"
        phost = proxy.hostname or ""
        _, wire = await loop.create_connection(
            lambda: Wire(origin, self), phost, proxy.port or (443 if ptls else 80),
            ssl=self.context(origin.insecure) if ptls else None,
            server_hostname=phost if ptls else None,
        )  # fmt: skip
        if tls:
            await _tunnel(wire, origin, self.context(origin.insecure))
        return wire


async def _tunnel(wire: Wire, origin: Origin, ctx: ssl.SSLContext) -> None:
    """CONNECT through the proxy, then TLS to the upstream inside it."""
    where = f"{_bracket(origin.host)}:{origin.port}".encode("idna")
    head = [b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n" % (where, where)]
    if origin.proxy_auth:
        head.append(b"Proxy-Authorization: %s\r\n" % origin.proxy_auth.encode("latin-1"))
    wire.method = "CONNECT"
    status, _, _ = await wire.ask(b"".join(head) + b"\r\n", "CONNECT")
    if not 200 <= status < 300:
        wire._close()
        raise ProxyRefused(f"the proxy answered the tunnel HTTP {status}")
    assert wire.transport is not None
    wire.head = wire.end = None
    loop = asyncio.get_running_loop()
    tls = await loop.start_tls(wire.transport, wire, ctx, server_hostname=origin.host)
    assert isinstance(tls, asyncio.Transport)
    wire.transport = tls


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(slots=True)
class Opened:
    """An attempt's answer once its head came, the body still to read: ``passed_to`` (its
    bytes as they come, framing included) or ``aiter_raw`` (its data); then ``aclose``."""

    status_code: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    """As the upstream wrote them (names in its case), hop-by-hop ones included."""
    wire: Wire

    def header(self, name: str) -> str | None:
        wanted = name.encode().lower()
        for key, value in self.headers:
            if key.lower() == wanted:
                return value.decode("latin-1")
        return None

    @property
    def framing(self) -> str:
        return self.wire.framing

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self.wire.pieces()

    async def started(self, timeout: float) -> str | None:
        """Waits for the body's first bytes (``timeout`` seconds at most): None once they
        came, or when the answer has no body; else how the body ended before any (the cause,
        as ``BodyCut`` names it): nothing of it can have reached the client."""
        wire = self.wire
        if wire.framing == "none" or wire.held or wire.sink is not None:
            return None
        if not wire.eof:
            wire.waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(wire.waiter, timeout)
            except TimeoutError:
                return "upstream_idle"
            finally:
                wire.waiter = None
        return None if wire.held else _cause(wire.lost_by)

    def watch(self, idle: float) -> None:
        """The body is cut after ``idle`` seconds without a byte (``upstream_idle``)."""
        self.wire.idle = idle

    async def passed_to(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.wire.passed_to(reader, writer)

    async def rechunked_to(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """``passed_to``, a chunked body's data written as one chunk per upstream read."""
        await self.wire.passed_to(reader, writer, rechunk=True)

    async def aclose(self) -> None:
        self.wire.release()


async def ask(
    pool: Pool, origin: Origin, request: bytes, method: str, connect: float, sent: list[bool]
) -> Opened:
    """``request`` sent to ``origin`` on a kept-alive connection (again on a new one when
    the kept one turns out closed before any byte of its answer), else a new one within
    ``connect`` seconds; ``sent[0]`` set once it went. The answer once its head came."""
    for fresh in (False, True):
        wire = None if fresh else pool.take(origin)
        reused = wire is not None
        if wire is None:
            async with asyncio.timeout(connect):
                wire = await pool.connect(origin)
        sent[0] = True
        try:
            status, reason, headers = await wire.ask(request, method)
        except (ConnectionError, OSError):
            wire._close()
            if reused and not wire.got_bytes:
                continue
            raise
        except BaseException:
            wire._close()
            raise
        return Opened(status, reason, headers, wire)
    raise UpstreamClosed("the upstream closed the connection")  # (not reached)
