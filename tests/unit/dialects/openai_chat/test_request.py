"""The openai_chat request codec: Cursor's variants in, standard OpenAI out."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import ClientError, Notes, Thinking, ToolCall, UnsupportedShape
from addon.transforms.tools import check_tools

TOOL_READ = {
    "name": "Read",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}


def roundtrip(body: dict[str, Any]) -> tuple[dict[str, Any], Notes]:
    notes: Notes = Counter()
    req = OPENAI.decode_request(body, notes)
    check_tools(req)
    return OPENAI.encode_request(req, notes), notes


def test_standard_openai_body_is_unchanged() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "f"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "description": "d",
                    "parameters": {"type": "object"},
                    "strict": True,
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "temperature": 0.2,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "u-1",
        "provider": {"order": ["x"]},
    }
    out, notes = roundtrip(body)
    assert out == body
    assert not notes


def test_flat_cursor_tools_become_nested_function_tools() -> None:
    out, notes = roundtrip(
        {
            "model": "claude-sonnet-4.6",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [TOOL_READ, {**TOOL_READ, "name": "Write", "type": "custom"}],
        }
    )
    assert out["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "Read",
                "description": "Read a file",
                "parameters": TOOL_READ["input_schema"],
            },
        },
        {
            "type": "function",
            "function": {
                "name": "Write",
                "description": "Read a file",
                "parameters": TOOL_READ["input_schema"],
            },
        },
    ]
    assert notes["flat tools → OpenAI"] == 2


def test_tool_use_and_tool_result_history_becomes_tool_calls_and_tool_messages() -> None:
    body = {
        "model": "claude-sonnet-4.6",
        "messages": [
            {"role": "user", "content": "read a.txt and b.txt"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "two reads", "signature": "sig-1"},
                    {"type": "text", "text": "Reading."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Read",
                        "input": {"path": "a.txt"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "Read",
                        "input": {"path": "b.txt"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "here you go"},
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "B"}],
                    },
                    {"type": "text", "text": "now summarize"},
                ],
            },
        ],
        "tools": [TOOL_READ],
    }
    out, notes = roundtrip(body)
    assert out["messages"] == [
        {"role": "user", "content": "read a.txt and b.txt"},
        {
            "role": "assistant",
            "content": "Reading.",
            "reasoning_content": "two reads",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"path": "a.txt"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"path": "b.txt"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "A"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "B"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "here you go"},
                {"type": "text", "text": "now summarize"},
            ],
        },
    ]
    assert notes["tool_use blocks → tool_calls"] == 2
    assert notes["tool_result blocks → tool messages"] == 2
    assert notes["thinking blocks → reasoning_content"] == 1


def test_thinking_signature_is_kept_in_the_unified_model_but_not_sent() -> None:
    notes: Notes = Counter()
    body = {
        "model": "m",
        "messages": [
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "t", "signature": "sig-9"}],
            }
        ],
    }
    req = OPENAI.decode_request(body, notes)
    thinking = [p for p in req.messages[0].parts if isinstance(p, Thinking)]
    assert thinking == [Thinking("t", signature="sig-9")]
    assert "sig-9" not in json.dumps(OPENAI.encode_request(req, notes))


def test_empty_content_array_beside_tool_calls_becomes_null() -> None:
    out, _ = roundtrip(
        {
            "model": "m",
            "messages": [
                {
                    "role": "assistant",
                    "content": [],
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                }
            ],
        }
    )
    assert out["messages"][0]["content"] is None


def test_tool_use_blocks_and_existing_tool_calls_merge_in_order() -> None:
    notes: Notes = Counter()
    req = OPENAI.decode_request(
        {
            "model": "m",
            "messages": [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}],
                    "tool_calls": [
                        {
                            "id": "b",
                            "type": "function",
                            "function": {"name": "g", "arguments": "{}"},
                        },
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        },
                    ],
                }
            ],
        },
        notes,
    )
    assert [p.id for p in req.messages[0].parts if isinstance(p, ToolCall)] == ["a", "b"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param("", "(empty result)", id="empty-string"),
        pytest.param([], "(empty result)", id="empty-blocks"),
        pytest.param(None, "(empty result)", id="missing"),
        pytest.param(
            [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "a\nb", id="blocks"
        ),
    ],
)
def test_tool_result_content_becomes_a_string(content: Any, expected: str) -> None:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": "x"}
    if content is not None:
        block["content"] = content
    out, _ = roundtrip({"model": "m", "messages": [{"role": "user", "content": [block]}]})
    assert out["messages"] == [{"role": "tool", "tool_call_id": "x", "content": expected}]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        pytest.param({"type": "auto"}, "auto", id="auto"),
        pytest.param({"type": "any"}, "required", id="any"),
        pytest.param({"type": "none"}, "none", id="none"),
        pytest.param(
            {"type": "tool", "name": "Read"},
            {"type": "function", "function": {"name": "Read"}},
            id="tool",
        ),
        pytest.param("required", "required", id="openai-required"),
        pytest.param(
            {"type": "function", "function": {"name": "Read"}},
            {"type": "function", "function": {"name": "Read"}},
            id="openai-function",
        ),
        pytest.param(
            {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}},
            {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}},
            id="openai-form-unknown-to-us",
        ),
    ],
)
def test_tool_choice_forms(choice: Any, expected: Any) -> None:
    out, _ = roundtrip(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "x"}],
            "tools": [TOOL_READ],
            "tool_choice": choice,
        }
    )
    assert out["tool_choice"] == expected


def test_disable_parallel_tool_use_becomes_parallel_tool_calls_false() -> None:
    out, _ = roundtrip(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "x"}],
            "tools": [TOOL_READ],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        }
    )
    assert out["tool_choice"] == "auto"
    assert out["parallel_tool_calls"] is False


@pytest.mark.parametrize(
    ("tools", "message", "param"),
    [
        pytest.param(
            [TOOL_READ, TOOL_READ], "tool name 'Read' is declared twice", "tools[1]", id="duplicate"
        ),
        pytest.param(
            [{"description": "x", "input_schema": {}}],
            "tools[0] has no name",
            "tools[0].name",
            id="no-name",
        ),
        pytest.param(
            [{"type": "function", "function": {"description": "x"}}],
            "tools[0] has no name",
            "tools[0].function.name",
            id="nested-no-name",
        ),
        pytest.param(
            [{"type": "web_search_20250305", "name": "web_search"}],
            "tool 'web_search' has type 'web_search_20250305'",
            "tools[0].type",
            id="server-tool",
        ),
    ],
)
def test_client_mistakes_in_tools_are_refused(tools: list[Any], message: str, param: str) -> None:
    with pytest.raises(ClientError) as info:
        roundtrip({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": tools})
    assert message in info.value.message
    assert info.value.param == param
    error = OPENAI.encode_error(info.value)["error"]
    assert error["type"] == "invalid_request_error"
    assert message in error["message"]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"prompt": "hello"}, id="legacy-completions"),
        pytest.param({"model": "m", "messages": "hi"}, id="messages-not-a-list"),
        pytest.param(
            {"model": "m", "messages": [{"role": "robot", "content": "x"}]}, id="unknown-role"
        ),
    ],
)
def test_shapes_we_cannot_read_are_unsupported(body: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedShape):
        OPENAI.decode_request(body, Counter())


def test_images_anthropic_style_become_image_url_parts() -> None:
    out, _ = roundtrip(
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AAA="},
                        },
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://x/y.png", "detail": "low"},
                        },
                    ],
                }
            ],
        }
    )
    assert out["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA="}},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
    ]


def test_real_cursor_byok_tool_round_trip_shape_survives() -> None:
    """The recorded Cursor request (OpenAI-native tool_calls + tool message) is kept as sent."""
    from tests.realdata import cursor_byok_body

    body = cursor_byok_body()
    out, notes = roundtrip(body)
    assert out == body
    assert not notes
