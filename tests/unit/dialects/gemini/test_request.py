"""gemini request codec: other dialects' requests for a Gemini upstream, Gemini CLI's recorded
requests decoded (and sent back to Gemini or to OpenAI), paths, placement, the Code Assist
envelope and credentials on the wire."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from collections import Counter
from typing import Any

import pytest

from addon.dialects import DIALECTS
from addon.dialects.anthropic import request as anthropic
from addon.dialects.base import Target, WireRequest
from addon.dialects.gemini.parts import CODE_ASSIST, NAME, SIDE, SKIP_SIGNATURE
from addon.dialects.gemini.placement import (
    code_assist_envelope,
    from_path,
    path_base,
    place_code_assist,
    place_public,
)
from addon.dialects.gemini.request import decode_request
from addon.dialects.gemini.request_encode import encode_request
from addon.dialects.openai_chat import request as chat
from addon.dialects.openai_chat import request_encode as chat_encode
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
from addon.plan.wire_request import RouteKey, build_wire
from addon.transforms.restore import restore_request
from addon.transforms.tools import leave_out_tools
from tests.realdata import FIXTURES, read

GEMINI_CLI = (
    sorted(p.name for p in (FIXTURES / "clients").glob("gemini-cli-0.61.0-*.request.json"))
    if (FIXTURES / "clients").is_dir()
    else []
)
KEY = "AIza-unit-SECRET-key"
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}}}


def encode(req: Request) -> tuple[dict[str, Any], Counter[str]]:
    """Encoded as the bridge does for a Gemini upstream: after ``leave_out_tools`` and
    ``restore_request`` (no store, the route's default ``signature_fallback``), which marks
    unsigned steps."""
    notes: Counter[str] = Counter()
    req = leave_out_tools(req, DIALECTS["gemini"].runs, "the gemini upstream", notes)
    origin = DIALECTS[req.origin].reasoning if req.origin in DIALECTS else "none"
    req = restore_request(
        req,
        None,
        DIALECTS["gemini"].reasoning,
        notes,
        signature_fallback="sentinel",
        origin=origin,
    )
    return encode_request(req, notes), notes


def decode(body: dict[str, Any]) -> tuple[Request, Counter[str]]:
    notes: Counter[str] = Counter()
    return decode_request(copy.deepcopy(body), notes), notes


def recorded(name: str) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads(read(f"clients/{name}"))
    return rec


def check_gemini(body: dict[str, Any]) -> None:
    """What Gemini refuses: a first turn that is not the user's, roles other than user/model,
    two turns of one role in a row, a call not answered (by name, in order) in the next turn,
    empty parts, fields of other dialects."""
    contents = body["contents"]
    assert contents and contents[0]["role"] == "user"
    for before, after in itertools.pairwise(contents):
        assert before["role"] != after["role"], "roles must alternate"
    for i, turn in enumerate(contents):
        assert turn["role"] in ("user", "model") and turn["parts"]
        for part in turn["parts"]:
            assert set(part) <= {
                "text", "thought", "thoughtSignature", "inlineData", "fileData",
                "functionCall", "functionResponse",
            }, part  # fmt: skip
            assert part.get("text", "x") != "" or "thoughtSignature" in part
        calls = [p["functionCall"] for p in turn["parts"] if "functionCall" in p]
        if not calls:
            continue
        answers = contents[i + 1]["parts"] if i + 1 < len(contents) else []
        replies = [p["functionResponse"] for p in answers if "functionResponse" in p]
        assert [r["name"] for r in replies] == [c["name"] for c in calls]
        assert [r.get("id") for r in replies] == [c.get("id") for c in calls]


def check_chat(body: dict[str, Any]) -> None:
    """Tool messages follow the assistant message whose calls they answer, ids matching."""
    pending: list[str] = []
    for m in body["messages"]:
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, (m["tool_call_id"], pending)
            pending.remove(m["tool_call_id"])
            continue
        assert not pending, f"calls without results: {pending}"
        for call in m.get("tool_calls") or []:
            json.loads(call["function"]["arguments"])
            pending.append(call["id"])
    assert not pending


# --------------------------------------------------------------------------- other dialects → Gemini

CURSOR_BODY: dict[str, Any] = {
    "model": "gemini-3-pro-preview",
    "stream": True,
    "messages": [
        {"role": "system", "content": "You are Cursor's agent."},
        {"role": "user", "content": "What do a.txt and b.txt say?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"path": "a.txt"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"path": "b.txt"}'},
                },
                {"id": "call_l", "type": "function", "function": {"name": "List", "arguments": ""}},
            ],
        },
        # answered out of order, as some clients do
        {"role": "tool", "tool_call_id": "call_l", "content": "a.txt\nb.txt"},
        {"role": "tool", "tool_call_id": "call_b", "content": "B"},
        {"role": "tool", "tool_call_id": "call_a", "content": "A"},
        {"role": "user", "content": "And now?"},
        {
            "role": "assistant",
            "content": "Reading again.",
            "tool_calls": [
                {
                    "id": "call_c",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"path": "c.txt"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_c", "content": "C"},
    ],
    "tools": [
        {"type": "function", "function": {"name": "Read", "parameters": SCHEMA}},
        {
            "type": "function",
            "function": {
                "name": "List",
                "description": "List files",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ],
}


def cursor_request() -> Request:
    return chat.decode_request(copy.deepcopy(CURSOR_BODY), Counter())


def test_cursor_request_with_parallel_calls_becomes_alternating_gemini_turns() -> None:
    body, notes = encode(cursor_request())
    check_gemini(body)
    assert body["systemInstruction"] == {"parts": [{"text": "You are Cursor's agent."}]}
    contents = body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model", "user"]
    calls = [p["functionCall"] for p in contents[1]["parts"]]
    assert calls == [
        {"name": "Read", "args": {"path": "a.txt"}, "id": "call_a"},
        {"name": "Read", "args": {"path": "b.txt"}, "id": "call_b"},
        {"name": "List", "args": {}, "id": "call_l"},
    ]
    # every result in one user turn, in call order, the next user text after them
    results = contents[2]["parts"]
    assert [p["functionResponse"] for p in results[:3]] == [
        {"name": "Read", "id": "call_a", "response": {"output": "A"}},
        {"name": "Read", "id": "call_b", "response": {"output": "B"}},
        {"name": "List", "id": "call_l", "response": {"output": "a.txt\nb.txt"}},
    ]
    assert results[3] == {"text": "And now?"}
    assert contents[3]["parts"][0] == {"text": "Reading again."}
    # Gemini 3 checks the first call of each step for a signature: an OpenAI client has none
    assert contents[1]["parts"][0]["thoughtSignature"] == SKIP_SIGNATURE
    assert "thoughtSignature" not in contents[1]["parts"][1]
    assert contents[3]["parts"][1]["thoughtSignature"] == SKIP_SIGNATURE
    assert notes["function calls without a thought signature marked to skip the check"] == 2
    # List has no parameters: Gemini refuses an OBJECT without properties, so none are sent
    declarations = body["tools"][0]["functionDeclarations"]
    assert declarations == [
        {"name": "Read", "parameters": SCHEMA},
        {"name": "List", "description": "List files"},
    ]
    assert body["generationConfig"] == {"candidateCount": 1}
    assert "stream" not in body and "model" not in body  # both go in the path


def test_gemini_2_gets_no_made_up_signature() -> None:
    req = dataclasses.replace(cursor_request(), model="gemini-2.5-flash")
    body, _ = encode(req)
    assert "thoughtSignature" not in json.dumps(body)


CLAUDE_BODY: dict[str, Any] = {
    "model": "gemini-3-pro-preview",
    "max_tokens": 4096,
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
    ],
    "thinking": {"type": "enabled", "budget_tokens": 2048},
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Look at the picture."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should read it.", "signature": "c2lnLTE="},
                {"type": "text", "text": "Reading.", "citations": None},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "p.png"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "an image"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": "iVBORw0KGgo=",
                            },
                        },
                    ],
                },
                {"type": "text", "text": "What is on it?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "From another model.", "signature": ""},
                {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"cmd": "false"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "exit 1",
                    "is_error": True,
                },
            ],
        },
    ],
    "tools": [
        {"name": "Read", "input_schema": SCHEMA},
        {
            "name": "Bash",
            "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
        {"type": "web_search_20250305", "name": "web_search"},
    ],
    "tool_choice": {"type": "auto"},
}


def test_claude_code_request_with_thinking_and_tool_results() -> None:
    req = anthropic.decode_request(copy.deepcopy(CLAUDE_BODY), Counter())
    body, notes = encode(req)
    check_gemini(body)
    assert body["systemInstruction"] == {"parts": [{"text": "You are Claude Code."}]}
    contents = body["contents"]
    first_model = contents[1]["parts"]
    # the signature of the thinking right before a call goes onto that call
    assert first_model == [
        {"text": "Reading."},
        {
            "functionCall": {"name": "Read", "args": {"path": "p.png"}, "id": "toolu_1"},
            "thoughtSignature": "c2lnLTE=",
        },
    ]
    # the result's image is a part beside the response, in the same user turn
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "Read", "id": "toolu_1", "response": {"output": "an image"}}},
        {"text": "What is on it?"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
    ]
    # unsigned thinking is not sent; its step still needs a signature for Gemini 3
    assert contents[3]["parts"] == [
        {
            "functionCall": {"name": "Bash", "args": {"cmd": "false"}, "id": "toolu_2"},
            "thoughtSignature": SKIP_SIGNATURE,
        }
    ]
    assert contents[4]["parts"] == [
        {"functionResponse": {"name": "Bash", "id": "toolu_2", "response": {"error": "exit 1"}}}
    ]
    assert notes["unsigned reasoning dropped (Gemini takes only its own)"] == 1
    assert notes["tools the gemini upstream cannot run left out: web_search (web_search_20250305)"]
    assert [d["name"] for d in body["tools"][0]["functionDeclarations"]] == ["Read", "Bash"]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}
    assert body["generationConfig"] == {
        "maxOutputTokens": 4096,
        "candidateCount": 1,
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 2048},
    }
    assert "cache_control" not in json.dumps(body) and "citations" not in json.dumps(body)


def test_signed_thinking_before_text_is_a_signed_thought_part() -> None:
    req = Request(
        "anthropic",
        "gemini-3-pro-preview",
        (
            Message("user", (Text("hi"),)),
            Message("assistant", (Thinking("hmm", signature="sig"), Text("hello"))),
            Message("user", (Text("again"),)),
        ),
    )
    body, _ = encode(req)
    assert body["contents"][1]["parts"] == [
        {"text": "hmm", "thought": True, "thoughtSignature": "sig"},
        {"text": "hello"},
    ]


def test_a_signature_kept_on_a_call_by_another_codec_is_sent() -> None:
    calls = (
        ToolCall("c1", "f", "{}", extra={"thoughtSignature": "own"}),
        ToolCall("c2", "f", "{}", extra={"extra_content": {"google": {"thought_signature": "oa"}}}),
    )
    req = Request(
        "openai_chat",
        "gemini-3-flash",
        (
            Message("user", (Text("go"),)),
            Message("assistant", (calls[0],)),
            Message("tool", (ToolResult("c1", "1"),)),
            Message("assistant", (calls[1],)),
            Message("tool", (ToolResult("c2", "2"),)),
        ),
    )
    body, _ = encode(req)
    assert body["contents"][1]["parts"][0]["thoughtSignature"] == "own"
    assert body["contents"][3]["parts"][0]["thoughtSignature"] == "oa"
    assert "extra_content" not in json.dumps(body)


def test_mid_conversation_system_messages_stay_in_place_as_user_text() -> None:
    req = Request(
        "anthropic",
        "gemini-3-pro-preview",
        (
            Message("system", (Text("Be brief."),)),
            Message("user", (Text("one"),)),
            Message("assistant", (Text("1"),)),
            Message("system", (Text("The date changed."),)),
            Message("user", (Text("two"),)),
        ),
    )
    body, notes = encode(req)
    check_gemini(body)
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"][2] == {
        "role": "user",
        "parts": [{"text": "<system>\nThe date changed.\n</system>"}, {"text": "two"}],
    }
    assert notes["system message after the first turn sent as user text"] == 1


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        (ToolChoice("auto"), {"mode": "AUTO"}),
        (ToolChoice("none"), {"mode": "NONE"}),
        (ToolChoice("required"), {"mode": "ANY"}),
        (ToolChoice("tool", "Read"), {"mode": "ANY", "allowedFunctionNames": ["Read"]}),
    ],
)
def test_tool_choice_modes(choice: ToolChoice, config: dict[str, Any]) -> None:
    req = Request(
        "openai_chat",
        "gemini-3-flash",
        (Message("user", (Text("hi"),)),),
        tools=(Tool("Read", None, SCHEMA),),
        tool_choice=choice,
    )
    body, _ = encode(req)
    assert body["toolConfig"] == {"functionCallingConfig": config}
    req = Request(req.origin, req.model, req.messages, tool_choice=choice)
    body, notes = encode(req)
    assert "toolConfig" not in body and "tools" not in body
    assert notes["tool_choice dropped (no function tools for Gemini)"] == 1


def test_generation_config_from_params() -> None:
    params = Params(
        max_tokens=100, temperature=0.2, top_p=0.9, top_k=40, stop=tuple("abcdef"), user="u1"
    )
    req = Request("openai_chat", "gemini-3-flash", (Message("user", (Text("hi"),)),), params=params)
    body, notes = encode(req)
    assert body["generationConfig"] == {
        "maxOutputTokens": 100,
        "temperature": 0.2,
        "topP": 0.9,
        "topK": 40,
        "stopSequences": ["a", "b", "c", "d", "e"],
        "candidateCount": 1,
    }
    assert notes["stop sequences cut to 5 (Gemini's limit)"] == 1
    assert notes["user dropped (Gemini has no end-user field)"] == 1


@pytest.mark.parametrize(
    ("model", "thinking", "config"),
    [
        ("gemini-3-pro", ThinkingConfig(True, 4096), {"includeThoughts": True, "thinkingBudget": 4096}),
        ("gemini-3-pro", ThinkingConfig(True, effort="low"), {"includeThoughts": True, "thinkingLevel": "LOW"}),
        ("gemini-3-pro", ThinkingConfig(True, effort="medium"), {"includeThoughts": True, "thinkingLevel": "HIGH"}),
        ("gemini-3-pro", ThinkingConfig(True, effort="xhigh"), {"includeThoughts": True, "thinkingLevel": "HIGH"}),
        ("gemini-2.5-flash", ThinkingConfig(True, effort="low"), {"includeThoughts": True, "thinkingBudget": 1024}),
        ("models/gemini-2.5-pro", ThinkingConfig(True, effort="high"), {"includeThoughts": True, "thinkingBudget": 24576}),
        ("gemini-3-pro", ThinkingConfig(True, adaptive=True), {"includeThoughts": True}),
        ("gemini-3-pro", ThinkingConfig(False), None),
        ("gemini-3-pro", None, None),
    ],
)  # fmt: skip
def test_thinking_budget_and_level(
    model: str, thinking: ThinkingConfig | None, config: dict[str, Any] | None
) -> None:
    req = Request("anthropic", model, (Message("user", (Text("hi"),)),), thinking=thinking)
    body, _ = encode(req)
    assert body["generationConfig"].get("thinkingConfig") == config


@pytest.mark.parametrize(
    ("call", "args", "noted"),
    [
        (ToolCall("c", "f", '{"a": [1, 2.5]}'), {"a": [1, 2.5]}, False),
        (ToolCall("c", "f", ""), {}, False),
        (ToolCall("c", "f", '{"a": 1'), {"_raw_arguments": '{"a": 1'}, True),
        (ToolCall("c", "f", "[1]"), {"_raw_arguments": "[1]"}, True),
        (ToolCall("c", "f", "*** Begin Patch", custom=True), {"input": "*** Begin Patch"}, False),
    ],
)
def test_arguments_become_an_object(call: ToolCall, args: dict[str, Any], noted: bool) -> None:
    req = Request(
        "openai_chat",
        "gemini-3-flash",
        (
            Message("user", (Text("go"),)),
            Message("assistant", (call,)),
            Message("tool", (ToolResult("c", "ok"),)),
        ),
    )
    body, notes = encode(req)
    assert body["contents"][1]["parts"][0]["functionCall"]["args"] == args
    assert bool(notes["unparsable tool arguments kept as _raw_arguments"]) is noted


def test_a_result_takes_its_own_name_or_its_calls_or_is_refused() -> None:
    named = Request(
        "openai_chat",
        "m",
        (Message("user", (Text("go"),)), Message("tool", (ToolResult("x", "1", name="Read"),))),
    )
    body, _ = encode(named)
    assert body["contents"][0]["parts"] == [
        {"functionResponse": {"name": "Read", "id": "x", "response": {"output": "1"}}},
        {"text": "go"},
    ]
    orphan = dataclasses.replace(
        named, messages=(Message("user", (Text("go"),)), Message("tool", (ToolResult("x", "1"),)))
    )
    with pytest.raises(ClientError, match="'x'"):
        encode(orphan)


def test_tool_result_parts_are_flattened_to_text() -> None:
    content = (Text("line 1"), Text("line 2"), Opaque("anthropic", {"type": "document"}))
    req = Request(
        "anthropic",
        "gemini-2.5-pro",
        (
            Message("user", (Text("go"),)),
            Message("assistant", (ToolCall("c", "f", "{}"),)),
            Message("user", (ToolResult("c", content),)),
        ),
    )
    body, _ = encode(req)
    response = body["contents"][2]["parts"][0]["functionResponse"]["response"]
    assert response == {"output": 'line 1\nline 2\n{"type": "document"}'}


def test_images_inline_and_by_url() -> None:
    images = (
        Image("data:image/jpeg;base64,/9j/AA=="),
        Image("https://example.com/cat.png?size=2", detail="high"),
        Image("https://example.com/cat"),
        Image("data:image/svg+xml,%3Csvg%2F%3E"),
    )
    req = Request("openai_chat", "m", (Message("user", images),))
    body, _ = encode(req)
    assert body["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/AA=="}},
        {"fileData": {"mimeType": "image/png", "fileUri": "https://example.com/cat.png?size=2"}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat"}},
        {"inlineData": {"mimeType": "image/svg+xml", "data": "PHN2Zy8+"}},
    ]


def test_empty_texts_and_foreign_parts() -> None:
    req = Request(
        "anthropic",
        "m",
        (
            Message("user", (Text(""), Text("hi", extra={"cache_control": {"type": "x"}}))),
            Message("assistant", (Text(""),)),
            Message("user", (Opaque("anthropic", {"type": "document", "title": "t"}),)),
        ),
    )
    body, notes = encode(req)
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "hi"}, {"text": '{"type": "document", "title": "t"}'}]}
    ]
    assert notes["empty text parts dropped (Gemini refuses them)"] == 2
    assert notes["message left empty"] == 1
    assert notes["anthropic part sent as JSON text"] == 1


def test_gemini_server_tools_are_kept_and_others_left_out() -> None:
    tools = (
        OpaqueTool(NAME, "googleSearch", "googleSearch", {"googleSearch": {}}),
        Tool("Read", "Read a file", SCHEMA),
        OpaqueTool("openai_responses", "web_search", "web_search", {"type": "web_search"}),
    )
    req = Request("openai_responses", "m", (Message("user", (Text("hi"),)),), tools=tools)
    body, notes = encode(req)
    assert body["tools"] == [
        {"googleSearch": {}},
        {
            "functionDeclarations": [
                {"name": "Read", "description": "Read a file", "parameters": SCHEMA}
            ]
        },
    ]
    assert notes["tools the gemini upstream cannot run left out: web_search"] == 1
    with pytest.raises(ClientError, match="web_search"):  # the encoder writes only its own
        encode_request(req, Counter())


# --------------------------------------------------------------------------- Gemini clients


def test_decode_a_minimal_snake_case_request() -> None:
    body = {
        "system_instruction": {"parts": [{"text": "Be terse."}]},
        "contents": [{"parts": [{"inline_data": {"mime_type": "image/png", "data": "AAAA"}},
                                {"text": "what is it?"}]}],
        "generation_config": {"max_output_tokens": 50, "response_mime_type": "text/plain"},
        "tools": [{"function_declarations": [{"name": "f", "parameters": {
            "type": "OBJECT", "properties": {"q": {"type": "STRING", "enum": ["A", "B"]}}}}]}],
        "tool_config": {"function_calling_config": {"mode": "ANY",
                                                     "allowed_function_names": ["f"]}},
    }  # fmt: skip
    req, _ = decode(body)
    assert req.origin == NAME and req.model == "" and not req.stream
    assert req.messages == (
        Message("system", (Text("Be terse."),), string_content=True),
        Message("user", (Image("data:image/png;base64,AAAA"), Text("what is it?"))),
    )
    assert req.params == Params(max_tokens=50)
    assert req.extra["generationConfig"] == {"response_mime_type": "text/plain"}
    assert req.tool_choice == ToolChoice("tool", "f")
    (tool,) = req.tools or ()
    assert isinstance(tool, Tool)
    # Gemini's OpenAPI types as JSON Schema for other dialects; enum values untouched
    assert tool.parameters == {
        "type": "object",
        "properties": {"q": {"type": "string", "enum": ["A", "B"]}},
    }
    # back to Gemini (camelCase, which the API takes as well): the schema as it was sent
    again, _ = encode(req)
    assert again["tools"] == [{"functionDeclarations": body["tools"][0]["function_declarations"]}]
    assert again["systemInstruction"] == body["system_instruction"]
    assert again["contents"] == [
        {"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
                                   {"text": "what is it?"}]}
    ]  # fmt: skip
    assert again["generationConfig"] == {"maxOutputTokens": 50, "response_mime_type": "text/plain"}
    assert again["toolConfig"] == body["tool_config"]


def test_calls_without_ids_get_stable_ids_and_results_pair_up_by_name() -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [
                {"functionCall": {"name": "read", "args": {"p": "a"}}, "thoughtSignature": "S1"},
                {"functionCall": {"name": "glob", "args": {}}},
                {"functionCall": {"name": "read", "args": {"p": "b"}}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "glob", "response": {"output": "x"}}},
                {"functionResponse": {"name": "read", "response": {"output": "A"}}},
                {"functionResponse": {"name": "read", "response": {"error": "no b"}}},
            ]},
        ]
    }  # fmt: skip
    req, _ = decode(body)
    calls = [p for p in req.messages[1].parts if isinstance(p, ToolCall)]
    results = [p for p in req.messages[2].parts if isinstance(p, ToolResult)]
    assert [c.id for c in calls] == ["call_read_1_0", "call_glob_1_1", "call_read_1_2"]
    assert [(r.tool_call_id, r.content, r.is_error) for r in results] == [
        ("call_glob_1_1", "x", False),
        ("call_read_1_0", "A", False),
        ("call_read_1_2", "no b", True),
    ]
    assert decode(body)[0] == req  # the same history gives the same ids
    # the signature is not on the unified call (other encoders would copy it) …
    assert calls[0].extra == {}
    # … made-up ids never go back to Gemini, the signature does
    again, _ = encode(req)
    assert again["contents"] == body["contents"]
    # and an OpenAI upstream gets pairs it accepts, without Gemini's fields
    chat_body = chat_encode.encode_request(req, Counter())
    check_chat(chat_body)
    assert "thoughtSignature" not in json.dumps(chat_body)


def test_function_responses_of_other_shapes() -> None:
    body = {
        "contents": [
            {"role": "model", "parts": [{"functionCall": {"name": "f", "id": "1"}},
                                        {"functionCall": {"name": "g", "id": "2"}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "f", "id": "1",
                                      "response": {"output": "x", "exit": 1}}},
                {"functionResponse": {"name": "g", "id": "2",
                                      "response": {"error": {"code": 5}}}},
            ]},
        ]
    }  # fmt: skip
    req, _ = decode(body)
    first, second = req.messages[1].parts
    assert isinstance(first, ToolResult) and isinstance(second, ToolResult)
    assert (first.content, first.is_error) == ('{"output": "x", "exit": 1}', False)
    assert (second.content, second.is_error) == ('{"error": {"code": 5}}', True)
    assert first.name == "f"
    again, _ = encode(req)
    assert again["contents"][1] == body["contents"][1]


def test_thought_parts_and_their_signatures() -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [
                {"text": "thinking…", "thought": True, "thoughtSignature": "T"},
                {"text": "hello"},
                {"text": "", "thoughtSignature": "END"},
            ]},
            {"role": "user", "parts": [{"text": "hello"}]},
        ]
    }  # fmt: skip
    req, _ = decode(body)
    assert req.messages[1].parts == (Thinking("thinking…", signature="T"), Text("hello"), Text(""))
    again, _ = encode(req)
    assert again["contents"] == body["contents"]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"contents": "hi"}, UnsupportedShape),
        ({"messages": []}, UnsupportedShape),
        ({"contents": ["hi"]}, UnsupportedShape),
        ({"contents": [{"role": "system", "parts": []}]}, UnsupportedShape),
        ({"contents": [{"role": "user", "parts": [{"text": 1}]}]}, UnsupportedShape),
        ({"contents": [{"role": "user", "parts": [{"functionCall": {"name": "f"}}]}]}, ClientError),
        ({"contents": [{"role": "model", "parts": [
            {"functionResponse": {"name": "f", "response": {}}}]}]}, ClientError),
        ({"contents": [], "tools": [{"functionDeclarations": [{"description": "x"}]}]}, ClientError),
    ],
)  # fmt: skip
def test_what_is_not_a_gemini_request(body: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        decode(body)


@pytest.mark.parametrize(
    ("config", "thinking"),
    [
        ({"includeThoughts": True, "thinkingLevel": "HIGH"}, ThinkingConfig(True, effort="high")),
        ({"thinkingLevel": "low"}, ThinkingConfig(True, effort="low")),
        ({"includeThoughts": True, "thinkingBudget": 8192}, ThinkingConfig(True, 8192)),
        ({"thinkingBudget": -1}, ThinkingConfig(True)),
        ({"thinkingBudget": 0}, None),
    ],
)
def test_decode_thinking_config(config: dict[str, Any], thinking: ThinkingConfig | None) -> None:
    body = {"contents": [], "generationConfig": {"thinkingConfig": config}}
    req, _ = decode(body)
    assert req.thinking == thinking
    again, _ = encode(req)
    assert again["generationConfig"] == body["generationConfig"]


def test_a_changed_thinking_or_tool_choice_is_written_anew() -> None:
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": [{"name": "f"}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}, "retrievalConfig": {"x": 1}},
        "generationConfig": {"thinkingConfig": {"includeThoughts": True, "thinkingLevel": "LOW"}},
    }
    req, _ = decode(body)
    req = dataclasses.replace(
        req, thinking=ThinkingConfig(True, 1000), tool_choice=ToolChoice("none")
    )
    again, _ = encode(req)
    assert again["generationConfig"]["thinkingConfig"] == {
        "includeThoughts": True,
        "thinkingBudget": 1000,
    }
    assert again["toolConfig"] == {
        "retrievalConfig": {"x": 1},
        "functionCallingConfig": {"mode": "NONE"},
    }
    off, _ = encode(dataclasses.replace(req, thinking=None))
    assert "generationConfig" not in off


@pytest.mark.skipif(not GEMINI_CLI, reason=f"recordings not available ({FIXTURES})")
@pytest.mark.parametrize("name", GEMINI_CLI)
def test_gemini_cli_recordings(name: str) -> None:
    rec = recorded(name)
    body = rec["body"]
    path, _, query = rec["path"].partition("?")
    req, notes = decode(body)
    req = dataclasses.replace(req, **from_path(path, ()))
    assert req.origin == NAME and req.model.startswith("gemini-3.")
    assert req.stream is path.endswith(":streamGenerateContent")
    assert req.messages[0].role == "system"
    assert req.thinking == ThinkingConfig(True, effort="high")
    assert req.params.temperature == 1 and req.params.top_k == 64
    calls = [p for m in req.messages for p in m.parts if isinstance(p, ToolCall)]
    results = [p for m in req.messages for p in m.parts if isinstance(p, ToolResult)]
    assert [c.id for c in calls] == [r.tool_call_id for r in results]
    assert all(c.extra == {} for c in calls)
    assert not notes
    # same dialect: the body as it came
    again, again_notes = encode(req)
    assert again == body
    assert not again_notes
    if calls:
        assert (
            again["contents"][1]["parts"][0]["thoughtSignature"]
            == (body["contents"][1]["parts"][0]["thoughtSignature"])
        )
    # an OpenAI upstream: tool messages right after the calls they answer, nothing of Gemini's
    chat_body = chat_encode.encode_request(req, Counter())
    check_chat(chat_body)
    assert chat_body["messages"][0] == {
        "role": "system",
        "content": body["systemInstruction"]["parts"][0]["text"],
    }
    dumped = json.dumps(chat_body)
    assert "thoughtSignature" not in dumped and SIDE not in dumped
    if rec["path"].endswith("alt=sse"):
        assert query == "alt=sse"


# --------------------------------------------------------------------------- paths and placement


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("/v1beta/models/gemini-3-pro:streamGenerateContent", {"model": "gemini-3-pro", "stream": True}),
        ("/v1beta/models/gemini-3-pro:generateContent", {"model": "gemini-3-pro", "stream": False}),
        ("/proxy/v1/models/models/gemini-x:generateContent", {"model": "gemini-x", "stream": False}),
        ("/v1beta/models/gemini%2Dpro%3Alatest:generateContent", {"model": "gemini-pro:latest", "stream": False}),
        ("/v1beta/models/openrouter%2Fgoogle%2Fgemini:streamGenerateContent",
         {"model": "openrouter/google/gemini", "stream": True}),
        ("/v1beta/tunedModels/my-tune:generateContent", {"model": "tunedModels/my-tune", "stream": False}),
        ("/v1/projects/p/locations/us/publishers/google/models/gemini-2.5-pro:streamGenerateContent",
         {"model": "gemini-2.5-pro", "stream": True}),
        ("/v1internal:streamGenerateContent", {"stream": True}),
        ("/v1internal:generateContent", {"stream": False}),
        ("/v1beta/models/gemini-3-pro:countTokens", {"model": "gemini-3-pro"}),
        ("/gemini", {}),
    ],
)  # fmt: skip
def test_from_path(path: str, fields: dict[str, Any]) -> None:
    said = {"stream_explicit": True} if "stream" in fields else {}  # the path says it
    assert from_path(path, (("alt", "sse"),)) == {**fields, **said}


@pytest.mark.parametrize(
    ("path", "base"),
    [
        ("/v1beta/models/m:streamGenerateContent", ""),
        ("/proxy/v1beta/models/m:generateContent", "/proxy"),
        ("/a/v1/b/v1beta/models/m:generateContent", "/a/v1/b"),
        ("/v1internal:generateContent", ""),
        ("/gemini", None),
    ],
)
def test_path_base(path: str, base: str | None) -> None:
    assert path_base(path) == base


def target(path: str, **kw: Any) -> Target:
    kw.setdefault("client_suffix", "/chat/completions")
    kw.setdefault("same_dialect", False)
    return Target(path, kw.pop("query", ()), **kw)


REQ = Request("openai_chat", "models/gemini-3-pro", (Message("user", (Text("hi"),)),))
STREAM = dataclasses.replace(REQ, stream=True)


@pytest.mark.parametrize(
    ("req", "t", "placed"),
    [
        (STREAM, target("/v1/chat/completions"),
         ("/v1beta/models/gemini-3-pro:streamGenerateContent", (("alt", "sse"),))),
        (REQ, target("/v1/chat/completions", query=(("x", "1"),)),
         ("/v1beta/models/gemini-3-pro:generateContent", ())),
        (REQ, target("/proxy/v1/messages", client_suffix="/messages"),
         ("/proxy/v1beta/models/gemini-3-pro:generateContent", ())),
        (REQ, target("/proxy/anthropic", client_suffix="/messages"),
         ("/proxy/anthropic/v1beta/models/gemini-3-pro:generateContent", ())),
        (dataclasses.replace(REQ, model="a:b c"), target("/chat/completions"),
         ("/v1beta/models/a%3Ab%20c:generateContent", ())),
        # a route's upstream_path wins; alt=sse is added to a streamed request unless it says alt
        (STREAM, target("/v1/chat/completions", upstream_path="/gw/models/m:streamGenerateContent"),
         ("/gw/models/m:streamGenerateContent", (("alt", "sse"),))),
        (STREAM, target("/v1/chat/completions", upstream_path="/gw:streamGenerateContent?alt=json"),
         ("/gw:streamGenerateContent", (("alt", "json"),))),
        (STREAM, target("/v1/chat/completions", upstream_path="/gw/models/m:generateContent"),
         ("/gw/models/m:generateContent", ())),
        (REQ, target("/v1/chat/completions", upstream_path="/gw?k=1"), ("/gw", (("k", "1"),))),
        # same dialect: the client's path and query; a route path without a query keeps the
        # client's; one with a query gets the client's alt and key when it lacks them
        (dataclasses.replace(STREAM, model="m"),
         target("/x/v1beta/models/m:streamGenerateContent", same_dialect=True,
                query=(("alt", "sse"), ("key", KEY))),
         ("/x/v1beta/models/m:streamGenerateContent", (("alt", "sse"), ("key", KEY)))),
        # …naming the model the request is for (a route's model_map chose another name)
        (STREAM, target("/x/v1beta/models/m:streamGenerateContent", same_dialect=True,
                        query=(("alt", "sse"),)),
         ("/x/v1beta/models/gemini-3-pro:streamGenerateContent", (("alt", "sse"),))),
        (STREAM, target("/v1/projects/p/locations/l/publishers/google/models/m:generateContent",
                        same_dialect=True),
         ("/v1/projects/p/locations/l/publishers/google/models/gemini-3-pro:generateContent",
          ())),
        (STREAM, target("/v1beta/models/m:streamGenerateContent", same_dialect=True,
                        query=(("alt", "sse"),), upstream_path="/gw"),
         ("/gw", (("alt", "sse"),))),
        (STREAM, target("/v1beta/models/m:streamGenerateContent", same_dialect=True,
                        query=(("alt", "sse"), ("key", KEY)), upstream_path="/gw?alt=json&z=1"),
         ("/gw", (("alt", "json"), ("z", "1"), ("key", KEY)))),
    ],
)  # fmt: skip
def test_place_public(req: Request, t: Target, placed: tuple[str, Any]) -> None:
    assert place_public(req, t) == placed


def test_place_code_assist() -> None:
    assert place_code_assist(STREAM, target("/v1/chat/completions")) == (
        "/v1internal:streamGenerateContent",
        (("alt", "sse"),),
    )
    assert place_code_assist(REQ, target("/p/v1/messages", client_suffix="/messages")) == (
        "/p/v1internal:generateContent",
        (),
    )
    assert place_code_assist(REQ, target("/v1/chat/completions", upstream_path="/ca")) == (
        "/ca",
        (),
    )


def test_code_assist_envelope_for_other_dialects() -> None:
    t = target("/v1/messages", project="proj-1")
    env = code_assist_envelope({"contents": []}, REQ, t)
    assert env["model"] == "gemini-3-pro" and env["project"] == "proj-1"
    assert env["request"] == {"contents": []}
    assert env["user_prompt_id"].startswith("bridge-")
    # stable across turns: derived from the first user message
    longer = dataclasses.replace(
        REQ, messages=(*REQ.messages, Message("assistant", (Text("x"),)), *REQ.messages)
    )
    assert code_assist_envelope({}, longer, t)["user_prompt_id"] == env["user_prompt_id"]
    assert "project" not in code_assist_envelope({}, REQ, target("/v1/messages"))


def test_code_assist_client_keeps_its_envelope() -> None:
    body = {
        "model": "gemini-2.5-pro",
        "project": "their-project",
        "user_prompt_id": "abc########1",
        "request": {
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "session_id": "s-1",
            "generationConfig": {"temperature": 0},
        },
    }
    req, _ = decode(body)
    assert req.origin == CODE_ASSIST and req.model == "gemini-2.5-pro"
    assert req.params.temperature == 0
    inner, _ = encode(req)
    assert inner == body["request"]
    t = target("/v1internal:generateContent", same_dialect=True)
    assert code_assist_envelope(inner, req, t) == body
    routed = code_assist_envelope(inner, req, dataclasses.replace(t, project="route-project"))
    assert routed["project"] == "route-project" and routed["user_prompt_id"] == "abc########1"
    # the same client to the public API: the request without the envelope
    assert place_public(req, target("/v1internal:generateContent", client_base="")) == (
        "/v1beta/models/gemini-2.5-pro:generateContent",
        (),
    )


# --------------------------------------------------------------------------- the wire


def wire(
    req: Request, client: str, upstream: str, path: str, headers: dict[str, str], **kw: Any
) -> tuple[WireRequest, Counter[str]]:
    notes: Counter[str] = Counter()
    w = build_wire(
        req,
        DIALECTS[client],
        DIALECTS[upstream],
        path=path,
        query=kw.pop("query", ()),
        headers=headers,
        notes=notes,
        **kw,
    )
    return w, notes


def test_claude_codes_key_becomes_x_goog_api_key() -> None:
    w, notes = wire(
        STREAM, "anthropic", "gemini", "/v1/messages",
        {"x-api-key": KEY, "anthropic-version": "2023-06-01"}, query=(("beta", "true"),),
    )  # fmt: skip
    assert (w.path, w.query) == (
        "/v1beta/models/gemini-3-pro:streamGenerateContent",
        (("alt", "sse"),),
    )
    assert dict(w.set_headers) == {"x-goog-api-key": KEY}
    assert set(w.drop_headers) == {"x-api-key", "anthropic-version"}
    assert notes["API key moved from x-api-key to x-goog-api-key"] == 1
    assert "contents" in w.body


def test_code_assist_upstream_takes_a_bearer_token_and_the_routes_project() -> None:
    w, _ = wire(
        REQ, "openai_chat", "gemini_code_assist", "/v1/chat/completions",
        {"authorization": f"Bearer {KEY}"}, project="p-1",
    )  # fmt: skip
    assert (w.path, w.query) == ("/v1internal:generateContent", ())
    assert w.set_headers == (("authorization", f"Bearer {KEY}"),)
    assert w.drop_headers == ()
    assert w.body["project"] == "p-1" and w.body["model"] == "gemini-3-pro"
    assert w.body["request"]["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


GEMINI_PATH = "/v1beta/models/gemini-3-flash:streamGenerateContent"
GEMINI_REQ = Request(NAME, "gemini-3-flash", (Message("user", (Text("hi"),)),), stream=True)


@pytest.mark.parametrize(
    ("upstream", "path"),
    [("openai_chat", "/v1/chat/completions"), ("anthropic", "/v1/messages"),
     ("openai_responses", "/v1/responses")],
)  # fmt: skip
def test_a_gemini_clients_key_in_the_query_moves_to_the_upstreams_header(
    upstream: str, path: str
) -> None:
    w, notes = wire(
        GEMINI_REQ, "gemini", upstream, f"/proxy{GEMINI_PATH}",
        {"x-goog-api-client": "sdk"}, query=(("alt", "sse"), ("key", KEY)),
    )  # fmt: skip
    assert (w.path, w.query) == (f"/proxy{path}", ())
    header = "x-api-key" if upstream == "anthropic" else "authorization"
    value = KEY if upstream == "anthropic" else f"Bearer {KEY}"
    assert dict(w.set_headers)[header] == value
    assert "x-goog-api-client" in w.drop_headers
    assert notes[f"API key moved from query parameter 'key' to {header}"] == 1
    assert KEY not in repr(w) and KEY not in json.dumps(dict(notes))


def test_a_gemini_client_header_key_comes_before_its_query_key() -> None:
    w, _ = wire(
        GEMINI_REQ, "gemini", "openai_chat", GEMINI_PATH,
        {"x-goog-api-key": "header-key"}, query=(("key", "query-key"),),
    )  # fmt: skip
    assert dict(w.set_headers) == {"authorization": "Bearer header-key"}
    assert w.drop_headers == ("x-goog-api-key",)


def test_gemini_to_gemini_moves_the_query_key_to_its_header_unless_the_route_has_one() -> None:
    query = (("alt", "sse"), ("key", KEY))
    w, notes = wire(GEMINI_REQ, "gemini", "gemini", GEMINI_PATH, {}, query=query)
    # Gemini reads x-goog-api-key as it reads ?key=: no key in the URL (issue 40, point 6)
    assert (w.path, w.query) == (GEMINI_PATH, (("alt", "sse"),))
    assert dict(w.set_headers) == {"x-goog-api-key": KEY} and w.drop_headers == ()
    assert notes["API key moved from query parameter 'key' to x-goog-api-key"] == 1
    # a key in the client's header goes on as it came, the query's dropped
    w, _ = wire(GEMINI_REQ, "gemini", "gemini", GEMINI_PATH, {"x-goog-api-key": "h"}, query=query)
    assert (w.query, w.set_headers, w.drop_headers) == ((("alt", "sse"),), (), ())
    w, _ = wire(
        GEMINI_REQ, "gemini", "gemini", GEMINI_PATH, {}, query=query, route_key=RouteKey("env")
    )
    assert w.query == (("alt", "sse"),) and dict(w.set_headers) == {"x-goog-api-key": "env"}
    # a key the route's own upstream_path carries is the route's
    w, _ = wire(
        GEMINI_REQ, "gemini", "gemini", GEMINI_PATH, {}, query=query, route_key=RouteKey("env"),
        upstream_path="/gw?key=route-key",
    )  # fmt: skip
    assert w.query == (("key", "route-key"), ("alt", "sse"))


def test_gemini_client_to_code_assist_upstream() -> None:
    w, _ = wire(
        GEMINI_REQ, "gemini", "gemini_code_assist", f"/p{GEMINI_PATH}",
        {"x-goog-api-key": KEY}, query=(("alt", "sse"),), project="p-2",
    )  # fmt: skip
    assert (w.path, w.query) == ("/p/v1internal:streamGenerateContent", (("alt", "sse"),))
    assert dict(w.set_headers) == {"authorization": f"Bearer {KEY}"}
    assert w.body["model"] == "gemini-3-flash" and w.body["project"] == "p-2"


# --------------------------------------------------------------------------- the whole decision


@pytest.mark.skipif(not GEMINI_CLI, reason=f"recordings not available ({FIXTURES})")
@pytest.mark.parametrize("in_query", [False, True], ids=["header-key", "query-key"])
def test_gemini_cli_through_the_default_route(in_query: bool) -> None:
    from addon.config.options import Settings
    from addon.plan import Incoming, Rewrite, decide, route_for

    rec = recorded("gemini-cli-0.61.0-default-turn3.request.json")
    headers = {k.lower(): v for k, v in rec["headers"].items() if k.lower() != "x-goog-api-key"}
    path = rec["path"]
    if in_query:
        path += f"&key={KEY}"
    else:
        headers["x-goog-api-key"] = KEY
    inc = Incoming("POST", "127.0.0.1", path, headers, json.dumps(rec["body"]).encode())
    settings = Settings()
    route = route_for(settings, inc.method, inc.host, inc.path)
    assert route is not None and (route.client, route.upstream) == ("gemini", "openai_chat")
    d = decide(settings, route, inc, {})
    assert isinstance(d, Rewrite), d
    assert (d.wire.path, d.wire.query) == ("/v1/chat/completions", ())
    assert dict(d.wire.set_headers)["authorization"] == f"Bearer {KEY}"
    assert "x-goog-api-client" in d.wire.drop_headers
    assert d.wire.body["model"] == "gemini-3.8-flash" and d.wire.body["stream"] is True
    check_chat(d.wire.body)
    assert d.plan.stream and d.plan.client_framing == "sse"
    assert KEY not in d.summary and KEY not in json.dumps(d.plan.meta())
