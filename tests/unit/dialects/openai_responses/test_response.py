"""openai_responses whole answers and errors: what the openai SDK's ``Response`` model accepts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response as SDKResponse

from addon.dialects.anthropic import response as anthropic
from addon.dialects.openai_chat import response as chat
from addon.dialects.openai_responses import DIALECT, NAME
from addon.dialects.openai_responses.response import (
    decode_response,
    encode_error,
    encode_response,
    error_message,
)
from addon.model import (
    ClientError,
    Opaque,
    Response,
    Text,
    Thinking,
    ToolCall,
    UnsupportedShape,
    Usage,
)
from tests.realdata import read
from tests.unit.dialects.ids_shapes import RESPONSE_ID
from tests.unit.helpers import sse_events

USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 3},
    "total_tokens": 15,
}


def answer(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": "gpt-5.5",
        "output": [
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [
                    {"type": "summary_text", "text": "First."},
                    {"type": "summary_text", "text": "Second."},
                ],
                "encrypted_content": "gAAAAenc",
            },
            {
                "id": "msg_1",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
            },
            {
                "id": "fc_1",
                "type": "function_call",
                "status": "completed",
                "call_id": "call_1",
                "name": "f",
                "arguments": '{"a": 1}',
            },
            {
                "id": "ctc_1",
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": "call_2",
                "name": "apply_patch",
                "input": "*** Begin Patch\n",
            },
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "store": False,
        "usage": USAGE,
    }
    body.update(over)
    return body


def test_decode_a_responses_answer() -> None:
    r = decode_response(answer())
    assert r.origin == NAME and r.id == "resp_1" and r.model == "gpt-5.5"
    thinking, text, call, custom = r.parts
    assert isinstance(thinking, Thinking)
    assert thinking.text == "First.\n\nSecond." and thinking.signature == "gAAAAenc"
    assert isinstance(text, Text) and text.text == "Hello"
    assert isinstance(call, ToolCall) and (call.id, call.name, call.arguments) == (
        "call_1",
        "f",
        '{"a": 1}',
    )
    assert (
        isinstance(custom, ToolCall) and custom.custom and custom.arguments == "*** Begin Patch\n"
    )
    assert r.finish == "tool_calls" and r.finish_raw == "completed"
    # Usage keeps the cached tokens apart from input_tokens (Responses counts them in it).
    assert r.usage == Usage(
        8,
        5,
        15,
        origin=NAME,
        raw=USAGE,
        cache_read_tokens=2,
        cache_write_tokens=0,
        reasoning_tokens=3,
    )
    assert r.usage.prompt_tokens == 10
    assert r.created == 1700000000


def test_responses_answer_survives_responses_to_responses() -> None:
    body = answer()
    out = encode_response(decode_response(body))
    assert out == body
    SDKResponse.model_validate(out)


@pytest.mark.parametrize("turn", [1, 2, 3])
def test_recorded_completed_response_survives(turn: int) -> None:
    raw = read(f"clients/codex-0.169.0-responses-gpt-5.5-turn{turn}.response.sse")
    completed: dict[str, Any] = {}
    for e in sse_events(raw):
        if e.event == "response.completed":
            completed = json.loads(e.data)["response"]
    r = decode_response(completed)
    assert encode_response(r) == completed
    # The same answer for a chat client: the calls with their ids, the reasoning, the text.
    message = chat.encode_response(r)["choices"][0]["message"]
    calls = [o for o in completed["output"] if o["type"] in ("function_call", "custom_tool_call")]
    assert [c["id"] for c in message.get("tool_calls") or ()] == [c["call_id"] for c in calls]
    assert message["reasoning_content"] == completed["output"][0]["summary"][0]["text"]


@pytest.mark.parametrize(
    ("details", "finish"),
    [
        ({"reason": "max_output_tokens"}, "length"),
        ({"reason": "content_filter"}, "content_filter"),
    ],
)
def test_incomplete_answers(details: dict[str, str], finish: str) -> None:
    body = answer(status="incomplete", incomplete_details=details, output=[])
    r = decode_response(body)
    assert r.finish == finish and r.finish_raw == details["reason"]
    out = encode_response(r)
    assert out["status"] == "incomplete" and out["incomplete_details"] == details
    # …and the same finish from another dialect.
    other = encode_response(Response("openai_chat", "x", "m", (Text("cut"),), finish))  # type: ignore[arg-type]
    assert other["status"] == "incomplete" and other["incomplete_details"] == details
    SDKResponse.model_validate(other)


def test_failed_answer_finishes_with_error() -> None:
    body = answer(status="failed", error={"code": "server_error", "message": "boom"}, output=[])
    assert decode_response(body).finish == "error"


def test_an_answer_from_another_dialect_is_what_the_sdk_accepts() -> None:
    r = Response(
        "anthropic",
        "msg_abc",
        "claude",
        (
            Thinking("hmm", signature="c2ln"),
            Thinking("hidden", redacted=True),
            Text("Hi "),
            Text("there"),
            ToolCall("toolu_1", "Read", '{"p": 1}'),
            ToolCall("toolu_2", "apply_patch", "*** Begin Patch", custom=True),
            Opaque("anthropic", {"type": "server_tool_use"}),
        ),
        "tool_calls",
        usage=Usage(
            7,
            3,
            origin="anthropic",
            raw={"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 4},
            cache_read_tokens=4,
        ),
    )
    out = encode_response(r)
    sdk = SDKResponse.model_validate(out)
    assert RESPONSE_ID.fullmatch(out["id"])  # ours, not the Anthropic upstream's "msg_abc"
    assert [o.type for o in sdk.output] == [
        "reasoning",
        "message",
        "function_call",
        "custom_tool_call",
    ]
    assert out["output"][0]["encrypted_content"] == "c2ln"
    assert out["output"][0]["summary"] == [{"type": "summary_text", "text": "hmm"}]
    assert sdk.output_text == "Hi there"
    assert [o["id"][:3] for o in out["output"]] == ["rs_", "msg", "fc_", "ctc"]
    assert out["output"][3]["input"] == "*** Begin Patch"
    assert sdk.usage is not None
    assert (sdk.usage.input_tokens, sdk.usage.output_tokens, sdk.usage.total_tokens) == (11, 3, 14)
    assert sdk.usage.input_tokens_details.cached_tokens == 4
    assert out["status"] == "completed"


def test_an_openai_chat_answer_becomes_a_responses_answer() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 5,
        "model": "gpt",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "ok",
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "total_tokens": 5,
            "completion_tokens_details": {"reasoning_tokens": 1},
        },
    }
    out = encode_response(chat.decode_response(body))
    sdk = SDKResponse.model_validate(out)
    assert sdk.output_text == "ok" and sdk.created_at == 5
    assert sdk.usage is not None and sdk.usage.output_tokens_details.reasoning_tokens == 1
    call = sdk.output[1]
    assert call.type == "function_call" and call.call_id == "c" and call.arguments == "{}"


def test_a_responses_answer_for_an_anthropic_client() -> None:
    out = anthropic.encode_response(decode_response(answer()))
    assert [b["type"] for b in out["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    assert out["content"][0]["signature"] == "gAAAAenc"
    assert out["stop_reason"] == "tool_use"


def test_not_a_response_object() -> None:
    with pytest.raises(UnsupportedShape):
        decode_response({"choices": []})


def test_errors() -> None:
    err = ClientError("tools[0] has no name", param="tools[0].name", status=400)
    assert encode_error(err) == {
        "error": {
            "message": "tools[0] has no name",
            "type": "invalid_request_error",
            "param": "tools[0].name",
            "code": None,
        }
    }
    assert DIALECT.encode_error is encode_error
    assert error_message({"error": {"message": "bad", "type": "x"}}) == "bad"
    assert error_message({"error": "plain"}) == "plain"
    assert error_message({"detail": "d"}) == "d"
    assert error_message(["x"]) is None
