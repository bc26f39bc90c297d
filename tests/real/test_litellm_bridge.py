"""The bridge in front of LiteLLM's proxy (itself in front of llama-server), official SDKs.

One LiteLLM and two mitmdumps per session: ``bridge`` with the default routes (every client
dialect to LiteLLM's ``/v1/chat/completions``) and ``native`` with a route per dialect
(Anthropic to ``/v1/messages``, Responses to ``/v1/responses``). Each client asks for text
and, with the conversation that makes SmolLM2 call (``record_llama_cpp``), for a tool call,
streamed and whole; a bad key must bring LiteLLM's 401 to the client in the client's shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import anthropic
import httpx
import openai
import pytest

from tests.e2e.harness import SAME_DIALECT_ROUTES, Proxy
from tests.real.litellm_proxy import LOCKED_MODEL, MODEL, LiteLLMProxy
from tests.real.record_llama_cpp import (
    ANTHROPIC_TOOL_TURNS,
    ANTHROPIC_TOOLS,
    CHAT_TOOL_TURNS,
    RESPONSES_TOOL_TURNS,
    RESPONSES_TOOLS,
    SAYS,
)

TIMEOUT = 120  # a loaded 2-core machine; SmolLM2 itself answers in well under a second


@pytest.fixture(scope="session")
def bridge(litellm: LiteLLMProxy) -> Iterator[Proxy]:
    """Default routes: every client dialect to LiteLLM's chat completions."""
    with Proxy(litellm.port) as p:
        yield p


@pytest.fixture(scope="session")
def native(litellm: LiteLLMProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """A route per dialect: each client to LiteLLM's endpoint of its own dialect."""
    routes = tmp_path_factory.mktemp("litellm-routes") / "routes.toml"
    routes.write_text(SAME_DIALECT_ROUTES)
    with Proxy(litellm.port, {"bridge_routes": str(routes)}) as p:
        yield p


def pick(request: pytest.FixtureRequest, name: str) -> Proxy:
    return cast(Proxy, request.getfixturevalue(name))


def openai_client(proxy: Proxy, key: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy.base_url}/v1", api_key=key, max_retries=0, timeout=TIMEOUT
    )


def anthropic_client(proxy: Proxy, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.base_url, api_key=key, max_retries=0, timeout=TIMEOUT)


# ---------------------------------------------------------------- OpenAI chat, as Cursor sends it

# Cursor sends its tools in Anthropic's shape and its user content as blocks.
CURSOR_TOOLS = ANTHROPIC_TOOLS


def cursor_chat(proxy: Proxy, key: str, stream: bool, **body: Any) -> dict[str, Any]:
    """The answer as ``{"text", "calls", "finish", "usage"}``, accumulated from the stream."""
    params: dict[str, Any] = {"model": MODEL, "temperature": 0, "max_tokens": 64, **body}
    chat = openai_client(proxy, key).chat.completions
    if not stream:
        done = chat.create(**params)
        message = done.choices[0].message
        return {
            "text": message.content or "",
            "calls": [
                {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                for c in message.tool_calls or []
                if c.type == "function"
            ],
            "finish": done.choices[0].finish_reason,
            "usage": done.usage,
        }
    text, finish, usage = "", None, None
    calls: dict[int, dict[str, str]] = {}
    for chunk in chat.create(**params, stream=True, stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += call.id or ""
                if call.function:
                    slot["name"] += call.function.name or ""
                    slot["arguments"] += call.function.arguments or ""
    return {"text": text, "calls": list(calls.values()), "finish": finish, "usage": usage}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_cursor_chat_text(bridge: Proxy, litellm: LiteLLMProxy, stream: bool) -> None:
    answer = cursor_chat(
        bridge,
        litellm.master_key,
        stream,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": SAYS}]},
        ],
    )
    assert answer["text"].strip()
    assert answer["calls"] == []
    assert answer["finish"] in {"stop", "length"}
    assert answer["usage"] is not None and answer["usage"].completion_tokens > 0


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_cursor_chat_tool_call(bridge: Proxy, litellm: LiteLLMProxy, stream: bool) -> None:
    answer = cursor_chat(
        bridge,
        litellm.master_key,
        stream,
        messages=CHAT_TOOL_TURNS,
        tools=CURSOR_TOOLS,
        tool_choice="required",
    )
    assert answer["finish"] == "tool_calls"
    (call,) = answer["calls"]
    assert call["id"] and call["name"] == "get_weather"
    assert isinstance(json.loads(call["arguments"])["city"], str)


# ---------------------------------------------------------------- Anthropic


def anthropic_final(proxy: Proxy, key: str, stream: bool, **body: Any) -> anthropic.types.Message:
    # This SDK has no ``temperature`` argument any more; the API still takes it.
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "extra_body": {"temperature": 0},
        **body,
    }
    messages = anthropic_client(proxy, key).messages
    if stream:
        with messages.stream(**params) as s:
            return s.get_final_message()
    return cast(anthropic.types.Message, messages.create(**params))


