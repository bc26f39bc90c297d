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

from addon.config.options import Settings
from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.model import Thinking, ThinkingDelta
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, decode_answer, encode_answer, stream_processor
from addon.plan.errors import error_body, foreign_error
from tests.unit.helpers import (
    accumulate,
    check_sequence,
    feed_pieces,
    pairs_of,
    payloads,
    sdk_final,
    sdk_message,
    split,
    sse_events,
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
    shell buffers it and re-shapes it whole, ``addon.shell.whole_answers.translate_error``). On a
    same-dialect route only an error in another dialect's shape is re-shaped (below)."""
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


# ------------------------------------------- each deviation alone, built from recorded events


def recorded_events(server: str, name: str) -> list[tuple[str | None, Any]]:
    """A recorded stream's events: ``(event name, parsed data)``."""
    return [
        (e.event, e.data if e.data == "[DONE]" else json.loads(e.data))
        for e in sse_events(raw(server, name))
    ]


def sse(events: list[tuple[str | None, Any]]) -> bytes:
    """Events framed as llama-server frames them (compact JSON)."""
    out = b""
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        out += ((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode()
    return out


def at(event: tuple[str | None, Any], index: int) -> tuple[str | None, Any]:
    name, data = event
    return name, {**data, "index": index}


def replay(client: str, upstream: str, body: bytes) -> bytes:
    plan = plan_for(client, upstream, stream=True)
    return feed_pieces(stream_processor(plan, AnswerState.of(plan), None), [body])


TEXT = recorded_events("llama_cpp", "messages_text_stream.sse")
TOOLS = recorded_events("llama_cpp", "messages_tools_stream.sse")
CHAT = recorded_events("llama_cpp", "chat_text_stream.sse")


def test_the_recorded_tool_use_start_has_no_input() -> None:
    """What the stream tests above read: llama-server's ``tool_use`` start without ``input``."""
    start = TOOLS[1][1]
    assert start["content_block"]["type"] == "tool_use"
    assert "input" not in start["content_block"]


@pytest.mark.parametrize("client", CLIENTS)
def test_every_block_stopped_at_the_end(client: str) -> None:
    """llama-server stops its blocks only at the end: a text block is still open when the
    ``tool_use`` block starts. Text and call both arrive whole."""
    start, text_start, *text_deltas = TEXT[:-3]
    text_stop = TEXT[-3]
    tool_start, *tool_deltas = TOOLS[1:-3]
    events = [
        start,
        text_start,
        *text_deltas,
        at(tool_start, 1),
        *(at(d, 1) for d in tool_deltas),
        text_stop,
        at(TOOLS[-3], 1),
        *TOOLS[-2:],
    ]
    assert [e[0] for e in events[-4:]] == [
        "content_block_stop",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    text, calls = got_stream(client, replay(client, "anthropic", sse(events)))
    assert text == sent("llama_cpp", "messages_text_stream.sse")[0]
    assert calls == sent("llama_cpp", "messages_tools_stream.sse")[1]


def _thinking_then_text() -> bytes:
    thinking = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me think."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": ""}},
    ]  # fmt: skip
    events = [
        TEXT[0],
        *((e["type"], e) for e in thinking),
        *(at(e, 1) for e in TEXT[1:-3]),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        *TEXT[-3:],
    ]
    return sse(events)


