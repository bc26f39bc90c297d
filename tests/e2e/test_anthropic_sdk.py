"""End to end: the official anthropic SDK (as Claude Code uses it) → mitmdump → OpenAI upstream.

Native-tools upstream: parallel tool calls split over chunks must become
``tool_use`` blocks with parsed input. Text-only upstream (``bracket``): the
model's ``[Calling tool: …]`` text must become the same. Tool results of the
next turn must reach the upstream as ``tool`` messages (native) or replayed
text (bracket).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream, SSEReply
from tests.e2e.test_text_tools import openai_json, openai_sse
from tests.realdata import as_sse

PARALLEL = "openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse"
DEEPSEEK = "openai-chat-stream-deepseek-reasoning_content-then-tool_calls.vercel-ai.chunks.txt"

TOOLS: list[Any] = [
    {
        "name": "GetWeatherArgs",
        "description": "Weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        },
    },
    {
        "name": "get_stock_price",
        "description": "Price of a ticker",
        "input_schema": {"type": "object", "properties": {"ticker": {"type": "string"}}},
    },
    {
        "name": "Read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
]
SYSTEM: Any = [
    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
]


def client(proxy: Proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.base_url, api_key="sk-ant-e2e-secret", max_retries=0, timeout=15
    )


def final(proxy: Proxy, stream: bool, **kwargs: Any) -> anthropic.types.Message:
    params: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "system": SYSTEM,
        "tools": TOOLS,
        **kwargs,
    }
    if stream:
        with client(proxy).messages.stream(**params) as s:
            return s.get_final_message()
    return client(proxy).messages.create(**params)


def tool_uses(message: anthropic.types.Message) -> list[tuple[str, str, Any]]:
    return [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]


def completion_with_calls() -> dict[str, Any]:
    body = openai_json("")
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_w",
                "type": "function",
                "function": {
                    "name": "GetWeatherArgs",
                    "arguments": '{"city": "Edinburgh", "country": "GB"}',
                },
            },
            {
                "id": "call_s",
                "type": "function",
                "function": {"name": "get_stock_price", "arguments": '{"ticker": "AAPL"}'},
            },
        ],
    }
    body["choices"][0]["finish_reason"] = "tool_calls"
    return body


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_native_upstream_parallel_tool_calls(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    reply = (
        SSEReply(as_sse(PARALLEL), chunk_min=1, chunk_max=9, seed=4)
        if stream
        else JSONReply(completion_with_calls())
    )
    upstream.enqueue(reply)
    message = final(
        proxy,
        stream,
        messages=[{"role": "user", "content": "Weather in Edinburgh and AAPL?"}],
        tool_choice={"type": "auto", "disable_parallel_tool_use": False},
        metadata={"user_id": "user-42"},
        stop_sequences=["\n\nHuman:"],
        extra_body={"temperature": 0.3},  # this SDK version no longer has the argument
    )
    assert message.stop_reason == "tool_use"
    uses = tool_uses(message)
    assert [name for _, name, _ in uses] == ["GetWeatherArgs", "get_stock_price"]
    assert uses[0][2]["city"] == "Edinburgh"
    assert uses[1][2]["ticker"] == "AAPL"
    assert all(i.startswith("call_") for i, _, _ in uses)  # OpenAI ids carried through

    (rec,) = upstream.requests
    assert rec.path == "/v1/chat/completions"
    body = rec.json()
    assert body["messages"][0] == {
        "role": "system",
        # Anthropic's cache_control is not sent to an OpenAI upstream (route default: drop).
        "content": [{"type": "text", "text": "You are Claude Code."}],
    }
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "GetWeatherArgs",
            "description": "Weather for a city",
            "parameters": TOOLS[0]["input_schema"],
        },
    }
    assert body["tool_choice"] == "auto" and "parallel_tool_calls" not in body
    assert body["max_tokens"] == 1024 and body["temperature"] == 0.3
    assert body["user"] == "user-42" and body["stop"] == ["\n\nHuman:"]
    if stream:
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "sk-ant-e2e-secret" not in proxy.log_text()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_two_turn_tool_loop_native(proxy: Proxy, upstream: ScriptedUpstream, stream: bool) -> None:
    upstream.enqueue(
        JSONReply(openai_json("It is sunny."))
        if not stream
        else SSEReply(openai_sse("It is sunny.", 1), seed=1)
    )
    message = final(
        proxy,
        stream,
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "call_w",
                        "name": "GetWeatherArgs",
                        "input": {"city": "Oslo"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_w", "content": "sunny, 21C"},
                    {"type": "text", "text": "Answer briefly."},
                ],
            },
        ],
    )
    assert message.stop_reason == "end_turn"
    assert [b.text for b in message.content if b.type == "text"] == ["It is sunny."]
    sent = upstream.requests[0].json()["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    assert sent[2]["tool_calls"][0]["id"] == "call_w"
    assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_w", "content": "sunny, 21C"}


def bracket_answer(rec: Recorded, stream: bool) -> Any:
    system = rec.json()["messages"][0]["content"]
    system = system if isinstance(system, str) else "".join(p["text"] for p in system)
    assert "# Tool Call Format" in system and "### Read" in system
    text = '<thinking>Need the file.</thinking>Reading it.\n[Calling tool: Read]\nInput: {"path": "README.md"}'
    return (
        SSEReply(openai_sse(text, seed=2), chunk_min=1, chunk_max=5, seed=2)
        if stream
        else JSONReply(openai_json(text))
    )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_bracket_upstream_tool_loop(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, stream: bool
) -> None:
    proxy = start_proxy(bridge_tool_mode="bracket")
    upstream.script = lambda rec: bracket_answer(rec, stream)
    message = final(
        proxy,
        stream,
        messages=[{"role": "user", "content": "What is in README.md?"}],
        thinking={"type": "enabled", "budget_tokens": 2000},
    )
    assert message.stop_reason == "tool_use"
    assert [(name, args) for _, name, args in tool_uses(message)] == [
        ("Read", {"path": "README.md"})
    ]
    kinds = [b.type for b in message.content]
    assert kinds == ["thinking", "text", "tool_use"]
    assert message.content[0].type == "thinking" and message.content[0].thinking == "Need the file."
    first = upstream.requests[0].json()
    assert "tools" not in first
    assert first["messages"][-1]["content"].endswith(
        "Keep your final visible answer outside the thinking tags."
    )

    call_id = tool_uses(message)[0][0]
    final(
        proxy,
        stream,
        messages=[
            {"role": "user", "content": "What is in README.md?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading it."},
                    {
                        "type": "tool_use",
                        "id": call_id,
                        "name": "Read",
                        "input": {"path": "README.md"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": [{"type": "text", "text": "# cursor-bridge"}],
                    }
                ],
            },
        ],
    )
    replay = upstream.requests[1].json()["messages"]
    assert [m["role"] for m in replay] == ["system", "user", "assistant", "user"]
    assert '[Calling tool: Read]\nInput: {"path": "README.md"}' in replay[2]["content"]
    assert "[Tool Result]\n# cursor-bridge" in json.dumps(
        replay[3]["content"], ensure_ascii=False
    ).replace("\\n", "\n")


def test_reasoning_content_becomes_thinking_blocks(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(SSEReply(as_sse(DEEPSEEK), chunk_min=3, chunk_max=40, seed=8))
    message = final(proxy, True, messages=[{"role": "user", "content": "weather?"}])
    assert message.content[0].type == "thinking"
    assert message.content[0].thinking.startswith("The user is asking")
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens > 0


def test_claude_code_2x_system_in_place_thinking_effort_and_foreign_ids(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    """What Claude Code 2.x sends: a system message inside ``messages`` (kept in place),
    adaptive thinking with ``output_config.effort`` (→ ``reasoning_effort``), and a tool id a
    Kimi gateway made (``functions.Read:0``) that Anthropic's pattern refuses: the client gets
    an id it accepts and, sent back, the upstream gets its own id again."""
    body = completion_with_calls()
    body["choices"][0]["message"]["tool_calls"] = [
        {
            "id": "functions.Read:0",
            "type": "function",
            "function": {"name": "Read", "arguments": '{"path": "a.txt"}'},
        }
    ]
    upstream.enqueue(JSONReply(body))
    message = final(
        proxy,
        False,
        messages=[
            {"role": "user", "content": "read a.txt"},
            {"role": "system", "content": "The user switched to plan mode."},
            {"role": "user", "content": "go on"},
        ],
        extra_body={"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}},
    )
    ((tool_id, name, args),) = tool_uses(message)
    assert name == "Read" and args == {"path": "a.txt"}
    assert tool_id.startswith("toolu_") and ":" not in tool_id and "." not in tool_id
    sent = upstream.requests[0].json()
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "system", "user"]
    assert "plan mode" in json.dumps(sent["messages"][2])
    assert sent["reasoning_effort"] == "high"
    assert "thinking" not in sent and "output_config" not in sent

    upstream.enqueue(JSONReply(openai_json("a.txt says hi")))
    reply = final(
        proxy,
        False,
        messages=[
            {"role": "user", "content": "read a.txt"},
            {"role": "assistant", "content": [b.model_dump() for b in message.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "hi"}],
            },
        ],
    )
    assert reply.content[0].type == "text" and reply.content[0].text == "a.txt says hi"
    again = upstream.requests[1].json()["messages"]
    assert again[2]["tool_calls"][0]["id"] == "functions.Read:0"
    assert again[3] == {"role": "tool", "tool_call_id": "functions.Read:0", "content": "hi"}


def test_server_tools_are_refused_in_anthropics_error_shape(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client(proxy).messages.create(
            model="claude-sonnet-4-6",
            max_tokens=100,
            messages=[{"role": "user", "content": "search the web"}],
            tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
        )
    assert info.value.status_code == 400
    body: Any = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "web_search" in body["error"]["message"]
    assert upstream.requests == []


def test_upstream_errors_reach_the_client_in_its_shape(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(
        JSONReply({"error": {"message": "Rate limit reached", "type": "rate_limit"}}, status=429)
    )
    with pytest.raises(anthropic.RateLimitError) as info:
        client(proxy).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    body: Any = info.value.body
    assert body["error"] == {"type": "rate_limit_error", "message": "Rate limit reached"}


def test_count_tokens_is_estimated_when_the_upstream_cannot_count(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(JSONReply({"error": {"message": "no such route"}}, status=404))
    counted = client(proxy).messages.count_tokens(
        model="claude-sonnet-4-6",
        messages=[{"role": "user", "content": "hello " * 400}],
        tools=TOOLS,
    )
    assert 500 < counted.input_tokens < 1500
    assert upstream.requests[0].path == "/v1/messages/count_tokens"


def test_count_tokens_answer_of_the_upstream_is_kept(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(JSONReply({"input_tokens": 1234}))
    counted = client(proxy).messages.count_tokens(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert counted.input_tokens == 1234


def test_a_whole_answer_reaches_a_streaming_client_as_a_stream(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    """Some gateways ignore stream: true; the SDK waiting for SSE must still get one."""
    upstream.enqueue(JSONReply(completion_with_calls()))
    message = final(proxy, True, messages=[{"role": "user", "content": "weather and stock"}])
    assert upstream.requests[0].json()["stream"] is True
    assert message.stop_reason == "tool_use"
    assert [(name, args) for _, name, args in tool_uses(message)] == [
        ("GetWeatherArgs", {"city": "Edinburgh", "country": "GB"}),
        ("get_stock_price", {"ticker": "AAPL"}),
    ]
    assert message.usage.output_tokens == 20


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (401, anthropic.AuthenticationError),
        (429, anthropic.RateLimitError),
        (500, anthropic.InternalServerError),
        (503, anthropic.InternalServerError),
    ],
)
def test_count_tokens_is_never_estimated_over_an_upstream_error(
    proxy: Proxy, upstream: ScriptedUpstream, status: int, error: type[Exception]
) -> None:
    """Only a missing endpoint (404/405/501) is answered with an estimate: an auth, rate-limit
    or server error reaches the client with its status."""
    upstream.enqueue(JSONReply({"error": {"message": f"refused {status}"}}, status=status))
    with pytest.raises(error) as info:
        client(proxy).messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
    assert getattr(info.value, "status_code", None) == status
    assert "input_tokens" not in json.dumps(getattr(info.value, "body", None))


@pytest.mark.parametrize("status", [405, 501])
def test_count_tokens_is_estimated_for_every_missing_endpoint_status(
    proxy: Proxy, upstream: ScriptedUpstream, status: int
) -> None:
    upstream.enqueue(JSONReply({"error": {"message": "not here"}}, status=status))
    counted = client(proxy).messages.count_tokens(
        model="m", messages=[{"role": "user", "content": "hello " * 100}]
    )
    assert counted.input_tokens > 50


def test_count_tokens_and_models_follow_the_routes_file(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Any
) -> None:
    """A routes file limited to another host: count_tokens and the model list of this one
    are not the bridge's business (the upstream's 404 and list reach the client as sent)."""
    routes = tmp_path / "routes.toml"
    routes.write_text(
        '[[routes]]\nname = "other"\nhost = "api.other.example"\npath = "*/v1/messages"\n'
        'client = "anthropic"\n'
    )
    p = start_proxy(bridge_routes=str(routes), bridge_models="extra-model")
    upstream.enqueue(JSONReply({"error": {"message": "no such route"}}, status=404))
    with pytest.raises(anthropic.NotFoundError):
        client(p).messages.count_tokens(model="m", messages=[{"role": "user", "content": "x"}])
    listed = {"object": "list", "data": [{"id": "gpt-5", "object": "model", "created": 1}]}
    upstream.enqueue(JSONReply(listed))
    got = httpx.get(f"{p.base_url}/v1/models", timeout=10).json()
    assert got == listed  # no derived models added