ROUTES = ["native", "bridge"]  # same dialect at LiteLLM, or a dialect change to its chat


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_anthropic_text(
    request: pytest.FixtureRequest, litellm: LiteLLMProxy, route: str, stream: bool
) -> None:
    message = anthropic_final(
        pick(request, route),
        litellm.master_key,
        stream,
        system="Be brief.",
        messages=[{"role": "user", "content": SAYS}],
    )
    assert message.role == "assistant"
    assert "".join(b.text for b in message.content if b.type == "text").strip()
    assert message.stop_reason in {"end_turn", "max_tokens"}
    assert message.usage.output_tokens > 0


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_anthropic_tool_call(
    request: pytest.FixtureRequest, litellm: LiteLLMProxy, route: str, stream: bool
) -> None:
    message = anthropic_final(
        pick(request, route),
        litellm.master_key,
        stream,
        messages=ANTHROPIC_TOOL_TURNS,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any"},
    )
    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use"
    (use,) = uses
    assert use.id and use.name == "get_weather"
    assert isinstance(cast(dict[str, Any], use.input)["city"], str)


# ---------------------------------------------------------------- Responses


def responses_final(proxy: Proxy, key: str, stream: bool, **body: Any) -> Any:
    params: dict[str, Any] = {"model": MODEL, "max_output_tokens": 64, "temperature": 0, **body}
    responses = openai_client(proxy, key).responses
    if stream:
        with responses.stream(**params) as s:
            return s.get_final_response()
    return responses.create(**params)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_responses_text(
    request: pytest.FixtureRequest, litellm: LiteLLMProxy, route: str, stream: bool
) -> None:
    response = responses_final(
        pick(request, route), litellm.master_key, stream, instructions="Be brief.", input=SAYS
    )
    assert response.status in {"completed", "incomplete"}
    assert response.output_text.strip()
    assert response.usage is not None and response.usage.output_tokens > 0


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_responses_tool_call(
    request: pytest.FixtureRequest, litellm: LiteLLMProxy, route: str, stream: bool
) -> None:
    response = responses_final(
        pick(request, route),
        litellm.master_key,
        stream,
        input=RESPONSES_TOOL_TURNS,
        tools=RESPONSES_TOOLS,
        tool_choice="required",
    )
    calls = [item for item in response.output if item.type == "function_call"]
    (call,) = calls
    assert call.call_id and call.name == "get_weather"
    assert isinstance(json.loads(call.arguments)["city"], str)


# ---------------------------------------------------------------- Gemini (no official SDK here)


def gemini(proxy: Proxy, key: str, stream: bool, model: str = MODEL) -> httpx.Response:
    verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
    body = {
        "contents": [{"role": "user", "parts": [{"text": SAYS}]}],
        "generationConfig": {"maxOutputTokens": 64, "temperature": 0},
    }
    return httpx.post(
        f"{proxy.base_url}/v1beta/models/{model}:{verb}",
        json=body,
        headers={"x-goog-api-key": key},
        timeout=TIMEOUT,
    )


