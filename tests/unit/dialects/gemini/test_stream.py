"""Gemini stream codec: every Gemini recording → the decoder → each client dialect's encoder
(through the ``StreamProcessor``, SSE and JSON-array framing, bytes split anywhere), read back
the way each client's SDK reads it; Gemini → Gemini keeps signatures where they were.

Recordings (``../shared/fixtures/real``, see each ``.source.txt``): vercel-ai's Gemini API and
Vertex chunk files (one payload per line; Vertex's streamed ``partialArgs``), gemini-cli's
recorded turns (``{"method": "generateContentStream", "response": [chunks]}`` per line), an
Antigravity capture (Code Assist SSE lines inside a TypeScript constant), a Code Assist log
(gcli2api; the parsed chunk and whole answer), and the scripted answers Gemini CLI 0.61.0
was served (raw SSE).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon.dialects.anthropic.stream_encode import AnthropicStreamEncoder
from addon.dialects.base import Framing, StreamEncoder
from addon.dialects.gemini.response import CALL_SIGNATURE
from addon.dialects.gemini.stream import GeminiStreamDecoder, _path
from addon.dialects.gemini.stream_encode import CodeAssistStreamEncoder, GeminiStreamEncoder
from addon.dialects.openai_chat.stream_encode import OpenAIChatStreamEncoder
from addon.dialects.openai_responses.stream_encode import OpenAIResponsesStreamEncoder
from addon.model import (
    Event,
    Finish,
    MessageStart,
    RawEvent,
    StreamEnd,
    StreamError,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UnsupportedShape,
    Usage,
    UsageEvent,
)
from addon.stream.processor import StreamProcessor
from tests.unit.dialects.gemini.conftest import (
    NAMES,
    NESTED,
    STREAMS,
    decode,
    expected,
    inner,
    needs_streams,
)
from tests.unit.helpers import (
    Pairs,
    accumulate,
    check_sequence,
    feed_at,
    pairs_of,
    payloads,
    sdk_final,
    sdk_message,
)

# --------------------------------------------------------------------------- pipeline


def body_of(chunks: list[str], framing: Framing) -> bytes:
    if framing == "sse":
        return b"".join(f"data: {c}\n\n".encode() for c in chunks)
    return ("[" + ",\r\n".join(chunks) + "]").encode()


def run(
    chunks: list[str],
    encoder: StreamEncoder,
    framing_in: Framing = "sse",
    framing_out: Framing = "sse",
    cuts: list[int] | None = None,
) -> bytes:
    p = StreamProcessor(
        GeminiStreamDecoder(), encoder, framing_in=framing_in, framing_out=framing_out
    )
    out = feed_at(p, body_of(chunks, framing_in), cuts or [])
    assert p.error is None, p.error
    return out


ENCODERS = {
    "openai": OpenAIChatStreamEncoder,
    "anthropic": AnthropicStreamEncoder,
    "responses": OpenAIResponsesStreamEncoder,
    "gemini": GeminiStreamEncoder,
}


# --------------------------------------------------------------------------- decoder


@needs_streams
@pytest.mark.parametrize("name", NAMES)
def test_decoder_reads_everything_the_recording_says(name: str) -> None:
    want = expected(name)
    events = decode(STREAMS[name])
    assert isinstance(events[0], MessageStart)
    assert isinstance(events[-1], StreamEnd)
    text = "".join(
        e.text for e in events if isinstance(e, TextDelta) and not e.extra.get("gemini", {})
    )
    assert text == want["text"]
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == want["reasoning"]
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.name, json.loads(s.arguments)) for s in starts] == want["calls"]
    assert [e.index for e in events if isinstance(e, ToolCallEnd)] == [s.index for s in starts]
    assert len({s.id for s in starts}) == len(starts)
    assert not [e for e in events if isinstance(e, ToolCallArgsDelta)]  # whole calls only
    # Every signature is kept: on its call, or as a thinking signature; a call's also as a
    # marked signature-only thinking delta right before it (for clients of other dialects).
    copies = [e for e in events if isinstance(e, ThinkingDelta) and e.extra == CALL_SIGNATURE]
    kept = [
        e.signature
        for e in events
        if isinstance(e, ThinkingDelta) and e.signature and e.extra != CALL_SIGNATURE
    ]
    kept += [s.extra["thoughtSignature"] for s in starts if "thoughtSignature" in s.extra]
    assert sorted(kept) == sorted(want["signatures"])
    for copy in copies:
        start = events[events.index(copy) + 1]
        assert isinstance(start, ToolCallStart)
        assert (copy.text, copy.signature) == ("", start.extra["thoughtSignature"])
    assert len(copies) == len([s for s in starts if "thoughtSignature" in s.extra])
    assert [s.extra.get("thoughtSignature") for s in starts][: len(want["call_signatures"])] == (
        want["call_signatures"]
    )
    finishes = [e for e in events if isinstance(e, Finish)]
    assert len(finishes) == 1 and finishes[0].raw == want["finish"]
    usage = [e.usage for e in events if isinstance(e, UsageEvent)]
    if want["usage"] is None:
        assert usage == []
    else:
        u = want["usage"]
        assert usage[-1].raw == u and usage[-1].origin == "gemini"
        assert usage[-1].prompt_tokens == u["promptTokenCount"]  # cached ones kept apart:
        assert usage[-1].cache_read_tokens == u.get("cachedContentTokenCount", 0)
        assert usage[-1].reasoning_tokens == u.get("thoughtsTokenCount", 0)
        assert usage[-1].output_tokens == u.get("candidatesTokenCount", 0) + u.get(
            "thoughtsTokenCount", 0
        )
        assert usage[-1].total_tokens == u["totalTokenCount"]


def test_nested_partial_args_assemble_into_one_object() -> None:
    if NESTED not in STREAMS:
        pytest.skip("recording not available")
    (start,) = [e for e in decode(STREAMS[NESTED]) if isinstance(e, ToolCallStart)]
    args = json.loads(start.arguments)
    recipe = args["recipe"]
    assert recipe["name"] == "Lasagna"
    assert len(recipe["ingredients"]) == 10 and len(recipe["steps"]) == 10
    assert recipe["ingredients"][0] == {"amount": "16 oz", "name": "Lasagna noodles"}
    assert recipe["steps"][1].endswith("drain and set aside.")
    assert recipe["steps"][4] == "In a 9x13 baking dish, spread a thin layer of meat sauce."
    assert recipe["steps"][0] == "Preheat oven to 375°F (190°C)."
    assert start.extra["thoughtSignature"].startswith("CmIBjz1r")


def test_call_ids_are_the_upstreams_or_made_from_the_answer_id() -> None:
    chunks = [
        _chunk([{"functionCall": {"name": "a", "args": {}, "id": "up1"}}], rid="R"),
        _chunk([{"functionCall": {"name": "b", "args": {"x": 1}}}], rid="R"),
        _chunk([{"functionCall": {"name": "c", "args": {}, "id": "up1"}}], rid="R", finish="STOP"),
    ]
    starts = [e for e in decode(chunks) if isinstance(e, ToolCallStart)]
    assert [s.id for s in starts] == ["up1", "call_R_1", "call_R_2"]
    assert starts[1].extra == {"gemini": {"made_id": True}}
    assert [s.id for s in starts] == [
        s.id for s in (e for e in decode(chunks) if isinstance(e, ToolCallStart))
    ]  # the same every time


def _chunk(
    parts: list[dict[str, Any]],
    *,
    rid: str = "r1",
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    **cand: Any,
) -> str:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    candidate.update(cand)
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": "m", "responseId": rid}
    if usage:
        body["usageMetadata"] = usage
    return json.dumps(body)


def test_partial_args_of_every_type_and_quoted_paths() -> None:
    chunks = [
        _chunk([{"functionCall": {"name": "f", "willContinue": True}}]),
        _chunk(
            [
                {
                    "functionCall": {
                        "partialArgs": [
                            {"jsonPath": "$.s", "stringValue": "he", "willContinue": True},
                            {"jsonPath": "$.s", "stringValue": "llo"},
                            {"jsonPath": "$.n", "numberValue": 2.5},
                            {"jsonPath": "$.b", "boolValue": False},
                            {"jsonPath": "$.z", "nullValue": "NULL_VALUE"},
                            {"jsonPath": "$['odd key'][1].x", "numberValue": 3},
                            {"jsonPath": "$.s2", "stringValue": "a", "willContinue": True},
                            {"jsonPath": "$.other", "stringValue": "b"},
                            {"jsonPath": "$.s2", "stringValue": "new"},
                        ],
                        "willContinue": True,
                    }
                }
            ]
        ),
        _chunk([{"functionCall": {}}], finish="STOP"),
    ]
    (start,) = [e for e in decode(chunks) if isinstance(e, ToolCallStart)]
    assert json.loads(start.arguments) == {
        "s": "hello",
        "n": 2.5,
        "b": False,
        "z": None,
        "odd key": [None, {"x": 3}],
        "s2": "new",
        "other": "b",
    }


def test_json_paths() -> None:
    assert _path("$.a.b[0]") == ["a", "b", 0]
    assert _path("$['x.y'][\"q\"]") == ["x.y", "q"]
    assert _path("$") == []
    assert _path("a.b") is None
    assert _path("$.a[") is None


def test_a_streamed_call_is_closed_by_the_finish_or_a_new_call() -> None:
    chunks = [
        _chunk([{"functionCall": {"name": "a", "willContinue": True}}]),
        _chunk([{"functionCall": {"partialArgs": [{"jsonPath": "$.x", "stringValue": "1"}]}}]),
        _chunk([{"functionCall": {"name": "b", "willContinue": True}}]),
        _chunk(
            [{"functionCall": {"partialArgs": [{"jsonPath": "$.y", "numberValue": 2}]}}],
            finish="STOP",
        ),
    ]
    events = decode(chunks)
    starts = [(e.name, json.loads(e.arguments)) for e in events if isinstance(e, ToolCallStart)]
    assert starts == [("a", {"x": "1"}), ("b", {"y": 2})]
    finish = next(e for e in events if isinstance(e, Finish))
    assert finish.reason == "tool_calls"


def test_signature_on_a_text_part_and_the_trailing_one() -> None:
    chunks = [
        _chunk([{"text": "plan", "thought": True}]),
        _chunk([{"text": "Hello", "thoughtSignature": "S1"}]),
        _chunk([{"text": "", "thoughtSignature": "S2"}], finish="STOP"),
    ]
    events = [e for e in decode(chunks) if isinstance(e, TextDelta | ThinkingDelta)]
    assert events == [
        ThinkingDelta("plan"),
        ThinkingDelta("", signature="S1"),
        TextDelta("Hello"),
        ThinkingDelta("", signature="S2"),
    ]


def test_code_assist_wrapper_is_unwrapped_and_kept_for_gemini() -> None:
    chunks = [
        json.dumps({"response": json.loads(_chunk([{"text": "hi"}])), "traceId": "t1"}),
        json.dumps(
            {"response": json.loads(_chunk([], finish="STOP", usage=_USAGE)), "traceId": "t1"}
        ),
    ]
    events = decode(chunks)
    start = events[0]
    assert isinstance(start, MessageStart) and start.id == "r1" and start.model == "m"
    assert start.extra == {"gemini": {"wrapper": {"traceId": "t1"}}}
    out = [json.loads(d) for _, d in _encode(events, CodeAssistStreamEncoder())]
    assert all(c["traceId"] == "t1" and "candidates" in c["response"] for c in out)
    assert out[0]["response"]["candidates"][0]["content"]["parts"] == [{"text": "hi"}]
    assert out[-1]["response"]["usageMetadata"] == _USAGE


_USAGE = {
    "promptTokenCount": 3,
    "candidatesTokenCount": 4,
    "totalTokenCount": 9,
    "thoughtsTokenCount": 2,
}


def _encode(events: list[Event], enc: StreamEncoder) -> Pairs:
    return [p for e in events for p in enc.feed(e)] + enc.finish()


def test_error_chunks_become_stream_errors() -> None:
    err = {"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}
    for data in (json.dumps(err), json.dumps([err])):
        dec = GeminiStreamDecoder()
        events = dec.feed(_chunk([{"text": "a"}]), None) + dec.feed(data, None) + dec.finish()
        error = events[-1]
        assert isinstance(error, StreamError)
        assert (error.message, error.type, error.origin) == (
            "Resource exhausted",
            "RESOURCE_EXHAUSTED",
            "gemini",
        )
        # A Gemini client gets the upstream's own error body, and nothing after it.
        assert _encode(events, GeminiStreamEncoder())[-1] == (
            None,
            json.dumps(err, separators=(",", ":")),
        )


def test_a_stream_cut_before_its_finish_ends_in_an_error() -> None:
    dec = GeminiStreamDecoder()
    events = dec.feed(_chunk([{"text": "a"}]), None) + dec.finish()
    assert isinstance(events[-1], StreamError)
    assert dec.finish() == []


def test_blocked_prompt_is_said() -> None:
    body = json.dumps({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "responseId": "b"})
    events = decode([body])
    text = next(e for e in events if isinstance(e, TextDelta))
    assert "blocked" in text.text and "PROHIBITED_CONTENT" in text.text
    assert next(e for e in events if isinstance(e, Finish)).reason == "content_filter"


@pytest.mark.parametrize(
    ("raw", "calls", "reason"),
    [
        ("STOP", False, "stop"),
        ("STOP", True, "tool_calls"),
        ("MAX_TOKENS", False, "length"),
        ("SAFETY", False, "content_filter"),
        ("RECITATION", False, "content_filter"),
        ("BLOCKLIST", False, "content_filter"),
        ("PROHIBITED_CONTENT", False, "content_filter"),
        ("SPII", False, "content_filter"),
        ("OTHER", False, "other"),
    ],
)
def test_finish_reasons(raw: str, calls: bool, reason: str) -> None:
    parts = [{"functionCall": {"name": "f", "args": {}}}] if calls else [{"text": "x"}]
    events = decode([_chunk(parts, finish=raw)])
    assert [(e.reason, e.raw) for e in events if isinstance(e, Finish)] == [(reason, raw)]


def test_chunks_we_cannot_read_raise_unsupported() -> None:
    dec = GeminiStreamDecoder()
    with pytest.raises(UnsupportedShape):
        dec.feed("not json", None)
    with pytest.raises(UnsupportedShape):
        dec.feed("[1]", None)
    assert dec.feed("", None) == []


# --------------------------------------------------------------------------- malformed calls


def _malformed(message: str | None) -> str:
    cand: dict[str, Any] = {"finishReason": "MALFORMED_FUNCTION_CALL", "index": 0}
    if message is not None:
        cand["finishMessage"] = message
    return json.dumps({"candidates": [cand], "responseId": "mf"})


@pytest.mark.parametrize(
    ("message", "name", "args"),
    [
        (
            'Malformed function call: call:default_api:write_file{"file_path": "a.txt", "content": "x"}',
            "write_file",
            {"file_path": "a.txt", "content": "x"},
        ),
        (
            "Malformed function call: call:default_api:list_dir{path:<ctrl46>src/server<ctrl46>,depth:2}",
            "list_dir",
            {"path": "src/server", "depth": 2},
        ),
        (
            'Malformed function call: call:read_file {"path":"/tmp/a.md"}',
            "read_file",
            {"path": "/tmp/a.md"},
        ),
        (
            'Malformed function call: call:default_api:edit{old:<ctrl46>a: "b", {c}<ctrl46>,n:true}',
            "edit",
            {"old": 'a: "b", {c}', "n": True},
        ),
    ],
)
def test_malformed_call_is_recovered(message: str, name: str, args: dict[str, Any]) -> None:
    dec = GeminiStreamDecoder()
    events = [
        *dec.feed(_chunk([{"text": "thinking", "thought": True}], rid="mf"), None),
        *dec.feed(_malformed(message), None),
        *dec.finish(),
    ]
    (start,) = [e for e in events if isinstance(e, ToolCallStart)]
    assert (start.name, json.loads(start.arguments)) == (name, args)
    assert start.id == "call_mf_0"
    finish = next(e for e in events if isinstance(e, Finish))
    assert (finish.reason, finish.raw) == ("tool_calls", "MALFORMED_FUNCTION_CALL")
    # A Gemini client gets the recovered call and STOP, not the malformed finish.
    chunks = [json.loads(d) for _, d in _encode(events, GeminiStreamEncoder())]
    fc = [
        p["functionCall"]
        for c in chunks
        for p in c["candidates"][0].get("content", {}).get("parts", [])
        if "functionCall" in p
    ]
    assert fc == [{"name": name, "args": args}]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "finishMessage" not in chunks[-1]["candidates"][0]


@pytest.mark.parametrize(
    "message",
    [
        None,
        "Malformed function call: call:default_api:report",
        "Malformed function call: call:read_file{",
        "Malformed function call: call:google_search{query:current UTC date}",
        "Malformed function call: print(default_api.write_file(content='x'))",
    ],
)
def test_unrecoverable_malformed_call_is_told_not_silenced(
    message: str | None, no_json_repair: None
) -> None:
    events = decode([_chunk([{"text": "plan", "thought": True}], rid="mf"), _malformed(message)])
    assert not [e for e in events if isinstance(e, ToolCallStart)]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "malformed function call" in text and "MALFORMED_FUNCTION_CALL" in text
    if message:
        assert message in text
    finish = next(e for e in events if isinstance(e, Finish))
    assert (finish.reason, finish.raw) == ("error", "MALFORMED_FUNCTION_CALL")
    # OpenAI and Anthropic clients read the explanation as the answer's text.
    body = run(
        [_chunk([{"text": "plan", "thought": True}], rid="mf"), _malformed(message)],
        OpenAIChatStreamEncoder(),
    )
    acc = accumulate(payloads(body))
    assert "malformed function call" in acc["content"] and acc["finish"] == "stop"
    msg = sdk_message(pairs_of(run([_malformed(message)], AnthropicStreamEncoder())))
    assert "malformed function call" in msg.content[-1].text
    # A Gemini client gets Gemini's own finish (Gemini CLI retries it), not our text.
    chunks = [json.loads(d) for _, d in _encode(events, GeminiStreamEncoder())]
    assert chunks[-1]["candidates"][0]["finishReason"] == "MALFORMED_FUNCTION_CALL"
    if message:
        assert chunks[-1]["candidates"][0]["finishMessage"] == message
    assert not any("malformed" in json.dumps(c) for c in chunks[:-1])


# --------------------------------------------------------------------------- to other clients


def openai_view(body: bytes) -> dict[str, Any]:
    acc = accumulate(payloads(body))
    calls = [acc["calls"][i] for i in sorted(acc["calls"])]
    return {
        "text": acc["content"],
        "reasoning": acc["reasoning"],
        "calls": [(c["name"], json.loads("".join(c["fragments"]))) for c in calls],
        "ids": [c["id"] for c in calls],
        "finish": acc["finish"],
        "usage": acc["usage"],
    }


def anthropic_view(body: bytes) -> dict[str, Any]:
    message = sdk_message(pairs_of(body))
    blocks = message.content
    return {
        "text": "".join(b.text for b in blocks if b.type == "text"),
        "reasoning": "".join(b.thinking for b in blocks if b.type == "thinking"),
        "signatures": [b.signature for b in blocks if b.type == "thinking" and b.signature],
        "calls": [(b.name, b.input) for b in blocks if b.type == "tool_use"],
        "ids": [b.id for b in blocks if b.type == "tool_use"],
        "finish": message.stop_reason,
        "usage": message.usage,
    }


def responses_view(body: bytes) -> dict[str, Any]:
    pairs = pairs_of(body)
    check_sequence(pairs)
    final = sdk_final(pairs)
    reasoning = [o for o in final.output if o.type == "reasoning"]
    return {
        "text": final.output_text,
        "reasoning": "".join(s.text for o in reasoning for s in o.summary),
        "signatures": [o.encrypted_content for o in reasoning if o.encrypted_content],
        "calls": [
            (o.name, json.loads(o.arguments)) for o in final.output if o.type == "function_call"
        ],
        "ids": [o.call_id for o in final.output if o.type == "function_call"],
        "status": final.status,
        "usage": final.usage,
    }


@needs_streams
@pytest.mark.parametrize("framing", ["sse", "json_array"])
@pytest.mark.parametrize("name", NAMES)
def test_recording_reaches_an_openai_chat_client(name: str, framing: Framing) -> None:
    want = expected(name)
    got = openai_view(run(STREAMS[name], OpenAIChatStreamEncoder(), framing_in=framing))
    assert got["text"] == want["text"] + _told(want)
    assert got["reasoning"] == want["reasoning"]
    assert got["calls"] == want["calls"]
    assert len(set(got["ids"])) == len(got["ids"]) and all(got["ids"])
    assert got["finish"] == ("tool_calls" if want["calls"] else "stop")
    if want["usage"]:
        assert got["usage"]["prompt_tokens"] == want["usage"]["promptTokenCount"]
        assert got["usage"]["total_tokens"] == want["usage"]["totalTokenCount"]


def _told(want: dict[str, Any]) -> str:
    """The explanation the bridge adds to an unrecoverable malformed call (none otherwise)."""
    if want["finish"] != "MALFORMED_FUNCTION_CALL":
        return ""
    return (
        "[cursor-bridge] Gemini stopped with MALFORMED_FUNCTION_CALL: the model produced a "
        "malformed function call that could not be read back into a tool call. Please try again."
    )


@needs_streams
@pytest.mark.parametrize("framing", ["sse", "json_array"])
@pytest.mark.parametrize("name", NAMES)
def test_recording_reaches_an_anthropic_client(name: str, framing: Framing) -> None:
    want = expected(name)
    got = anthropic_view(run(STREAMS[name], AnthropicStreamEncoder(), framing_in=framing))
    assert got["text"] == want["text"] + _told(want)
    assert got["reasoning"] == want["reasoning"]
    assert got["calls"] == want["calls"]
    assert len(set(got["ids"])) == len(got["ids"])
    # Every signature reaches the client as a thinking block's (a call's as a copy).
    assert sorted(got["signatures"]) == sorted(want["signatures"])
    assert got["finish"] == ("tool_use" if want["calls"] else "end_turn")
    if want["usage"]:
        cached = want["usage"].get("cachedContentTokenCount")  # apart, for Anthropic
        assert got["usage"].cache_read_input_tokens == (cached or 0)
        assert got["usage"].input_tokens + (cached or 0) == want["usage"]["promptTokenCount"]


@needs_streams
@pytest.mark.parametrize("framing", ["sse", "json_array"])
@pytest.mark.parametrize("name", NAMES)
def test_recording_reaches_a_responses_client(name: str, framing: Framing) -> None:
    want = expected(name)
    got = responses_view(run(STREAMS[name], OpenAIResponsesStreamEncoder(), framing_in=framing))
    assert got["text"] == want["text"] + _told(want)
    assert got["reasoning"] == want["reasoning"]
    assert got["calls"] == want["calls"]
    assert len(set(got["ids"])) == len(got["ids"])
    assert sorted(got["signatures"]) == sorted(want["signatures"])
    if want["usage"]:
        u = want["usage"]
        assert got["usage"].input_tokens == u["promptTokenCount"]  # the cached ones counted
        assert got["usage"].input_tokens_details.cached_tokens == u.get(
            "cachedContentTokenCount", 0
        )
        assert got["usage"].output_tokens_details.reasoning_tokens == u.get("thoughtsTokenCount", 0)


# --------------------------------------------------------------------------- Gemini → Gemini


def gemini_view(datas: list[str]) -> dict[str, Any]:
    chunks = [inner(json.loads(d)) for d in datas]
    parts = [
        p
        for c in chunks
        for cand in c.get("candidates") or []
        for p in (cand.get("content") or {}).get("parts") or []
    ]
    finish = [
        cand["finishReason"]
        for c in chunks
        for cand in c.get("candidates") or []
        if cand.get("finishReason")
    ]
    usage = [c["usageMetadata"] for c in chunks if "promptTokenCount" in c.get("usageMetadata", {})]
    return {
        "text": "".join(p["text"] for p in parts if "text" in p and not p.get("thought")),
        "reasoning": "".join(p["text"] for p in parts if p.get("thought")),
        "calls": [
            (
                p["functionCall"]["name"],
                p["functionCall"].get("args", {}),
                p.get("thoughtSignature"),
            )
            for p in parts
            if "functionCall" in p
            and "name" in p["functionCall"]
            and "willContinue" not in p["functionCall"]
        ],
        "text_signatures": [
            (p["text"], p["thoughtSignature"])
            for p in parts
            if "text" in p and "thoughtSignature" in p
        ],
        "finish": finish[-1:],
        "usage": usage[-1:],
    }


@needs_streams
@pytest.mark.parametrize("name", NAMES)
def test_gemini_to_gemini_keeps_calls_signatures_finish_and_usage(name: str) -> None:
    want = expected(name)
    wrapped = "response" in json.loads(STREAMS[name][0])
    encoder = CodeAssistStreamEncoder() if wrapped else GeminiStreamEncoder()
    datas = payloads(run(STREAMS[name], encoder))
    got = gemini_view(datas)
    source = gemini_view(STREAMS[name])
    assert got["text"] == source["text"]
    assert got["reasoning"] == source["reasoning"]
    assert [(n, a) for n, a, _ in got["calls"]] == want["calls"]
    assert [s for _, _, s in got["calls"]] == want["call_signatures"]
    # A signature on a text part goes back on the first text part after it.
    assert [s for _, s in got["text_signatures"]] == [s for _, s in source["text_signatures"]]
    assert got["finish"] == source["finish"]
    assert got["usage"] == source["usage"]
    for data in datas:
        chunk = json.loads(data)
        if wrapped:
            assert set(chunk) >= {"response"}
            chunk = chunk["response"]
        first = inner(json.loads(STREAMS[name][0]))
        for key in ("responseId", "modelVersion", "createTime"):
            assert chunk.get(key) == first.get(key)
        for cand in chunk["candidates"]:
            parts = (cand.get("content") or {}).get("parts") or []
            assert len(parts) <= 1  # one part per chunk
            if parts and "text" in parts[0] and not parts[0]["text"]:
                assert "thoughtSignature" in parts[0]  # only the trailing signature part


@needs_streams
@pytest.mark.parametrize("name", NAMES)
def test_gemini_to_gemini_json_array_out_is_the_same_chunks(name: str) -> None:
    sse = payloads(run(STREAMS[name], GeminiStreamEncoder()))
    array = json.loads(run(STREAMS[name], GeminiStreamEncoder(), "json_array", "json_array"))
    assert array == [json.loads(d) for d in sse]


def test_gemini_client_of_another_dialect() -> None:
    """Unified events from elsewhere (an Anthropic-like answer) → what Gemini CLI reads."""
    events: list[Event] = [
        MessageStart("anthropic", id="msg_1", model="claude"),
        ThinkingDelta("I should read it."),
        ThinkingDelta("", signature="ANTHROPIC-SIG"),
        TextDelta("Reading."),
        ToolCallStart(1, "toolu_1", "read_file", '{"path":'),
        ToolCallArgsDelta(1, ' "a.txt"}'),
        ToolCallEnd(1),
        ToolCallStart(2, "toolu_2", "glob", "not json"),
        Finish("tool_calls", raw="tool_use"),
        UsageEvent(Usage(10, 5, origin="anthropic", raw={"input_tokens": 10})),
        StreamEnd(),
    ]
    chunks = [json.loads(d) for _, d in _encode(events, GeminiStreamEncoder())]
    parts = [c["candidates"][0].get("content", {}).get("parts", []) for c in chunks]
    assert parts == [
        [{"text": "I should read it.", "thought": True}],
        [{"text": "Reading.", "thoughtSignature": "ANTHROPIC-SIG"}],
        [{"functionCall": {"name": "read_file", "args": {"path": "a.txt"}, "id": "toolu_1"}}],
        [
            {
                "functionCall": {
                    "name": "glob",
                    "args": {"_raw_arguments": "not json"},
                    "id": "toolu_2",
                }
            }
        ],
        [],
    ]
    assert all(c["responseId"] == "msg_1" and c["modelVersion"] == "claude" for c in chunks)
    last = chunks[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["usageMetadata"] == {
        "promptTokenCount": 10,
        "candidatesTokenCount": 5,
        "totalTokenCount": 15,
    }


def test_a_signature_with_nothing_after_it_ends_the_answer_as_geminis_trailing_part() -> None:
    events: list[Event] = [
        MessageStart("x"),
        TextDelta("hi"),
        ThinkingDelta("", signature="S"),
        StreamEnd(),
    ]
    chunks = [json.loads(d) for _, d in _encode(events, GeminiStreamEncoder())]
    assert [c["candidates"][0].get("content", {}).get("parts") for c in chunks] == [
        [{"text": "hi"}],
        [{"text": "", "thoughtSignature": "S"}],
        None,
    ]


def test_gemini_encoder_errors_and_raw_events() -> None:
    enc = GeminiStreamEncoder()
    assert enc.feed(MessageStart("openai_chat")) == []
    assert enc.feed(RawEvent("openai_chat", {"x": 1})) == []
    out = enc.feed(StreamError("overloaded", "overloaded_error", "anthropic", status=529))
    assert json.loads(out[0][1]) == {
        "error": {"code": 529, "message": "overloaded", "status": "UNAVAILABLE"}
    }
    assert enc.feed(TextDelta("late")) == [] and enc.finish() == []


def test_unknown_parts_and_fields_reach_a_gemini_client_only() -> None:
    chunks = [
        _chunk([{"inlineData": {"mimeType": "image/png", "data": "QUJD"}}]),
        _chunk([{"text": "x"}], finish="STOP", groundingMetadata={"webSearchQueries": ["q"]}),
    ]
    out = [json.loads(d) for d in payloads(run(chunks, GeminiStreamEncoder()))]
    assert out[0]["candidates"][0]["content"]["parts"] == [
        {"inlineData": {"mimeType": "image/png", "data": "QUJD"}}
    ]
    assert out[-1]["candidates"][0]["groundingMetadata"] == {"webSearchQueries": ["q"]}
    acc = accumulate(payloads(run(chunks, OpenAIChatStreamEncoder())))
    assert acc["content"] == "x"


# --------------------------------------------------------------------------- split anywhere


def _whole(name: str, client: str, framing: Framing) -> bytes:
    key = (name, client, framing)
    if key not in _WHOLE:
        _WHOLE[key] = run(
            STREAMS[name],
            ENCODERS[client](),
            framing_in=framing,
            framing_out=framing if client == "gemini" else "sse",
        )
    return _WHOLE[key]


_WHOLE: dict[tuple[str, str, Framing], bytes] = {}


@needs_streams
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(NAMES or ["-"]),
    client=st.sampled_from(sorted(ENCODERS)),
    framing=st.sampled_from(["sse", "json_array"]),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 80),
)
def test_any_split_gives_the_same_client_bytes(
    name: str, client: str, framing: Framing, seed: int, n: int
) -> None:
    data = body_of(STREAMS[name], framing)
    cuts = random.Random(seed).sample(range(1, len(data)), min(n, len(data) - 1))
    out_framing: Framing = framing if client == "gemini" else "sse"
    got = run(STREAMS[name], ENCODERS[client](), framing, out_framing, cuts)
    assert got == _whole(name, client, framing)


@needs_streams
@pytest.mark.parametrize("name", NAMES)
def test_byte_by_byte_json_array_equals_whole(name: str) -> None:
    data = body_of(STREAMS[name], "json_array")
    got = run(
        STREAMS[name], AnthropicStreamEncoder(), "json_array", "sse", list(range(1, len(data)))
    )
    assert got == _whole(name, "anthropic", "json_array")
