"""End-to-end harness: a scripted local upstream and a real mitmdump in front of it.

Everything listens on 127.0.0.1 only; every wait is bounded; processes and
threads are always cleaned up (on failure too, and at interpreter exit for
anything a test forgot).

- ``ScriptedUpstream`` stands in for an LLM API: it records each request and
  answers from a FIFO of replies (``enqueue``) or a ``script`` callable; strict by default,
  it first answers the real service's 400 to a body the service refuses
  (``tests.upstream_rules``).
- ``Proxy`` runs ``mitmdump -s addon/main.py`` in reverse mode before it.
- ``raw_request`` / ``stream_request`` talk to either with ``http.client``.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import itertools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from scripts.mitmdump_ready import NotServing, can_connect, wait_serving, write_probe
from tests import upstream_rules

REPO = Path(__file__).resolve().parents[2]
MAIN_SCRIPT = REPO / "addon" / "main.py"
FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "real"
HOST = "127.0.0.1"
MITMDUMP = Path(sys.executable).parent / "mitmdump"
MITMWEB = Path(sys.executable).parent / "mitmweb"


# --------------------------------------------------------------------------- records


class Headers(dict[str, str]):
    """Header names lower-cased; lookups ignore case. Repeated headers are joined with ", "."""

    def __init__(self, pairs: Iterable[tuple[str, str]] | Mapping[str, str] = ()) -> None:
        super().__init__()
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        for name, value in items:
            key = name.lower()
            super().__setitem__(key, f"{self[key]}, {value}" if key in self else value)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key.lower(), value)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key.lower() if isinstance(key, str) else key)

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


@dataclass(frozen=True)
class Recorded:
    """One request as the upstream received it (body de-chunked)."""

    method: str
    path: str
    headers: Headers
    """Names lower-cased; lookups ignore case."""
    body: bytes
    header_list: tuple[tuple[str, str], ...] = ()
    """The header lines in order, names as sent."""

    def json(self) -> Any:
        return json.loads(self.body)


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class JSONReply:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RawReply:
    """``body`` as is, with Content-Length."""

    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SSEReply:
    """An SSE answer written in random pieces, flushed one by one (chunked encoding).

    Piece sizes are uniform in [chunk_min, chunk_max], reproducible from ``seed``.
    """

    body: bytes
    chunk_min: int = 1
    chunk_max: int = 17
    seed: int | None = None
    gzip: bool = False
    """Compress (Z_SYNC_FLUSH per piece) even when the proxy asked for identity: a misbehaving upstream."""
    delay: float = 0.0
    """Seconds between pieces."""
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 200
    linger: float = 0.0
    """Seconds between the last piece and the body's end (an upstream slower to close its
    side than its client, which may hang up first)."""
    cuts: tuple[int, ...] = ()
    """Where the body is cut into pieces (offsets, in order), instead of at random."""
    abort: bool = False
    """After the pieces, the connection closed without the last chunk: the body broken off
    (issue 42), as an upstream restart or a balancer's timeout does."""
    hold: tuple[int, threading.Event] | None = None
    """``(n, gate)``: before piece ``n`` the upstream waits (at most ``HOLD_TIMEOUT`` s) for the
    gate a test sets once its client got the pieces before: what proves a stream live."""
    finished: threading.Event | None = None
    """Set once the body's end is written (or it is broken off)."""

    def __post_init__(self) -> None:
        if not 1 <= self.chunk_min <= self.chunk_max:
            raise ValueError(
                f"need 1 <= chunk_min <= chunk_max, got {self.chunk_min}, {self.chunk_max}"
            )

    def pieces(self) -> list[bytes]:
        """The uncompressed pieces this reply writes, in order."""
        if self.cuts:
            ends = [0, *self.cuts, len(self.body)]
            return [self.body[a:b] for a, b in itertools.pairwise(ends) if b > a]
        rng = random.Random(self.seed)
        out, pos = [], 0
        while pos < len(self.body):
            size = rng.randint(self.chunk_min, self.chunk_max)
            out.append(self.body[pos : pos + size])
            pos += size
        return out


type Reply = JSONReply | RawReply | SSEReply

HOLD_TIMEOUT = 20.0
"""Seconds a held ``SSEReply`` waits for its gate at most (then it goes on)."""


def not_scripted(rec: Recorded) -> Reply:
    """The default script: a 404 in OpenAI's error shape."""
    return JSONReply(
        {"error": {"message": f"no reply scripted for {rec.method} {rec.path}"}}, status=404
    )


# --------------------------------------------------------------------------- upstream


_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 128
    """The listen backlog (socketserver's default is 5): tens of streams connect at once."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up is no error of ours; anything else is printed as before."""
        if isinstance(sys.exception(), _DISCONNECTS):
            return
        super().handle_error(request, client_address)


