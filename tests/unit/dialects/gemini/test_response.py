"""Gemini whole answers and errors: recorded answers in and back out, to other dialects' SDK
types, and other dialects' answers out for a Gemini client."""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import pytest
from anthropic.types import Message as AnthropicMessage
from openai.types.chat import ChatCompletion
from openai.types.responses import Response as ResponsesResponse

from addon.dialects.anthropic import DIALECT as ANTHROPIC
from addon.dialects.gemini import CODE_ASSIST_DIALECT, DIALECT
from addon.dialects.gemini.response import (
    CALL_SIGNATURE,
    decode_response,
    encode_code_assist_response,
    encode_error,
    encode_response,
    error_message,
    parse_malformed,
)
from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.dialects.openai_responses import DIALECT as RESPONSES
from addon.model import (
    ClientError,
    Opaque,
    Response,
    Text,
    Thinking,
    ToolCall,
    ToolCallStart,
    UnsupportedShape,
    Usage,
)
from tests.realdata import FIXTURES
from tests.unit.dialects.gemini.conftest import (
    NAMES,
    STREAMS,
    codeassist_log,
    decode,
    expected,
    inner,
    needs_streams,
    wire_parts,
)

# --------------------------------------------------------------------------- recorded answers


def whole_answers() -> dict[str, dict[str, Any]]:
    """Recorded whole answers: gemini-cli's ``generateContent`` turns, Gemini CLI's router
    answer, Code Assist's (gcli2api) wrapped answer."""
    out: dict[str, dict[str, Any]] = {}
    if not FIXTURES.is_dir():
        return out
    for path in sorted(FIXTURES.glob("gemini-cli-recorded-*.responses")):
        for n, line in enumerate(path.read_text().splitlines()):
            turn = json.loads(line)
            if turn["method"] == "generateContent":
                out[f"{path.name}#{n}"] = turn["response"]
    router = FIXTURES / "clients" / "gemini-cli-0.61.0-default-aux-router.response.json"
    if router.exists():
        out["clients/" + router.name] = json.loads(router.read_text())
    for path in sorted(FIXTURES.glob("gemini-codeassist-*")):
        if not path.name.endswith(".source.txt"):
            out[path.name] = codeassist_log(path.name)[1]
    return out


WHOLE = whole_answers()
WHOLE_NAMES = sorted(WHOLE)


def normalized(body: dict[str, Any]) -> dict[str, Any]:
    """A body as our encoder writes it: candidate ``index`` always there."""
    body = copy.deepcopy(body)
    target = inner(body)
    for cand in target.get("candidates") or []:
        cand.setdefault("index", 0)
    return body


@pytest.mark.skipif(not WHOLE, reason="recordings not available")
@pytest.mark.parametrize("name", WHOLE_NAMES)
def test_recorded_whole_answer_comes_back_unchanged(name: str) -> None:
    body = WHOLE[name]
    answer = decode_response(body)
    wrapped = "response" in body
    again = encode_code_assist_response(answer) if wrapped else encode_response(answer)
    assert again == normalized(body)
    # The dialects wired in the package do the same.
    dialect = CODE_ASSIST_DIALECT if wrapped else DIALECT
    assert dialect.encode_response(dialect.decode_response(body)) == normalized(body)


@pytest.mark.skipif(not WHOLE, reason="recordings not available")
@pytest.mark.parametrize("name", WHOLE_NAMES)
def test_recorded_whole_answer_reaches_other_sdks(name: str) -> None:
    body = WHOLE[name]
    answer = decode_response(body)
    text = "".join(
        p["text"]
        for c in inner(body)["candidates"]
        for p in c["content"]["parts"]
        if not p.get("thought")
    )
    chat = ChatCompletion.model_validate(OPENAI.encode_response(answer))
    assert chat.choices[0].message.content == text
    assert chat.choices[0].finish_reason == "stop"
    message = AnthropicMessage.model_validate(ANTHROPIC.encode_response(answer))
    assert "".join(b.text for b in message.content if b.type == "text") == text
    resp = ResponsesResponse.model_validate(RESPONSES.encode_response(answer))
    assert resp.output_text == text
    usage = inner(body)["usageMetadata"]
    assert answer.usage is not None and answer.usage.input_tokens == usage["promptTokenCount"]


