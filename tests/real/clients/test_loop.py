"""The scripted answers of ``loop`` are what the official SDKs read, and its request checks bite.

Anthropic, OpenAI chat and Responses answers go straight (no proxy) to the official Python
SDK, streamed and whole; the SDK must see the same call or text. (Gemini has no SDK here:
its answers follow ``gemini-cli-0.61.0-default-turn*.response.sse``.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from openai.types.responses import Response

from tests.e2e.harness import ScriptedUpstream
from tests.real.clients.loop import Call, answer, check_request, gemini_chunk

CALL = Call("read", {"path": "/tmp/notes.txt"})
OTHER = Call("read", {"path": "/tmp/other.txt"}, id="call_real_client_2")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as upstream:
        yield upstream


def _anthropic(server: ScriptedUpstream, stream: bool) -> tuple[str, list[Any]]:
    client = anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0, timeout=10)
    params: Any = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    if stream:
        with client.messages.stream(**params) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**params)
    text = "".join(b.text for b in message.content if b.type == "text")
    return text, [(b.name, b.input) for b in message.content if b.type == "tool_use"]


def _chat(server: ScriptedUpstream, stream: bool) -> tuple[str, list[Any]]:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0)
    params: Any = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    if not stream:
        message = client.chat.completions.create(**params).choices[0].message
        calls = [
            (c.function.name, json.loads(c.function.arguments))
            for c in message.tool_calls or ()
            if c.type == "function"
        ]
        return message.content or "", calls
    text, args, name = "", "", ""
    for chunk in client.chat.completions.create(stream=True, **params):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for c in choice.delta.tool_calls or ():
                name = (c.function and c.function.name) or name
                args += (c.function and c.function.arguments) or ""
    return text, [(name, json.loads(args))] if name else []


def _responses(server: ScriptedUpstream, stream: bool) -> tuple[str, list[Any]]:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0)
    response: Response
    if stream:
        with client.responses.stream(model="m", input="x") as s:
            response = s.get_final_response()
    else:
        response = client.responses.create(model="m", input="x")
    calls = [
        (item.name, json.loads(item.arguments))
        for item in response.output
        if item.type == "function_call"
    ]
    return response.output_text, calls


READERS = {"anthropic": _anthropic, "openai_chat": _chat, "openai_responses": _responses}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("dialect", sorted(READERS))
def test_the_official_sdk_reads_the_scripted_answers(
    server: ScriptedUpstream, dialect: str, stream: bool
) -> None:
    server.reset()
    server.enqueue(answer(dialect, stream, None, [CALL]), answer(dialect, stream, "it says 42"))
    assert READERS[dialect](server, stream) == ("", [(CALL.name, CALL.arguments)])
    assert READERS[dialect](server, stream) == ("it says 42", [])


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("dialect", ["anthropic", "openai_responses"])
def test_the_official_sdk_reads_two_scripted_calls(
    server: ScriptedUpstream, dialect: str, stream: bool
) -> None:
    server.reset()
    server.enqueue(answer(dialect, stream, "Reading both.", [CALL, OTHER]))
    both = [(CALL.name, CALL.arguments), (OTHER.name, OTHER.arguments)]
    assert READERS[dialect](server, stream) == ("Reading both.", both)


def test_the_official_sdk_reads_two_scripted_chat_calls(server: ScriptedUpstream) -> None:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0)
    params: Any = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    server.reset()
    server.enqueue(answer("openai_chat", False, None, [CALL, OTHER]))
    calls = client.chat.completions.create(**params).choices[0].message.tool_calls or []
    assert [c.id for c in calls] == [CALL.id, OTHER.id]
    server.enqueue(answer("openai_chat", True, None, [CALL, OTHER]))
    args: dict[int, str] = {}
    for chunk in client.chat.completions.create(stream=True, **params):
        for choice in chunk.choices:
            for c in choice.delta.tool_calls or ():
                args[c.index] = args.get(c.index, "") + (
                    (c.function and c.function.arguments) or ""
                )
    assert [json.loads(args[i]) for i in sorted(args)] == [CALL.arguments, OTHER.arguments]


def test_only_the_first_gemini_call_of_a_turn_carries_the_signature() -> None:
    parts = gemini_chunk(None, [CALL, OTHER])["candidates"][0]["content"]["parts"]
    assert [bool(p.get("thoughtSignature")) for p in parts] == [True, False]


UNPAIRED = {
    "anthropic": {
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "no call"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
        ],
    },
    "openai_chat": {
        "messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c1"}]
    },
    "openai_responses": {"input": [{"type": "function_call_output", "call_id": "c1"}]},
    "gemini": {
        "contents": [
            {"role": "user", "parts": [{"text": "x"}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "read", "response": {}}}]},
        ]
    },
}


@pytest.mark.parametrize("dialect", sorted(UNPAIRED))
def test_a_tool_result_without_its_call_is_refused(dialect: str) -> None:
    with pytest.raises(AssertionError):
        check_request(dialect, UNPAIRED[dialect])


def test_a_gemini_call_replayed_without_its_signature_is_refused() -> None:
    call = {"functionCall": {"name": "read", "args": {}}}
    answer = {"functionResponse": {"name": "read", "response": {}}}
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "x"}]},
            {"role": "model", "parts": [call]},
            {"role": "user", "parts": [answer]},
        ]
    }
    with pytest.raises(AssertionError, match="thought_signature"):
        check_request("gemini", body)
    body["contents"][1]["parts"] = [{**call, "thoughtSignature": "c2ln"}]
    check_request("gemini", body)
