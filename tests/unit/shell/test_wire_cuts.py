"""The relay's client (``addon.shell.outbound.http1``) names how an upstream's body broke off (issue 42):
a raw asyncio upstream on 127.0.0.1 writes the head and part of a body, then ends it one way;
the body's reader raises ``BodyCut`` with the cause, or ends cleanly where the body did.

TLS here: a body without framing ends with its connection, so only TLS's ``close_notify``
tells its end from a cut; without it (the TCP connection dropped) the body is cut."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from addon.shell.outbound.http1 import Origin, Pool, ask
from addon.shell.outbound.relay import BodyCut

HEAD_CLOSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
HEAD_CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
EVENT = b'data: {"x": 1}\n\n'

type Ending = Callable[[asyncio.StreamWriter], Awaitable[None]]


def server_context(tmp: Path) -> ssl.SSLContext:
    """A TLS server context with a self-signed certificate for 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    return ctx


async def read_body(head: bytes, ending: Ending, tls: ssl.SSLContext | None, idle: float) -> bytes:
    """The body the relay's client read from an upstream that writes ``head`` and one event,
    then ends as ``ending`` does."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        piece = b"%x\r\n%s\r\n" % (len(EVENT), EVENT) if b"chunked" in head else EVENT
        writer.write(head + piece)
        await writer.drain()
        await asyncio.sleep(0.05)
        await ending(writer)

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    pool = Pool()
    origin = Origin("https" if tls else "http", "127.0.0.1", port, None, "", True)
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-length: 0\r\n\r\n"
    try:
        async with asyncio.timeout(10):
            got = await ask(pool, origin, request, "POST", 5.0, [False])
            got.watch(idle)
            body = b""
            try:
                async for piece in got.aiter_raw():
                    body += piece
            finally:
                await got.aclose()
            return body
    finally:
        pool.close()
        server.close()


async def close_notify(writer: asyncio.StreamWriter) -> None:
    writer.close()  # TLS: close_notify, then the TCP close


async def drop(writer: asyncio.StreamWriter) -> None:
    writer.transport.abort()  # TLS: no close_notify, the TCP connection just ends


async def reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def silence(writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3)
    writer.close()


def test_tls_with_close_notify_ends_a_body_without_framing_cleanly(tmp_path: Path) -> None:
    body = asyncio.run(read_body(HEAD_CLOSE, close_notify, server_context(tmp_path), 0))
    assert body == EVENT


def test_tls_closed_without_close_notify_cuts_a_body_without_framing(tmp_path: Path) -> None:
    with pytest.raises(BodyCut) as cut:
        asyncio.run(read_body(HEAD_CLOSE, drop, server_context(tmp_path), 0))
    assert cut.value.cause == "upstream_cut"


@pytest.mark.parametrize(
    ("ending", "cause"),
    [(close_notify, "upstream_cut"), (reset, "upstream_reset"), (silence, "upstream_idle")],
    ids=["closed", "reset", "idle"],
)
def test_a_chunked_body_broken_off_names_its_cause(ending: Ending, cause: str) -> None:
    with pytest.raises(BodyCut) as cut:
        asyncio.run(read_body(HEAD_CHUNKED, ending, None, 0.5))
    assert cut.value.cause == cause


def test_an_http2_upstream_is_spoken_to_over_http_1_1(tmp_path: Path) -> None:
    """The relay's client offers only ``http/1.1`` (ALPN): an upstream that would speak HTTP/2
    (it offers ``h2`` first) answers over HTTP/1.1, so its stream reset is a connection reset
    (docs/streams.md, the HTTP/2 row)."""
    tls = server_context(tmp_path)
    tls.set_alpn_protocols(["h2", "http/1.1"])
    chosen: list[str | None] = []

    async def run() -> bytes:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            chosen.append(writer.get_extra_info("ssl_object").selected_alpn_protocol())
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD_CLOSE + EVENT)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=tls)
        port = server.sockets[0].getsockname()[1]
        pool = Pool()
        origin = Origin("https", "127.0.0.1", port, None, "", True)
        request = b"POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-length: 0\r\n\r\n"
        try:
            async with asyncio.timeout(10):
                got = await ask(pool, origin, request, "POST", 5.0, [False])
                body = b""
                try:
                    async for piece in got.aiter_raw():
                        body += piece
                finally:
                    await got.aclose()
                return body
        finally:
            pool.close()
            server.close()

    assert asyncio.run(run()) == EVENT
    assert chosen == ["http/1.1"]
