"""End to end: the official openai SDK → real mitmdump with the addon → scripted upstream.

The upstream records the body it got (it must be standard OpenAI, order kept)
and replays recorded streams in random small chunks; the SDK must accumulate
the tool calls with their arguments.
"""

from __future__ import annotations

import gzip
import json
from typing import Any, cast

import openai
import pytest

from tests.e2e.harness import (
    JSONReply,
    Proxy,
    ScriptedUpstream,
    SSEReply,
    raw_request,
)
from tests.realdata import as_sse

CURSOR_TOOLS = [
    {
        "name": "Read",
        "description": "Read a file",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "Shell",
        "description": "Run a command",
        "input_schema": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"command": {"type": "string", "title": "Command"}},
        },
    },
]

CURSOR_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "What is in a.txt and b.txt?"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Read both.", "signature": "sig-abc"},
            {"type": "text", "text": "Reading both."},
            {"type": "tool_use", "id": "toolu_a", "name": "Read", "input": {"path": "a.txt"}},
            {"type": "tool_use", "id": "toolu_b", "name": "Read", "input": {"path": "b.txt"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "alpha"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_b",
                "content": [{"type": "text", "text": "beta"}],
            },
            {"type": "text", "text": "Summarize."},
        ],
    },
]

PARALLEL = "openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse"


def client(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy.base_url}/v1", api_key="sk-e2e-secret", max_retries=0, timeout=15
    )


def assert_standard_openai(body: dict[str, Any]) -> None:
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
    ]
    assistant = body["messages"][2]
    assert assistant["content"] == "Reading both."
    assert assistant["reasoning_content"] == "Read both."
    assert [c["id"] for c in assistant["tool_calls"]] == ["toolu_a", "toolu_b"]
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {"path": "b.txt"}
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "toolu_a", "content": "alpha"}
    assert body["messages"][4] == {"role": "tool", "tool_call_id": "toolu_b", "content": "beta"}
    assert body["messages"][5]["content"] == [{"type": "text", "text": "Summarize."}]
    assert [t["type"] for t in body["tools"]] == ["function", "function"]
    assert body["tools"][0]["function"]["parameters"] == CURSOR_TOOLS[0]["input_schema"]
    assert "sig-abc" not in json.dumps(body)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streamed_cursor_tool_loop(proxy: Proxy, upstream: ScriptedUpstream, seed: int) -> None:
    upstream.enqueue(SSEReply(as_sse(PARALLEL), chunk_min=1, chunk_max=13, seed=seed))
    stream = client(proxy).chat.completions.create(
        model="claude-sonnet-4.6",
        messages=cast(Any, CURSOR_HISTORY),
        tools=cast(Any, CURSOR_TOOLS),
        tool_choice=cast(Any, {"type": "auto"}),
        stream=True,
        temperature=0.1,
        stream_options={"include_usage": True},
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    usage = None
    ids = set()
    for chunk in stream:
        ids.add(chunk.id)
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += call.id or ""
                if call.function:
                    slot["name"] += call.function.name or ""
                    slot["arguments"] += call.function.arguments or ""
    assert finish == "tool_calls"
    assert ids == {"chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63"}
    assert [c["name"] for c in calls.values()] == ["GetWeatherArgs", "get_stock_price"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Edinburgh", "country": "GB", "units": "c"}
    assert json.loads(calls[1]["arguments"]) == {"ticker": "AAPL", "exchange": "NASDAQ"}
    assert usage is not None and usage.total_tokens > 0

    (recorded,) = upstream.requests
    body = recorded.json()
    assert_standard_openai(body)
    assert body["tool_choice"] == "auto"
    assert body["temperature"] == 0.1
    assert body["stream_options"] == {"include_usage": True}
    assert recorded.headers["accept-encoding"] == "identity"
    assert "sk-e2e-secret" not in proxy.log_text()


def test_streamed_answer_with_the_sdk_stream_helper(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    """The SDK's own accumulator (``chat.completions.stream``) gets complete tool calls."""
    upstream.enqueue(SSEReply(as_sse(PARALLEL), chunk_min=1, chunk_max=9, seed=11))
    with client(proxy).chat.completions.stream(
        model="gpt-4o",
        messages=[{"role": "user", "content": "weather and stock"}],
        tools=[
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                },
            }
            for t in CURSOR_TOOLS
        ],
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in message.tool_calls or []] == [
        "GetWeatherArgs",
        "get_stock_price",
    ]


def test_non_stream_cursor_request(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    answer = {
        "id": "chatcmpl-xyz",
        "object": "chat.completion",
        "created": 1727346182,
        "model": "gpt-4o-2024-08-06",
        "system_fingerprint": "fp_1",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "Read", "arguments": '{"path":"c.txt"}'},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    upstream.enqueue(JSONReply(answer))
    completion = client(proxy).chat.completions.create(
        model="claude-sonnet-4.6", messages=cast(Any, CURSOR_HISTORY), tools=cast(Any, CURSOR_TOOLS)
    )
    assert completion.id == "chatcmpl-xyz"
    assert completion.system_fingerprint == "fp_1"
    call = (completion.choices[0].message.tool_calls or [])[0]
    assert call.id == "call_1" and json.loads(call.function.arguments) == {"path": "c.txt"}
    assert_standard_openai(upstream.requests[0].json())


def test_strict_schema_profile(start_proxy: Any, upstream: ScriptedUpstream) -> None:
    proxy = start_proxy(bridge_schema="strict")
    upstream.enqueue(SSEReply(as_sse(PARALLEL), seed=5))
    list(
        client(proxy).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "x"}],
            tools=cast(Any, CURSOR_TOOLS),
            stream=True,
        )
    )
    shell = upstream.requests[0].json()["tools"][1]["function"]["parameters"]
    assert shell == {"type": "object", "properties": {"command": {"type": "string"}}}


