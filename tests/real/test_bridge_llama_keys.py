"""Keys through the bridge to a llama-server that wants one (``--api-key``; issue 28).

The right key, sent where each client sends it (``Authorization: Bearer``, ``x-api-key``,
``x-goog-api-key``), reaches llama-server in the upstream dialect's header and is accepted;
a wrong key is refused and the refusal reaches the client in its own shape.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.harness import Proxy
from tests.real.bridge_clients import CLIENTS, UPSTREAMS, assert_client_error, bridge_to
from tests.real.llama_cpp import LlamaServer, Unavailable, locate

SERVER_KEY = "sk-llama-server-key"
CLIENT = pytest.mark.parametrize("client_name", list(CLIENTS))


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[LlamaServer]:
    try:
        paths = locate()
    except Unavailable as why:
        pytest.skip(str(why))
    with LlamaServer.start(paths, extra_args=("--api-key", SERVER_KEY)) as server:
        yield server


@pytest.fixture(scope="module", params=UPSTREAMS)
def keyed_bridge(
    request: pytest.FixtureRequest,
    keyed_server: LlamaServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Proxy]:
    with bridge_to(keyed_server, request.param, tmp_path_factory.mktemp("routes")) as proxy:
        yield proxy
    assert SERVER_KEY not in proxy.log_text()


@CLIENT
def test_the_right_key_reaches_llama_server_in_the_upstreams_header(
    keyed_bridge: Proxy, client_name: str
) -> None:
    client = CLIENTS[client_name](keyed_bridge.base_url, SERVER_KEY)
    assert client.text(False).strip()


@CLIENT
def test_a_wrong_key_is_refused_in_the_clients_shape(keyed_bridge: Proxy, client_name: str) -> None:
    client = CLIENTS[client_name](keyed_bridge.base_url, "sk-wrong")
    assert_client_error(client_name, client.refused(False, "Say hello."), 401)