def test_an_empty_signature_is_no_signature() -> None:
    """llama-server ends a thinking block with ``signature_delta`` ``""`` (and a whole
    answer's thinking block has ``signature: ""``): never a signature to keep or send back."""
    decoder = DIALECTS["anthropic"].stream_decoder()
    events = [
        e for ev in sse_events(_thinking_then_text()) for e in decoder.feed(ev.data, ev.event)
    ]
    thinking = [e for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(e.text for e in thinking) == "Let me think."
    assert all(e.signature is None for e in thinking)
    whole = json.loads(raw("llama_cpp", "messages_text.json"))
    whole["content"].insert(0, {"type": "thinking", "thinking": "Hm.", "signature": ""})
    answer = DIALECTS["anthropic"].decode_response(whole)
    assert [p.signature for p in answer.parts if isinstance(p, Thinking)] == [None]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_thinking_block_with_an_empty_signature_reaches_every_client(client: str) -> None:
    out = replay(client, "anthropic", _thinking_then_text())
    text, calls = got_stream(client, out)
    assert (text, calls) == (sent("llama_cpp", "messages_text_stream.sse")[0], [])
    assert b"Let me think." in out
    for written in (
        b"signature_delta",
        b"thoughtSignature",
        b"encrypted_content",
        b"thought_signature",
    ):
        assert written not in out


def stream_error(client: str, out: bytes) -> tuple[str, str, str]:
    """``(text before it, error type, message)`` of a client stream that ended in an error,
    checked well-formed for the client's SDK."""
    pairs = pairs_of(out)
    if client == "anthropic":
        assert pairs[-1][0] == "error"
        err = json.loads(pairs[-1][1])
        assert set(err) == {"type", "error"} and err["type"] == "error"
        text = _anthropic(sdk_message(pairs).model_dump())[0]
        return text, err["error"]["type"], err["error"]["message"]
    if client == "openai_responses":
        datas = check_sequence(pairs, unended=True)
        assert datas[-1]["type"] == "response.failed"
        response = datas[-1]["response"]
        return _responses(response)[0], response["error"]["code"], response["error"]["message"]
    datas = payloads(out)
    chunks = [json.loads(d) for d in datas if d != "[DONE]"]
    err = chunks[-1]["error"]
    if client == "openai_chat":  # same dialect: the upstream's own chunk, as it came
        assert {"message", "type"} <= set(err)
        return accumulate(datas)["content"], err["type"], err["message"]
    return _gemini(chunks[:-1])[0], err["status"], err["message"]


SERVER_ERROR = {
    "anthropic": "api_error",
    "openai_chat": "server_error",
    "openai_responses": "server_error",
    "gemini": "INTERNAL",
}
"""What a 500 is called in each client dialect."""
BAD_REQUEST_IN_STREAM = {**CLIENT_TYPES, "openai_responses": "invalid_prompt"}
"""What a 400 is called in the error that ends each client dialect's stream (Responses:
``response.failed``'s ``error.code``)."""


@pytest.mark.parametrize(
    ("code", "kind"), [(500, "server_error"), (400, "exceed_context_size_error")]
)
@pytest.mark.parametrize("client", CLIENTS)
def test_a_bare_anthropic_error_event_ends_every_client_stream(
    client: str, code: int, kind: str
) -> None:
    """llama-server's ``/v1/messages`` error after the first token: ``event: error`` with the
    error object itself (no ``{"type": "error", "error": …}`` wrapper; its ``type`` is
    llama.cpp's, its ``code`` the status)."""
    boom = {"code": code, "message": "the slot died", "type": kind}
    out = replay(client, "anthropic", sse([*TEXT[:4], ("error", boom)]))
    text, written, message = stream_error(client, out)
    assert text == "I'm"
    assert message == "the slot died"
    assert written == (SERVER_ERROR if code == 500 else BAD_REQUEST_IN_STREAM)[client]


@pytest.mark.parametrize("code", [500, "500"])
@pytest.mark.parametrize("client", CLIENTS)
def test_a_chat_error_chunk_ends_every_client_stream(client: str, code: int | str) -> None:
    """llama-server's chat error after the first token: ``data: {"error": {…}}`` (LiteLLM
    writes its ``code`` as a string)."""
    boom = {"error": {"code": code, "message": "the slot died", "type": "server_error"}}
    out = replay(client, "openai_chat", sse([*CHAT[:3], (None, boom)]))
    text, kind, message = stream_error(client, out)
    assert text == "Hello,"
    assert message == "the slot died"
    assert kind == SERVER_ERROR[client]


def _anthropic_usage(events: list[tuple[str | None, Any]]) -> dict[str, int]:
    """The counts of a recorded ``/v1/messages`` stream: ``message_start``'s, then
    ``message_delta``'s over them (LiteLLM's start has zeros and the real counts at the end)."""
    usage: dict[str, int] = {}
    for _, data in events:
        usage.update((data.get("message") or data).get("usage") or {})
    return usage


MESSAGES_STREAMS = [f for f in _files("stream") if f[1].startswith("messages")]


@pytest.mark.parametrize(("server", "name"), MESSAGES_STREAMS)
def test_a_chat_client_gets_every_count(server: str, name: str) -> None:
    """The last usage chunk (the one an OpenAI SDK keeps) has the input from the start, the
    output from the end, and counts cache reads in ``prompt_tokens`` as OpenAI does."""
    usage = _anthropic_usage(recorded_events(server, name))
    out = replay("openai_chat", "anthropic", raw(server, name))
    last = accumulate(payloads(out))["usage"]
    read = usage.get("cache_read_input_tokens", 0)
    prompt = usage["input_tokens"] + read + usage.get("cache_creation_input_tokens", 0)
    assert last["prompt_tokens"] == prompt > 0
    assert last["completion_tokens"] == usage["output_tokens"] > 0
    assert last["total_tokens"] == prompt + usage["output_tokens"]
    assert last.get("prompt_tokens_details", {}).get("cached_tokens", 0) == read


@pytest.mark.parametrize(("server", "name"), _files("error"))
def test_a_same_dialect_client_gets_an_error_in_its_own_shape(server: str, name: str) -> None:
    """On a same-dialect route an upstream error passes on as it came, unless it is in
    another dialect's shape (llama-server's OpenAI-shaped errors on ``/v1/messages``): that
    one is re-shaped (``foreign_error``), as for a client of another dialect."""
    upstream = _upstream(name)
    plan = plan_for(upstream, upstream, stream=name.endswith(".sse"))
    body = raw(server, name)
    openai_shaped = "type" not in json.loads(body)
    assert foreign_error(plan, body) is (upstream == "anthropic" and openai_shaped)
    assert openai_shaped is (server == "llama_cpp" or upstream == "openai_chat")
    assert not foreign_error(plan, b"<html>not JSON</html>")
