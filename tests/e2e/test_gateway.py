"""``scripts/gateway``: HAProxy in front of mitmdump workers, real processes on 127.0.0.1.

Requests are answered through HAProxy by both workers; a streamed answer arrives event by
event (HAProxy does not buffer it); Ctrl-C (SIGINT to the gateway) leaves no process behind;
a worker killed under 40 streams: every request started after HAProxy took it out succeeds.
Skipped, saying why, where HAProxy is not installed.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.gateway_run import GatewayRun, alive, require_haproxy
from tests.e2e.harness import (
    JSONReply,
    Recorded,
    Reply,
    ScriptedUpstream,
    SSEReply,
    StreamedResponse,
    _can_connect,
    raw_request,
    stream_request,
)

CHAT = "/v1/chat/completions"
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-test"}


def event(i: int) -> bytes:
    """One chat.completion.chunk, the same length for every i < 1000."""
    chunk = {
        "id": "chatcmpl-gw",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": f"t{i:03d} "}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def streamed(events: int, delay: float) -> SSEReply:
    """``events`` events, each its own HTTP chunk, ``delay`` s apart."""
    size = len(event(0))
    body = b"".join(event(i) for i in range(events)) + DONE
    return SSEReply(body, chunk_min=size, chunk_max=size, delay=delay)


def chat(stream: bool) -> bytes:
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    ).encode()


def script_for(events: int, delay: float) -> Callable[[Recorded], Reply]:
    def script(rec: Recorded) -> Reply:
        if rec.json().get("stream"):
            return streamed(events, delay)
        return JSONReply(
            {
                "id": "chatcmpl-gw",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "hello"},
                        "finish_reason": "stop",
                    }
                ],
            }
        )

    return script


def complete(resp: StreamedResponse, events: int) -> bool:
    body = resp.body
    return (
        resp.status == 200
        and body.count(b"t0") + body.count(b"t1") >= events
        and (body.rstrip().endswith(b"data: [DONE]"))
    )


@pytest.fixture(scope="module")
def confdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mitmproxy confdir (its CA) for every gateway of this module."""
    require_haproxy()
    return tmp_path_factory.mktemp("gateway-confdir")


@pytest.fixture
def gateway(upstream: ScriptedUpstream, confdir: Path) -> Iterator[GatewayRun]:
    with GatewayRun(upstream.port, workers=2, confdir=confdir) as g:
        yield g
        # Shown only when the test failed (pytest's captured output of the teardown).
        print(f"----- scripts/gateway's output -----\n{g.log_text()[-8000:]}")


def test_requests_through_haproxy_are_served_by_both_workers(
    gateway: GatewayRun, upstream: ScriptedUpstream
) -> None:
    upstream.script = script_for(10, 0.05)
    status, _, body = raw_request(gateway.port, "POST", CHAT, chat(False), HEADERS)
    assert status == 200, body
    assert json.loads(body)["choices"][0]["message"]["content"] == "hello"
    # Streams at once: leastconn gives each worker its share.
    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(
                lambda _: stream_request(gateway.port, "POST", CHAT, chat(True), HEADERS), range(8)
            )
        )
    assert all(complete(r, 10) for r in results), [r.body[-200:] for r in results]
    served = {
        name: sum("cursor-bridge flow route=" in line for line in gateway.lines_of(name))
        for name in ("w1", "w2")
    }
    assert served["w1"] >= 1 and served["w2"] >= 1, served
    assert sum(served.values()) == 9, served
    # The health checks reached the workers without reaching the upstream or their flow log.
    assert all(r.path == CHAT for r in upstream.requests)
    assert not any("_cursor_bridge/health" in line for line in gateway.lines_of("w1"))


def test_a_stream_arrives_event_by_event_through_haproxy(
    gateway: GatewayRun, upstream: ScriptedUpstream
) -> None:
    """Each event reaches the client when the upstream sends it: not at the end, and not in
    batches (without ``option http-no-delay`` HAProxy's writes waited for more data: events
    sent 0.1 s apart came three at a time, ~300 ms apart, the first after ~210 ms)."""
    events, delay = 10, 0.1
    upstream.script = script_for(events, delay)
    resp = stream_request(gateway.port, "POST", CHAT, chat(True), HEADERS, timeout=15)
    assert complete(resp, events), resp.body
    arrivals = [t for t, data in resp.pieces if b"t0" in data]
    # The upstream sends its last event (events - 1) * delay = 0.9 s after its first.
    assert arrivals[0] < 0.45, resp.pieces
    assert arrivals[-1] - arrivals[0] > (events - 1) * delay * 0.6, resp.pieces
    # One read can return several pieces of a chunked body: reads within 30 ms are one.
    moments = [t for i, t in enumerate(arrivals) if i == 0 or t - arrivals[i - 1] > 0.03]
    assert len(moments) >= 0.7 * events, resp.pieces


def test_sigint_stops_haproxy_and_every_worker(
    gateway: GatewayRun, upstream: ScriptedUpstream
) -> None:
    upstream.script = script_for(3, 0.0)
    assert raw_request(gateway.port, "POST", CHAT, chat(False), HEADERS)[0] == 200
    pids = gateway.pids()
    assert len(pids) == 3 and all(alive(p) for p in pids)
    started = time.monotonic()
    gateway.signal(signal.SIGINT)
    assert gateway.wait(30) == 0, gateway.log_text()
    took = time.monotonic() - started
    assert not [p for p in pids if alive(p)], gateway.log_text()
    assert not _can_connect(gateway.port)
    assert gateway.lines_of("gateway")[-1] == "stopped"
    assert took < 15, took


def test_a_worker_killed_under_40_streams(gateway: GatewayRun, upstream: ScriptedUpstream) -> None:
    """Streams through the killed worker break; every request started after HAProxy took the
    worker out succeeds."""
    events, delay = 30, 0.1
    upstream.script = script_for(events, delay)
    victim, (_, victim_pid) = sorted(gateway.workers.items())[0]

    def one(_: int) -> StreamedResponse | Exception:
        try:
            return stream_request(gateway.port, "POST", CHAT, chat(True), HEADERS, timeout=20)
        except Exception as e:
            return e

    with ThreadPoolExecutor(40) as pool:
        first = [pool.submit(one, i) for i in range(40)]
        upstream.wait_for_requests(40, timeout=30)
        time.sleep(0.5)  # mid-stream
        os.kill(victim_pid, signal.SIGKILL)
        gateway.wait_for_log(rf"Server workers/{victim} is DOWN", timeout=20)
        gateway.wait_for_log(rf"gateway \| {victim} .*killed by SIGKILL", timeout=10)
        after = [pool.submit(one, i) for i in range(40)]
        second = [f.result(timeout=120) for f in after]
        before = [f.result(timeout=120) for f in first]
    failed = [r for r in second if not (isinstance(r, StreamedResponse) and complete(r, events))]
    assert not failed, failed[:3]
    broken = sum(not (isinstance(r, StreamedResponse) and complete(r, events)) for r in before)
    # Some of the first 40 were the killed worker's (leastconn shares them): those broke.
    assert 0 < broken < 40, broken
    survivor = next(n for n in gateway.workers if n != victim)
    assert sum("cursor-bridge flow route=" in line for line in gateway.lines_of(survivor)) >= 40
