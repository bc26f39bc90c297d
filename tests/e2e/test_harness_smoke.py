"""The harness itself, through a real mitmdump, independent of what the addon rewrites.

Paths here are not chat paths, so the addon leaves them alone whatever it does.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.e2e.harness import (
    HOST,
    JSONReply,
    Proxy,
    ProxyStartError,
    RawReply,
    Recorded,
    ScriptedUpstream,
    SSEReply,
    fixture_as_sse,
    load_fixture,
    raw_request,
    sse_from_payloads,
    stream_request,
)

SSE_BODY = sse_from_payloads(
    [{"i": i, "text": f"piece {i} ünïcode ✓"} for i in range(40)] + ["[DONE]"]
)


def read_raw_response(port: int, request: bytes, timeout: float = 5.0) -> tuple[bytes, bytes]:
    """Send ``request`` on a plain socket; (head, wire body) of a chunked answer."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(request)
        data = b""
        deadline = time.monotonic() + timeout
        while not data.endswith(b"\r\n0\r\n\r\n"):
            assert time.monotonic() < deadline, data[-200:]
            more = s.recv(65536)
            assert more, f"connection closed early: {data[-200:]!r}"
            data += more
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def parse_chunks(wire: bytes) -> list[bytes]:
    chunks: list[bytes] = []
    pos = 0
    while True:
        eol = wire.index(b"\r\n", pos)
        size = int(wire[pos:eol], 16)
        if size == 0:
            return chunks
        chunks.append(wire[eol + 2 : eol + 2 + size])
        pos = eol + 2 + size + 2


# --------------------------------------------------------------------------- upstream alone


def test_upstream_records_bodies_sent_with_length_or_chunked(upstream: ScriptedUpstream) -> None:
    upstream.script = lambda rec: JSONReply({"got": len(rec.body)})
    status, headers, body = raw_request(
        upstream.port, "POST", "/a?x=1", b'{"k": 1}', {"X-Custom": "Yes"}
    )
    assert (status, json.loads(body)) == (200, {"got": 8})
    assert headers["Content-Type"] == "application/json"

    conn = http.client.HTTPConnection(HOST, upstream.port, timeout=5)
    try:
        conn.request("PUT", "/b", body=iter([b"hello ", b"", b"chunked ", b"world"]))
        assert conn.getresponse().read() == b'{"got": 19}'
    finally:
        conn.close()

    first, second = upstream.requests
    assert (first.method, first.path, first.body, first.json()) == (
        "POST",
        "/a?x=1",
        b'{"k": 1}',
        {"k": 1},
    )
    assert first.headers["x-custom"] == first.headers["X-CUSTOM"] == "Yes"
    assert "X-Custom" in first.headers and ("X-Custom", "Yes") in first.header_list
    assert second.headers["transfer-encoding"] == "chunked"
    assert (second.method, second.body) == ("PUT", b"hello chunked world")


