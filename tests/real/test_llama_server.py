"""llama-server starts on loopback and answers each dialect it speaks (no bridge yet)."""

from __future__ import annotations

import httpx

from tests.real.llama_cpp import LlamaServer

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def test_chat_completions_answers_text(llama_server: LlamaServer) -> None:
    body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}
    r = httpx.post(f"{llama_server.base_url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["role"] == "assistant"


def test_chat_completions_calls_a_tool_when_required(llama_server: LlamaServer) -> None:
    body = {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
            # A second call, no text answer between: then SmolLM2 calls again (a text answer
            # here and it answers in text, tests/fixtures/llama_cpp/README.md).
            {"role": "user", "content": "And in Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_2", "content": "18 C"},
            {"role": "user", "content": "And in Berlin?"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 64,
    }
    r = httpx.post(f"{llama_server.base_url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200
    calls = r.json()["choices"][0]["message"]["tool_calls"]
    assert calls[0]["function"]["name"] == "get_weather"


def test_messages_and_responses_answer(llama_server: LlamaServer) -> None:
    msgs = [{"role": "user", "content": "Say hi."}]
    r = httpx.post(
        f"{llama_server.base_url}/v1/messages",
        json={"model": "m", "messages": msgs, "max_tokens": 8},
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["type"] == "message"
    r = httpx.post(
        f"{llama_server.base_url}/v1/responses",
        json={"model": "m", "input": "Say hi.", "max_output_tokens": 8},
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["object"] == "response"
