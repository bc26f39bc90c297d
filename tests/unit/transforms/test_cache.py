"""``addon.transforms.cache.strip_cache_control``: prompt-caching markers removed everywhere
an Anthropic request keeps them, counted; nothing else touched."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

from addon.dialects.anthropic import DIALECT as ANTHROPIC
from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import (
    Image,
    Message,
    Notes,
    Opaque,
    OpaqueTool,
    Request,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolResult,
)
from addon.transforms.cache import NOTE, strip_cache_control

EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}

BODY: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 100,
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": HOUR},
        {"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL},
    ],
    "messages": [
        {
            "role": "user",
            "content": [{"type": "text", "text": "read a", "cache_control": EPHEMERAL}],
        },
        {"role": "system", "content": [{"type": "text", "text": "mid", "cache_control": HOUR}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": "t",
                    "signature": "s",
                    "cache_control": EPHEMERAL,
                },
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "A", "cache_control": EPHEMERAL}],
                    "cache_control": HOUR,
                }
            ],
        },
    ],
    "tools": [
        {"name": "Read", "input_schema": {"type": "object"}, "cache_control": HOUR},
        {"name": "Glob", "input_schema": {"type": "object"}},
    ],
}


def test_every_marker_of_an_anthropic_request_is_removed_and_counted() -> None:
    notes: Notes = Counter()
    req = strip_cache_control(ANTHROPIC.decode_request(copy.deepcopy(BODY), notes), notes)
    assert notes[NOTE] == 8
    out = OPENAI.encode_request(req, notes)
    assert "cache_control" not in json.dumps(out)
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "You are Claude Code."},
        {"type": "text", "text": "Be brief."},
    ]
    # the thinking block's marker is gone from the model too (an Anthropic upstream's concern)
    assert "cache_control" not in json.dumps(ANTHROPIC.encode_request(req, Counter()))


def test_without_markers_the_request_is_returned_as_it_is() -> None:
    notes: Notes = Counter()
    req = ANTHROPIC.decode_request(
        {"model": "m", "messages": [{"role": "user", "content": "x"}]}, notes
    )
    assert strip_cache_control(req, notes) is req
    assert NOTE not in notes


def test_every_place_of_the_unified_model() -> None:
    """Parts of every kind (nested ones too), messages and tools; dialect-keyed extras one level
    down; other keys and opaque items kept."""
    opaque = Opaque("anthropic", {"type": "document", "cache_control": EPHEMERAL})
    opaque_tool = OpaqueTool("anthropic", "web", "web_search_20250305", {"cache_control": HOUR})
    req = Request(
        "anthropic",
        "m",
        (
            Message(
                "user",
                (
                    Text("a", extra={"cache_control": HOUR, "citations": []}),
                    Image("https://x/y.png", extra={"cache_control": EPHEMERAL}),
                    opaque,
                ),
                extra={"cache_control": EPHEMERAL},
            ),
            Message(
                "assistant",
                (
                    Thinking("t", "s", extra={"cache_control": EPHEMERAL}),
                    ToolCall("c", "f", "{}", extra={"anthropic": {"cache_control": HOUR}}),
                ),
            ),
            Message(
                "user",
                (
                    ToolResult(
                        "c",
                        (Text("r", extra={"cache_control": EPHEMERAL}), Image("data:,")),
                        extra={"cache_control": HOUR},
                    ),
                ),
            ),
        ),
        tools=(
            Tool("f", None, {}, extra={"anthropic": {"cache_control": HOUR, "type": "custom"}}),
            Tool("g", None, {}, extra={"function": {"cache_control": HOUR}}),
            opaque_tool,
        ),
    )
    notes: Notes = Counter()
    out = strip_cache_control(req, notes)
    assert notes == Counter({NOTE: 9})
    assert out == Request(
        "anthropic",
        "m",
        (
            Message("user", (Text("a", extra={"citations": []}), Image("https://x/y.png"), opaque)),
            Message("assistant", (Thinking("t", "s"), ToolCall("c", "f", "{}"))),
            Message("user", (ToolResult("c", (Text("r"), Image("data:,"))),)),
        ),
        tools=(
            Tool("f", None, {}, extra={"anthropic": {"type": "custom"}}),
            Tool("g", None, {}),
            opaque_tool,
        ),
    )