def test_upstream_queue_before_script_and_default_404(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(RawReply(b"first", status=201, headers={"Content-Type": "text/plain"}))
    assert raw_request(upstream.port, "GET", "/q")[::2] == (201, b"first")
    status, _, body = raw_request(upstream.port, "GET", "/q")
    assert status == 404 and b"no reply scripted for GET /q" in body
    assert upstream.wait_for_requests(2, timeout=1) == upstream.requests


def test_upstream_script_errors_answer_500_and_are_kept(upstream: ScriptedUpstream) -> None:
    def broken(rec: Recorded) -> JSONReply:
        raise KeyError("oops")

    upstream.script = broken
    status, _, body = raw_request(upstream.port, "GET", "/boom")
    assert status == 500 and b"harness script failed" in body
    assert len(upstream.errors) == 1 and "KeyError: 'oops'" in upstream.errors[0]
    upstream.errors.clear()  # handled: the fixture would fail the test otherwise


@pytest.mark.parametrize("compress", [False, True])
def test_upstream_sse_pieces_are_seeded_chunks(upstream: ScriptedUpstream, compress: bool) -> None:
    reply = SSEReply(SSE_BODY, chunk_min=3, chunk_max=11, seed=42, gzip=compress)
    assert reply.pieces() == SSEReply(SSE_BODY, chunk_min=3, chunk_max=11, seed=42).pieces()
    assert all(3 <= len(p) <= 11 for p in reply.pieces()[:-1])
    upstream.enqueue(reply)
    head, wire = read_raw_response(
        upstream.port,
        b"POST /s HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}",
    )
    head_text = head.decode().lower()
    assert "transfer-encoding: chunked" in head_text
    assert "content-type: text/event-stream" in head_text
    assert ("content-encoding: gzip" in head_text) == compress
    chunks = parse_chunks(wire)
    if not compress:
        assert chunks == reply.pieces()
        return
    # Each chunk decompresses on its own to exactly its piece: data arrives incrementally.
    d = zlib.decompressobj(wbits=31)
    assert [d.decompress(c) for c in chunks[:-1]] == reply.pieces()
    assert d.decompress(chunks[-1]) == b"" and d.eof


def test_upstream_sse_delay_spreads_pieces(upstream: ScriptedUpstream) -> None:
    upstream.enqueue(SSEReply(SSE_BODY[:200], chunk_min=40, chunk_max=40, delay=0.03))
    got = stream_request(upstream.port, "GET", "/slow")
    assert got.status == 200 and got.body == SSE_BODY[:200]
    assert len(got.pieces) >= 3
    assert got.pieces[-1][0] - got.pieces[0][0] >= 0.08


def test_fixture_helpers() -> None:
    names = sorted(p.name for p in harness.FIXTURES.glob("*.chunks.txt"))
    if not names:
        pytest.skip(f"no recordings in {harness.FIXTURES}")
    sse = fixture_as_sse(names[0])
    lines = [x for x in load_fixture(names[0]).decode().splitlines() if x.strip()]
    assert sse.startswith(b"data: {") and sse.endswith(b"data: [DONE]\n\n")
    assert sse.count(b"data: ") == len(lines) + 1
    sse_files = sorted(harness.FIXTURES.glob("*.sse"))
    if sse_files:
        assert fixture_as_sse(sse_files[0].name) == sse_files[0].read_bytes()
    with pytest.raises(FileNotFoundError, match="no-such-recording"):
        load_fixture("no-such-recording.sse")


# --------------------------------------------------------------------------- through mitmdump


def test_get_is_forwarded(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(JSONReply({"ok": True}, headers={"X-From": "upstream"}))
    status, headers, body = raw_request(proxy.port, "GET", "/healthz?probe=1")
    assert (status, json.loads(body), headers["x-from"]) == (200, {"ok": True}, "upstream")
    (rec,) = upstream.requests
    assert (rec.method, rec.path, rec.body) == ("GET", "/healthz?probe=1", b"")


def test_post_body_is_forwarded_byte_exact(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    payload = bytes(range(256)) * 40
    upstream.script = lambda rec: RawReply(rec.body[::-1], headers={"content-type": "x/y"})
    status, _, body = raw_request(
        proxy.port, "POST", "/other/echo", payload, {"content-type": "application/octet-stream"}
    )
    assert status == 200 and body == payload[::-1]
    (rec,) = upstream.requests
    assert rec.body == payload and rec.path == "/other/echo"


@pytest.mark.parametrize("compress", [False, True], ids=["identity", "gzip"])
def test_sse_passes_through_byte_exact(
    proxy: Proxy, upstream: ScriptedUpstream, compress: bool
) -> None:
    upstream.enqueue(SSEReply(SSE_BODY, seed=7, gzip=compress, delay=0.001))
    request = json.dumps({"model": "m", "stream": True}).encode()
    status, headers, body = raw_request(
        proxy.port, "POST", "/other/stream", request, {"content-type": "application/json"}
    )
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    if compress:
        assert headers["content-encoding"] == "gzip"
        assert body != SSE_BODY and gzip.decompress(body) == SSE_BODY
    else:
        assert "content-encoding" not in headers
        assert body == SSE_BODY
    (rec,) = upstream.requests
    assert rec.body == request and rec.path == "/other/stream"


# --------------------------------------------------------------------------- Proxy lifecycle


@pytest.fixture
def proxies() -> Iterator[Callable[..., Proxy]]:
    """Build ``Proxy`` objects that are closed after the test, whatever happens."""
    made: list[Proxy] = []

    def make(*args: object, **kwargs: object) -> Proxy:
        p = Proxy(*args, **kwargs)  # type: ignore[arg-type]
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def test_unknown_addon_option_is_refused_before_start(upstream: ScriptedUpstream) -> None:
    with pytest.raises(ValueError, match=r"bridge_nonexistent.*ignore them silently"):
        Proxy(upstream.port, {"bridge_nonexistent": "1"})


def test_mitmdump_ignores_unknown_options_but_the_bridge_refuses_its_own(
    proxies: Callable[..., Proxy], upstream: ScriptedUpstream
) -> None:
    # mitmdump itself keeps unknown --set options as "deferred" and never complains ...
    p = proxies(upstream.port, {"nonexistent_option": "1"}, check_options=False).start()
    upstream.enqueue(RawReply(b"fine"))
    assert raw_request(p.port, "GET", "/healthz")[::2] == (200, b"fine")
    assert p.alive and "nonexistent_option" not in p.log_text()
    log_before_stop = p.log_text()
    assert p.stop() == 0 and not p.alive
    assert p.log_text().startswith(log_before_stop)
    # ... but a bridge_* name the bridge does not declare stops the start, naming it.
    bad = proxies(upstream.port, {"bridge_nonexistent": "1"}, check_options=False)
    with pytest.raises(ProxyStartError, match="unknown option bridge_nonexistent"):
        bad.start()


def test_bad_addon_option_value_fails_start(
    proxies: Callable[..., Proxy], upstream: ScriptedUpstream
) -> None:
    from addon.config.options import OPTIONS

    spec = next((s for s in OPTIONS if s.choices), None)
    if spec is None:
        pytest.skip("the addon declares no option with choices")
    p = proxies(upstream.port, {spec.name: "no-such-choice"})
    # mitmdump logs "listening at" first and exits right after: the harness must not
    # call that ready.
    with pytest.raises(ProxyStartError, match="Error logged during startup") as e:
        p.start()
    assert spec.name in str(e.value) and "no-such-choice" in e.value.log
    assert not p.alive


def test_bad_mitmproxy_option_value_fails_start(
    proxies: Callable[..., Proxy], upstream: ScriptedUpstream
) -> None:
    p = proxies(upstream.port, {"flow_detail": "bogus"})
    with pytest.raises(ProxyStartError, match="exited with 1") as e:
        p.start()
    assert "Failed to parse option flow_detail" in e.value.log


def test_broken_script_fails_start(
    proxies: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    script = tmp_path / "broken.py"
    script.write_text("raise RuntimeError('addon failed to import')\n")
    p = proxies(upstream.port, script=script)
    t0 = time.monotonic()
    with pytest.raises(ProxyStartError, match="addon failed to import"):
        p.start(timeout=20)
    assert time.monotonic() - t0 < 15 and not p.alive


def test_port_clash_is_retried(
    proxies: Callable[..., Proxy], upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = iter([busy])
        real_free_port = harness.free_port
        monkeypatch.setattr(harness, "free_port", lambda: next(ports, None) or real_free_port())
        p = proxies(upstream.port).start()
        assert p.port != busy and p.alive
        upstream.enqueue(RawReply(b"ok"))
        assert raw_request(p.port, "GET", "/x")[::2] == (200, b"ok")


def test_close_stops_and_cleans_up(upstream: ScriptedUpstream) -> None:
    with Proxy(upstream.port) as p:
        assert p.alive and p.confdir.is_dir()
        port = p.port
    assert not p.alive and not p.confdir.exists()
    assert f"listening at {HOST}:{port}" in p.log_text()
    with pytest.raises(OSError), socket.create_connection((HOST, port), timeout=1):
        pass


def test_upstream_answers_the_services_400_to_what_it_refuses(upstream: ScriptedUpstream) -> None:
    """Strict by default: the rules of ``tests.upstream_rules`` by path, before the queue."""
    upstream.enqueue(JSONReply({"ok": True}))
    unpaired = {
        "max_tokens": 8,
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
            },
            {"role": "user", "content": "no result"},
        ],
    }
    status, _, body = raw_request(
        upstream.port, "POST", "/v1/messages", json.dumps(unpaired).encode()
    )
    assert status == 400
    error = json.loads(body)
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "`tool_use` ids were found without `tool_result` blocks" in error["error"]["message"]
    assert len(upstream.violations) == 1 and "anthropic refuses" in upstream.violations[0]
    # the queued reply is still there for a body the service takes
    unpaired["messages"] = unpaired["messages"][:1]
    status, _, body = raw_request(
        upstream.port, "POST", "/v1/messages", json.dumps(unpaired).encode()
    )
    assert (status, json.loads(body)) == (200, {"ok": True})
    upstream.violations.clear()  # seen: the fixture fails a test on any left


def test_upstream_strict_off_lets_any_body_reach_the_script(upstream: ScriptedUpstream) -> None:
    upstream.strict = False
    upstream.enqueue(JSONReply({"ok": True}))
    status, _, _ = raw_request(upstream.port, "POST", "/v1/messages", b'{"messages": []}')
    assert status == 200 and upstream.violations == []
    upstream.reset()
    assert upstream.strict
    with ScriptedUpstream(strict=False) as lenient:
        lenient.enqueue(JSONReply({"ok": True}))
        status, _, _ = raw_request(lenient.port, "POST", "/v1/chat/completions", b"{}")
        assert status == 200 and lenient.violations == []


def test_upstream_is_quiet_when_a_client_hangs_up(
    upstream: ScriptedUpstream, capfd: pytest.CaptureFixture[str]
) -> None:
    """A client that resets the connection mid-request is no traceback on stderr; any other
    exception in the server still is."""
    upstream.enqueue(JSONReply({"ok": True}))
    with socket.create_connection((HOST, upstream.port), timeout=5) as s:
        s.sendall(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n" + b"x" * 10)
        time.sleep(0.1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
    time.sleep(0.3)
    assert "Exception occurred" not in capfd.readouterr().err
    server = upstream._server
    assert server is not None
    try:
        raise ValueError("not a disconnect")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert "Exception occurred" in capfd.readouterr().err