def as_whole(chunks: list[str]) -> dict[str, Any]:
    """A recorded stream's chunks merged the way a ``generateContent`` answer holds them."""
    first = inner(json.loads(chunks[0]))
    body: dict[str, Any] = {k: v for k, v in first.items() if k != "candidates"}
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": wire_parts(chunks)}}
    for c in chunks:
        data = inner(json.loads(c))
        for cand in data.get("candidates") or []:
            if cand.get("finishReason"):
                candidate["finishReason"] = cand["finishReason"]
        if "promptTokenCount" in data.get("usageMetadata", {}):
            body["usageMetadata"] = data["usageMetadata"]
    body["candidates"] = [candidate]
    return body


WHOLE_STREAMS = [n for n in NAMES if '"partialArgs"' not in "".join(STREAMS[n])]


@needs_streams
@pytest.mark.parametrize("name", WHOLE_STREAMS)
def test_a_stream_read_whole_says_the_same(name: str) -> None:
    want = expected(name)
    answer = decode_response(as_whole(STREAMS[name]))
    text = "".join(p.text for p in answer.parts if isinstance(p, Text) and not p.extra)
    assert text == want["text"]
    assert "".join(p.text for p in answer.parts if isinstance(p, Thinking)) == want["reasoning"]
    calls = [p for p in answer.parts if isinstance(p, ToolCall)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == want["calls"]
    assert len({c.id for c in calls}) == len(calls)
    # The same ids as the stream decoder made.
    starts = [e for e in decode(STREAMS[name]) if isinstance(e, ToolCallStart)]
    assert [c.id for c in calls] == [s.id for s in starts]
    thinking = [p for p in answer.parts if isinstance(p, Thinking) and p.signature]
    kept = [p.signature for p in thinking if p.extra != CALL_SIGNATURE]
    kept += [c.extra["thoughtSignature"] for c in calls if "thoughtSignature" in c.extra]
    assert sorted(kept) == sorted(want["signatures"])
    # A call's signature is also a signature-only thinking part just before it.
    for i, p in enumerate(answer.parts):
        if isinstance(p, ToolCall) and "thoughtSignature" in p.extra:
            assert answer.parts[i - 1] == Thinking(
                "", p.extra["thoughtSignature"], extra=CALL_SIGNATURE
            )
    assert answer.finish_raw == want["finish"]
    # Back to Gemini: signatures on the same parts.
    again = encode_response(answer)
    parts = again["candidates"][0]["content"]["parts"]
    source = wire_parts(STREAMS[name])
    assert [p.get("thoughtSignature") for p in parts if "functionCall" in p] == [
        p.get("thoughtSignature") for p in source if "functionCall" in p
    ]
    assert [p["thoughtSignature"] for p in parts if "text" in p and "thoughtSignature" in p] == [
        p["thoughtSignature"] for p in source if "text" in p and "thoughtSignature" in p
    ]


# --------------------------------------------------------------------------- decoding


def test_signature_of_a_text_part_signs_the_reasoning_before_it() -> None:
    body = {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {"text": "plan", "thought": True},
                        {"text": "Hello", "thoughtSignature": "S1"},
                        {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "S2"},
                        {"text": "", "thoughtSignature": "S3"},
                    ],
                    "role": "model",
                },
                "finishReason": "STOP",
            }
        ],
        "responseId": "R",
    }
    answer = decode_response(body)
    assert answer.parts == (
        Thinking("plan", "S1", extra={"gemini": {"signature_on": "next"}}),
        Text("Hello"),
        Thinking("", "S2", extra=CALL_SIGNATURE),
        ToolCall(
            "call_R_0",
            "f",
            '{"a": 1}',
            extra={"thoughtSignature": "S2", "gemini": {"made_id": True}},
        ),
        Thinking("", "S3"),
    )
    assert answer.finish == "tool_calls"
    assert encode_response(answer)["candidates"][0]["content"]["parts"] == [
        {"text": "plan", "thought": True},
        {"text": "Hello", "thoughtSignature": "S1"},
        {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "S2"},
        {"text": "", "thoughtSignature": "S3"},
    ]
    # Anthropic keeps both thinking signatures; Responses as encrypted reasoning.
    message = AnthropicMessage.model_validate(ANTHROPIC.encode_response(answer))
    assert [b.signature for b in message.content if b.type == "thinking"] == ["S1", "S2", "S3"]
    assert message.stop_reason == "tool_use"


