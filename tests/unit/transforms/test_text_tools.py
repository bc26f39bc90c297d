"""Request side of the text tool protocols, and the thinking policy."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from addon.dialects.anthropic import DIALECT as ANTHROPIC
from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import (
    ClientError,
    Message,
    Notes,
    Request,
    Response,
    Text,
    Thinking,
    ToolCall,
)
from addon.textproto.invoke import make_trigger
from addon.textproto.parser import TextProtocolParser
from addon.transforms.prompt import SEPARATOR
from addon.transforms.text_tools import TextToolSettings, apply_text_tools, parse_text_tools
from addon.transforms.thinking import (
    THINKING_HINT,
    THINKING_RULE,
    apply_thinking_prompt,
    catalogue_models,
    resolve_model,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "Read",
            "description": "Read a file. " * 10,
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Where. " * 10},
                    "limit": {"type": ["integer", "null"]},
                },
                "required": ["path"],
            },
        },
    }
]


def request(body: dict[str, Any]) -> Request:
    return OPENAI.decode_request({"model": "m", **body}, Counter())


def encode(req: Request, settings: TextToolSettings) -> dict[str, Any]:
    notes: Notes = Counter()
    return OPENAI.encode_request(apply_text_tools(req, settings, notes), notes)


def test_invoke_instruction_is_appended_to_the_first_system_message() -> None:
    trigger = make_trigger(bytes(range(8)))
    out = encode(
        request(
            {
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "hi"},
                ],
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "Read"}},
            }
        ),
        TextToolSettings("invoke", trigger),
    )
    assert "tools" not in out and "tool_choice" not in out
    system = out["messages"][0]["content"]
    assert system.startswith("Be brief.\n\n")
    assert trigger in system and '<invoke name="TOOL_NAME">' in system
    assert '<function name="Read">' in system and '"required": ["path"]' in system
    assert 'You must call the tool "Read"' in system


def test_instruction_is_inserted_when_there_is_no_system_message() -> None:
    out = encode(
        request({"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}),
        TextToolSettings("bracket"),
    )
    assert out["messages"][0]["role"] == "system"
    assert out["messages"][0]["content"].startswith("# Tool Call Format")


def test_tool_choice_none_adds_no_tool_text() -> None:
    out = encode(
        request(
            {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "tool_choice": "none"}
        ),
        TextToolSettings("invoke", make_trigger(bytes(range(8)))),
    )
    assert out["messages"] == [{"role": "user", "content": "hi"}]
    assert "tools" not in out


def test_bracket_cuts_long_descriptions() -> None:
    out = encode(
        request({"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}),
        TextToolSettings("bracket", desc_limit=20, param_limit=10),
    )
    system = out["messages"][0]["content"]
    assert "## Available Tools\n\n### Read\nRead a file. Read a ...\nParameters:" in system
    assert "- path: string (required) - Where. Whe..." in system
    assert "- limit: integer | null" in system


def test_history_is_replayed_as_text_and_roles_alternate() -> None:
    trigger = "<<CALL_abcdefgh>>"
    out = encode(
        request(
            {
                "messages": [
                    {"role": "user", "content": "read it"},
                    {
                        "role": "assistant",
                        "content": "Sure.",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "Read", "arguments": '{"path":"a"}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "A"},
                    {"role": "user", "content": "thanks"},
                ],
                "tools": TOOLS,
            }
        ),
        TextToolSettings("invoke", trigger),
    )
    assert [m["role"] for m in out["messages"]] == ["system", "user", "assistant", "user"]
    assert (
        out["messages"][2]["content"]
        == f'Sure.\n{trigger}\n<invoke name="Read">{{"path":"a"}}</invoke>'
    )
    assert out["messages"][3]["content"] == '<tool_result id="c1">A</tool_result>\n\nthanks'


def test_custom_tools_cannot_be_carried_as_text() -> None:
    req = request(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "custom", "custom": {"name": "patch"}}],
        }
    )
    with pytest.raises(ClientError, match="cannot be carried"):
        apply_text_tools(req, TextToolSettings("bracket"), Counter())


def test_whole_answer_is_parsed_into_parts() -> None:
    answer = Response(
        "openai_chat",
        "id",
        "m",
        (Text('<think>plan</think>Doing it.\n[Calling tool: Read]\nInput: {"path": "a"}'),),
        "stop",
        "stop",
    )
    parser = TextProtocolParser("bracket", tools=("Read",), ids=lambda n: f"call_{n}")
    parsed = parse_text_tools(answer, parser)
    assert parsed.parts == (
        Thinking("plan"),
        Text("Doing it.\n"),
        ToolCall("call_0", "Read", '{"path": "a"}'),
    )
    assert (parsed.finish, parsed.finish_raw) == ("tool_calls", "tool_calls")


@pytest.mark.parametrize(
    ("model", "catalogue", "expected"),
    [
        pytest.param("gpt-5-thinking", ("gpt-5",), ("gpt-5", True), id="derived"),
        pytest.param("gpt-5", ("gpt-5",), ("gpt-5", False), id="base"),
        pytest.param("kimi-k2-thinking", (), ("kimi-k2-thinking", False), id="no-catalogue"),
        pytest.param("r1-thinking", ("r1-thinking",), ("r1-thinking", False), id="listed-as-is"),
    ],
)
def test_resolve_model(model: str, catalogue: tuple[str, ...], expected: tuple[str, bool]) -> None:
    assert resolve_model(model, catalogue) == expected


@pytest.mark.parametrize("model", ["gpt-5-thinking-thinking", "o3-thinking"])
def test_unknown_thinking_models_are_refused(model: str) -> None:
    with pytest.raises(ClientError, match=model):
        resolve_model(model, ("gpt-5",))


def test_catalogue_never_doubles_the_suffix() -> None:
    assert catalogue_models(("a", "b-thinking")) == ["a", "a-thinking", "b-thinking"]


# --------------------------------------------------------------------------- thinking hint

HINT = Text(SEPARATOR + THINKING_HINT)
CALL = {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{}"}}


def test_thinking_prompt_rule_in_system_hint_on_the_last_user_text_only() -> None:
    req = request(
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "second"},
            ]
        }
    )
    notes: Notes = Counter()
    out = apply_thinking_prompt(req, notes)
    assert out.thinking is None  # the prompt replaces the switch: no reasoning_effort
    assert out.messages[0].parts[-1] == Text(SEPARATOR + THINKING_RULE)
    assert out.messages[1] == req.messages[1]  # not on every user message any more
    assert out.messages[3].parts == (Text("second"), HINT)
    body = OPENAI.encode_request(out, notes)
    assert body["messages"][-1]["content"] == f"second{SEPARATOR}{THINKING_HINT}"


def test_thinking_hint_never_follows_a_turn_of_tool_results_only() -> None:
    """Anthropic-style user turns of tool_result blocks, and OpenAI tool messages: the hint goes
    to the last user message with text of its own, never after a tool result."""
    anthropic = ANTHROPIC.decode_request(
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "read a"}]},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "A"}],
                        }
                    ],
                },
            ],
        },
        Counter(),
    )
    out = apply_thinking_prompt(anthropic, Counter())
    assert out.messages[0] == Message("system", (Text(THINKING_RULE),), True)
    assert out.messages[1].parts == (Text("read a"), HINT)
    assert out.messages[2:] == anthropic.messages[1:]

    openai = request(
        {
            "messages": [
                {"role": "user", "content": "read a"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "A"},
            ]
        }
    )
    out = apply_thinking_prompt(openai, Counter())
    assert out.messages[1].parts == (Text("read a"), HINT)
    assert out.messages[2:] == openai.messages[1:]


def test_thinking_hint_with_no_user_text_changes_no_message() -> None:
    req = request({"messages": [{"role": "user", "content": ""}]})
    out = apply_thinking_prompt(req, Counter())
    assert out.messages[1:] == req.messages  # only the system rule was added
