"""The bridge (a real mitmdump, reverse mode) in front of the real llama-server (issue 28).

Every client dialect the bridge takes (Cursor, Claude Code, Codex CLI, Gemini CLI: see
``bridge_clients``) goes to each upstream dialect llama-server speaks (``openai_chat`` at
``/v1/chat/completions``, ``anthropic`` at ``/v1/messages``, ``openai_responses`` at
``/v1/responses``), streamed and whole: text arrives and the client's SDK parses it, a tool
loop runs (a real ``get_weather`` call, then its result back), errors reach the client in
its own shape, and the token counts the server gave reach a Gemini client (none as a wrong 0)
and an Anthropic client (cache reads apart from ``input_tokens``). One llama-server for the session, one mitmdump per upstream dialect.

Unknown models: llama-server serves its one model whatever ``model`` names (the answer's
``model`` is the GGUF path), so there is no "unknown model" error to carry; the test below
shows a made-up name answered. Bad keys: llama-server runs without ``--api-key`` here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.e2e.harness import Proxy
from tests.real.bridge_clients import (
    CLIENT_ROUTES,
    CLIENTS,
    FILLER,
    KEY,
    MAX_TOKENS,
    TIMEOUT,
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


# --------------------------------------------------------------------------- usage

PROMPT = "Say hello in five words."


@STREAM
def test_a_gemini_client_gets_every_count_the_server_gave(bridge: Proxy, stream: bool) -> None:
    """From ``/v1/messages`` too (input at ``message_start``, output at ``message_delta``):
    the prompt, the answer and their total, no count as a wrong 0."""
    path = "m:streamGenerateContent?alt=sse" if stream else "m:generateContent"
    r = httpx.post(
        f"{bridge.base_url}/v1beta/models/{path}",
        json={
            "contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
            "generationConfig": {"maxOutputTokens": MAX_TOKENS, "temperature": 0},
        },
        headers={"x-goog-api-key": KEY},
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.text[:500]
    if stream:
        datas = [ln.removeprefix("data:") for ln in r.text.splitlines() if ln.startswith("data:")]
        meta: dict[str, Any] = json.loads(datas[-1])["usageMetadata"]
    else:
        meta = r.json()["usageMetadata"]
    assert meta["promptTokenCount"] > 5 and meta["candidatesTokenCount"] > 0, meta
    assert meta["totalTokenCount"] == meta["promptTokenCount"] + meta["candidatesTokenCount"]
    assert meta.get("cachedContentTokenCount", 0) < meta["promptTokenCount"]


@STREAM
def test_a_claude_client_gets_cache_reads_apart_from_input(bridge: Proxy, stream: bool) -> None:
    """The same prompt twice: llama-server reads the second from its cache. Anthropic counts
    the cache reads apart, so ``input_tokens`` + ``cache_read_input_tokens`` is the same
    prompt both times, whatever dialect the server answered in."""
    claude = anthropic.Anthropic(base_url=bridge.base_url, api_key=KEY, max_retries=0, timeout=TIMEOUT)  # fmt: skip
    ask: Any = {
        "model": "m",
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    prompts = []
    for _ in range(2):
        if stream:
            with claude.messages.stream(**ask) as s:
                usage = s.get_final_message().usage
        else:
            usage = claude.messages.create(**ask).usage
        assert usage.output_tokens > 0
        prompts.append(usage.input_tokens + (usage.cache_read_input_tokens or 0))
    assert usage.cache_read_input_tokens, usage  # the second prompt came from the cache
    assert usage.input_tokens < prompts[1]
    assert prompts[0] == prompts[1] > 5


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
