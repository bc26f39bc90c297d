"""Every client dialect through the bridge to each LiteLLM endpoint as its upstream (issue 28).

LiteLLM's proxy (``litellm_proxy``) before the real llama-server serves four dialects the
bridge can send to: ``openai_chat`` (``/v1/chat/completions``), ``anthropic``
(``/v1/messages``), ``openai_responses`` (``/v1/responses``) and ``gemini``
(``/v1beta/models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse``, its own
adapter over chat completions). One mitmdump per upstream dialect, every client routed to it
(``bridge_clients.routes``), each client driven as its real program sends it
(``bridge_clients``), streamed and whole: text; a tool loop (a real ``get_weather`` call
from SmolLM2, its result back, the answer after it); and LiteLLM's errors reaching the
client in its own shape: a prompt past llama-server's context (LiteLLM's
``ContextWindowExceededError``), a model LiteLLM has no config for (its unknown-model 400,
which llama-server alone never gives) and a bad key (``LOCKED_MODEL``'s upstream refuses
LiteLLM's key: its 401).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.harness import Proxy
from tests.real.bridge_clients import (
    CLIENTS,
    FILLER,
    Client,
    assert_client_error,
    routes,
)
from tests.real.litellm_proxy import LOCKED_MODEL, LiteLLMProxy

UPSTREAMS = ("openai_chat", "anthropic", "openai_responses", "gemini")
"""The upstream dialects LiteLLM serves."""
STREAM = pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
CLIENT = pytest.mark.parametrize("client_name", list(CLIENTS))
UNKNOWN_MODEL = "no-such-model-anywhere"


@pytest.fixture(scope="module", params=UPSTREAMS)
def bridge(
    request: pytest.FixtureRequest,
    litellm: LiteLLMProxy,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Proxy]:
    upstream = request.param
    path = tmp_path_factory.mktemp("routes") / f"{upstream}.toml"
    path.write_text(routes(upstream))
    with Proxy(litellm.port, {"bridge_routes": str(path)}) as proxy:
        yield proxy
        log = proxy.log_text()  # before the stop: mitmdump may log its own on SIGTERM
    assert "Traceback" not in log, log


@pytest.fixture
def client(bridge: Proxy, litellm: LiteLLMProxy, client_name: str) -> Client:
    driver: Client = CLIENTS[client_name](bridge.base_url, litellm.master_key)
    return driver


# --------------------------------------------------------------------------- answers


@CLIENT
@STREAM
def test_text_arrives(client: Client, stream: bool) -> None:
    assert client.text(stream).strip()


@CLIENT
@STREAM
def test_tool_loop(client: Client, stream: bool) -> None:
    """Turn 1: the call, parsed by the client's SDK; turn 2: its result back, an answer."""
    call = client.call(stream)
    assert call.name == "get_weather"
    assert isinstance(call.arguments.get("city"), str), call.arguments
    assert client.after_call(stream, call).strip()


# --------------------------------------------------------------------------- errors


@CLIENT
@STREAM
def test_a_prompt_past_the_context_size_is_an_error_in_the_clients_shape(
    client: Client, stream: bool
) -> None:
    assert_client_error(client.name, client.refused(stream, FILLER), 400, says="context")


@CLIENT
@STREAM
def test_a_model_litellm_does_not_know_is_an_error_in_the_clients_shape(
    client: Client, stream: bool
) -> None:
    failure = client.refused(stream, "Say hello.", model=UNKNOWN_MODEL)
    assert_client_error(client.name, failure, 400, says=UNKNOWN_MODEL)


@CLIENT
@STREAM
def test_a_bad_upstream_key_is_an_error_in_the_clients_shape(client: Client, stream: bool) -> None:
    failure = client.refused(stream, "Say hello.", model=LOCKED_MODEL)
    assert_client_error(client.name, failure, 401)
