"""openai_responses request codec: Codex CLI's recorded requests, other dialects' requests for a
Responses upstream, and the Responses-shaped bodies Cursor's agent mode posts to
``/chat/completions``."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from openai.types.chat.completion_create_params import CompletionCreateParams
from openai.types.responses.response_create_params import ResponseCreateParams
from pydantic import TypeAdapter

from addon.dialects import DIALECTS
from addon.dialects.anthropic import request as anthropic
from addon.dialects.anthropic import request_encode as anthropic_encode
from addon.dialects.openai_chat import request as chat
from addon.dialects.openai_chat import request_encode as chat_encode
from addon.dialects.openai_responses import DIALECT, NAME
from addon.dialects.openai_responses.request import ITEMS, decode_request
from addon.dialects.openai_responses.request_encode import encode_request
from addon.model import (
    ClientError,
    Image,
    Message,
    Opaque,
    OpaqueTool,
    Params,
    Request,
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
from tests.realdata import read


def to_chat(req: Request) -> dict[str, Any]:
    """Encoded for a chat upstream as a route does: the tools it cannot run left out first."""
    notes: Counter[str] = Counter()
    req = leave_out_tools(req, DIALECTS["openai_chat"].runs, "the openai_chat upstream", notes)
    return chat_encode.encode_request(req, notes)


CODEX = [f"clients/codex-0.169.0-responses-gpt-5.5-turn{n}.request.json" for n in (1, 2, 3)]
CHAT_BODY: TypeAdapter[Any] = TypeAdapter(CompletionCreateParams)
RESPONSES_BODY: TypeAdapter[Any] = TypeAdapter(ResponseCreateParams)
RESPONSES_ONLY_KEYS = {"input", "instructions", "include", "store", "text", "reasoning",
                       "previous_response_id", "prompt_cache_retention", "max_output_tokens"}  # fmt: skip


def codex(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(read(name))["body"]
    return body


def decode(body: dict[str, Any]) -> tuple[Request, Counter[str]]:
    notes: Counter[str] = Counter()
    return decode_request(body, notes), notes


def check_chat_body(body: dict[str, Any]) -> None:
    """A chat/completions body the API accepts: chat keys only, tool results answer calls."""
    assert not RESPONSES_ONLY_KEYS & set(body), RESPONSES_ONLY_KEYS & set(body)
    CHAT_BODY.validate_python(body)
    open_calls: set[str] = set()
    for m in body["messages"]:
        assert m["role"] in ("system", "developer", "user", "assistant", "tool")
        if m["role"] == "assistant":
            open_calls = {c["id"] for c in m.get("tool_calls") or ()}
            for c in m.get("tool_calls") or ():
                json.loads(c["function"]["arguments"])  # every call's arguments are JSON
        elif m["role"] == "tool":
            assert m["tool_call_id"] in open_calls
    for t in body.get("tools") or ():
        assert t["type"] == "function" and isinstance(t["function"]["parameters"], dict)


# --------------------------------------------------------------------------- Codex


def test_dialect_record() -> None:
    assert DIALECTS[NAME] is DIALECT
    assert DIALECT.path == "/responses"
    assert DIALECT.placement(
        Request(NAME, "m", ()),
        _target("/v1/messages", "/messages"),
    ) == ("/v1/responses", ())


def _target(path: str, suffix: str) -> Any:
    from addon.dialects.base import Target

    return Target(path, (("beta", "true"),), suffix, same_dialect=False)


@pytest.mark.parametrize("name", CODEX)
def test_codex_request_survives_responses_to_responses_unchanged(name: str) -> None:
    body = codex(name)
    req, _ = decode(body)
    assert encode_request(req, Counter()) == body


def test_codex_turn3_decodes_into_the_unified_conversation() -> None:
    req, _ = decode(codex(CODEX[2]))
    assert req.origin == NAME and req.model == "gpt-5.5" and req.stream
    assert [m.role for m in req.messages] == [
        "developer", "developer", "user", "user", "assistant", "tool", "assistant", "tool", "tool",
    ]  # fmt: skip
    first, second = req.messages[4], req.messages[6]
    thinking = first.parts[0]
    assert isinstance(thinking, Thinking)
    assert thinking.text == "The user wants the file content. I should call the read tool first."
    assert thinking.signature is not None and thinking.signature.startswith("gAAAA")
    assert thinking.extra[NAME]["id"] == "rs_rec_t1"
    assert first.parts[1] == ToolCall(
        "call_rec_t1_0",
        "exec_command",
        '{"cmd": "cat hello.txt", "workdir": "/home/user/project"}',
    )
    patch = second.parts[2]
    assert isinstance(patch, ToolCall) and patch.custom and patch.name == "apply_patch"
    assert patch.arguments.startswith("*** Begin Patch\n*** Add File: notes.txt\n")
    results = [m.parts[0] for m in req.messages[7:]]
    assert [(r.tool_call_id, r.custom) for r in results if isinstance(r, ToolResult)] == [
        ("call_rec_t2_0", False),
        ("call_rec_t2_1", True),
    ]
    assert req.thinking == ThinkingConfig(True, effort="medium")
    assert req.tool_choice == ToolChoice("auto")
    for key in ("store", "include", "text", "client_metadata", "reasoning"):
        assert key in req.extra
    assert req.params.cache_key == "01a20270-ef02-7532-9af6-59047caaf51b"  # Codex's conversation
    tools = {t.name: t for t in req.tools or ()}
    apply_patch = tools["apply_patch"]
    assert isinstance(apply_patch, Tool) and apply_patch.parameters == {}
    assert apply_patch.format is not None and apply_patch.format["type"] == "grammar"
    assert isinstance(tools["exec_command"], Tool) and tools["exec_command"].strict is False
    opaque = [t for t in req.tools or () if isinstance(t, OpaqueTool)]
    assert [(t.origin, t.type) for t in opaque] == [(NAME, "tool_search"), (NAME, "web_search")]


@pytest.mark.parametrize("name", CODEX)
def test_codex_request_becomes_a_valid_chat_body(name: str) -> None:
    req, _ = decode(codex(name))
    notes: Counter[str] = Counter()
    req = leave_out_tools(req, DIALECTS["openai_chat"].runs, "the openai_chat upstream", notes)
    body = chat_encode.encode_request(req, notes)
    check_chat_body(body)
    assert notes["tools the openai_chat upstream cannot run left out: tool_search, web_search"]
    tools = {t["function"]["name"]: t["function"] for t in body["tools"]}
    assert "web_search" not in tools
    # apply_patch (a custom tool) goes out as a function with one string parameter, and its
    # calls in the history carry the raw patch in that parameter.
    assert tools["apply_patch"]["parameters"]["properties"] == {"input": {"type": "string"}}
    assert body["stream_options"] == {"include_usage": True}
    for m in body["messages"]:
        for c in m.get("tool_calls") or ():
            if c["function"]["name"] == "apply_patch":
                assert json.loads(c["function"]["arguments"])["input"].startswith("*** Begin Patch")


def test_codex_turn3_chat_history_pairs_calls_and_results() -> None:
    req, _ = decode(codex(CODEX[2]))
    body = to_chat(req)
    roles = [m["role"] for m in body["messages"]]
    assert roles == [
        "developer", "developer", "user", "user", "assistant", "tool", "assistant", "tool", "tool",
    ]  # fmt: skip
    assistant = body["messages"][6]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_rec_t2_0", "call_rec_t2_1"]
    assert assistant["reasoning_content"].startswith("I got the first file.")


def test_codex_request_reaches_an_anthropic_upstream() -> None:
    """Codex → a Claude model: the tools only OpenAI runs are left out first, as a route does
    (the Anthropic encoder refuses what it cannot write)."""
    req, _ = decode(codex(CODEX[0]))
    notes: Counter[str] = Counter()
    req = leave_out_tools(req, DIALECTS["anthropic"].runs, "the anthropic upstream", notes)
    assert notes == {"tools the anthropic upstream cannot run left out: tool_search, web_search": 1}
    body = anthropic_encode.encode_request(
        Request(req.origin, "claude", req.messages, req.tools, stream=True), Counter()
    )
    assert body["system"][0]["text"].startswith("You are Codex")
    assert [t["name"] for t in body["tools"]][:2] == ["exec_command", "write_stdin"]


# --------------------------------------------------------------------------- decoding


def test_input_string_and_instructions() -> None:
    body = {"model": "m", "instructions": "Be brief.", "input": "hi", "max_output_tokens": 9}
    req, _ = decode(body)
    assert req.messages == (
        Message("system", (Text("Be brief."),), string_content=True),
        Message("user", (Text("hi"),), string_content=True),
    )
    assert req.params == Params(max_tokens=9)
    assert encode_request(req, Counter()) == body


def test_content_parts() -> None:
    body = {
        "model": "m",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "https://x/a.png", "detail": "low"},
                    {"type": "input_image", "file_id": "file-1"},
                    {"type": "input_file", "file_id": "file-2"},
                    {"type": "input_mystery", "x": 1},
                ],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "refusal", "refusal": "no"}],
            },
        ],
    }
    req, notes = decode(body)
    user = req.messages[0]
    assert user.parts[:2] == (Text("look"), Image("https://x/a.png", detail="low"))
    assert user.parts[2] == Image("", file="file-1")  # an image the client uploaded to OpenAI
    assert [p.data["type"] for p in user.parts[3:] if isinstance(p, Opaque)] == [
        "input_file",
        "input_mystery",
    ]
    assert req.messages[1] == Message("assistant", (Text("no"),), string_content=True)
    assert notes["refusal parts → text"] == 1
    out = encode_request(req, Counter())
    assert out["input"][0] == body["input"][0]  # the unknown part stays a part
    # A chat upstream gets the text and the image.
    chat_body = to_chat(req)
    assert chat_body["messages"][0]["content"][:2] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
    ]


def test_items_group_into_messages_and_outputs_follow_call_order() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "go"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
            {"type": "custom_tool_call", "call_id": "b", "name": "g", "input": "raw"},
            {"type": "custom_tool_call_output", "call_id": "b", "output": "done"},
            {"type": "function_call_output", "call_id": "a", "output": [
                {"type": "input_text", "text": "x"},
                {"type": "input_image", "image_url": "data:image/png;base64,AA"},
            ]},
            {"type": "item_reference", "id": "msg_old"},
        ],
    }  # fmt: skip
    req, notes = decode(body)
    assert [m.role for m in req.messages] == ["user", "assistant", "tool", "tool", "user"]
    assistant = req.messages[1]
    assert [p.kind for p in assistant.parts] == ["thinking", "text", "tool_call", "tool_call"]
    first, second = req.messages[2].parts[0], req.messages[3].parts[0]
    assert isinstance(first, ToolResult) and first.tool_call_id == "a"
    assert first.content == (Text("x"), Image("data:image/png;base64,AA"))
    assert isinstance(second, ToolResult) and second.custom and second.content == "done"
    assert req.messages[4].parts == (Opaque(NAME, {"type": "item_reference", "id": "msg_old"}),)
    assert notes["Responses-only input items kept aside"] == 1
    out = encode_request(req, Counter())
    assert [i.get("type", "message") for i in out["input"]] == [
        "message", "reasoning", "message", "function_call", "custom_tool_call",
        "function_call_output", "custom_tool_call_output", "item_reference",
    ]  # fmt: skip


def test_tools_of_every_shape() -> None:
    body = {
        "model": "m",
        "input": "x",
        "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {"type": "function", "function": {"name": "g", "description": "d"}},
            {"type": "custom", "name": "free"},
            {"type": "custom", "custom": {"name": "nested", "format": {
                "type": "grammar", "grammar": {"syntax": "lark", "definition": "start: x"}}}},
            {"name": "Read", "input_schema": {"type": "object", "properties": {}}},
            {"type": "web_search", "search_context_size": "low"},
            {"type": "mcp", "server_label": "fs"},
        ],
    }  # fmt: skip
    req, _ = decode(body)
    tools = req.tools or ()
    assert [type(t).__name__ for t in tools] == ["Tool"] * 5 + ["OpaqueTool"] * 2
    f, g, free, nested, read_ = (t for t in tools if isinstance(t, Tool))
    assert f.strict is None and g.description == "d" and read_.parameters["type"] == "object"
    assert free.format == {"type": "text"} and free.parameters == {}
    assert nested.format == {"type": "grammar", "syntax": "lark", "definition": "start: x"}
    out = encode_request(req, Counter())
    assert out["tools"][0] == body["tools"][0]  # no strict added for a Responses client
    assert out["tools"][2] == {"type": "custom", "name": "free"}
    assert out["tools"][3]["format"] == nested.format  # the flat Responses format
    assert out["tools"][5:] == body["tools"][5:]


@pytest.mark.parametrize(
    ("raw", "want", "kept"),
    [
        ("required", ToolChoice("required"), False),
        ({"type": "function", "name": "f"}, ToolChoice("tool", "f"), False),
        ({"type": "custom", "name": "free"}, ToolChoice("tool", "free"), False),
        ({"type": "allowed_tools", "mode": "auto", "tools": []}, None, True),
        ({"type": "web_search"}, ToolChoice("tool", kind="web_search"), True),
        ({"type": "mcp", "server_label": "x"}, ToolChoice("tool", kind="mcp"), True),
    ],
)
def test_tool_choice(raw: Any, want: ToolChoice | None, kept: bool) -> None:
    body = {
        "model": "m",
        "input": "x",
        "tools": [{"type": "function", "name": "f"}, {"type": "custom", "name": "free"}],
        "tool_choice": raw,
    }
    req, _ = decode(body)
    assert req.tool_choice == want
    assert ("tool_choice" in req.extra) == kept
    assert encode_request(req, Counter())["tool_choice"] == raw


def test_parallel_tool_calls_false_reaches_a_chat_upstream() -> None:
    body = {
        "model": "m",
        "input": "x",
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "parallel_tool_calls": False,
    }
    req, _ = decode(body)
    assert req.tool_choice == ToolChoice("auto", disable_parallel=True)
    assert encode_request(req, Counter()) == body  # no tool_choice made up
    assert to_chat(req)["parallel_tool_calls"] is False


@pytest.mark.parametrize(
    ("reasoning", "want"),
    [
        ({"effort": "none"}, None),
        ({"effort": "high", "summary": "auto"}, ThinkingConfig(True, effort="high")),
        ({"summary": "detailed"}, ThinkingConfig(True)),
        ({"effort": "turbo"}, ThinkingConfig(True)),
    ],
)
def test_reasoning(reasoning: dict[str, Any], want: ThinkingConfig | None) -> None:
    body = {"model": "m", "input": "x", "reasoning": reasoning}
    req, _ = decode(body)
    assert req.thinking == want
    assert encode_request(req, Counter()) == body


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "tools[0] has no name"),
        ({"model": "m", "input": [{"type": "function_call", "name": "f"}]}, "without a call_id"),
        ({"model": "m", "input": [{"type": "function_call_output", "output": ""}]}, "call_id"),
        ({"model": "m", "input": "x", "tool_choice": "any"}, "tool_choice 'any'"),
    ],
)
def test_client_mistakes_are_refused(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ClientError) as info:
        decode(body)
    assert message in info.value.message


@pytest.mark.parametrize(
    "body",
    [
        {"input": "x"},
        {"model": "m", "input": 3},
        {"model": "m", "input": ["x"]},
        {"model": "m", "input": [{"role": "robot", "content": "x"}]},
    ],
)
def test_what_is_not_a_responses_request_passes_through(body: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedShape):
        decode(body)


# --------------------------------------------------------------------------- other dialects


def test_an_anthropic_request_for_a_responses_upstream() -> None:
    body = {
        "model": "claude",
        "max_tokens": 1000,
        "system": "Be brief.",
        "stop_sequences": ["END"],
        "thinking": {"type": "enabled", "budget_tokens": 8000},
        "tools": [{"name": "Read", "input_schema": {"type": "object", "properties": {}}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [
            {"role": "user", "content": "read a"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "c2ln"},
                    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"p": "a"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A", "is_error": True},
                    {"type": "text", "text": "now?"},
                ],
            },
        ],
    }  # fmt: skip
    req = anthropic.decode_request(body, Counter())
    notes: Counter[str] = Counter()
    out = encode_request(req, notes)
    RESPONSES_BODY.validate_python(out)
    assert out["instructions"] == "Be brief."
    assert out["max_output_tokens"] == 1000
    assert out["store"] is False and out["include"] == ["reasoning.encrypted_content"]
    assert out["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert out["tools"] == [
        {"type": "function", "name": "Read", "parameters": {"type": "object", "properties": {}},
         "strict": False},
    ]  # fmt: skip
    assert out["tool_choice"] == "required" and out["parallel_tool_calls"] is False
    assert out["input"] == [
        {"type": "message", "role": "user", "content": "read a"},
        {
            "type": "reasoning",
            "id": out["input"][1]["id"],
            "summary": [{"type": "summary_text", "text": "hmm"}],
            "encrypted_content": "c2ln",
        },
        {"type": "function_call", "call_id": "toolu_1", "name": "Read", "arguments": '{"p": "a"}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "[tool error] A"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "now?"}]},
    ]
    assert notes["stop sequences dropped (the Responses API has none)"] == 1


def test_a_chat_request_for_a_responses_upstream() -> None:
    body = {
        "model": "gpt",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "reasoning_content": "think",
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            {"role": "system", "content": "late rule"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "stream": True,
    }  # fmt: skip
    req = chat.decode_request(body, Counter())
    notes: Counter[str] = Counter()
    out = encode_request(req, notes)
    RESPONSES_BODY.validate_python(out)
    assert out["instructions"] == "sys" and "include" not in out and out["stream"] is True
    assert [i["type"] for i in out["input"]] == [
        "message", "message", "function_call", "function_call_output", "message",
    ]  # fmt: skip
    assert out["input"][1] == {"type": "message", "role": "assistant", "content": ""}
    assert out["input"][4]["role"] == "system"
    assert notes["reasoning without encrypted content dropped (Responses replays only its own)"]


def test_custom_calls_from_another_dialect_get_custom_outputs() -> None:
    req = Request(
        "anthropic",
        "m",
        (
            Message("user", (Text("patch"),)),
            Message("assistant", (ToolCall("c", "apply_patch", "*** Begin", custom=True),)),
            Message("user", (ToolResult("c", "ok"),)),
        ),
        tools=(Tool("apply_patch", "edit", {}, format={"type": "text"}),),
        tool_choice=ToolChoice("tool", "apply_patch"),
    )
    out = encode_request(req, Counter())
    assert out["input"][1] == {
        "type": "custom_tool_call",
        "call_id": "c",
        "name": "apply_patch",
        "input": "*** Begin",
    }
    assert out["input"][2]["type"] == "custom_tool_call_output"
    assert out["tools"] == [
        {"type": "custom", "name": "apply_patch", "description": "edit", "format": {"type": "text"}}
    ]
    assert out["tool_choice"] == {"type": "custom", "name": "apply_patch"}


def test_other_dialects_server_tools_are_refused() -> None:
    req = Request(
        "anthropic", "m", (), tools=(OpaqueTool("anthropic", "web_search", "web_search_2025", {}),)
    )
    with pytest.raises(ClientError, match="web_search"):
        encode_request(req, Counter())


def test_unknown_items_and_parts_round_trip_for_a_responses_upstream() -> None:
    body = {
        "model": "m",
        "input": [
            {"type": "compaction", "encrypted_content": "zzz"},
            {"role": "user", "content": [{"type": "input_video", "url": "v"}]},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        ],
        "previous_response_id": "resp_1",
        "prompt_cache_retention": "24h",
    }
    req, _ = decode(body)
    assert encode_request(req, Counter()) == body
    assert ITEMS in req.extra


# --------------------------------------------------------------------------- Cursor


# Cursor's agent mode for GPT-named models sends Responses-shaped bodies to
# /chat/completions (with ``stream_options: {include_usage: true}``) and expects Chat
# Completions back: LiteLLM's /cursor/chat/completions endpoint and its tests
# (BerriAI/litellm, tests for response_api_endpoints: "what Cursor agent mode sends"), the
# Bifrost Cursor integration (maximhq/bifrost transports/bifrost-http/integrations/cursor.go:
# input + instructions, flat tools, sometimes ``messages`` too, whose tool results the input
# may lack), codex-lb PR #833 (Cursor's GPT-5.5 option: ``input`` + ``instructions`` on
# /v1/chat/completions). Ask mode mixes nested function tools with flat custom tools such as
# ApplyPatch with a lark grammar (LiteLLM's "live-captured" Cursor tool envelopes). The
# bodies below are built from those descriptions, not recorded.
APPLY_PATCH = {
    "type": "custom",
    "name": "ApplyPatch",
    "description": "Use this tool to edit files.",
    "format": {
        "type": "grammar",
        "syntax": "lark",
        "definition": 'start: begin_patch hunk end_patch\nbegin_patch: "*** Begin Patch" LF\n',
    },
}
READ_FILE = {
    "type": "function",
    "function": {
        "name": "ReadFile",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


def cursor_agent_body() -> dict[str, Any]:
    return {
        "model": "gpt-5.5",
        "instructions": "You are a coding agent in Cursor.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "create out.md"}]},
            {
                "type": "reasoning",
                "id": "rs_9",
                "summary": [{"type": "summary_text", "text": "I will patch."}],
                "encrypted_content": "gAAAAenc",
            },
            {
                "type": "function_call",
                "id": "fc_9",
                "call_id": "call_9",
                "name": "ReadFile",
                "arguments": '{"path": "out.md"}',
            },
            {"type": "function_call_output", "call_id": "call_9", "output": "no such file"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "ReadFile",
                "parameters": READ_FILE["function"]["parameters"],
            },  # type: ignore[index]
            APPLY_PATCH,
        ],
        "reasoning": {"effort": "high", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "previous_response_id": "resp_prev",
        "prompt_cache_retention": "24h",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_cursor_agent_body_on_chat_completions_is_a_responses_request() -> None:
    notes: Counter[str] = Counter()
    req = chat.decode_request(cursor_agent_body(), notes)
    assert notes["Responses-shaped body (Cursor agent mode) decoded"] == 1
    assert req.origin == NAME
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool"]
    thinking = req.messages[2].parts[0]
    assert isinstance(thinking, Thinking) and thinking.signature == "gAAAAenc"
    patch = next(t for t in req.tools or () if isinstance(t, Tool) and t.name == "ApplyPatch")
    assert patch.format == APPLY_PATCH["format"]
    assert req.thinking == ThinkingConfig(True, effort="high")
    assert "stream_options" not in req.extra and req.extra["previous_response_id"] == "resp_prev"


def test_cursor_agent_body_becomes_a_valid_chat_body() -> None:
    req = chat.decode_request(cursor_agent_body(), Counter())
    body = to_chat(req)
    check_chat_body(body)
    assert body["messages"][0] == {"role": "system", "content": "You are a coding agent in Cursor."}
    assert body["messages"][2]["reasoning_content"] == "I will patch."
    assert [t["function"]["name"] for t in body["tools"]] == ["ReadFile", "ApplyPatch"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_cursor_agent_body_for_a_responses_upstream_keeps_its_fields() -> None:
    req = chat.decode_request(cursor_agent_body(), Counter())
    out = encode_request(req, Counter())
    want = cursor_agent_body()
    del want["stream_options"]  # the Responses API refuses it
    assert out == want


def test_cursor_chat_only_fields_are_translated() -> None:
    body = {
        "model": "gpt-5.5",
        "input": "hi",
        "max_completion_tokens": 50,
        "reasoning_effort": "low",
        "tool_choice": {"type": "function", "function": {"name": "ReadFile"}},
        "tools": [READ_FILE],
    }
    req = chat.decode_request(body, Counter())
    assert req.params.max_tokens == 50
    assert req.thinking == ThinkingConfig(True, effort="low")
    assert req.tool_choice == ToolChoice("tool", "ReadFile")
    out = encode_request(req, Counter())
    assert out["max_output_tokens"] == 50 and out["reasoning"] == {"effort": "low"}
    assert out["tool_choice"] == {"type": "function", "name": "ReadFile"}


def test_cursor_input_and_messages_messages_hold_the_tool_results() -> None:
    """Bifrost's observation: ``input`` without the tool results that ``messages`` holds."""
    body = {
        "model": "gpt-5.5",
        "input": [
            {"role": "user", "content": "read a"},
            {"type": "function_call", "call_id": "c1", "name": "ReadFile", "arguments": "{}"},
            {"role": "user", "content": "and now?"},
        ],
        "messages": [
            {"role": "user", "content": "read a"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ReadFile", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "A"},
        ],
        "tools": [READ_FILE],
    }  # fmt: skip
    notes: Counter[str] = Counter()
    req = chat.decode_request(body, notes)
    assert [m.role for m in req.messages] == ["user", "assistant", "tool", "user"]
    assert req.messages[-1].parts == (Text("and now?"),)
    assert notes["chat messages used: they hold the tool results input lacks"] == 1
    check_chat_body(to_chat(req))


def test_cursor_input_and_messages_older_messages_come_first() -> None:
    body = {
        "model": "gpt-5.5",
        "input": [{"role": "user", "content": "second question"}],
        "messages": [
            {"role": "system", "content": "Cursor system prompt"},
            {"role": "user", "content": "second question"},
        ],
    }
    notes: Counter[str] = Counter()
    req = chat.decode_request(body, notes)
    assert [(m.role, m.parts) for m in req.messages] == [
        ("system", (Text("Cursor system prompt"),)),
        ("user", (Text("second question"),)),
    ]
    assert notes["messages merged from both input and messages"] == 1


def test_cursor_empty_input_uses_messages() -> None:
    body = {"model": "gpt-5.5", "input": [], "instructions": "sys",
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    req = chat.decode_request(body, Counter())
    assert [(m.role, m.parts) for m in req.messages] == [
        ("system", (Text("sys"),)),
        ("user", (Text("hi"),)),
    ]


def test_cursor_ask_mode_mixed_tool_list_on_a_chat_body() -> None:
    body = {
        "model": "gpt-5.6-sol",
        "messages": [{"role": "user", "content": "create out.md containing ok"}],
        "tools": [READ_FILE, APPLY_PATCH],
    }
    notes: Counter[str] = Counter()
    req = chat.decode_request(body, notes)
    assert req.origin == "openai_chat"
    read_, patch = req.tools or ()
    assert isinstance(read_, Tool) and read_.format is None
    assert isinstance(patch, Tool) and patch.format == APPLY_PATCH["format"]
    out = to_chat(req)
    check_chat_body(out)
    assert out["tools"][1]["function"]["parameters"]["required"] == ["input"]


def test_cursor_ask_mode_mixed_tool_list_in_a_responses_body() -> None:
    body = {"model": "gpt-5.5", "input": "hi", "tools": [READ_FILE, APPLY_PATCH]}
    req = chat.decode_request(body, Counter())
    assert [(t.name, isinstance(t, Tool) and t.format is not None) for t in req.tools or ()] == [
        ("ReadFile", False),
        ("ApplyPatch", True),
    ]
    out = encode_request(req, Counter())
    assert out["tools"][0] == {
        "type": "function",
        "name": "ReadFile",
        "description": "Read a file.",
        "parameters": READ_FILE["function"]["parameters"],  # type: ignore[index]
    }
    assert out["tools"][1] == APPLY_PATCH


def test_a_request_of_only_hosted_tools_is_refused_for_a_chat_upstream() -> None:
    """It asks the upstream to run them: answered without them, it would pretend they ran."""
    req = Request(
        NAME,
        "m",
        (Message("user", (Text("x"),)),),
        tools=(OpaqueTool(NAME, None, "web_search", {"type": "web_search"}),),
        tool_choice=ToolChoice("auto"),
    )
    with pytest.raises(ClientError, match="'web_search', which the openai_chat upstream"):
        leave_out_tools(req, DIALECTS["openai_chat"].runs, "the openai_chat upstream", Counter())
    with pytest.raises(ClientError, match="web_search"):  # the encoder writes only its own
        chat_encode.encode_request(req, Counter())
