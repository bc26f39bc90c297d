"""End to end: a whole (non-streamed) answer is fetched by the bridge in the request hook
(``Fallbacks._whole``): mitmproxy opens no connection for it, neither to the loopback relay nor
to the upstream; a stream still goes by the relay (docs/architecture.md, "One upstream path")."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time

from tests.e2e.harness import JSONReply, Proxy, ScriptedUpstream, raw_request
from tests.e2e.test_text_tools import openai_json

HEADERS = {"authorization": "Bearer k", "content-type": "application/json"}


def server_connects(proxy: Proxy, since: int) -> list[str]:
    """mitmproxy's own ``server connect`` lines since ``since``."""
    return re.findall(r"server connect \S+", proxy.log_text()[since:])


def test_a_whole_answer_opens_no_server_connection(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    body = {"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]}
    since = len(proxy.log_text())
    for _ in range(3):
        upstream.enqueue(JSONReply(openai_json("whole")))
        status, _, raw = raw_request(
            proxy.port, "POST", "/v1/chat/completions", json.dumps(body).encode(), HEADERS
        )
        assert status == 200 and b"whole" in raw, raw
    assert len(upstream.wait_for_requests(3)) == 3
    assert server_connects(proxy, since) == [], proxy.log_text()[since:]


class Silent:
    """An upstream that reads a request and answers nothing: when the bridge closes its
    connection is ``closed_at``."""

    def __init__(self) -> None:
        self.requests = 0
        self.closed_at: float | None = None
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.getsockname()[1])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            with contextlib.closing(conn):
                conn.settimeout(0.1)
                deadline = time.monotonic() + 20
                got = b""
                while time.monotonic() < deadline and not self._stop.is_set():
                    try:
                        data = conn.recv(65536)
                    except TimeoutError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        self.closed_at = time.monotonic()
                        break
                    got += data
                    if b"\r\n\r\n" in got:
                        self.requests += got.count(b"POST ")
                        got = b""


def test_a_client_that_hangs_up_on_a_whole_answer_closes_the_upstream() -> None:
    """The client closes its connection while the whole answer's attempt waits for the
    upstream's head: the attempt is cancelled (the upstream's connection closed within a few
    of the bridge's looks at the client) and nothing is sent again."""
    silent = Silent()
    try:
        with Proxy(silent.port) as proxy:
            body = json.dumps(
                {"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]}
            ).encode()
            head = (
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                b"authorization: Bearer k\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n" % len(body)
            )
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as client:
                client.sendall(head + body)
                deadline = time.monotonic() + 10
                while silent.requests == 0:
                    assert time.monotonic() < deadline, proxy.log_text()
                    time.sleep(0.02)
            hung_up = time.monotonic()
            deadline = hung_up + 10
            while silent.closed_at is None:
                assert time.monotonic() < deadline, proxy.log_text()
                time.sleep(0.02)
            assert silent.closed_at - hung_up < 3.0, silent.closed_at - hung_up
            time.sleep(0.5)
            assert silent.requests == 1
            assert "Traceback" not in proxy.log_text()
    finally:
        silent.close()
