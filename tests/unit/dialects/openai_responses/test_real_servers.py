"""Responses upstreams as real servers send them: llama.cpp's ``llama-server`` and LiteLLM's
proxy (``tests/fixtures/llama_cpp/``, ``tests/fixtures/litellm/``; their README lists what
they leave out or add). Every recorded answer, streamed and whole, through the plan's own
pipeline to a client of each dialect: the text and the call (name, id, arguments) arrive
whole, in a stream the official SDKs read. Then each deviation alone, from a recorded event.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from addon.config import Settings
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, decode_answer, encode_answer, stream_processor
from addon.routes import Route
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