def test_upstream_call_ids_are_kept_and_sent_back() -> None:
    body = {
        "response": {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {
                                "thoughtSignature": "EpUF",
                                "functionCall": {
                                    "name": "get_weather",
                                    "args": {"city": "Paris"},
                                    "id": "5hp24qb7",
                                },
                            }
                        ],
                    },
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {
                "promptTokenCount": 48,
                "candidatesTokenCount": 16,
                "totalTokenCount": 202,
                "thoughtsTokenCount": 138,
            },
            "modelVersion": "gemini-3.1-pro-low",
            "responseId": "atBp",
        },
        "traceId": "429b",
        "metadata": {},
    }
    answer = decode_response(body)
    copy, call = answer.parts
    assert copy == Thinking("", "EpUF", extra=CALL_SIGNATURE)
    assert isinstance(call, ToolCall) and call.id == "5hp24qb7"
    usage = body["response"]["usageMetadata"]
    assert answer.usage == Usage(
        48, 154, 202, "gemini", usage, cache_read_tokens=0, reasoning_tokens=138
    )
    assert answer.extra["wrapper"] == {"traceId": "429b", "metadata": {}}
    assert encode_code_assist_response(answer) == normalized(body)
    chat = ChatCompletion.model_validate(OPENAI.encode_response(answer))
    tool_calls = chat.choices[0].message.tool_calls or []
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in tool_calls] == [  # type: ignore[union-attr]
        ("5hp24qb7", "get_weather", {"city": "Paris"})
    ]
    assert chat.choices[0].finish_reason == "tool_calls"
    assert chat.usage is not None and chat.usage.completion_tokens == 154


def _malformed(message: str | None) -> dict[str, Any]:
    cand: dict[str, Any] = {"finishReason": "MALFORMED_FUNCTION_CALL", "index": 0}
    if message is not None:
        cand["finishMessage"] = message
    return {"candidates": [cand], "responseId": "W", "modelVersion": "gemini-2.5-pro"}


def test_malformed_call_recovered_whole() -> None:
    body = _malformed("Malformed function call: call:default_api:run{cmd:<ctrl46>ls -la<ctrl46>}")
    answer = decode_response(body)
    assert answer.parts == (
        ToolCall("call_W_0", "run", '{"cmd": "ls -la"}', extra={"gemini": {"made_id": True}}),
    )
    assert (answer.finish, answer.finish_raw) == ("tool_calls", "MALFORMED_FUNCTION_CALL")
    again = encode_response(answer)
    candidate = again["candidates"][0]
    assert candidate["finishReason"] == "STOP" and "finishMessage" not in candidate
    assert candidate["content"]["parts"] == [
        {"functionCall": {"name": "run", "args": {"cmd": "ls -la"}}}
    ]


def test_malformed_call_not_recovered_is_told(no_json_repair: None) -> None:
    message = "Malformed function call: call:default_api:run{cmd: ls -la"
    answer = decode_response(_malformed(message))
    (text,) = answer.parts
    assert (
        isinstance(text, Text) and "malformed function call" in text.text and message in text.text
    )
    assert answer.finish == "error"
    chat = ChatCompletion.model_validate(OPENAI.encode_response(answer))
    assert "malformed function call" in (chat.choices[0].message.content or "")
    # A Gemini client gets Gemini's own answer back.
    assert encode_response(answer) == {
        "candidates": [
            {
                "content": {"role": "model", "parts": []},
                "finishReason": "MALFORMED_FUNCTION_CALL",
                "index": 0,
                "finishMessage": message,
            }
        ],
        "modelVersion": "gemini-2.5-pro",
        "responseId": "W",
    }


@pytest.mark.parametrize(
    ("message", "want"),
    [
        ('call:f{"a": [1, {"b": null}]}', ("f", {"a": [1, {"b": None}]})),
        (
            "Malformed function call: call:ns:deep:g{x:1,y:<ctrl46>}{<ctrl46>}",
            ("g", {"x": 1, "y": "}{"}),
        ),
        ("Malformed function call: call:h{}", ("h", {})),
        (
            "Malformed function call: call:h{ key_1 : [true,false] }",
            ("h", {"key_1": [True, False]}),
        ),
        ("Malformed function call: call:h{a:<ctrl46>unclosed}", None),
        ("Malformed function call: call:h{a: 'single'}", None),
        ("Malformed function call: call:h[1]", None),
        ("something else", None),
        ("", None),
    ],
)
def test_parse_malformed(
    message: str, want: tuple[str, dict[str, Any]] | None, no_json_repair: None
) -> None:
    got = parse_malformed(message)
    assert (None if got is None else (got[0], json.loads(got[1]))) == want


def test_json_repair_is_used_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    fake = types.ModuleType("json_repair")
    fake.loads = lambda text: {"query": "current UTC date"}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "json_repair", fake)
    got = parse_malformed("Malformed function call: call:google_search{query:current UTC date}")
    assert got == ("google_search", '{"query": "current UTC date"}')


