"""End to end: tool calls that run, and loops that stop (openai, anthropic and Responses clients).

An ``edit`` call whose arguments the model got almost right (aliased keys, a trailing comma)
reaches every client repaired, streamed and whole. A history that ends in three identical
failing calls gets the loop guard's answer without the upstream being asked; with
``bridge_loop_fallback`` the upstream is asked with the tools in the prompt instead, and its
text-protocol answer reaches the client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream, SSEReply
from tests.e2e.test_text_tools import openai_json, openai_sse

EDIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "old_string": {"type": "string"},
        "new_string": {"type": "string"},
    },
    "required": ["path", "old_string", "new_string"],
}
BROKEN = '{"filePath": "src/a.py", "oldString": "x = 1", "newString": "x = 2",}'
REPAIRED = {"path": "src/a.py", "old_string": "x = 1", "new_string": "x = 2"}
ERROR = "Error: file not found: src/a.py"


def broken_call_reply(stream: bool) -> JSONReply | SSEReply:
    call = {"id": "call_e1", "type": "function", "function": {"name": "edit", "arguments": BROKEN}}
    if not stream:
        body = openai_json("")
        body["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
        body["choices"][0]["finish_reason"] = "tool_calls"
        return JSONReply(body)
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    head = {**call, "index": 0, "function": {"name": "edit", "arguments": ""}}
    payloads: list[Any] = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [head]}}]}
    ]
    for i in range(0, len(BROKEN), 9):
        piece = {"index": 0, "function": {"arguments": BROKEN[i : i + 9]}}
        payloads.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]})
    payloads.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    sse = b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads)
    return SSEReply(sse + b"data: [DONE]\n\n", chunk_min=1, chunk_max=13, seed=5)


STREAMS = pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])


@STREAMS
def test_openai_client_gets_the_edit_repaired(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.enqueue(broken_call_reply(stream))
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=15)
    tools: Any = [{"type": "function", "function": {"name": "edit", "parameters": EDIT_SCHEMA}}]
    messages: Any = [{"role": "user", "content": "bump x"}]
    if stream:
        args = ""
        for chunk in client.chat.completions.create(
            model="m", messages=messages, tools=tools, stream=True
        ):
            for tc in (chunk.choices[0].delta.tool_calls or ()) if chunk.choices else ():
                args += (tc.function.arguments or "") if tc.function else ""
    else:
        done = client.chat.completions.create(model="m", messages=messages, tools=tools)
        call = (done.choices[0].message.tool_calls or [])[0]
        assert call.type == "function"
        args = call.function.arguments
    assert json.loads(args) == REPAIRED


@STREAMS
def test_anthropic_client_gets_the_edit_repaired(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.enqueue(broken_call_reply(stream))
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=15)
    params: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "tools": [{"name": "edit", "input_schema": EDIT_SCHEMA}],
        "messages": [{"role": "user", "content": "bump x"}],
    }
    if stream:
        with client.messages.stream(**params) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**params)
    (use,) = [b for b in message.content if b.type == "tool_use"]
    assert use.name == "edit" and use.input == REPAIRED


@STREAMS
def test_responses_client_gets_the_edit_repaired(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.enqueue(broken_call_reply(stream))
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=15)
    tools: Any = [{"type": "function", "name": "edit", "parameters": EDIT_SCHEMA, "strict": False}]
    if stream:
        with client.responses.stream(model="m", input="bump x", tools=tools) as s:
            response = s.get_final_response()
    else:
        response = client.responses.create(model="m", input="bump x", tools=tools)
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert call.name == "edit" and json.loads(call.arguments) == REPAIRED


# --------------------------------------------------------------------------- the loop guard


def failing_history() -> list[Any]:
    messages: list[Any] = [{"role": "user", "content": "bump x"}]
    args = json.dumps(REPAIRED)
    for i in range(3):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "edit", "arguments": args},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": ERROR})
    return messages


@STREAMS
def test_three_identical_failures_get_the_loop_guards_answer(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=15)
    tools: Any = [{"type": "function", "function": {"name": "edit", "parameters": EDIT_SCHEMA}}]
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="m", messages=failing_history(), tools=tools, stream=True
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        done = client.chat.completions.create(model="m", messages=failing_history(), tools=tools)
        text, finish = done.choices[0].message.content or "", done.choices[0].finish_reason
    assert finish == "stop"
    assert "`edit`" in text and "3 times" in text and ERROR in text
    assert upstream.requests == []  # the upstream was not asked to loop again
    line = proxy.wait_for_log(r"loop_guard")
    assert "Traceback" not in proxy.log_text() and line


def test_anthropic_client_gets_the_loop_guards_answer(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    messages: list[Any] = [{"role": "user", "content": "bump x"}]
    for i in range(3):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{i}", "name": "edit", "input": REPAIRED}
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{i}",
                        "content": ERROR,
                        "is_error": True,
                    }
                ],
            }
        )
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=15)
    with client.messages.stream(
        model="m",
        max_tokens=100,
        tools=[{"name": "edit", "input_schema": EDIT_SCHEMA}],
        messages=messages,
    ) as s:
        message = s.get_final_message()
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text" and "loop guard" in message.content[0].text
    assert upstream.requests == []


def test_with_fallback_the_upstream_is_asked_with_the_invoke_protocol(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream
) -> None:
    seen: list[Any] = []

    def script(rec: Recorded) -> SSEReply:
        seen.append(rec.json())
        return SSEReply(openai_sse("Let me read the file first instead.", seed=1), seed=2)

    upstream.script = script
    proxy = start_proxy(bridge_loop_fallback=True)
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=15)
    tools: Any = [{"type": "function", "function": {"name": "edit", "parameters": EDIT_SCHEMA}}]
    chunks = list(
        client.chat.completions.create(
            model="m", messages=failing_history(), tools=tools, stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me read the file first instead."
    (body,) = seen
    assert "tools" not in body  # the tools went into the prompt
    prompt = json.dumps(body["messages"])
    assert "<invoke" in prompt and "edit" in prompt
    assert all(m["role"] != "tool" for m in body["messages"])
    # The flow's line (and its mark in mitmweb) says the loop guard decided this one.
    proxy.wait_for_log(re.compile(r"cursor-bridge flow route=default outcome=loop_guard "))


def test_responses_client_gets_the_loop_guards_answer(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    items: list[Any] = [{"role": "user", "content": "bump x"}]
    for i in range(3):
        items.append(
            {
                "type": "function_call",
                "call_id": f"call_{i}",
                "name": "edit",
                "arguments": json.dumps(REPAIRED),
            }
        )
        items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": ERROR})
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=15)
    tools: Any = [{"type": "function", "name": "edit", "parameters": EDIT_SCHEMA, "strict": False}]
    with client.responses.stream(model="m", input=items, tools=tools) as s:
        response = s.get_final_response()
    assert response.status == "completed"
    assert "loop guard" in response.output_text and "`edit`" in response.output_text
    assert upstream.requests == []


@STREAMS
def test_a_broken_text_protocol_call_is_repaired_too(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, stream: bool
) -> None:
    """The invoke protocol (upstreams without tool calling): the model's call in text, with
    aliased keys and a trailing comma, still reaches the client as a real call."""

    def script(rec: Recorded) -> JSONReply | SSEReply:
        found = re.search(r"<<CALL_[A-Za-z0-9]{8}>>", json.dumps(rec.json()["messages"]))
        assert found
        text = f'Editing.\n{found.group(0)}\n<invoke name="edit">{BROKEN}</invoke>'
        return (
            SSEReply(openai_sse(text, seed=3), chunk_min=1, chunk_max=9, seed=4)
            if stream
            else JSONReply(openai_json(text))
        )

    upstream.script = script
    proxy = start_proxy(bridge_tool_mode="invoke")
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=15)
    params: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "tools": [{"name": "edit", "input_schema": EDIT_SCHEMA}],
        "messages": [{"role": "user", "content": "bump x"}],
    }
    if stream:
        with client.messages.stream(**params) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**params)
    (use,) = [b for b in message.content if b.type == "tool_use"]
    assert use.name == "edit" and use.input == REPAIRED
    assert message.stop_reason == "tool_use"
