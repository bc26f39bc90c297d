"""End to end: tool calls that run, and loops that stop (openai, anthropic and Responses clients).

An ``edit`` call whose arguments the model got almost right (aliased keys, a trailing comma)
reaches every client repaired, streamed and whole. A history that ends in three identical
failing calls is sent to the upstream as usual; when the model answers the same call a fourth
time, the client gets the loop guard's message instead of that call (finish ``stop``), and with
``bridge_loop_fallback`` the upstream is asked again with the tools in the prompt and that
answer reaches the client. Another call, or text alone, reaches the client untouched. Each
flow's one log line says what happened (``outcome=loop_guard tool=edit failures=3``,
``outcome=rejected``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, cast

import anthropic
import httpx
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
    return call_reply(stream)


def call_reply(
    stream: bool, arguments: str = BROKEN, text: str | None = None
) -> JSONReply | SSEReply:
    """The upstream (OpenAI chat) answers one ``edit`` call, after ``text`` when given."""
    call = {
        "id": "call_e1",
        "type": "function",
        "function": {"name": "edit", "arguments": arguments},
    }
    if not stream:
        body = openai_json("")
        body["choices"][0]["message"] = {"role": "assistant", "content": text, "tool_calls": [call]}
        body["choices"][0]["finish_reason"] = "tool_calls"
        return JSONReply(body)
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    head = {**call, "index": 0, "function": {"name": "edit", "arguments": ""}}
    payloads: list[Any] = []
    if text:
        for i in range(0, len(text), 5):
            delta = {"content": text[i : i + 5]}
            payloads.append({**base, "choices": [{"index": 0, "delta": delta}]})
    payloads.append(
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [head]}}]}
    )
    for i in range(0, len(arguments), 9):
        piece = {"index": 0, "function": {"arguments": arguments[i : i + 9]}}
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

TOOLS: Any = [{"type": "function", "function": {"name": "edit", "parameters": EDIT_SCHEMA}}]
OTHER = json.dumps({"path": "src/b.py", "old_string": "x = 1", "new_string": "x = 2"})


def failing_history() -> list[Any]:
    """A Cursor-shaped conversation: its system prompt, the user's ask, then the same ``edit``
    call three times, each answered by the same error."""
    messages: list[Any] = [
        {"role": "system", "content": "You are a powerful agentic AI coding assistant."},
        {"role": "user", "content": "bump x"},
    ]
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


def chat_answer(proxy: Proxy, stream: bool) -> tuple[str, str | None, list[tuple[str, str]]]:
    """The openai SDK asks with the failing history: (text, finish, [(tool, arguments)])."""
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=15)
    if not stream:
        done = client.chat.completions.create(model="m", messages=failing_history(), tools=TOOLS)
        message = done.choices[0].message
        calls = [
            (c.function.name, c.function.arguments)
            for c in message.tool_calls or ()
            if c.type == "function"
        ]
        return message.content or "", done.choices[0].finish_reason, calls
    text, finish, calls = "", None, dict[int, list[str]]()
    for chunk in client.chat.completions.create(
        model="m",
        messages=failing_history(),
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    ):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or ():
                got = calls.setdefault(tc.index, ["", ""])
                if tc.function is not None:
                    got[0] += tc.function.name or ""
                    got[1] += tc.function.arguments or ""
    return text, finish, [(name, args) for name, args in calls.values()]


def flow_line(proxy: Proxy, before: int, outcome: str) -> str:
    """This test's flow line (logged after ``before``, the log's length when it began)."""
    pattern = re.compile(rf"cursor-bridge flow route=\S+ outcome={outcome} [^\n]*")
    deadline = time.monotonic() + 5
    while True:
        if m := pattern.search(proxy.log_text()[before:]):
            return m.group(0)
        assert time.monotonic() < deadline, proxy.log_text()[before:]
        time.sleep(0.02)


def assert_stopped(text: str) -> None:
    assert "loop guard" in text and "`edit`" in text
    assert "4th time" in text and "3 times" in text and ERROR in text


@STREAMS
def test_a_fourth_identical_call_gets_the_loop_guards_message(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    """The upstream IS asked; its answer repeats the call (arguments that need repair, the
    same once repaired), after a sentence: the sentence reaches the client, the call does not."""
    upstream.enqueue(call_reply(stream, text="Let me try that again."))
    before = len(proxy.log_text())
    text, finish, calls = chat_answer(proxy, stream)
    assert finish == "stop" and calls == []
    assert text.startswith("Let me try that again.\n\nStopped by cursor-bridge's loop guard")
    assert_stopped(text)
    (asked,) = upstream.requests  # asked once, as usual: with its tools and the history
    body = asked.json()
    assert body["tools"][0]["function"]["name"] == "edit"
    assert [m["role"] for m in body["messages"]].count("tool") == 3
    line = flow_line(proxy, before, "loop_guard")
    assert " tool=edit failures=3 " in line and "status=200" in line
    assert "Traceback" not in proxy.log_text()


@STREAMS
def test_a_different_call_reaches_the_client_untouched(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.enqueue(call_reply(stream, arguments=OTHER))
    before = len(proxy.log_text())
    text, finish, calls = chat_answer(proxy, stream)
    assert calls == [("edit", OTHER)] and finish == "tool_calls" and text == ""
    assert len(upstream.requests) == 1
    assert "tool=" not in flow_line(proxy, before, "rewritten")


@STREAMS
def test_text_alone_reaches_the_client_untouched(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    said = "That keeps failing: the file is not there. Shall I create src/a.py?"
    upstream.enqueue(
        SSEReply(openai_sse(said, seed=4), seed=5) if stream else JSONReply(openai_json(said))
    )
    before = len(proxy.log_text())
    assert chat_answer(proxy, stream) == (said, "stop", [])
    assert len(upstream.requests) == 1
    flow_line(proxy, before, "rewritten")


@STREAMS
def test_with_fallback_the_upstream_is_asked_again_with_the_invoke_protocol(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, stream: bool
) -> None:
    seen: list[Any] = []
    instead = "Let me read the file first instead."

    def script(rec: Recorded) -> JSONReply | SSEReply:
        body = rec.json()
        seen.append(body)
        if len(seen) == 1:
            return call_reply(stream)  # the fourth identical call
        assert body.get("stream", False) == stream
        return (
            SSEReply(openai_sse(instead, seed=1), seed=2)
            if stream
            else JSONReply(openai_json(instead))
        )

    upstream.script = script
    proxy = start_proxy(bridge_loop_fallback=True)
    text, finish, calls = chat_answer(proxy, stream)
    assert (text, finish, calls) == (instead, "stop", [])
    first, second = seen
    assert first["tools"][0]["function"]["name"] == "edit"  # first asked natively
    assert "tools" not in second  # then with the tools in the prompt
    prompt = json.dumps(second["messages"])
    assert "<invoke" in prompt and "edit" in prompt
    assert all(m["role"] != "tool" for m in second["messages"])
    line = flow_line(proxy, 0, "loop_guard")
    assert " tool=edit failures=3 " in line and "retries=1" in line


def test_with_fallback_a_second_answer_that_calls_a_tool_gets_a_real_call(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream
) -> None:
    """The second answer is read in the invoke protocol: its call reaches the client as a
    real call (streamed client)."""

    def script(rec: Recorded) -> SSEReply:
        body = rec.json()
        if "tools" in body:
            return cast(SSEReply, call_reply(True))
        found = re.search(r"<<CALL_[A-Za-z0-9]{8}>>", json.dumps(body["messages"]))
        assert found
        text = f'{found.group(0)}\n<invoke name="edit">{OTHER}</invoke>'
        return SSEReply(openai_sse(text, seed=3), chunk_min=1, chunk_max=9, seed=4)

    upstream.script = script
    proxy = start_proxy(bridge_loop_fallback=True)
    _, finish, calls = chat_answer(proxy, stream=True)
    assert finish == "tool_calls" and [(n, json.loads(a)) for n, a in calls] == [
        ("edit", json.loads(OTHER))
    ]
    assert len(upstream.requests) == 2


def anthropic_history() -> list[Any]:
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
    return messages


@STREAMS
def test_anthropic_client_gets_the_loop_guards_message(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    upstream.enqueue(call_reply(stream))
    before = len(proxy.log_text())
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=15)
    params: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "tools": [{"name": "edit", "input_schema": EDIT_SCHEMA}],
        "messages": anthropic_history(),
    }
    if stream:
        with client.messages.stream(**params) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**params)
    assert message.stop_reason == "end_turn"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].type == "text"
    assert_stopped(message.content[0].text)
    assert len(upstream.requests) == 1
    line = flow_line(proxy, before, "loop_guard")
    assert "route=messages" in line and "client=anthropic" in line and " tool=edit " in line


def test_anthropic_client_gets_a_different_call_untouched(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(call_reply(True, arguments=OTHER))
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=15)
    with client.messages.stream(
        model="m",
        max_tokens=100,
        tools=[{"name": "edit", "input_schema": EDIT_SCHEMA}],
        messages=anthropic_history(),
    ) as s:
        message = s.get_final_message()
    (use,) = [b for b in message.content if b.type == "tool_use"]
    assert use.input == json.loads(OTHER) and message.stop_reason == "tool_use"


def test_responses_client_gets_the_loop_guards_message(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(call_reply(True))
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
    assert not [item for item in response.output if item.type == "function_call"]
    assert_stopped(response.output_text)
    assert len(upstream.requests) == 1


@STREAMS
def test_on_a_text_protocol_route_a_repeated_invoke_call_is_replaced(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, stream: bool
) -> None:
    def script(rec: Recorded) -> JSONReply | SSEReply:
        found = re.search(r"<<CALL_[A-Za-z0-9]{8}>>", json.dumps(rec.json()["messages"]))
        assert found
        text = f'Once more.\n{found.group(0)}\n<invoke name="edit">{BROKEN}</invoke>'
        return (
            SSEReply(openai_sse(text, seed=3), chunk_min=1, chunk_max=9, seed=4)
            if stream
            else JSONReply(openai_json(text))
        )

    upstream.script = script
    proxy = start_proxy(bridge_tool_mode="invoke")
    text, finish, calls = chat_answer(proxy, stream)
    assert finish == "stop" and calls == []
    assert text.startswith("Once more.") and "<invoke" not in text and "CALL_" not in text
    assert_stopped(text)
    assert " tool=edit failures=3 " in flow_line(proxy, 0, "loop_guard")


def test_a_rejected_flow_gets_the_flow_line(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    before = len(proxy.log_text())
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=15)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="m", messages=failing_history(), tools=[TOOLS[0], TOOLS[0]]
        )
    assert upstream.requests == []
    line = flow_line(proxy, before, "rejected")
    assert "status=400" in line and "declared twice" in line
    assert 'request="POST /v1/chat/completions"' in line


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


@STREAMS
def test_gemini_client_gets_the_loop_guards_message(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    """A Gemini client (Gemini CLI's shape, plain HTTP: the route of ``…:generateContent``)."""
    upstream.enqueue(call_reply(stream))
    contents: list[Any] = [{"role": "user", "parts": [{"text": "bump x"}]}]
    for _ in range(3):
        contents.append(
            {"role": "model", "parts": [{"functionCall": {"name": "edit", "args": REPAIRED}}]}
        )
        response = {"name": "edit", "response": {"error": ERROR}}
        contents.append({"role": "user", "parts": [{"functionResponse": response}]})
    body = {
        "contents": contents,
        "tools": [{"functionDeclarations": [{"name": "edit", "parameters": EDIT_SCHEMA}]}],
    }
    path = "/v1beta/models/m:" + ("streamGenerateContent?alt=sse" if stream else "generateContent")
    r = httpx.post(
        f"{proxy.base_url}{path}", json=body, headers={"x-goog-api-key": "k"}, timeout=15
    )
    assert r.status_code == 200
    chunks = (
        [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
        if stream
        else [r.json()]
    )
    candidates = [c for chunk in chunks for c in chunk.get("candidates", [])]
    parts = [p for c in candidates for p in c.get("content", {}).get("parts", [])]
    assert not any("functionCall" in p for p in parts)
    assert_stopped("".join(p.get("text", "") for p in parts))
    assert [c["finishReason"] for c in candidates if c.get("finishReason")] == ["STOP"]
    assert len(upstream.requests) == 1


def test_parallel_calls_only_the_repeating_one_is_replaced(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    """The model repeats the call and reads a file in the same answer (streamed): the read
    reaches the client as call 0, the repeat becomes the message, the finish stays
    ``tool_calls`` (a call is left to run)."""
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    read = {"path": "src/a.py"}
    calls = [
        {"index": 0, "id": "call_e", "type": "function", "function": {"name": "edit"}},
        {"index": 1, "id": "call_r", "type": "function", "function": {"name": "read_file"}},
    ]
    payloads: list[Any] = []
    for call, args in zip(calls, (json.dumps(REPAIRED), json.dumps(read)), strict=True):
        head = {**call, "function": {**call["function"], "arguments": ""}}
        payloads.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
        piece = {"index": call["index"], "function": {"arguments": args}}
        payloads.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]})
    payloads.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    sse = b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads)
    upstream.enqueue(SSEReply(sse + b"data: [DONE]\n\n", chunk_min=3, chunk_max=20, seed=9))
    read_tool = {"type": "function", "function": {"name": "read_file", "parameters": {}}}
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=15)
    text, finish, got = "", None, dict[int, list[str]]()
    for chunk in client.chat.completions.create(
        model="m", messages=failing_history(), tools=[*TOOLS, read_tool], stream=True
    ):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or ():
                entry = got.setdefault(tc.index, ["", "", ""])
                entry[0] += tc.id or ""
                if tc.function is not None:
                    entry[1] += tc.function.name or ""
                    entry[2] += tc.function.arguments or ""
    assert got == {0: ["call_r", "read_file", json.dumps(read)]}
    assert finish == "tool_calls"
    assert_stopped(text)


@STREAMS
def test_with_fallback_an_answer_that_changes_course_is_delivered_as_it_came(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, stream: bool
) -> None:
    """Fallback on, the model changes course: asked once, its call reaches the client (a
    stream read whole first, then sent in the client's framing)."""
    upstream.enqueue(call_reply(stream, arguments=OTHER, text="Other file then."))
    proxy = start_proxy(bridge_loop_fallback=True)
    text, finish, calls = chat_answer(proxy, stream)
    assert (text, finish, calls) == ("Other file then.", "tool_calls", [("edit", OTHER)])
    assert len(upstream.requests) == 1
    line = flow_line(proxy, 0, "rewritten")
    assert "tool=" not in line and "retries" not in line