def gemini_items(r: httpx.Response, stream: bool) -> list[dict[str, Any]]:
    if not stream:
        return [r.json()]
    return [
        json.loads(line[len("data:") :])
        for line in r.text.splitlines()
        if line.startswith("data:") and line[len("data:") :].strip()
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_gemini_text_to_chat(bridge: Proxy, litellm: LiteLLMProxy, stream: bool) -> None:
    r = gemini(bridge, litellm.master_key, stream)
    assert r.status_code == 200, r.text[:500]
    items = gemini_items(r, stream)
    text = "".join(
        part.get("text", "")
        for item in items
        for candidate in item.get("candidates", ())
        for part in candidate.get("content", {}).get("parts", ())
    )
    assert text.strip()
    finishes = [c.get("finishReason") for i in items for c in i.get("candidates", ())]
    assert finishes[-1] in {"STOP", "MAX_TOKENS"}
    assert items[-1]["usageMetadata"]["candidatesTokenCount"] > 0


# ---------------------------------------------------------------- errors

# LOCKED_MODEL's upstream refuses LiteLLM's key: LiteLLM answers 401 (its authentication error).
SAYS_TO_LOCKED: dict[str, Any] = {"model": LOCKED_MODEL}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_bad_key_reaches_the_openai_chat_client_as_its_401(
    bridge: Proxy, litellm: LiteLLMProxy, stream: bool
) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        cursor_chat(
            bridge,
            litellm.master_key,
            stream,
            messages=[{"role": "user", "content": SAYS}],
            **SAYS_TO_LOCKED,
        )
    assert caught.value.status_code == 401
    body = cast(dict[str, Any], caught.value.body)
    assert isinstance(body["message"], str) and body["message"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_bad_key_reaches_the_anthropic_client_as_its_401(
    request: pytest.FixtureRequest, litellm: LiteLLMProxy, route: str, stream: bool
) -> None:
    with pytest.raises(anthropic.AuthenticationError) as caught:
        anthropic_final(
            pick(request, route),
            litellm.master_key,
            stream,
            messages=[{"role": "user", "content": SAYS}],
            **SAYS_TO_LOCKED,
        )
    assert caught.value.status_code == 401
    body = cast(dict[str, Any], caught.value.body)
    assert body["type"] == "error"
    assert body["error"]["type"] == "authentication_error"
    assert body["error"]["message"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_bad_key_reaches_the_responses_client_as_its_401(
    request: pytest.FixtureRequest, litellm: LiteLLMProxy, route: str, stream: bool
) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        responses_final(
            pick(request, route), litellm.master_key, stream, input=SAYS, **SAYS_TO_LOCKED
        )
    assert caught.value.status_code == 401
    body = cast(dict[str, Any], caught.value.body)
    assert isinstance(body["message"], str) and body["message"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_bad_key_reaches_the_gemini_client_in_its_shape(
    bridge: Proxy, litellm: LiteLLMProxy, stream: bool
) -> None:
    r = gemini(bridge, litellm.master_key, stream, model=LOCKED_MODEL)
    assert r.status_code == 401, r.text[:500]
    error = r.json()["error"]
    assert error["code"] == 401 and error["status"] == "UNAUTHENTICATED"
    assert error["message"]


# Without a database LiteLLM answers a key that is not its master key with a 400
# ("No connected db.", type no_db_connection), not a 401: it reaches each client as its 400.
NOT_THE_MASTER_KEY = "sk-not-the-master-key"


@pytest.mark.parametrize("route", ROUTES)
def test_a_key_litellm_does_not_know_reaches_the_anthropic_client_as_its_400(
    request: pytest.FixtureRequest, route: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        anthropic_final(
            pick(request, route),
            NOT_THE_MASTER_KEY,
            False,
            messages=[{"role": "user", "content": SAYS}],
        )
    body = cast(dict[str, Any], refused.value.body)
    assert body.get("type") == "error", body
    assert body["error"]["type"] == "invalid_request_error"
    assert "No connected db" in body["error"]["message"]


@pytest.mark.parametrize("route", ROUTES)
def test_a_key_litellm_does_not_know_reaches_the_responses_client_as_its_400(
    request: pytest.FixtureRequest, route: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        responses_final(pick(request, route), NOT_THE_MASTER_KEY, False, input=SAYS)
    assert "No connected db" in cast(dict[str, Any], refused.value.body)["message"]


def test_a_key_litellm_does_not_know_reaches_the_chat_client_as_its_400(bridge: Proxy) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        cursor_chat(bridge, NOT_THE_MASTER_KEY, True, messages=[{"role": "user", "content": SAYS}])
    assert "No connected db" in cast(dict[str, Any], refused.value.body)["message"]
