"""The bridge (a real mitmdump, reverse mode) in front of the real llama-server (issue 28).

Every client dialect the bridge takes (Cursor, Claude Code, Codex CLI, Gemini CLI: see
``bridge_clients``) goes to each upstream dialect llama-server speaks (``openai_chat`` at
``/v1/chat/completions``, ``anthropic`` at ``/v1/messages``, ``openai_responses`` at
``/v1/responses``), streamed and whole: text arrives and the client's SDK parses it, a tool
loop runs (a real ``get_weather`` call, then its result back), and errors reach the client in
its own shape. One llama-server for the session, one mitmdump per upstream dialect.

Unknown models: llama-server serves its one model whatever ``model`` names (the answer's
``model`` is the GGUF path), so there is no "unknown model" error to carry; the test below
shows a made-up name answered. Bad keys: llama-server runs without ``--api-key`` here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.harness import Proxy
from tests.real.bridge_clients import (
    CLIENT_ROUTES,
    CLIENTS,
    FILLER,
    UPSTREAMS,
    Client,
    assert_client_error,
    bridge_to,
)
from tests.real.llama_cpp import LlamaServer

STREAM = pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
CLIENT = pytest.mark.parametrize("client_name", list(CLIENTS))
SAME_DIALECT = {name: dialect for name, _, dialect in CLIENT_ROUTES}
"""The dialect each client speaks itself."""


@pytest.fixture(scope="module", params=UPSTREAMS)
def bridge(
    request: pytest.FixtureRequest,
    llama_server: LlamaServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Proxy]:
    with bridge_to(llama_server, request.param, tmp_path_factory.mktemp("routes")) as proxy:
        yield proxy


@pytest.fixture
def client(bridge: Proxy, client_name: str) -> Client:
    driver: Client = CLIENTS[client_name](bridge.base_url)
    return driver


# --------------------------------------------------------------------------- answers


@CLIENT
@STREAM
def test_text_arrives(client: Client, stream: bool) -> None:
    assert client.text(stream).strip()


@CLIENT
@STREAM
def test_tool_loop(client: Client, stream: bool) -> None:
    call = client.call(stream)
    assert call.name == "get_weather"
    assert isinstance(call.arguments.get("city"), str), call.arguments
    assert client.after_call(stream, call).strip()


@CLIENT
def test_a_model_name_llama_server_never_heard_of_is_answered(client: Client) -> None:
    """llama-server has no unknown model: it answers any name with its one model."""
    assert client.text(False, model="no-such-model-anywhere").strip()


# --------------------------------------------------------------------------- errors


@CLIENT
@STREAM
def test_a_prompt_past_the_context_size_is_an_error_in_the_clients_shape(
    client: Client, stream: bool
) -> None:
    assert_client_error(client.name, client.refused(stream, FILLER), 400, says="context")


@CLIENT
def test_a_body_that_is_not_json_is_an_error_in_the_clients_shape(
    client: Client, request: pytest.FixtureRequest
) -> None:
    """Another dialect's body the bridge cannot read is refused by the bridge in the client's
    shape. On a same-dialect route it passes through untouched (the bridge rewrites nothing it
    cannot read): the client gets the server's own 400, in whatever shape the server writes
    (llama-server writes OpenAI's on ``/v1/messages`` too)."""
    failure = client.bad_json()
    if SAME_DIALECT[client.name] == request.node.callspec.params["bridge"]:
        assert failure.status == 400, failure
    else:
        assert_client_error(client.name, failure, 400)
