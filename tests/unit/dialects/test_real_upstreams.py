"""What llama.cpp's ``llama-server`` and LiteLLM's proxy really send as Anthropic
``/v1/messages`` and OpenAI chat upstreams (``tests/fixtures/{llama_cpp,litellm}/``, their
READMEs list the deviations), replayed into every client dialect: text and tool calls (name,
id, arguments) arrive whole, the client's stream is what its SDK reads, and an upstream's
error (OpenAI-shaped on an Anthropic endpoint too, and a plain JSON error answering a
streamed request) reaches the client in its own shape with the upstream's message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from addon.config import Settings
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, decode_answer, encode_answer, stream_processor
from addon.plan.errors import error_body
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

ROOT = Path(__file__).resolve().parents[2] / "fixtures"
SERVERS = ("llama_cpp", "litellm")
UPSTREAMS = {"chat": "openai_chat", "messages": "anthropic"}
"""A fixture's name prefix → the upstream dialect that sent it."""
CLIENTS = ("openai_chat", "anthropic", "openai_responses", "gemini")
PATHS = {
    "openai_chat": ("*/chat/completions", "/v1/chat/completions"),
    "anthropic": ("*/v1/messages", "/v1/messages"),
    "openai_responses": ("*/responses", "/v1/responses"),
    "gemini": ("*/models/*", "/v1beta/models/smollm2:generateContent"),
}
TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _index(server: str) -> dict[str, dict[str, Any]]:
    index = json.loads((ROOT / server / "index.json").read_text())
    return {x["file"]: x for x in index["exchanges"]}


INDEX = {server: _index(server) for server in SERVERS}


def _files(kind: str) -> list[tuple[str, str]]:
    """``(server, file)`` of every answer of ``kind`` (``stream``, ``whole``, ``error``)."""
    out = []
    for server in SERVERS:
        for name, x in INDEX[server].items():
            if name.split("_", 1)[0] not in UPSTREAMS or "count_tokens" in name:
                continue
            got = "stream" if name.endswith(".sse") else "whole"
            if x["status"] >= 400:
                got = "error"
            if got == kind:
                out.append((server, name))
    return sorted(out)


def _upstream(name: str) -> str:
    return UPSTREAMS[name.split("_", 1)[0]]


def request_body(client: str, stream: bool) -> dict[str, Any]:
    ask = [{"role": "user", "content": "Weather in Berlin?"}]
    if client == "anthropic":
        tools: list[dict[str, Any]] = [
            {
                "name": TOOL["name"],
                "description": TOOL["description"],
                "input_schema": TOOL["schema"],
            }
        ]
        return {
            "model": "smollm2",
            "max_tokens": 64,
            "stream": stream,
            "tools": tools,
            "messages": ask,
        }
    if client == "openai_responses":
        tools = [
            {
                "type": "function",
                "name": TOOL["name"],
                "description": TOOL["description"],
                "parameters": TOOL["schema"],
            }
        ]
        return {"model": "smollm2", "stream": stream, "input": ask, "tools": tools}
    if client == "gemini":
        decl = {
            "name": TOOL["name"],
            "description": TOOL["description"],
            "parameters": TOOL["schema"],
        }
        return {
            "contents": [{"role": "user", "parts": [{"text": "Weather in Berlin?"}]}],
            "tools": [{"functionDeclarations": [decl]}],
        }
    fn = {"name": TOOL["name"], "description": TOOL["description"], "parameters": TOOL["schema"]}
    return {"model": "smollm2", "stream": stream, "messages": ask, "tools": [{"type": "function", "function": fn}]}  # fmt: skip


def plan_for(client: str, upstream: str, stream: bool) -> FlowPlan:
    glob, path = PATHS[client]
    if client == "gemini" and stream:
        path = "/v1beta/models/smollm2:streamGenerateContent?alt=sse"
    route = Route(name="r", client=client, path=glob, upstream=upstream)  # type: ignore[arg-type]
    body = json.dumps(request_body(client, stream)).encode()
    d = decide(
        Settings(), route, Incoming("POST", "h", path, {"authorization": "Bearer t"}, body), {}
    )
    assert isinstance(d, Rewrite), d
    assert d.plan.stream is stream
    return d.plan


def raw(server: str, name: str) -> bytes:
    return (ROOT / server / name).read_bytes()


# ------------------------------------------------------------------ what was sent, read apart


type Call = tuple[str, str, Any]
"""A tool call: ``(id, name, arguments parsed)``."""


def sent(server: str, name: str) -> tuple[str, list[Call]]:
    """The text and the tool calls of a recorded answer, read straight from its bytes."""
    body = raw(server, name)
    if name.endswith(".sse") and name.startswith("chat"):
        acc = accumulate(payloads(body))
        calls = [
            (c["id"], c["name"], json.loads("".join(c["fragments"]))) for c in acc["calls"].values()
        ]
        return acc["content"], calls
    if name.endswith(".sse"):
        return _anthropic(sdk_message(pairs_of(body), strict=False).model_dump())
    whole = json.loads(body)
    if name.startswith("chat"):
        return _chat(whole)
    return _anthropic(whole)


def _anthropic(msg: dict[str, Any]) -> tuple[str, list[Call]]:
    text = "".join(b["text"] for b in msg["content"] if b["type"] == "text")
    calls = [(b["id"], b["name"], b["input"]) for b in msg["content"] if b["type"] == "tool_use"]
    return text, calls


