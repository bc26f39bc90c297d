"""openai_chat whole answers: decode → encode gives the client what the upstream sent."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import Text, Thinking, ToolCall, UnsupportedShape

COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-abc",
    "object": "chat.completion",
    "created": 1727346182,
    "model": "gpt-4o-2024-08-06",
    "system_fingerprint": "fp_143bb8492c",
    "service_tier": "default",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "annotations": [],
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "Read", "arguments": '{"path":"a"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "Read", "arguments": '{"path":"b"}'},
                    },
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 44,
        "completion_tokens": 16,
        "total_tokens": 60,
        "completion_tokens_details": {"reasoning_tokens": 0},
    },
}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(COMPLETION, id="tool-calls"),
        pytest.param(
            {
                **COMPLETION,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": "Hi",
                            "reasoning_content": "think",
                        },
                        "finish_reason": "stop",
                    }
                ],
            },
            id="deepseek-reasoning",
        ),
    ],
)
def test_openai_answer_round_trips_exactly(body: dict[str, Any]) -> None:
    original = copy.deepcopy(body)
    assert OPENAI.encode_response(OPENAI.decode_response(body)) == original


def test_decoded_parts() -> None:
    r = OPENAI.decode_response(
        {
            **COMPLETION,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "Reading.",
                        "reasoning_content": "plan",
                        "tool_calls": COMPLETION["choices"][0]["message"]["tool_calls"],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        }
    )
    assert r.parts == (
        Thinking("plan"),
        Text("Reading."),
        ToolCall("call_1", "Read", '{"path":"a"}'),
        ToolCall("call_2", "Read", '{"path":"b"}'),
    )
    assert r.finish == "tool_calls"
    assert r.usage is not None and r.usage.total_tokens == 60


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({**COMPLETION, "choices": COMPLETION["choices"] * 2}, id="n-2"),
        pytest.param({"object": "list", "data": []}, id="not-a-completion"),
        pytest.param(
            {**COMPLETION, "choices": [{"index": 0, "text": "legacy"}]}, id="legacy-completion"
        ),
    ],
)
def test_answers_we_do_not_model_are_unsupported(body: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedShape):
        OPENAI.decode_response(body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({"error": {"message": "Rate limit", "type": "x"}}, "Rate limit", id="openai"),
        pytest.param({"error": "bad key"}, "bad key", id="bare-string"),
        pytest.param({"detail": "Not found"}, "Not found", id="detail"),
        pytest.param({"ok": True}, None, id="no-message"),
        pytest.param(["x"], None, id="not-an-object"),
    ],
)
def test_error_message_of_upstream_error_bodies(body: Any, message: str | None) -> None:
    assert OPENAI.error_message(body) == message
