"""Tool-call ids Anthropic accepts (``addon.dialects.anthropic.ids``), and their round trip
through the bridge: an OpenAI-compatible upstream's ``functions.Read:0`` reaches an Anthropic
client as a valid id and comes back to the upstream as ``functions.Read:0``."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from addon.dialects.anthropic import DIALECT as ANTHROPIC
from addon.dialects.anthropic.ids import PREFIX, from_anthropic, to_anthropic
from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import Response, ToolCall
from addon.stream.processor import StreamProcessor
from tests.unit.helpers import pairs_of, sdk_message

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
KIMI_ID = "functions.Read:0"
ANY_TEXT = st.text(st.characters(exclude_categories=()))
"""Any Python string, lone surrogates included."""


# --------------------------------------------------------------------------- the mapping


@given(ANY_TEXT | st.sampled_from(["", KIMI_ID, "toolu_b64_", "toolu_b64_x"]))
def test_any_string_round_trips_and_becomes_a_valid_id(tool_id: str) -> None:
    escaped = to_anthropic(tool_id)
    assert ANTHROPIC_ID.match(escaped)
    assert from_anthropic(escaped) == tool_id


@given(ANY_TEXT, ANY_TEXT)
def test_to_anthropic_is_injective(a: str, b: str) -> None:
    """(The round trip above already implies it: ``from_anthropic`` is a left inverse.) The
    closest candidates for a collision: an id and its own escape."""
    if a != b:
        assert to_anthropic(a) != to_anthropic(b)
    escaped = to_anthropic(a)
    if escaped != a:
        assert to_anthropic(escaped) != escaped


@given(st.from_regex(ANTHROPIC_ID, fullmatch=True).filter(lambda s: not s.startswith(PREFIX)))
def test_valid_ids_are_left_alone(tool_id: str) -> None:
    assert to_anthropic(tool_id) == tool_id
    assert from_anthropic(tool_id) == tool_id


@pytest.mark.parametrize(
    ("tool_id", "expected"),
    [
        pytest.param("toolu_01A09q90qw90lq917835lq9", "toolu_01A09q90qw90lq917835lq9", id="anth"),
        pytest.param("call_abc-123", "call_abc-123", id="openai"),
        pytest.param(KIMI_ID, "toolu_b64_ZnVuY3Rpb25zLlJlYWQ6MA", id="kimi"),
        pytest.param("", PREFIX, id="empty"),
        pytest.param(PREFIX + "x", PREFIX + "dG9vbHVfYjY0X3g", id="our-prefix"),
        pytest.param("\ud83d", PREFIX + "7aC9", id="lone-surrogate"),
    ],
)
def test_examples(tool_id: str, expected: str) -> None:
    assert to_anthropic(tool_id) == expected
    assert from_anthropic(expected) == tool_id


@pytest.mark.parametrize(
    "made_up",
    [PREFIX + "!!", PREFIX + "a", PREFIX + "YWJj", PREFIX + "ZnVuY3Rpb25zLlJlYWQ6MA=="],
)
def test_ids_we_cannot_have_made_come_back_unchanged(made_up: str) -> None:
    """Not base64, a valid id we would not escape (``abc``), padding: not ours."""
    assert from_anthropic(made_up) == made_up


# --------------------------------------------------------------------------- through the codecs


def test_whole_answer_gets_a_valid_id() -> None:
    answer = Response(
        "openai_chat", "chatcmpl-1", "kimi-k2", (ToolCall(KIMI_ID, "Read", "{}"),), "tool_calls"
    )
    block = ANTHROPIC.encode_response(answer)["content"][0]
    assert block["type"] == "tool_use" and ANTHROPIC_ID.match(block["id"])
    assert from_anthropic(block["id"]) == KIMI_ID


def openai_stream(tool_id: str) -> bytes:
    """An OpenAI-compatible gateway's answer with one tool call (Kimi K2 numbering)."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "kimi-k2"}
    chunks: list[dict[str, Any]] = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Reading."}}]},
        {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": tool_id,
                                "type": "function",
                                "function": {"name": "Read", "arguments": '{"file_path":'},
                            }
                        ]
                    },
                }
            ],
        },
        {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ' "a.txt"}'}}]},
                }
            ],
        },
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


def test_kimi_id_survives_a_tool_loop_through_an_anthropic_client() -> None:
    # 1. the upstream's stream, as Claude Code receives it
    processor = StreamProcessor(OPENAI.stream_decoder(), ANTHROPIC.stream_encoder())
    raw = openai_stream(KIMI_ID)
    out = b"".join(b for i in range(0, len(raw), 7) for b in processor.feed(raw[i : i + 7]))
    out += b"".join(processor.finish())
    assert not processor.passthrough
    message = sdk_message(pairs_of(out))
    tool_use = message.content[-1]
    assert tool_use.type == "tool_use" and tool_use.input == {"file_path": "a.txt"}
    assert ANTHROPIC_ID.match(tool_use.id)

    # 2. Claude Code's next request carries that id back, in the tool_use and the tool_result
    body = {
        "model": "kimi-k2",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "read a.txt"},
            {
                "role": "assistant",
                "content": [b.model_dump(exclude={"caller"}) for b in message.content],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "A"}],
            },
        ],
    }
    notes: Counter[str] = Counter()
    upstream = OPENAI.encode_request(
        ANTHROPIC.decode_request(json.loads(json.dumps(body)), notes), notes
    )

    # 3. the upstream gets its own id again
    assistant, tool = upstream["messages"][1], upstream["messages"][2]
    assert assistant["tool_calls"][0]["id"] == KIMI_ID
    assert tool == {"role": "tool", "tool_call_id": KIMI_ID, "content": "A"}

    # 4. and an Anthropic upstream gets the escaped id, the same for the call and its result
    to_claude = ANTHROPIC.encode_request(ANTHROPIC.decode_request(body, Counter()), Counter())
    assert to_claude["messages"][1]["content"][-1]["id"] == tool_use.id
    assert to_claude["messages"][2]["content"][0]["tool_use_id"] == tool_use.id
