"""End-to-end harness: a scripted local upstream and a real mitmdump in front of it.

Everything listens on 127.0.0.1 only; every wait is bounded; processes and
threads are always cleaned up.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


# --------------------------------------------------------------------------- upstream


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class JSONReply:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RawReply:
    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SSEReply:
    """An SSE answer written in random pieces, flushed one by one (chunked encoding)."""

    body: bytes
    chunk_min: int = 1
    chunk_max: int = 17
    seed: int | None = None
    gzip: bool = False
    """Compress even though the proxy asked for identity: a misbehaving upstream."""
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


type Reply = JSONReply | RawReply | SSEReply


def _not_scripted(_: Recorded) -> Reply:
    return JSONReply({"error": {"message": "no reply scripted"}}, status=404)


class ScriptedUpstream:
    """A local HTTP/1.1 server standing in for an LLM API; records what it receives."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.script: Callable[[Recorded], Reply] = _not_scripted
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._queue.clear()
            self.script = _not_scripted

    def _next_reply(self, rec: Recorded) -> Reply:
        with self._lock:
            self.requests.append(rec)
            if self._queue:
                return self._queue.popleft()
        return self.script(rec)

    def start(self) -> ScriptedUpstream:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("transfer-encoding", "").lower():
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            self.rfile.readline()
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("content-length") or 0))

            def _handle(self) -> None:
                rec = Recorded(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self._body(),
                )
                reply = upstream._next_reply(rec)
                if isinstance(reply, SSEReply):
                    self._send_sse(reply)
                    return
                body = (
                    reply.body if isinstance(reply, RawReply) else json.dumps(reply.body).encode()
                )
                self.send_response(reply.status)
                headers = {"content-type": "application/json", **reply.headers}
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _send_sse(self, reply: SSEReply) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("transfer-encoding", "chunked")
                if reply.gzip:
                    self.send_header("content-encoding", "gzip")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                rng = random.Random(reply.seed)
                compressor = zlib.compressobj(wbits=31) if reply.gzip else None
                pos = 0
                while pos < len(reply.body):
                    size = rng.randint(reply.chunk_min, reply.chunk_max)
                    piece = reply.body[pos : pos + size]
                    pos += size
                    if compressor is not None:
                        piece = compressor.compress(piece) + compressor.flush(zlib.Z_SYNC_FLUSH)
                    self._chunk(piece)
                    if reply.delay:
                        time.sleep(reply.delay)
                if compressor is not None:
                    self._chunk(compressor.flush())
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _chunk(self, data: bytes) -> None:
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sse_from_payloads(payloads: list[Any]) -> bytes:
    return b"".join(
        b"data: " + (p if isinstance(p, str) else json.dumps(p)).encode() + b"\n\n"
        for p in payloads
    )


# --------------------------------------------------------------------------- proxy


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class ProxyStartError(RuntimeError):
    pass


class Proxy:
    """A real ``mitmdump -s addon/main.py`` in reverse mode in front of ``upstream_port``."""

    def __init__(self, upstream_port: int, options: dict[str, str] | None = None) -> None:
        self.upstream_port = upstream_port
        self.options = options or {}
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="cursor-bridge-e2e-")
        self._log = Path(self._dir.name) / "mitmdump.log"

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_text(self) -> str:
        return self._log.read_text(errors="replace") if self._log.exists() else ""

    def command(self) -> list[str]:
        args = [
            str(Path(sys.executable).parent / "mitmdump"),
            "-s",
            str(REPO / "addon" / "main.py"),
            "--mode",
            f"reverse:http://{HOST}:{self.upstream_port}",
            "--listen-host",
            HOST,
            "--listen-port",
            str(self.port),
            "--set",
            f"confdir={self._dir.name}",
            "--set",
            "flow_detail=0",
        ]
        for k, v in self.options.items():
            args += ["--set", f"{k}={v}"]
        return args

    def start(self, timeout: float = 30.0) -> Proxy:
        for _attempt in range(3):
            self.port = free_port()
            with self._log.open("wb") as log:
                self._proc = subprocess.Popen(
                    self.command(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=REPO,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    break
                if "listening at" in self.log_text():
                    with (
                        contextlib.suppress(OSError),
                        socket.create_connection((HOST, self.port), 0.5),
                    ):
                        return self
                time.sleep(0.05)
            log_text = self.log_text()
            self.stop()
            if "address already in use" not in log_text.lower():
                raise ProxyStartError(f"mitmdump did not start:\n{log_text}")
        raise ProxyStartError("mitmdump could not find a free port in 3 tries")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._dir.cleanup()


def raw_request(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request with http.client, for byte-exact checks. Returns status, headers, body."""
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()