class ScriptedUpstream:
    """A local HTTP/1.1 server standing in for an LLM API; records what it receives.

    Replies come from the ``enqueue`` FIFO first, then from ``script``. An exception
    in ``script`` answers 500 and is kept in ``errors`` (the e2e fixtures fail the
    test on it). With ``strict`` (the default), a POST to a dialect's generating endpoint
    (``*/chat/completions``, ``*/v1/messages``, ``*/responses``, ``*:generateContent``,
    ``*:streamGenerateContent``, ``*/generateAssistantResponse``) whose body the real service
    refuses gets that service's 400 instead, and the reason is kept in ``violations`` (the e2e
    fixtures fail the test on it too); ``strict=False`` (or setting ``strict`` until the next
    ``reset``) is for a test that sends such a body on purpose.
    """

    def __init__(self, strict: bool = True) -> None:
        self.strict = strict
        self._strict_default = strict
        self.requests: list[Recorded] = []
        self.errors: list[str] = []
        self.violations: list[str] = []
        """``"<method> <path>: <dialect> refuses: <the service's message>"`` per refused body."""
        self.script: Callable[[Recorded], Reply] = not_scripted
        self._queue: deque[Reply] = deque()
        self._cond = threading.Condition()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- public API

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("ScriptedUpstream is not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def enqueue(self, *replies: Reply) -> None:
        with self._cond:
            self._queue.extend(replies)

    def reset(self) -> None:
        """Forget requests, errors, violations and queued replies; back to the default script
        and strictness."""
        with self._cond:
            self.requests.clear()
            self.errors.clear()
            self.violations.clear()
            self.strict = self._strict_default
            self._queue.clear()
            self.script = not_scripted

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[Recorded]:
        """Block until at least ``count`` requests arrived; a copy of the list."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(
                    f"upstream got {len(self.requests)} request(s) in {timeout} s, "
                    f"expected {count}: {[(r.method, r.path) for r in self.requests]}"
                )
            return list(self.requests)

    def start(self) -> ScriptedUpstream:
        if self._server is not None:
            return self
        self._server = _Server((HOST, 0), _make_handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-upstream-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- internals

    def _reply_for(self, rec: Recorded) -> Reply:
        with self._cond:
            self.requests.append(rec)
            self._cond.notify_all()
            refused = (
                upstream_rules.refusal_for(rec.method, rec.path, rec.body) if self.strict else None
            )
            if refused is not None:
                self.violations.append(
                    f"{rec.method} {rec.path}: {refused.dialect} refuses: {refused.message}"
                )
                return JSONReply(refused.body, status=refused.status)
            if self._queue:
                return self._queue.popleft()
            script = self.script
        try:
            return script(rec)
        except Exception as e:
            with self._cond:
                self.errors.append(f"{rec.method} {rec.path}: {traceback.format_exc()}")
            return JSONReply({"error": {"message": f"harness script failed: {e!r}"}}, status=500)


def _make_handler(upstream: ScriptedUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 60  # idle keep-alive connections do not live forever

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _read_body(self) -> bytes:
            if "chunked" in self.headers.get("transfer-encoding", "").lower():
                parts: list[bytes] = []
                while True:
                    line = self.rfile.readline(65537)
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline(65537)
            length = int(self.headers.get("content-length") or 0)
            return self.rfile.read(length) if length else b""

        def _handle(self) -> None:
            header_list = tuple(self.headers.items())
            rec = Recorded(
                self.command, self.path, Headers(header_list), self._read_body(), header_list
            )
            reply = upstream._reply_for(rec)
            try:
                if isinstance(reply, SSEReply):
                    self._send_sse(reply)
                else:
                    self._send_whole(reply)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                self.close_connection = True  # the client went away mid-answer

        def _send_head(self, status: int, defaults: dict[str, str], extra: dict[str, str]) -> None:
            self.send_response(status)
            headers = Headers(defaults)
            headers.update(Headers(extra))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()

        def _send_whole(self, reply: JSONReply | RawReply) -> None:
            body = reply.body if isinstance(reply, RawReply) else json.dumps(reply.body).encode()
            defaults = {"content-length": str(len(body))}
            if isinstance(reply, JSONReply):
                defaults["content-type"] = "application/json"
            self._send_head(reply.status, defaults, reply.headers)
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()

        def _send_sse(self, reply: SSEReply) -> None:
            defaults = {
                "content-type": "text/event-stream",
                "cache-control": "no-cache",
                "transfer-encoding": "chunked",
            }
            if reply.gzip:
                defaults["content-encoding"] = "gzip"
            self._send_head(reply.status, defaults, reply.headers)
            if self.command == "HEAD":
                return
            compressor = zlib.compressobj(wbits=31) if reply.gzip else None
            for i, piece in enumerate(reply.pieces()):
                if i and reply.delay:
                    time.sleep(reply.delay)
                if reply.hold is not None and i == reply.hold[0]:
                    reply.hold[1].wait(HOLD_TIMEOUT)
                if compressor is not None:
                    piece = compressor.compress(piece) + compressor.flush(zlib.Z_SYNC_FLUSH)
                self._chunk(piece)
            if compressor is not None:
                self._chunk(compressor.flush())
            if reply.abort:
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                if reply.finished is not None:
                    reply.finished.set()
                return
            if reply.linger:
                time.sleep(reply.linger)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            if reply.finished is not None:
                reply.finished.set()

        def _chunk(self, data: bytes) -> None:
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _handle

    return Handler


# --------------------------------------------------------------------------- bodies


def sse_from_payloads(payloads: Sequence[Any]) -> bytes:
    """``data: <json>\\n\\n`` per payload; a str (such as ``"[DONE]"``) is written as is."""
    return b"".join(
        b"data: " + (p if isinstance(p, str) else json.dumps(p)).encode() + b"\n\n"
        for p in payloads
    )


def load_fixture(name: str) -> bytes:
    """A recording from ``../shared/fixtures/real/`` (next to the repository)."""
    path = FIXTURES / name
    if not path.is_file():
        raise FileNotFoundError(f"recording {name!r} not found in {FIXTURES}")
    return path.read_bytes()


def fixture_as_sse(name: str) -> bytes:
    """A recording as SSE bytes: ``*.sse`` as is; ``*.chunks.txt`` (one JSON payload per
    line) framed as ``data:`` events ending in ``data: [DONE]``."""
    raw = load_fixture(name)
    if name.endswith(".sse"):
        return raw
    if name.endswith(".chunks.txt"):
        lines = [line for line in raw.decode().splitlines() if line.strip()]
        return sse_from_payloads([*lines, "[DONE]"])
    raise ValueError(f"{name}: not a .sse or .chunks.txt recording")


# --------------------------------------------------------------------------- proxy


def free_port() -> int:
    """A port free on 127.0.0.1 right now (it may be taken again before use)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def known_bridge_options() -> set[str] | None:
    """The addon's option names, or None when ``addon.config.options`` does not import right now."""
    try:
        from addon.config.options import OPTIONS
    except Exception:
        return None
    return {spec.name for spec in OPTIONS}


class ProxyStartError(RuntimeError):
    """mitmdump exited or did not become ready; the message ends with its log."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(f"{message}\n----- mitmdump log -----\n{log}-----")
        self.log = log


SAME_DIALECT_ROUTES = """
[[routes]]
name = "chat"
path = "*/chat/completions"

[[routes]]
name = "messages"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"
strip_client_noise = false  # the scripted upstream stands for Anthropic's own API

[[routes]]
name = "responses"
path = "*/responses"
client = "openai_responses"
upstream = "openai_responses"
"""
"""A routes file (``bridge_routes``) that sends each client dialect to an upstream of its own."""


_live: weakref.WeakSet[Proxy] = weakref.WeakSet()


def live_proxies() -> list[Proxy]:
    return [p for p in list(_live) if p.alive]


@atexit.register
def _stop_all() -> None:
    for p in list(_live):
        with contextlib.suppress(Exception):
            p.stop()


def _child_env() -> dict[str, str]:
    """Our environment without proxy settings: the addon's own HTTP client stays on loopback."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in {"http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy"}
    }
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Proxy:
    """A real ``mitmdump -s addon/main.py`` in reverse mode before ``upstream_port``.

    ``options`` become ``--set k=v``. A ``bridge_*`` name the addon does not declare
    raises ValueError before anything starts (mitmdump itself would silently ignore
    it); ``check_options=False`` skips that check.
    """

    def __init__(
        self,
        upstream_port: int,
        options: Mapping[str, object] | None = None,
        *,
        extra_args: Sequence[str] = (),
        script: Path = MAIN_SCRIPT,
        check_options: bool = True,
        start_timeout: float = 30.0,
        program: Path = MITMDUMP,
    ) -> None:
        self.upstream_port = upstream_port
        self.program = program
        self.options = {k: _option_value(v) for k, v in (options or {}).items()}
        self.extra_args = list(extra_args)
        self.script = script
        self.start_timeout = start_timeout
        self.port = 0
        self.returncode: int | None = None
        if check_options:
            self._check_options()
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="cursor-bridge-e2e-")
        self.confdir = Path(self._dir.name) / "confdir"
        self.confdir.mkdir()
        self.log_path = Path(self._dir.name) / "mitmdump.log"
        self._probe = write_probe(Path(self._dir.name))  # the start-up probe's script
        self._closed_log: str | None = None

    def _check_options(self) -> None:
        known = known_bridge_options()
        if known is None:
            return
        unknown = sorted(k for k in self.options if k.startswith("bridge_") and k not in known)
        if unknown:
            raise ValueError(
                f"unknown addon option(s) {', '.join(unknown)}; mitmdump would ignore them "
                f"silently. Known: {', '.join(sorted(known))}"
            )

    # ---------------------------------------------------------------- state

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_text(self) -> str:
        if self._closed_log is not None:
            return self._closed_log
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_log(self, pattern: str | re.Pattern[str], timeout: float = 5.0) -> re.Match[str]:
        """Wait until the log matches ``pattern`` (a plain string is matched literally)."""
        regex = re.compile(re.escape(pattern)) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text()
            if m := regex.search(text):
                return m
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{regex.pattern!r} not in the mitmdump log after {timeout} s:\n{text}"
                )
            time.sleep(0.02)

    def command(self) -> list[str]:
        args = [
            str(self.program),
            "-s",
            str(self.script),
            "-s",
            str(self._probe),
            "--mode",
            f"reverse:http://{HOST}:{self.upstream_port}",
            "--listen-host",
            HOST,
            "--listen-port",
            str(self.port),
        ]
        # ``options`` may override these; mitmdump refuses the same option set twice.
        settings = {
            "connection_strategy": "lazy",
            "confdir": str(self.confdir),
            "flow_detail": "0",
            **self.options,
        }
        for k, v in settings.items():
            args += ["--set", f"{k}={v}"]
        return args + self.extra_args

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float | None = None) -> Proxy:
        """Start mitmdump and wait until it serves; ProxyStartError (with the log) if not."""
        if self.alive:
            return self
        timeout = self.start_timeout if timeout is None else timeout
        for _attempt in range(3):
            self.port = free_port()
            self._spawn()
            try:
                self._wait_ready(timeout)
                return self
            except ProxyStartError as e:
                self.stop()
                if "address already in use" not in e.log.lower():
                    raise
        raise ProxyStartError("no free port for mitmdump in 3 tries", self.log_text())

    def _spawn(self) -> None:
        self.returncode = None
        self._closed_log = None
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                env=_child_env(),
            )
        _live.add(self)

    def _wait_ready(self, timeout: float) -> None:
        assert self._proc is not None
        try:
            wait_serving(self._proc, self.log_text, HOST, self.port, timeout)
        except NotServing as e:
            raise ProxyStartError(f"mitmdump {e.why}", e.log) from None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` s. Returns the exit code (None if never run)."""
        proc, self._proc = self._proc, None
        _live.discard(self)
        if proc is None:
            return self.returncode
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.returncode = proc.returncode
        return self.returncode

    def close(self) -> None:
        """Stop and delete the temporary directory; ``log_text()`` keeps working."""
        self.stop()
        if self._closed_log is None:
            self._closed_log = self.log_text()
        self._dir.cleanup()

    def __enter__(self) -> Proxy:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


def _option_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _can_connect(port: int) -> bool:
    return can_connect(HOST, port)


# --------------------------------------------------------------------------- clients


def raw_request(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, Headers, bytes]:
    """One request with http.client to 127.0.0.1, for byte-exact checks.

    Returns status, headers (case-insensitive) and the body as it came on the wire
    (de-chunked, never decompressed). http.client adds ``Accept-Encoding: identity``
    unless ``headers`` set one.
    """
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=body or None, headers=dict(headers or {}))
        resp = conn.getresponse()
        return resp.status, Headers(resp.getheaders()), resp.read()
    finally:
        conn.close()


@dataclass
class StreamedResponse:
    status: int
    headers: Headers
    pieces: list[tuple[float, bytes]]
    """(seconds since the request was sent, bytes) for each read that returned data."""

    @property
    def body(self) -> bytes:
        return b"".join(p for _, p in self.pieces)


def stream_request(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> StreamedResponse:
    """Like ``raw_request``, but records when each piece of the body arrived.

    ``timeout`` bounds every socket operation; the whole read is bounded by
    ``4 * timeout``.
    """
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        start = time.monotonic()
        conn.request(method, path, body=body or None, headers=dict(headers or {}))
        resp = conn.getresponse()
        pieces: list[tuple[float, bytes]] = []
        while data := resp.read1(65536):
            now = time.monotonic() - start
            pieces.append((now, data))
            if now > 4 * timeout:
                raise TimeoutError(f"response still streaming after {now:.1f} s")
        return StreamedResponse(resp.status, Headers(resp.getheaders()), pieces)
    finally:
        conn.close()


class ModeProxy(Proxy):
    """A ``Proxy`` in another mode than reverse (``regular``, ``upstream:URL``)."""

    def __init__(self, upstream_port: int, mode: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(upstream_port, *args, **kwargs)
        self.mode = mode

    def command(self) -> list[str]:
        args = super().command()
        args[args.index("--mode") + 1] = self.mode
        return args
