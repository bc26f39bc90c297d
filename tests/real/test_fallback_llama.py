"""Fallbacks to the real llama-server (issue 29): every client dialect's route first goes to an
upstream that refuses the connection or that accepts it and never answers (the route's
``timeout`` is 2 s), with a ``fallback`` to a route whose upstream is llama-server (in
another dialect than the client's, ``anthropic``: the fallback's request is decided again for
it). Through a real mitmdump and the bridge's relay, the client's SDK gets llama-server's
answer, streamed and whole, and a tool loop runs; the flow line names what was tried."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Proxy
from tests.real.bridge_clients import CLIENT_ROUTES, CLIENTS, Client
from tests.real.llama_cpp import LlamaServer

STREAM = pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
CLIENT = pytest.mark.parametrize("client_name", list(CLIENTS))
UPSTREAM = "anthropic"
"""The dialect the fallback route speaks to llama-server."""


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def routes(dead: int, silent: int) -> str:
    """Per client: ``<client>-dead`` (refused) for the model ``dead``, ``<client>-silent`` (no
    first byte) for any other, each falling back to ``<client>-llama`` (llama-server)."""
    out = []
    for name, path, client in CLIENT_ROUTES:
        first = f'path = "{path}"\nclient = "{client}"\nupstream = "{client}"\n'
        out.append(
            f'[[routes]]\nname = "{name}-dead"\n{first}model = "dead"\n'
            f'upstream_url = "http://127.0.0.1:{dead}"\nfallback = ["{name}-llama"]\n\n'
            f'[[routes]]\nname = "{name}-silent"\n{first}'
            f'upstream_url = "http://127.0.0.1:{silent}"\ntimeout = 2\n'
            f'fallback = ["{name}-llama"]\n\n'
            f'[[routes]]\nname = "{name}-llama"\npath = "{path}"\nclient = "{client}"\n'
            f'upstream = "{UPSTREAM}"\nmodel = "never"\n\n'
        )
    return "".join(out)


@pytest.fixture(scope="module")
def bridge(
    llama_server: LlamaServer, silent_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    path: Path = tmp_path_factory.mktemp("routes") / "fallback.toml"
    path.write_text(routes(dead_port(), silent_port))
    with Proxy(llama_server.port, {"bridge_routes": str(path)}) as proxy:
        yield proxy
        log = proxy.log_text()
    assert "Traceback" not in log, log


def flow_lines(proxy: Proxy, route: str, at_least: int) -> list[str]:
    pattern = re.compile(rf"cursor-bridge flow route={route} .*")
    deadline = time.monotonic() + 10
    while True:
        lines = pattern.findall(proxy.log_text())
        if len(lines) >= at_least or time.monotonic() > deadline:
            return [str(line) for line in lines]
        time.sleep(0.05)


@CLIENT
@STREAM
def test_a_refused_route_falls_back_to_llama_server(
    bridge: Proxy, client_name: str, stream: bool
) -> None:
    client: Client = CLIENTS[client_name](bridge.base_url)
    before = len(flow_lines(bridge, f"{client_name}-llama", 0))
    assert client.text(stream, model="dead").strip()
    (line,) = flow_lines(bridge, f"{client_name}-llama", before + 1)[before:]
    assert f"{client_name}-dead (connection refused" in line or "skipped" in line, line


@CLIENT
def test_a_route_with_no_first_byte_in_time_falls_back_to_llama_server_in_a_tool_loop(
    bridge: Proxy, client_name: str
) -> None:
    client: Client = CLIENTS[client_name](bridge.base_url)
    started = time.monotonic()
    call = client.call(True)
    assert call.name == "get_weather"
    assert client.after_call(True, call).strip()
    lines = flow_lines(bridge, f"{client_name}-llama", 1)
    assert any(f"{client_name}-silent (timed out before the first byte" in x for x in lines)
    assert time.monotonic() - started < 60