def test_duplicate_tool_names_get_a_400_and_the_upstream_is_not_called(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(proxy).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "x"}],
            tools=cast(Any, [CURSOR_TOOLS[0], CURSOR_TOOLS[0]]),
        )
    assert info.value.status_code == 400
    body = cast(dict[str, Any], info.value.body)
    assert "tool name 'Read' is declared twice" in body["message"]
    assert body["type"] == "invalid_request_error"
    assert upstream.requests == []


def test_non_json_body_passes_through_unchanged(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(JSONReply({"ok": True}))
    payload = b"\x00\x01 not json at all \xff"
    headers = {"content-type": "application/json", "accept-encoding": "gzip, br"}
    status, _, _ = raw_request(proxy.port, "POST", "/v1/chat/completions", payload, headers)
    assert status == 200
    (got,) = upstream.requests
    assert got.body == payload
    assert got.headers["accept-encoding"] == "gzip, br"  # untouched, not forced to identity
    assert "passed through: request body is not a JSON object" in proxy.log_text()


def test_other_paths_pass_through_byte_for_byte(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    body = json.dumps({"model": "m", "input": "hello", "tools": [CURSOR_TOOLS[0]]}).encode()
    sse = as_sse(PARALLEL)
    upstream.enqueue(SSEReply(sse, seed=3))
    status, _, got = raw_request(
        proxy.port, "POST", "/v1/completions", body, {"content-type": "application/json"}
    )
    assert status == 200
    assert got == sse
    assert upstream.requests[0].body == body


def test_gzipped_sse_is_rewritten_anyway(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(SSEReply(as_sse(PARALLEL), seed=9, gzip=True))
    stream = client(proxy).chat.completions.create(
        model="m", messages=cast(Any, CURSOR_HISTORY), tools=cast(Any, CURSOR_TOOLS), stream=True
    )
    names = [
        call.function.name
        for chunk in stream
        for choice in chunk.choices
        for call in choice.delta.tool_calls or []
        if call.function and call.function.name
    ]
    assert names == ["GetWeatherArgs", "get_stock_price"]
    assert_standard_openai(upstream.requests[0].json())


def test_gzip_check_is_real() -> None:
    """Guard for the test above: the recording really is different once gzipped."""
    assert gzip.compress(as_sse(PARALLEL)) != as_sse(PARALLEL)


def test_a_whole_answer_reaches_a_streaming_openai_client_as_a_stream(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(
        JSONReply(
            {
                "id": "chatcmpl-w",
                "object": "chat.completion",
                "created": 5,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "whole"},
                        "finish_reason": "stop",
                    }
                ],
            }
        )
    )
    chunks = list(
        client(proxy).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "whole"
    assert {c.id for c in chunks} == {"chatcmpl-w"}
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_routes_file_rewrites_the_upstream_path_and_applies_its_profile(
    start_proxy: Any, upstream: ScriptedUpstream, tmp_path: Any
) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text(
        '[[routes]]\nname = "gw"\npath = "/v1/chat/completions"\nschema = "strict"\n'
        'upstream_path = "/openai/v1/chat/completions"\n'
    )
    proxy = start_proxy(bridge_routes=str(routes))
    upstream.enqueue(SSEReply(as_sse(PARALLEL), seed=2))
    list(
        client(proxy).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "x"}],
            tools=cast(Any, CURSOR_TOOLS),
            stream=True,
        )
    )
    (rec,) = upstream.requests
    assert rec.path == "/openai/v1/chat/completions"
    assert "additionalProperties" not in json.dumps(rec.json()["tools"])
    assert "cursor-bridge: 1 route(s) from" in proxy.log_text()
