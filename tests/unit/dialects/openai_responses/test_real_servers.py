"""Responses upstreams as real servers send them: llama.cpp's ``llama-server`` and LiteLLM's
proxy (``tests/fixtures/llama_cpp/``, ``tests/fixtures/litellm/``; their README lists what
they leave out or add). Every recorded answer, streamed and whole, through the plan's own
pipeline to a client of each dialect: the text and the call (name, id, arguments) arrive
whole, in a stream the official SDKs read. Then each deviation alone, from a recorded event.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from addon.config.options import Settings
from addon.config.routes import Route
from addon.dialects.openai_responses import NAME
from addon.dialects.openai_responses.stream import OpenAIResponsesStreamDecoder
from addon.model import (
    Event,
    Finish,
    MessageStart,
    RawEvent,
    StreamEnd,
    StreamError,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageEvent,
)
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, decode_answer, encode_answer, stream_processor
from addon.plan.errors import error_body
from tests.unit.helpers import (
    accumulate,
    check_sequence,
    feed_pieces,
    pairs_of,
    payloads,
    sdk_final,
    sdk_message,
    split,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
SERVERS = ("llama_cpp", "litellm")
STREAMS = [
    f"{server}/{p.name}"
    for server in SERVERS
    for p in sorted((FIXTURES / server).glob("responses_*_stream.sse"))
    if "error" not in p.name
]
WHOLE = [
    f"{server}/{p.name}"
    for server in SERVERS
    for p in sorted((FIXTURES / server).glob("responses_*.json"))
    if "error" not in p.name
]
CLIENTS = ("openai_chat", "anthropic", "openai_responses", "gemini")
PATHS = {
    "openai_chat": ("*/chat/completions", "/v1/chat/completions"),
    "anthropic": ("*/v1/messages", "/v1/messages"),
    "openai_responses": ("*/responses", "/v1/responses"),
    "gemini": ("*/models/*:*enerateContent", "/v1beta/models/m:{}?alt=sse"),
}
RESPONSES_EVENT: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def request_body(client: str, stream: bool) -> dict[str, Any]:
    user = "What is the weather in Berlin?"
    tool = {"name": "get_weather", "description": "The weather in a city"}
    match client:
        case "anthropic":
            return {
                "model": "smollm2",
                "max_tokens": 64,
                "stream": stream,
                "tools": [{**tool, "input_schema": SCHEMA}],
                "messages": [{"role": "user", "content": user}],
            }
        case "openai_responses":
            return {
                "model": "smollm2",
                "stream": stream,
                "input": user,
                "tools": [{"type": "function", **tool, "parameters": SCHEMA}],
            }
        case "gemini":
            return {
                "contents": [{"role": "user", "parts": [{"text": user}]}],
                "tools": [{"functionDeclarations": [{**tool, "parameters": SCHEMA}]}],
            }
        case _:
            return {
                "model": "smollm2",
                "stream": stream,
                "tools": [{"type": "function", "function": {**tool, "parameters": SCHEMA}}],
                "messages": [{"role": "user", "content": user}],
            }


def plan_for(client: str, stream: bool) -> FlowPlan:
    glob, path = PATHS[client]
    if client == "gemini":
        path = path.format("streamGenerateContent" if stream else "generateContent")
        path = path if stream else path.removesuffix("?alt=sse")
    route = Route(name="r", client=client, path=glob, upstream="openai_responses")  # type: ignore[arg-type]
    body = json.dumps(request_body(client, stream)).encode()
    d = decide(
        Settings(), route, Incoming("POST", "h", path, {"authorization": "Bearer t"}, body), {}
    )
    assert isinstance(d, Rewrite), d
    return d.plan


# --------------------------------------------------------------------------- what was sent


def read(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def answer_of(name: str) -> dict[str, Any]:
    """The upstream's own final answer: the whole body, or a stream's ``response.completed``."""
    raw = read(name)
    if name.endswith(".json"):
        body: dict[str, Any] = json.loads(raw)
        return body
    for data in payloads(raw):
        if data != "[DONE]" and json.loads(data).get("type") == "response.completed":
            return dict(json.loads(data)["response"])
    raise AssertionError(f"{name}: no response.completed")


def want_of(name: str) -> tuple[str, list[tuple[str, str, str]]]:
    """The text and the calls ``(call id, name, arguments)`` the upstream answered."""
    output = answer_of(name)["output"]
    text = "".join(
        c["text"] for o in output if o["type"] == "message" for c in o["content"] if "text" in c
    )
    calls = [
        (o["call_id"], o["name"], o["arguments"]) for o in output if o["type"] == "function_call"
    ]
    return text, calls


# --------------------------------------------------------------------------- what a client got


def sdk_strict(value: Any) -> Any:
    """``value`` with ``usage.input_tokens_details.cache_write_tokens`` where it is absent:
    the SDK's types require it, OpenAI itself leaves it out (the Codex recordings), and the
    SDK reads it leniently; everything else is validated as the types say."""
    if isinstance(value, list):
        return [sdk_strict(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: sdk_strict(v) for k, v in value.items()}
    details = out.get("input_tokens_details")
    if isinstance(details, dict) and "input_tokens" in out:
        out["input_tokens_details"] = {"cache_write_tokens": 0, **details}
    return out


def chat_got(body: bytes, stream: bool) -> tuple[str, list[tuple[str, str, str]], str | None]:
    if not stream:
        ChatCompletion.model_validate_json(body)
        message = json.loads(body)["choices"][0]
        calls = [
            (c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in message["message"].get("tool_calls") or []
        ]
        return message["message"]["content"] or "", calls, message["finish_reason"]
    datas = payloads(body)
    assert datas[-1] == "[DONE]"
    acc = accumulate(datas)
    calls = [(c["id"], c["name"], "".join(c["fragments"])) for _, c in sorted(acc["calls"].items())]
    return acc["content"], calls, acc["finish"]


def anthropic_got(body: bytes, stream: bool) -> tuple[str, list[tuple[str, str, str]], str | None]:
    if stream:
        message = sdk_message(pairs_of(body))
        blocks = [b.model_dump() for b in message.content]
        stop = message.stop_reason
    else:
        Message.model_validate_json(body)
        whole = json.loads(body)
        blocks, stop = whole["content"], whole["stop_reason"]
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    calls = [
        (b["id"], b["name"], json.dumps(b["input"])) for b in blocks if b["type"] == "tool_use"
    ]
    return text, calls, stop


def responses_got(body: bytes, stream: bool) -> tuple[str, list[tuple[str, str, str]], str | None]:
    if stream:
        pairs = pairs_of(body)
        check_sequence(pairs)
        for _, data in pairs:  # every event as the SDK's types say, not only as it reads them
            RESPONSES_EVENT.validate_python(sdk_strict(json.loads(data)))
        final = sdk_final(pairs)
        output = [o.model_dump() for o in final.output]
        status = final.status
    else:
        Response.model_validate(sdk_strict(json.loads(body)))
        whole = json.loads(body)
        output, status = whole["output"], whole["status"]
    text = "".join(
        c["text"] for o in output if o["type"] == "message" for c in o["content"] if "text" in c
    )
    calls = [
        (o["call_id"], o["name"], o["arguments"]) for o in output if o["type"] == "function_call"
    ]
    return text, calls, status


def gemini_got(body: bytes, stream: bool) -> tuple[str, list[tuple[str, str, str]], str | None]:
    chunks = [json.loads(d) for d in payloads(body)] if stream else [json.loads(body)]
    text, calls, finish = "", [], None
    for chunk in chunks:
        for candidate in chunk.get("candidates") or []:
            finish = candidate.get("finishReason") or finish
            for part in (candidate.get("content") or {}).get("parts") or []:
                text += part.get("text", "") if not part.get("thought") else ""
                if "functionCall" in part:
                    fc = part["functionCall"]
                    calls.append((fc.get("id", ""), fc["name"], json.dumps(fc["args"])))
    return text, calls, finish


GOT = {
    "openai_chat": chat_got,
    "anthropic": anthropic_got,
    "openai_responses": responses_got,
    "gemini": gemini_got,
}
STOPS = {  # the finish each client sees for an answer with calls / without
    "openai_chat": ("tool_calls", "stop"),
    "anthropic": ("tool_use", "end_turn"),
    "openai_responses": ("completed", "completed"),
    "gemini": ("STOP", "STOP"),
}


def check(client: str, name: str, body: bytes, stream: bool) -> None:
    text, calls, finish = GOT[client](body, stream)
    want_text, want_calls = want_of(name)
    assert text == want_text
    assert len(calls) == len(want_calls)
    for (got_id, got_name, got_args), (call_id, call_name, args) in zip(
        calls, want_calls, strict=True
    ):
        assert got_name == call_name
        assert json.loads(got_args) == json.loads(args)
        if client != "gemini":  # Gemini's calls carry no id of the upstream's
            assert got_id == call_id
    assert finish == STOPS[client][0 if want_calls else 1]


# --------------------------------------------------------------------------- recorded answers


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("name", STREAMS)
def test_recorded_stream_reaches_every_client_whole(name: str, client: str) -> None:
    raw = read(name)
    rng = random.Random(f"{name}/{client}")
    for pieces in ([raw], split(raw, [rng.randrange(len(raw)) for _ in range(40)])):
        plan = plan_for(client, stream=True)
        processor = stream_processor(plan, AnswerState.of(plan), None)
        body = feed_pieces(processor, pieces)
        assert processor.error is None and processor.skipped == 0
        assert processor.ended_with_error is None
        check(client, name, body, stream=True)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "as-stream"])
@pytest.mark.parametrize("name", WHOLE)
def test_recorded_whole_answer_reaches_every_client(name: str, client: str, stream: bool) -> None:
    plan = plan_for(client, stream)
    answer = decode_answer(plan, AnswerState.of(plan), read(name))
    body = encode_answer(plan, answer)
    check(client, name, body, stream)


# --------------------------------------------------------------------------- each deviation alone


def recorded_events(name: str) -> list[dict[str, Any]]:
    """The events of a recorded stream, as JSON (``[DONE]`` left out)."""
    return [json.loads(d) for d in payloads(read(name)) if d != "[DONE]"]


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def decode(*items: dict[str, Any], named: bool = True) -> list[Event]:
    """What the decoder makes of these payloads (``named``: with their event line, as
    llama-server sends them; else data only, as LiteLLM)."""
    dec = OpenAIResponsesStreamDecoder()
    out = [ev for p in items for ev in dec.feed(json.dumps(p), p["type"] if named else None)]
    return out + dec.finish()


TOOLS = recorded_events("llama_cpp/responses_tools_stream.sse")
TEXT = recorded_events("llama_cpp/responses_text_stream.sse")
CALL_ADDED, CALL_DONE = TOOLS[2], of_type(TOOLS, "response.output_item.done")[0]
ARG_DELTAS = of_type(TOOLS, "response.function_call_arguments.delta")
COMPLETED = of_type(TOOLS, "response.completed")[0]
ITEM = CALL_DONE["item"]


def test_the_recorded_events_have_the_deviations_tested_here() -> None:
    assert "output_index" not in CALL_ADDED and "output_index" not in CALL_DONE
    assert all(set(d) == {"type", "delta", "item_id"} for d in ARG_DELTAS)
    assert not of_type(TOOLS, "response.function_call_arguments.done")
    assert not any("sequence_number" in e for e in TOOLS + TEXT)
    assert set(TOOLS[0]["response"]) == {"id", "object", "status"}
    assert "completed_at" not in COMPLETED["response"]


def test_a_call_item_without_output_index_with_deltas_by_item_id() -> None:
    events = decode(TOOLS[0], CALL_ADDED, *ARG_DELTAS, CALL_DONE, COMPLETED)
    start = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.index, s.id, s.name) for s in start] == [(0, ITEM["call_id"], "get_weather")]
    args = "".join(e.delta for e in events if isinstance(e, ToolCallArgsDelta))
    assert args == ITEM["arguments"]
    # No function_call_arguments.done: the call ends at its output_item.done, once.
    ends = [i for i, e in enumerate(events) if isinstance(e, ToolCallEnd)]
    assert len(ends) == 1 and isinstance(events[ends[0] + 1], UsageEvent)
    finish = [e for e in events if isinstance(e, Finish)]
    assert [f.reason for f in finish] == ["tool_calls"]


def test_a_call_without_deltas_takes_its_arguments_from_output_item_done() -> None:
    events = decode(TOOLS[0], CALL_ADDED, CALL_DONE, COMPLETED)
    assert [e for e in events if isinstance(e, ToolCallArgsDelta | ToolCallEnd)] == [
        ToolCallArgsDelta(0, ITEM["arguments"]),
        ToolCallEnd(0),
    ]


def test_a_call_never_done_ends_with_the_response() -> None:
    events = decode(TOOLS[0], CALL_ADDED, *ARG_DELTAS, COMPLETED)
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert ends == [ToolCallEnd(0)]
    assert (
        "".join(e.delta for e in events if isinstance(e, ToolCallArgsDelta)) == (ITEM["arguments"])
    )


def test_deltas_before_a_lost_added_wait_for_output_item_done() -> None:
    """The call item's added never came: its fragments are kept by item id, and its
    ``output_item.done`` starts the call whole."""
    events = decode(TOOLS[0], *ARG_DELTAS, CALL_DONE, COMPLETED)
    start = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.id, s.name) for s in start] == [(ITEM["call_id"], "get_weather")]
    args = "".join(e.delta for e in events if isinstance(e, ToolCallArgsDelta))
    assert args == ITEM["arguments"]
    assert sum(isinstance(e, ToolCallEnd) for e in events) == 1


def renamed(event: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """A recorded event with its ids renamed (a second call of the same shape)."""
    loaded: dict[str, Any] = json.loads(json.dumps(event).replace(old, new))
    return loaded


def test_a_done_item_of_an_unknown_id_is_another_call_not_the_open_one() -> None:
    """Two calls, no ``output_index``: the second one's ``output_item.done`` (its added lost)
    names an id not known — a call of its own, never the open first one."""
    stem = ITEM["id"].removeprefix("fc_")
    second = renamed(CALL_DONE, stem, "second")
    second["item"]["arguments"] = '{"city": "Paris"}'
    events = decode(TOOLS[0], CALL_ADDED, *ARG_DELTAS, second, CALL_DONE, COMPLETED)
    starts = [(e.index, e.id) for e in events if isinstance(e, ToolCallStart)]
    assert starts == [(0, ITEM["call_id"]), (1, "call_second")]
    args = {0: "", 1: ""}
    for e in events:
        if isinstance(e, ToolCallArgsDelta):
            args[e.index] += e.delta
    assert args == {0: ITEM["arguments"], 1: '{"city": "Paris"}'}
    ends = [e.index for e in events if isinstance(e, ToolCallEnd)]
    assert ends == [1, 0]


def test_text_of_an_unknown_item_id_still_goes_out() -> None:
    deltas = [renamed(d, "msg_", "msg_other") for d in of_type(TEXT, "response.output_text.delta")]
    events = decode(*TEXT[:4], *deltas, of_type(TEXT, "response.completed")[0])
    done = of_type(TEXT, "response.output_text.done")[0]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == done["text"]


def test_arguments_of_no_call_at_all_go_out_as_text_with_a_note(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="cursor_bridge"):
        events = decode(TOOLS[0], *ARG_DELTAS, COMPLETED)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == ITEM["arguments"]
    assert len(caplog.records) == 1 and "no known call item" in caplog.records[0].message


def test_text_by_item_id_only() -> None:
    events = decode(*TEXT)
    texts = [e for e in events if isinstance(e, TextDelta)]
    message = of_type(TEXT, "response.output_item.done")[0]["item"]
    assert "".join(t.text for t in texts) == message["content"][0]["text"]
    # The first delta names the item (a Responses client gets the same id back).
    assert texts[0].extra == {NAME: {"item_id": message["id"]}}
    assert all(t.extra == {} for t in texts[1:])


def test_text_without_item_id_goes_to_the_open_message() -> None:
    bare = [{k: v for k, v in e.items() if k != "item_id"} for e in TEXT]
    events = decode(*bare)
    texts = [e for e in events if isinstance(e, TextDelta)]
    message = of_type(TEXT, "response.output_item.done")[0]["item"]
    assert "".join(t.text for t in texts) == message["content"][0]["text"]
    assert texts[0].extra == {NAME: {"item_id": message["id"]}}


def test_text_of_no_known_item_still_goes_out_with_one_note(
    caplog: pytest.LogCaptureFixture,
) -> None:
    deltas = of_type(TEXT, "response.output_text.delta")
    done = of_type(TEXT, "response.output_text.done")
    with caplog.at_level(logging.WARNING, logger="cursor_bridge"):
        events = decode(TEXT[0], *deltas, *done, of_type(TEXT, "response.completed")[0])
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == done[0]["text"]  # once: the done event does not repeat the deltas
    assert len(caplog.records) == 1


def test_text_given_only_in_the_done_event_of_no_known_item() -> None:
    done = of_type(TEXT, "response.output_text.done")
    events = decode(TEXT[0], *done, of_type(TEXT, "response.completed")[0])
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == done[0]["text"]


def test_a_bare_response_created_and_completed() -> None:
    events = decode(*TEXT)
    start = events[0]
    assert isinstance(start, MessageStart)
    assert (start.id, start.model, start.created) == (TEXT[0]["response"]["id"], None, None)
    assert isinstance(events[-1], StreamEnd) and isinstance(events[-2], Finish)
    assert events[-2].reason == "stop"


def test_litellm_events_without_event_lines_and_with_done() -> None:
    """LiteLLM: the type only in the JSON, a top-level ``model`` on each event, ``[DONE]``."""
    raw = read("litellm/responses_tools_stream.sse")
    assert b"event:" not in raw and raw.rstrip().endswith(b"data: [DONE]")
    dec = OpenAIResponsesStreamDecoder()
    events = [ev for d in payloads(raw) for ev in dec.feed(d, None)] + dec.finish()
    item = of_type(recorded_events("litellm/responses_tools_stream.sse"), "response.completed")
    call = item[0]["response"]["output"][0]
    start = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.id, s.name) for s in start] == [(call["call_id"], call["name"])]
    assert sum(isinstance(e, StreamEnd) for e in events) == 1  # [DONE] after completed
    assert not any(isinstance(e, RawEvent | StreamError) for e in events)


ERROR = json.loads(read("llama_cpp/responses_error_context.json"))


@pytest.mark.parametrize("client", CLIENTS)
def test_a_chat_style_error_mid_stream_ends_the_answer_in_the_clients_shape(client: str) -> None:
    """llama-server (and LiteLLM) end a stream that fails after its first token with
    ``data: {"error": {…}}``: no event line, no type (recorded body of the same error)."""
    head = b"".join(b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode()
                    + b"\n\n" for e in TEXT[:6])  # fmt: skip
    raw = head + b"data: " + json.dumps(ERROR).encode() + b"\n\n"
    dec = OpenAIResponsesStreamDecoder()
    error = dec.feed(json.dumps(ERROR), None)
    assert len(error) == 1 and isinstance(error[0], StreamError)
    assert (error[0].message, error[0].http_status) == (ERROR["error"]["message"], 400)
    assert error[0].type == "exceed_context_size_error"
    plan = plan_for(client, stream=True)
    processor = stream_processor(plan, AnswerState.of(plan), None)
    body = feed_pieces(processor, [raw])
    assert processor.error is None and processor.skipped == 0
    assert ERROR["error"]["message"].encode() in body
    if client == "openai_responses":
        pairs = pairs_of(body)
        check_sequence(pairs)
        assert pairs[-1][0] == "response.failed"


ERRORS = [
    f"{server}/{p.name}"
    for server in SERVERS
    for p in sorted((FIXTURES / server).glob("responses_error_*"))
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("name", ERRORS)
def test_recorded_error_bodies_reach_every_client_in_its_shape(name: str, client: str) -> None:
    """A refused request (context too long, an item without ``type``), also on a streamed
    request: a plain JSON 400, OpenAI-shaped, its ``code`` a number (llama.cpp) or a string
    (LiteLLM)."""
    raw = read(name)
    want = json.loads(raw)["error"]["message"]
    body, message = error_body(plan_for(client, stream=name.endswith(".sse")), 400, raw)
    assert message == want
    got = json.loads(body)
    match client:
        case "anthropic":
            assert got["type"] == "error" and got["error"]["message"] == want
            assert got["error"]["type"] == "invalid_request_error"
        case "gemini":
            assert got["error"]["message"] == want and got["error"]["code"] == 400
        case _:
            assert got["error"]["message"] == want
            assert got["error"]["type"] == "invalid_request_error"


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(STREAMS),
    client=st.sampled_from(CLIENTS),
    cuts=st.lists(st.integers(min_value=0), max_size=30),
)
def test_recorded_streams_read_in_any_pieces(name: str, client: str, cuts: list[int]) -> None:
    raw = read(name)
    plan = plan_for(client, stream=True)
    processor = stream_processor(plan, AnswerState.of(plan), None)
    body = feed_pieces(processor, split(raw, cuts))
    assert processor.error is None and processor.skipped == 0
    check(client, name, body, stream=True)
