"""anthropic response codec: whole answers for the anthropic SDK, and from an Anthropic upstream."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from anthropic.types import Message as SDKMessage

from addon.dialects.anthropic import DIALECT as ANTHROPIC
from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import (
    Opaque,
    Response,
    Text,
    Thinking,
    ToolCall,
    UnsupportedShape,
    Usage,
)
from tests.unit.dialects.ids_shapes import MESSAGE_ID

ANTHROPIC_ANSWER: dict[str, Any] = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "thinking", "thinking": "Let me look.", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "opaque"},
        {
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "web_search",
            "input": {"query": "q"},
        },
        {"type": "text", "text": "Found it.", "citations": None},
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "Read",
            "input": {"path": "a", "n": [1, "é"]},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 7,
        "service_tier": "standard",
    },
    "container": None,
}


def test_openai_answer_becomes_a_valid_anthropic_message() -> None:
    answer = Response(
        "openai_chat",
        "chatcmpl-1",
        "gpt",
        (
            Text("Reading"),
            ToolCall("call_1", "Read", '{"path": "a"}'),
            Thinking("hm"),
            Text(" now."),
            ToolCall("call_2", "Read", "{broken"),
            ToolCall("call_3", "List", ""),
        ),
        "tool_calls",
        "tool_calls",
        Usage(10, 5, 15, origin="openai_chat", raw={"prompt_tokens": 10}),
    )
    body = ANTHROPIC.encode_response(answer)
    assert MESSAGE_ID.fullmatch(body["id"])  # ours: the upstream's is chat's
    assert body == {
        "id": body["id"],
        "type": "message",
        "role": "assistant",
        "model": "gpt",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": ""},
            {"type": "text", "text": "Reading now."},
            {"type": "tool_use", "id": "call_1", "name": "Read", "input": {"path": "a"}},
            # not {}: the client's tool sees the model's broken arguments and says so
            {
                "type": "tool_use",
                "id": "call_2",
                "name": "Read",
                "input": {"_raw_arguments": "{broken"},
            },
            {"type": "tool_use", "id": "call_3", "name": "List", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    SDKMessage.model_validate(body)  # the SDK's own type accepts it


@pytest.mark.parametrize(
    ("finish", "raw", "origin", "want"),
    [
        pytest.param("tool_calls", "tool_calls", "openai_chat", "tool_use", id="tool_calls"),
        pytest.param("length", "length", "openai_chat", "max_tokens", id="length"),
        pytest.param("stop", "stop", "openai_chat", "end_turn", id="stop"),
        pytest.param("content_filter", "content_filter", "openai_chat", "refusal", id="filter"),
        pytest.param("error", "error", "openai_chat", "end_turn", id="error"),
        pytest.param("other", "function_call", "openai_chat", "end_turn", id="other"),
        pytest.param(None, None, "openai_chat", "end_turn", id="none"),
        pytest.param("stop", "stop_sequence", "anthropic", "stop_sequence", id="anthropic-raw"),
        pytest.param("stop", "pause_turn", "anthropic", "pause_turn", id="pause_turn"),
    ],
)
def test_stop_reason(finish: Any, raw: str | None, origin: str, want: str) -> None:
    body = ANTHROPIC.encode_response(Response(origin, None, None, (), finish, raw))
    assert body["stop_reason"] == want
    assert body["content"] == []
    assert MESSAGE_ID.fullmatch(body["id"])  # the upstream named none: a fresh one
    SDKMessage.model_validate(body)


def test_anthropic_answer_decodes() -> None:
    r = ANTHROPIC.decode_response(copy.deepcopy(ANTHROPIC_ANSWER))
    assert r.parts == (
        Thinking("Let me look.", "sig=="),
        Thinking("opaque", redacted=True),
        Opaque("anthropic", ANTHROPIC_ANSWER["content"][2]),
        Text("Found it.", extra={"citations": None}),
        ToolCall("toolu_1", "Read", '{"path": "a", "n": [1, "é"]}'),
    )
    assert (r.id, r.model, r.finish, r.finish_raw) == (
        "msg_01",
        "claude-sonnet-4-5",
        "tool_calls",
        "tool_use",
    )
    assert r.usage is not None and (r.usage.input_tokens, r.usage.output_tokens) == (10, 5)


def test_anthropic_answer_round_trips_unchanged() -> None:
    r = ANTHROPIC.decode_response(copy.deepcopy(ANTHROPIC_ANSWER))
    assert ANTHROPIC.encode_response(r) == ANTHROPIC_ANSWER


def test_anthropic_answer_for_an_openai_client() -> None:
    body = OPENAI.encode_response(ANTHROPIC.decode_response(copy.deepcopy(ANTHROPIC_ANSWER)))
    message = body["choices"][0]["message"]
    assert message["content"] == "Found it."
    assert message["reasoning_content"] == "Let me look."
    assert message["tool_calls"][0]["function"]["arguments"] == '{"path": "a", "n": [1, "é"]}'
    assert body["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"type": "error", "error": {}}, id="error"),
        pytest.param({"type": "message"}, id="no-content"),
        pytest.param({"choices": []}, id="openai"),
    ],
)
def test_not_an_anthropic_message(body: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedShape):
        ANTHROPIC.decode_response(body)
