"""anthropic request codec: Claude Code's ``/v1/messages`` bodies ↔ unified ↔ OpenAI / Anthropic."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects.anthropic import DIALECT as ANTHROPIC
from addon.dialects.anthropic.request_encode import DEFAULT_MAX_TOKENS
from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import (
    CacheMark,
    ClientError,
    Image,
    Message,
    Notes,
    Opaque,
    OpaqueTool,
    Params,
    Part,
    Request,
    Role,
    Text,
    Thinking,
    ThinkingConfig,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    UnsupportedShape,
)
from addon.transforms.tools import leave_out_tools

CACHE = {"type": "ephemeral"}

CLAUDE_CODE_BODY: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "stream": True,
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": CACHE},
        {"type": "text", "text": "Be brief."},
    ],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look at these"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AAA="},
                },
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Need to read.", "signature": "sig-1"},
                {"type": "redacted_thinking", "data": "opaque=="},
                {"type": "text", "text": "Reading both."},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"path": "é"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "no such file"}],
                    "is_error": True,
                    "cache_control": CACHE,
                },
                {"type": "text", "text": "Go on."},
            ],
        },
    ],
    "tools": [
        {
            "name": "Read",
            "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        {
            "type": "custom",
            "name": "Bash",
            "input_schema": {"type": "object"},
            "cache_control": CACHE,
        },
    ],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "thinking": {"type": "enabled", "budget_tokens": 10000},
    "metadata": {"user_id": "user_abc_account_1_session_2"},
    "stop_sequences": ["STOP"],
    "temperature": 1,
    "top_k": 5,
    "service_tier": "auto",
}

EXPECTED_REQUEST = Request(
    origin="anthropic",
    model="claude-sonnet-4-5",
    messages=(
        Message(
            "system",
            (Text("You are Claude Code.", cache=CacheMark()), Text("Be brief.")),
        ),
        Message(
            "user",
            (
                Text("Look at these"),
                Image("data:image/png;base64,AAA="),
                Image("https://x/y.png"),
            ),
        ),
        Message(
            "assistant",
            (
                Thinking("Need to read.", signature="sig-1"),
                Thinking("opaque==", redacted=True),
                Text("Reading both."),
                ToolCall("toolu_1", "Read", '{"path": "a"}'),
                ToolCall("toolu_2", "Read", '{"path": "é"}'),
            ),
        ),
        Message(
            "user",
            (
                ToolResult("toolu_1", "A"),
                ToolResult(
                    "toolu_2",
                    (Text("no such file"),),
                    is_error=True,
                    cache=CacheMark(),
                ),
                Text("Go on."),
            ),
        ),
    ),
    tools=(
        Tool(
            "Read",
            "Read a file",
            {"type": "object", "properties": {"path": {"type": "string"}}},
        ),
        Tool(
            "Bash",
            None,
            {"type": "object"},
            extra={"anthropic": {"type": "custom"}},
            cache=CacheMark(),
        ),
    ),
    tool_choice=ToolChoice("auto", disable_parallel=True),
    stream=True,
    stream_explicit=True,
    params=Params(
        max_tokens=32000,
        temperature=1.0,
        top_k=5,
        stop=("STOP",),
        user="user_abc_account_1_session_2",
    ),
    thinking=ThinkingConfig(True, 10000),
    extra={"metadata": {"user_id": "user_abc_account_1_session_2"}, "service_tier": "auto"},
)


def decode(body: dict[str, Any], notes: Notes | None = None) -> Request:
    return ANTHROPIC.decode_request(body, Counter() if notes is None else notes)


def to_openai(body: dict[str, Any], notes: Notes | None = None) -> dict[str, Any]:
    notes = Counter() if notes is None else notes
    return OPENAI.encode_request(ANTHROPIC.decode_request(body, notes), notes)


def to_anthropic(req: Request, notes: Notes | None = None) -> dict[str, Any]:
    return ANTHROPIC.encode_request(req, Counter() if notes is None else notes)


def minimal(**fields: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }


# --------------------------------------------------------------------------- decode


def test_claude_code_body_decodes_to_the_unified_request() -> None:
    assert decode(copy.deepcopy(CLAUDE_CODE_BODY)) == EXPECTED_REQUEST


def test_claude_code_body_becomes_the_openai_body() -> None:
    out = to_openai(copy.deepcopy(CLAUDE_CODE_BODY))
    assert out == {
        "model": "claude-sonnet-4-5",
        "messages": [
            {
                "role": "system",
                "content": [
                    {"type": "text", "text": "You are Claude Code.", "cache_control": CACHE},
                    {"type": "text", "text": "Be brief."},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look at these"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA="}},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Reading both."}],
                "reasoning_content": "Need to read.",
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "Read", "arguments": '{"path": "a"}'},
                    },
                    {
                        "id": "toolu_2",
                        "type": "function",
                        "function": {"name": "Read", "arguments": '{"path": "é"}'},
                    },
                ],
            },
            # the tool messages right after the assistant turn, the user's text after them
            {"role": "tool", "tool_call_id": "toolu_1", "content": "A"},
            {
                "role": "tool",
                "tool_call_id": "toolu_2",
                "content": [
                    {"type": "text", "text": "[tool error] no such file", "cache_control": CACHE}
                ],
            },
            {"role": "user", "content": [{"type": "text", "text": "Go on."}]},
        ],
        "max_tokens": 32000,
        "temperature": 1.0,
        "user": "user_abc_account_1_session_2",
        "stop": ["STOP"],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "Read",
                    "description": "Read a file",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                },
            },
            {
                "type": "function",
                "function": {"name": "Bash", "parameters": {"type": "object"}},
                "cache_control": CACHE,  # the plan removes marks unless the route keeps them
            },
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "stream": True,
        "stream_options": {"include_usage": True},
        "reasoning_effort": "medium",  # from the thinking budget of 10000
    }


def test_anthropic_round_trip_gives_the_same_body() -> None:
    notes: Notes = Counter()
    once = to_anthropic(decode(copy.deepcopy(CLAUDE_CODE_BODY), notes), notes)
    assert once == CLAUDE_CODE_BODY
    assert to_anthropic(decode(copy.deepcopy(once))) == once
    assert not notes


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        pytest.param("Be nice.", (Message("system", (Text("Be nice."),), True),), id="string"),
        pytest.param("", (), id="empty-string"),
        pytest.param([], (), id="empty-list"),
        pytest.param(None, (), id="absent"),
    ],
)
def test_system_forms(system: Any, expected: tuple[Message, ...]) -> None:
    body = minimal(system=system) if system is not None else minimal()
    assert decode(body).messages[:-1] == expected


def test_string_system_and_content_round_trip_as_strings() -> None:
    body = minimal(system="Be nice.")
    assert to_anthropic(decode(body)) == body


@pytest.mark.parametrize(
    ("thinking", "expected", "kept"),
    [
        pytest.param(
            {"type": "enabled", "budget_tokens": 2000}, ThinkingConfig(True, 2000), None, id="on"
        ),
        pytest.param({"type": "disabled"}, None, {"type": "disabled"}, id="off"),
        pytest.param(
            {"type": "adaptive"},
            ThinkingConfig(True, None, adaptive=True),
            {"type": "adaptive"},
            id="adaptive",
        ),
        pytest.param({"type": "future"}, None, {"type": "future"}, id="unknown-kept"),
    ],
)
def test_thinking_config(thinking: Any, expected: ThinkingConfig | None, kept: Any) -> None:
    req = decode(minimal(thinking=thinking))
    assert req.thinking == expected
    assert req.extra.get("thinking") == kept
    if kept is not None:  # an Anthropic upstream gets the original back
        assert to_anthropic(req)["thinking"] == kept


@pytest.mark.parametrize(
    ("choice", "expected", "openai"),
    [
        pytest.param({"type": "auto"}, ToolChoice("auto"), "auto", id="auto"),
        pytest.param({"type": "any"}, ToolChoice("required"), "required", id="any"),
        pytest.param({"type": "none"}, ToolChoice("none"), "none", id="none"),
        pytest.param(
            {"type": "tool", "name": "Read", "disable_parallel_tool_use": False},
            ToolChoice("tool", "Read", disable_parallel=False),
            {"type": "function", "function": {"name": "Read"}},
            id="tool",
        ),
    ],
)
def test_tool_choice(choice: Any, expected: ToolChoice, openai: Any) -> None:
    body = minimal(tools=[{"name": "Read", "input_schema": {}}], tool_choice=choice)
    assert decode(body).tool_choice == expected
    assert to_openai(body)["tool_choice"] == openai
    assert to_anthropic(decode(body))["tool_choice"] == choice


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        pytest.param({"type": "tool"}, "tool_choice.name", id="tool-without-name"),
        pytest.param({"type": "sometimes"}, "tool_choice.type", id="unknown-type"),
        pytest.param("auto", "tool_choice", id="string"),
    ],
)
def test_tool_choice_mistakes(choice: Any, param: str) -> None:
    with pytest.raises(ClientError) as info:
        decode(minimal(tool_choice=choice))
    assert info.value.param == param


def test_unknown_blocks_are_opaque_and_reach_anthropic_unchanged() -> None:
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
    body = minimal(messages=[{"role": "user", "content": [doc, {"type": "text", "text": "?"}]}])
    req = decode(body)
    assert req.messages[0].parts[0] == Opaque("anthropic", doc)
    assert to_anthropic(req) == body


# --------------------------------------------------------------------------- client mistakes


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param({"type": "web_search_20250305", "name": "web_search"}, id="web_search"),
        pytest.param({"type": "bash_20250124", "name": "bash"}, id="bash"),
        pytest.param({"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}),
        pytest.param({"type": "computer_20250124", "name": "computer"}, id="computer"),
        pytest.param({"type": "code_execution_20250825", "name": "code_execution"}, id="code"),
    ],
)
def test_server_tool_is_left_out_for_an_openai_upstream(tool: dict[str, Any]) -> None:
    body = minimal(tools=[{"name": "Read", "input_schema": {}}, tool])
    req = decode(body)
    assert req.tools is not None and req.tools[1] == OpaqueTool(
        "anthropic", tool["name"], tool["type"], tool
    )
    assert to_anthropic(req)["tools"][1] == tool  # an Anthropic upstream runs it
    notes: Counter[str] = Counter()
    sent = leave_out_tools(req, OPENAI.runs, "the openai_chat upstream", notes)
    label = f"{tool['name']} ({tool['type']})"
    assert notes == {f"tools the openai_chat upstream cannot run left out: {label}": 1}
    assert [t["function"]["name"] for t in OPENAI.encode_request(sent, notes)["tools"]] == ["Read"]
    # The encoder writes only what its wire has.
    with pytest.raises(ClientError, match="cannot run"):
        to_openai(body)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param(
            {"tool_choice": {"type": "tool", "name": "web_search"}},
            "tool_choice asks for tool 'web_search' of type 'web_search_20250305', which the "
            "openai_chat upstream cannot run",
            id="forced",
        ),
        pytest.param(
            {"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]},
            "tool 'web_search' has type 'web_search_20250305', which the openai_chat upstream "
            "cannot run, and the request has no other tool",
            id="only-tool",
        ),
    ],
)
def test_a_server_tool_the_client_asks_for_is_refused(fields: dict[str, Any], message: str) -> None:
    tools = [
        {"name": "Read", "input_schema": {}},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    req = decode(minimal(**{"tools": tools, **fields}))
    with pytest.raises(ClientError) as info:
        leave_out_tools(req, OPENAI.runs, "the openai_chat upstream", Counter())
    assert info.value.message.startswith(message)
    assert info.value.code == "unsupported_tool" and info.value.status == 400
    assert ANTHROPIC.encode_error(info.value) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": info.value.message},
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param(minimal(tools=[{"input_schema": {}}]), "tools[0].name", id="tool-no-name"),
        pytest.param(minimal(tools=[{"name": ""}]), "tools[0].name", id="tool-empty-name"),
        pytest.param(minimal(tools=["Read"]), "tools[0]", id="tool-not-object"),
        pytest.param(
            minimal(
                messages=[
                    {"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f"}]}
                ]
            ),
            "messages[0].content[0]",
            id="tool_use-in-user-turn",
        ),
        pytest.param(
            minimal(
                messages=[
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_result", "tool_use_id": "x"}],
                    }
                ]
            ),
            "messages[0].content[0]",
            id="tool_result-in-assistant-turn",
        ),
    ],
)
def test_client_mistakes(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ClientError) as info:
        decode(body)
    assert info.value.param == param and info.value.status == 400


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"model": "m"}, id="no-messages"),
        pytest.param({"messages": []}, id="no-model"),
        pytest.param({"model": "m", "messages": {}}, id="messages-not-a-list"),
        pytest.param(
            {"model": "m", "messages": [{"role": "system", "content": 3}]}, id="system-content"
        ),
        pytest.param(
            {"model": "m", "messages": [{"role": "system", "content": [{"type": "image"}]}]},
            id="system-block",
        ),
        pytest.param({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, id="tool"),
        pytest.param({"model": "m", "messages": [{"role": "user", "content": 3}]}, id="content"),
        pytest.param({"model": "m", "messages": [{"role": "user", "content": [3]}]}, id="block"),
        pytest.param({"model": "m", "messages": [], "system": 3}, id="system-type"),
        pytest.param({"model": "m", "messages": [], "system": [{"type": "image"}]}, id="sys-blk"),
    ],
)
def test_not_a_messages_request(body: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedShape):
        decode(body)


def test_encode_error_types_follow_the_status() -> None:
    assert ANTHROPIC.encode_error(ClientError("slow down", status=429))["error"] == {
        "type": "rate_limit_error",
        "message": "slow down",
    }
    assert ANTHROPIC.encode_error(ClientError("x", status=502))["error"]["type"] == "api_error"


# --------------------------------------------------------------------------- encode (other dialects)

OPENAI_BODY: dict[str, Any] = {
    "model": "claude-x",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "unsigned thoughts",
            "tool_calls": [
                {
                    "id": "functions.Read:0",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"path": "a"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "Read", "arguments": "{broken"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "functions.Read:0", "content": "A"},
        {"role": "tool", "tool_call_id": "call_2", "content": ""},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [{"type": "function", "function": {"name": "Read", "parameters": {}}}],
    "tool_choice": "required",
    "temperature": 0.2,
    "stop": "END",
    "user": "u1",
    "stream": True,
    "stream_options": {"include_usage": True},
}


def openai_to_anthropic(body: dict[str, Any]) -> tuple[dict[str, Any], Notes]:
    notes: Notes = Counter()
    return ANTHROPIC.encode_request(OPENAI.decode_request(body, notes), notes), notes


def test_openai_body_becomes_an_anthropic_body() -> None:
    out, notes = openai_to_anthropic(copy.deepcopy(OPENAI_BODY))
    assert out == {
        "model": "claude-x",
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"},
                                         {"type": "text", "text": "read a"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_b64_ZnVuY3Rpb25zLlJlYWQ6MA", "name": "Read",
                     "input": {"path": "a"}},
                    {"type": "tool_use", "id": "call_2", "name": "Read",
                     "input": {"_raw_arguments": "{broken"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_b64_ZnVuY3Rpb25zLlJlYWQ6MA",
                     "content": "A"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": ""},
                    {"type": "text", "text": "thanks"},
                ],
            },
        ],
        "max_tokens": DEFAULT_MAX_TOKENS,
        "temperature": 0.2,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u1"},
        "tools": [{"name": "Read", "input_schema": {}}],
        "tool_choice": {"type": "any"},
        "stream": True,
    }  # fmt: skip
    assert notes == Counter(
        {
            f"max_tokens {DEFAULT_MAX_TOKENS} added (Anthropic requires it)": 1,
            "unsigned thinking dropped (Anthropic rejects it)": 1,
            "unparsable tool arguments kept as _raw_arguments": 1,
            "tool ids made Anthropic-safe": 2,
        }
    )
    assert "stream_options" not in out  # OpenAI's extras stay with OpenAI


def test_tool_results_go_first_in_their_user_turn() -> None:
    req = Request(
        "openai_chat",
        "m",
        (
            Message("assistant", (ToolCall("c1", "f", "{}"),)),
            Message("user", (Text("note"), ToolResult("c1", "r"))),
        ),
    )
    out = to_anthropic(req)
    assert [b["type"] for b in out["messages"][1]["content"]] == ["tool_result", "text"]


def test_thinking_from_another_dialect() -> None:
    notes: Notes = Counter()
    req = Request(
        "openai_chat",
        "m",
        (Message("user", (Text("x"),)),),
        params=Params(max_tokens=1000, temperature=0.5, top_p=0.9, top_k=3),
        thinking=ThinkingConfig(True, 2000),
    )
    out = to_anthropic(req, notes)
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    assert out["max_tokens"] > 2000  # Anthropic: budget_tokens < max_tokens
    assert "temperature" not in out and "top_k" not in out and out["top_p"] == 0.9
    assert notes["max_tokens raised above the thinking budget"] == 1


def test_thinking_off_when_the_tool_loop_has_no_signed_thinking() -> None:
    notes: Notes = Counter()
    req = Request(
        "openai_chat",
        "m",
        (
            Message("user", (Text("x"),)),
            Message("assistant", (Thinking("unsigned"), ToolCall("c1", "f", "{}"))),
            Message("tool", (ToolResult("c1", "r"),)),
        ),
        thinking=ThinkingConfig(True, None),
    )
    out = to_anthropic(req, notes)
    assert "thinking" not in out
    assert notes["thinking off: the tool loop has no signed thinking (Anthropic requires it)"]


def test_signed_thinking_and_redacted_thinking_go_first() -> None:
    req = Request(
        "openai_chat",
        "m",
        (
            Message("user", (Text("x"),)),
            Message(
                "assistant",
                (Text("t"), Thinking("r", signature="s"), Thinking("d", redacted=True)),
            ),
        ),
    )
    assert to_anthropic(req)["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "r", "signature": "s"},
        {"type": "redacted_thinking", "data": "d"},
        {"type": "text", "text": "t"},
    ]


def test_parts_anthropic_cannot_take_are_dropped_with_a_note() -> None:
    notes: Notes = Counter()
    req = Request(
        "openai_chat",
        "m",
        (
            Message("system", (Text("s"), Image("https://x/i.png"))),
            Message("user", (Text(""),)),
            Message("user", (Text("x"),)),
            Message("developer", (Text("late"),)),
            Message("assistant", (Thinking("unsigned"),)),
            Message("user", (Opaque("openai_chat", {"type": "input_audio"}),)),
        ),
    )
    out = to_anthropic(req, notes)
    assert out["system"] == [{"type": "text", "text": "s"}, {"type": "text", "text": "late"}]
    assert out["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "x"},
                {"type": "text", "text": '{"type": "input_audio"}'},
            ],
        }
    ]
    assert set(notes) == {
        f"max_tokens {DEFAULT_MAX_TOKENS} added (Anthropic requires it)",
        "image part of a system message dropped (system takes text)",
        "message left empty by the conversion dropped",
        "system message moved to the top (Anthropic has one system prompt)",
        "unsigned thinking dropped (Anthropic rejects it)",
        "openai_chat part sent as JSON text",
    }


def test_opaque_tool_of_another_dialect_is_refused() -> None:
    req = Request(
        "openai_chat",
        "m",
        (Message("user", (Text("x"),)),),
        tools=(OpaqueTool("openai_chat", "grammar", "custom", {"type": "custom"}),),
    )
    with pytest.raises(ClientError) as info:
        to_anthropic(req)
    assert "grammar" in info.value.message and info.value.param == "tools[0]"


# --------------------------------------------------------------------------- property

_parts: st.SearchStrategy[Part] = st.one_of(
    st.builds(Text, st.text(max_size=3)),
    st.builds(Image, st.sampled_from(["https://x/a.png", "data:image/png;base64,AA=="])),
    st.builds(Thinking, st.text(max_size=3), st.sampled_from([None, "sig"])),
    st.builds(ToolCall, st.sampled_from(["c1", "c.2"]), st.just("f"), st.sampled_from(["{}", "x"])),
    st.builds(ToolResult, st.sampled_from(["c1", "c.2"]), st.text(max_size=3)),
)
_roles: st.SearchStrategy[Role] = st.sampled_from(["system", "user", "assistant", "tool"])


def _message(role: Role, parts: list[Part]) -> Message:
    if role == "assistant":
        parts = [p for p in parts if not isinstance(p, ToolResult)]
    else:
        parts = [p for p in parts if not isinstance(p, ToolCall | Thinking)]
    return Message(role, tuple(parts))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.builds(_message, _roles, st.lists(_parts, max_size=4)), max_size=8))
def test_any_conversation_gives_alternating_non_empty_turns(messages: list[Message]) -> None:
    out = to_anthropic(Request("openai_chat", "m", tuple(messages)))
    roles = [t["role"] for t in out["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))
    for turn in out["messages"]:
        blocks = turn["content"]
        assert blocks, "an empty turn"
        if isinstance(blocks, str):
            continue
        kinds = [b["type"] for b in blocks]
        assert all(b.get("text", "x") for b in blocks), "an empty text block"
        if turn["role"] == "user":  # tool results first
            assert kinds == sorted(kinds, key=lambda k: k != "tool_result")
        else:
            assert "tool_result" not in kinds
            thinking = [k in ("thinking", "redacted_thinking") for k in kinds]
            assert thinking == sorted(thinking, reverse=True)
        for b in blocks:
            if b["type"] == "tool_use":
                assert isinstance(b["input"], dict) and "." not in b["id"]
            if b["type"] == "thinking":
                assert b["signature"]
    json.dumps(out)  # plain JSON


# --------------------------------------------------------------------------- Claude Code 2.x

MID_SYSTEM: dict[str, Any] = {
    "model": "claude-opus-4-8",
    "max_tokens": 64000,
    "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": CACHE}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "read a"}]},
        {"role": "system", "content": "Reminder: be careful."},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": [{"type": "text", "text": "Two.", "cache_control": CACHE}]},
        {"role": "user", "content": "go"},
    ],
}


def test_system_messages_inside_messages_decode_in_place() -> None:
    req = decode(copy.deepcopy(MID_SYSTEM))
    assert [m.role for m in req.messages] == [
        "system",
        "user",
        "system",
        "assistant",
        "system",
        "user",
    ]
    assert req.messages[2] == Message("system", (Text("Reminder: be careful."),), True)
    assert req.messages[4] == Message("system", (Text("Two.", cache=CacheMark()),))


def test_system_messages_reach_an_openai_upstream_in_order() -> None:
    out = to_openai(copy.deepcopy(MID_SYSTEM))
    assert [(m["role"], m["content"]) for m in out["messages"]][1:] == [
        ("user", [{"type": "text", "text": "read a"}]),
        ("system", "Reminder: be careful."),
        ("assistant", "ok"),
        ("system", [{"type": "text", "text": "Two.", "cache_control": CACHE}]),  # see cache.py
        ("user", "go"),
    ]


def test_an_anthropic_client_keeps_its_system_messages_in_place() -> None:
    notes: Notes = Counter()
    assert to_anthropic(decode(copy.deepcopy(MID_SYSTEM), notes), notes) == MID_SYSTEM
    assert not notes


def test_other_clients_system_messages_still_move_to_the_top() -> None:
    notes: Notes = Counter()
    req = Request(
        "openai_chat",
        "m",
        (
            Message("system", (Text("A"),), True),
            Message("user", (Text("x"),), True),
            Message("system", (Text("B"),), True),
        ),
    )
    out = to_anthropic(req, notes)
    assert out["system"] == "A\n\nB"
    assert out["messages"] == [{"role": "user", "content": "x"}]
    assert notes["system message moved to the top (Anthropic has one system prompt)"] == 1


def test_an_empty_system_message_in_place_is_dropped_with_a_note() -> None:
    notes: Notes = Counter()
    body = minimal(messages=[{"role": "user", "content": "x"}, {"role": "system", "content": ""}])
    assert to_anthropic(decode(body), notes)["messages"] == [{"role": "user", "content": "x"}]
    assert notes["empty message dropped"] == 1


@pytest.mark.parametrize(
    ("thinking", "output_config", "expected", "effort"),
    [
        pytest.param(
            {"type": "adaptive"},
            {"effort": "high"},
            ThinkingConfig(True, None, effort="high", adaptive=True),
            "high",
            id="claude-code",
        ),
        pytest.param(
            {"type": "adaptive"},
            None,
            ThinkingConfig(True, None, adaptive=True),
            "medium",
            id="adaptive",
        ),
        pytest.param(
            {"type": "adaptive"},
            {"effort": "max"},
            ThinkingConfig(True, None, effort="xhigh", adaptive=True),
            "high",
            id="max",
        ),
        pytest.param(
            {"type": "enabled", "budget_tokens": 8000},
            {"effort": "low"},
            ThinkingConfig(True, 8000, effort="low"),
            "low",
            id="effort-wins-over-budget",
        ),
        pytest.param(
            {"type": "enabled", "budget_tokens": 4096},
            {"effort": "unknown"},
            ThinkingConfig(True, 4096),
            "low",
            id="budget-low",
        ),
        pytest.param(
            {"type": "enabled", "budget_tokens": 16384},
            None,
            ThinkingConfig(True, 16384),
            "medium",
            id="budget-medium",
        ),
        pytest.param(
            {"type": "enabled", "budget_tokens": 16385},
            None,
            ThinkingConfig(True, 16385),
            "high",
            id="budget-high",
        ),
        pytest.param(None, {"effort": "high"}, None, None, id="effort-alone-is-not-thinking"),
        pytest.param({"type": "disabled"}, {"effort": "low"}, None, None, id="disabled"),
    ],
)
def test_reasoning_switch(
    thinking: Any, output_config: Any, expected: ThinkingConfig | None, effort: str | None
) -> None:
    fields: dict[str, Any] = {}
    if thinking is not None:
        fields["thinking"] = thinking
    if output_config is not None:
        fields["output_config"] = output_config
    body = minimal(**fields)
    req = decode(copy.deepcopy(body))
    assert req.thinking == expected
    assert req.extra.get("output_config") == output_config  # for an Anthropic upstream
    assert to_openai(copy.deepcopy(body)).get("reasoning_effort") == effort
    assert to_anthropic(req) == body  # the same dialect gets it back as it was


@pytest.mark.parametrize(
    ("config", "effort"),
    [
        pytest.param(ThinkingConfig(True, effort="minimal"), "minimal", id="minimal"),
        pytest.param(ThinkingConfig(True, effort="xhigh"), "high", id="xhigh"),
        pytest.param(ThinkingConfig(True), "medium", id="on"),
        pytest.param(ThinkingConfig(False, effort="high"), None, id="off"),
    ],
)
def test_reasoning_effort_for_an_openai_upstream(
    config: ThinkingConfig, effort: str | None
) -> None:
    req = Request("openai_responses", "m", (Message("user", (Text("x"),)),), thinking=config)
    assert OPENAI.encode_request(req, Counter()).get("reasoning_effort") == effort


def test_an_openai_clients_own_reasoning_effort_is_left_alone() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "low"}
    req = OPENAI.decode_request(copy.deepcopy(body), Counter())
    req = dataclasses.replace(req, thinking=ThinkingConfig(True, effort="high"))
    assert OPENAI.encode_request(req, Counter())["reasoning_effort"] == "low"
    assert "reasoning_effort" not in OPENAI.encode_request(
        OPENAI.decode_request({"model": "m", "messages": []}, Counter()), Counter()
    )


def test_effort_without_budget_from_another_dialect_gets_the_default_budget() -> None:
    req = Request(
        "openai_responses",
        "m",
        (Message("user", (Text("x"),)),),
        params=Params(max_tokens=8000),
        thinking=ThinkingConfig(True, effort="high"),
    )
    out = to_anthropic(req)
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "output_config" not in out