def _chat(whole: dict[str, Any]) -> tuple[str, list[Call]]:
    message = whole["choices"][0]["message"]
    calls = [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]
    return message.get("content") or "", calls


def _gemini(chunks: list[dict[str, Any]]) -> tuple[str, list[Call]]:
    text, calls = "", []
    for chunk in chunks:
        for cand in chunk.get("candidates") or []:
            for part in (cand.get("content") or {}).get("parts") or []:
                if "functionCall" in part:
                    fc = part["functionCall"]
                    calls.append((fc.get("id"), fc["name"], fc.get("args")))
                elif "text" in part and not part.get("thought"):
                    text += part["text"]
    return text, calls


def _responses(response: dict[str, Any]) -> tuple[str, list[Call]]:
    text, calls = "", []
    for item in response["output"]:
        if item["type"] == "message":
            text += "".join(c["text"] for c in item["content"] if c["type"] == "output_text")
        elif item["type"] == "function_call":
            calls.append((item["call_id"], item["name"], json.loads(item["arguments"])))
    return text, calls


def got_stream(client: str, out: bytes) -> tuple[str, list[Call]]:
    """The text and calls a client's SDK reads from its stream (checked well-formed)."""
    pairs = pairs_of(out)
    if client == "anthropic":
        assert all(name != "error" for name, _ in pairs), out
        return _anthropic(sdk_message(pairs).model_dump())
    if client == "openai_responses":
        check_sequence(pairs)
        assert sdk_final(pairs).status == "completed"
        return _responses(json.loads(pairs[-1][1])["response"])
    datas = payloads(out)
    if client == "openai_chat":
        assert datas[-1] == "[DONE]"
        chunks = [json.loads(d) for d in datas[:-1]]
        assert all("error" not in c for c in chunks), out
        acc = accumulate(datas)
        assert acc["finish"] in ("stop", "tool_calls")
        calls = [
            (c["id"], c["name"], json.loads("".join(c["fragments"]))) for c in acc["calls"].values()
        ]
        return acc["content"], calls
    chunks = [json.loads(d) for d in datas]
    assert all("error" not in c for c in chunks), out
    return _gemini(chunks)


def got_whole(client: str, body: dict[str, Any]) -> tuple[str, list[Call]]:
    if client == "anthropic":
        return _anthropic(body)
    if client == "openai_responses":
        return _responses(body)
    if client == "openai_chat":
        return _chat(body)
    return _gemini([body])


# ------------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("server", "name"), _files("stream"))
@pytest.mark.parametrize("cut", ["whole", "events", "bytes"])
def test_a_recorded_stream_reaches_every_client_whole(
    server: str, name: str, client: str, cut: str
) -> None:
    plan = plan_for(client, _upstream(name), stream=True)
    body = raw(server, name)
    if cut == "whole":
        pieces = [body]
    elif cut == "events":
        pieces = [e + b"\n\n" for e in body.split(b"\n\n") if e]
    else:
        pieces = split(body, range(3, len(body), 11))
    out = feed_pieces(stream_processor(plan, AnswerState.of(plan), None), pieces)
    text, calls = got_stream(client, out)
    want_text, want_calls = sent(server, name)
    assert text == want_text
    assert calls == want_calls
    assert want_text or want_calls


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("server", "name"), _files("whole"))
def test_a_recorded_whole_answer_reaches_every_client(server: str, name: str, client: str) -> None:
    plan = plan_for(client, _upstream(name), stream=False)
    answer = decode_answer(plan, AnswerState.of(plan), raw(server, name), status=200)
    body = json.loads(encode_answer(plan, answer))
    text, calls = got_whole(client, body)
    want_text, want_calls = sent(server, name)
    assert text == want_text
    assert calls == want_calls
    assert want_text or want_calls


def _client_error(client: str, body: dict[str, Any]) -> tuple[str, str]:
    """``(type, message)`` of an error body in the client's dialect, checked for its shape."""
    if client == "anthropic":
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
        return body["error"]["type"], body["error"]["message"]
    if client == "gemini":
        err = body["error"]
        assert isinstance(err["code"], int)
        return err["status"], err["message"]
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err["type"], err["message"]


CLIENT_TYPES = {
    "anthropic": "invalid_request_error",
    "openai_chat": "invalid_request_error",
    "openai_responses": "invalid_request_error",
    "gemini": "INVALID_ARGUMENT",
}
"""The type a 400 has in each client dialect."""


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("server", "name"), _files("error"))
def test_a_recorded_error_reaches_every_client_in_its_shape(
    server: str, name: str, client: str
) -> None:
    """Whole or asked as a stream (answered as plain JSON with its status, not SSE: the
    shell re-shapes it whole), on every route."""
    x = INDEX[server][name]
    assert x["status"] == 400
    headers = {k.lower(): v for k, v in x["headers"]}
    assert headers["content-type"].startswith("application/json")
    plan = plan_for(client, _upstream(name), stream=name.endswith(".sse"))
    body, message = error_body(plan, x["status"], raw(server, name))
    kind, text = _client_error(client, json.loads(body))
    upstream = json.loads(raw(server, name))["error"]["message"]
    assert text == message == upstream
    assert kind == CLIENT_TYPES[client]