def test_blocked_prompt_whole() -> None:
    body = {
        "promptFeedback": {"blockReason": "SAFETY", "blockReasonMessage": "unsafe"},
        "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5},
    }
    answer = decode_response(body)
    (text,) = answer.parts
    assert isinstance(text, Text) and "SAFETY" in text.text and "unsafe" in text.text
    assert answer.finish == "content_filter"
    again = encode_response(answer)
    assert again["promptFeedback"] == body["promptFeedback"]
    assert again["candidates"][0]["finishReason"] == "SAFETY"
    assert again["candidates"][0]["content"]["parts"] == []


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}},
        {"object": "chat.completion"},
        {"candidates": "nope"},
    ],
)
def test_what_is_not_an_answer_is_unsupported(body: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedShape):
        decode_response(body)


def test_unknown_parts_and_fields_are_kept_for_gemini_only() -> None:
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
                        {"text": "done", "videoMetadata": {"fps": 1}},
                    ],
                },
                "finishReason": "STOP",
                "index": 0,
                "safetyRatings": [
                    {"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"}
                ],
                "avgLogprobs": -0.5,
            }
        ],
        "createTime": "2026-01-10T01:55:33Z",
        "responseId": "X",
        "modelVersion": "m",
    }
    answer = decode_response(body)
    assert isinstance(answer.parts[0], Opaque)
    assert encode_response(answer) == body
    chat = ChatCompletion.model_validate(OPENAI.encode_response(answer))
    assert chat.choices[0].message.content == "done"


# --------------------------------------------------------------------------- encoding others


def test_another_dialects_answer_for_a_gemini_client() -> None:
    answer = Response(
        "anthropic",
        "msg_1",
        "claude-sonnet",
        (
            Thinking("Let me look.", "ANTH-SIG"),
            Thinking("opaque", redacted=True),
            Text("Looking."),
            ToolCall("toolu_1", "Read", '{"path": "a"}'),
            ToolCall("toolu_2", "Broken", "{not json"),
            Opaque("anthropic", {"type": "server_tool_use"}),
        ),
        "tool_calls",
        "tool_use",
        Usage(10, 5, origin="anthropic", raw={"input_tokens": 10}),
    )
    assert encode_response(answer) == {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "Let me look.", "thought": True},
                        {"text": "Looking.", "thoughtSignature": "ANTH-SIG"},
                        {"functionCall": {"name": "Read", "args": {"path": "a"}, "id": "toolu_1"}},
                        {
                            "functionCall": {
                                "name": "Broken",
                                "args": {"_raw_arguments": "{not json"},
                                "id": "toolu_2",
                            }
                        },
                    ],
                },
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "claude-sonnet",
        "responseId": "msg_1",
    }
    assert encode_code_assist_response(answer) == {"response": encode_response(answer)}


@pytest.mark.parametrize(
    ("finish", "want"),
    [
        ("stop", "STOP"),
        ("length", "MAX_TOKENS"),
        ("content_filter", "SAFETY"),
        ("error", "OTHER"),
        (None, "STOP"),
    ],
)
def test_finish_for_a_gemini_client(finish: Any, want: str) -> None:
    answer = Response("openai_chat", None, None, (Text("x"),), finish)
    assert encode_response(answer)["candidates"][0]["finishReason"] == want


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("status", "name"),
    [
        (400, "INVALID_ARGUMENT"),
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (429, "RESOURCE_EXHAUSTED"),
        (500, "INTERNAL"),
        (503, "UNAVAILABLE"),
        (418, "INVALID_ARGUMENT"),
        (502, "UNAVAILABLE"),
        (501, "UNIMPLEMENTED"),
        (504, "DEADLINE_EXCEEDED"),
        (529, "UNAVAILABLE"),
        (599, "INTERNAL"),
    ],
)
def test_encode_error(status: int, name: str) -> None:
    assert encode_error(ClientError("duplicate tool name", status=status)) == {
        "error": {"code": status, "message": "duplicate tool name", "status": name}
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"error": {"code": 400, "message": "API key not valid", "status": "INVALID_ARGUMENT"}},
            "API key not valid",
        ),
        ([{"error": {"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED"}}], "Quota"),
        ({"response": {"error": {"message": "wrapped"}}}, "wrapped"),
        ({"error": "string"}, None),
        ({"candidates": []}, None),
        ([], None),
        ("text", None),
    ],
)
def test_error_message(body: Any, message: str | None) -> None:
    assert error_message(body) == message
