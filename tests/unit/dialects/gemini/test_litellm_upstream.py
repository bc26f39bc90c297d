"""What LiteLLM's Gemini endpoints (``/v1beta/models/{model}:generateContent`` and
``:streamGenerateContent?alt=sse``, its own adapter over chat completions) really send as a
Gemini upstream (``tests/fixtures/litellm/gemini_*``; the README there lists how it differs
from Google's), replayed into every client dialect: text and tool calls arrive whole, the
tool call ends the turn as a call in each client's dialect, and its errors (OpenAI-shaped,
no Google ``status``) reach every client in its own shape, the Gemini client's included."""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.plan.answer import AnswerState, decode_answer, encode_answer, stream_processor
from addon.plan.errors import error_body, foreign_error
from tests.unit.dialects.test_real_upstreams import (
    CLIENTS,
    INDEX,
    Call,
    _client_error,
    _gemini,
    got_stream,
    got_whole,
    plan_for,
    raw,
)
from tests.unit.helpers import feed_pieces, pairs_of, payloads, split

SERVER = "litellm"
GEMINI = {name: x for name, x in INDEX[SERVER].items() if name.startswith("gemini_")}
STREAMS = sorted(n for n, x in GEMINI.items() if n.endswith(".sse") and x["status"] == 200)
WHOLE = sorted(
    n for n, x in GEMINI.items() if n.endswith(".json") and x["status"] == 200 and "count" not in n
)
ERRORS = sorted(n for n, x in GEMINI.items() if x["status"] >= 400)
TYPES = {
    400: {
        "anthropic": "invalid_request_error",
        "openai_chat": "invalid_request_error",
        "openai_responses": "invalid_request_error",
        "gemini": "INVALID_ARGUMENT",
    },
    401: {
        "anthropic": "authentication_error",
        "openai_chat": "invalid_request_error",  # OpenAI's own 401 (code invalid_api_key)
        "openai_responses": "invalid_request_error",
        "gemini": "UNAUTHENTICATED",
    },
}
"""The type each client dialect gives an error of this status."""


def sent(name: str) -> tuple[str, list[tuple[str, Any]]]:
    """Text and ``(name, args)`` calls of a recording, read straight from its bytes."""
    body = raw(SERVER, name)
    if name.endswith(".sse"):
        chunks = [json.loads(d) for d in payloads(body)]
    else:
        chunks = [json.loads(body)]
    text, calls = _gemini(chunks)
    return text, [(n, args) for _, n, args in calls]


def named(client: str, calls: list[Call]) -> list[tuple[str, Any]]:
    """Calls without their ids: LiteLLM's have none (a Gemini client gets none either), the
    bridge makes one for a client of another dialect."""
    for i, _, _ in calls:
        assert i is None if client == "gemini" else isinstance(i, str) and i
    return [(n, args) for _, n, args in calls]


def test_the_recordings_are_there() -> None:
    assert STREAMS and WHOLE and ERRORS
    assert any(sent(n)[1] for n in STREAMS) and any(sent(n)[1] for n in WHOLE)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("name", STREAMS)
@pytest.mark.parametrize("cut", ["whole", "events", "bytes"])
def test_a_recorded_stream_reaches_every_client_whole(name: str, client: str, cut: str) -> None:
    """``finishReason: null`` on every chunk before the last, ``safetyRatings: []``, a last
    chunk with no parts: the text and calls arrive as sent, in any cut."""
    plan = plan_for(client, "gemini", stream=True)
    body = raw(SERVER, name)
    if cut == "whole":
        pieces = [body]
    elif cut == "events":
        pieces = [e + b"\n\n" for e in body.split(b"\n\n") if e]
    else:
        pieces = split(body, range(3, len(body), 11))
    out = feed_pieces(stream_processor(plan, AnswerState.of(plan), None), pieces)
    text, calls = got_stream(client, out)
    want_text, want_calls = sent(name)
    assert (text, named(client, calls)) == (want_text, want_calls)
    assert want_text or want_calls


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("name", WHOLE)
def test_a_recorded_whole_answer_reaches_every_client(name: str, client: str) -> None:
    plan = plan_for(client, "gemini", stream=False)
    answer = decode_answer(plan, AnswerState.of(plan), raw(SERVER, name), status=200)
    body = json.loads(encode_answer(plan, answer))
    text, calls = got_whole(client, body)
    want_text, want_calls = sent(name)
    assert (text, named(client, calls)) == (want_text, want_calls)
    assert want_text or want_calls


CALL_ENDS = {"anthropic": "tool_use", "openai_chat": "tool_calls"}
"""How each client dialect says a turn ended on a call."""


def _finish(client: str, stream: bool, out: bytes) -> str:
    if not stream:
        body = json.loads(out)
        return str(
            body["stop_reason"] if client == "anthropic" else body["choices"][0]["finish_reason"]
        )
    if client == "anthropic":
        deltas = [json.loads(d) for e, d in pairs_of(out) if e == "message_delta"]
        return str(deltas[-1]["delta"]["stop_reason"])
    chunks = [json.loads(d) for d in payloads(out) if d != "[DONE]"]
    return str([c["finish_reason"] for x in chunks for c in x["choices"] if c["finish_reason"]][-1])


@pytest.mark.parametrize("client", list(CALL_ENDS))
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_a_recorded_call_ends_the_turn_as_a_call(client: str, stream: bool) -> None:
    """LiteLLM ends a call with Google's ``STOP`` (Google does too): the client still hears
    that the turn ended on a call, else an agent would not run the tool."""
    plan = plan_for(client, "gemini", stream=stream)
    if stream:
        body = raw(SERVER, "gemini_tools_stream.sse")
        out = feed_pieces(stream_processor(plan, AnswerState.of(plan), None), [body])
    else:
        body = raw(SERVER, "gemini_tools.json")
        out = encode_answer(plan, decode_answer(plan, AnswerState.of(plan), body, status=200))
    assert _finish(client, stream, out) == CALL_ENDS[client]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("name", ERRORS)
def test_a_recorded_error_reaches_every_client_in_its_shape(name: str, client: str) -> None:
    """Context too long, unknown model, bad upstream key, a key LiteLLM does not know: each
    in OpenAI's shape (``code`` a string) with its status, streamed requests too (plain JSON
    before the first chunk): re-shaped for the client with LiteLLM's message and status."""
    x = GEMINI[name]
    headers = {k.lower(): v for k, v in x["headers"]}
    assert headers["content-type"].startswith("application/json")
    plan = plan_for(client, "gemini", stream=name.endswith(".sse"))
    body, message = error_body(plan, x["status"], raw(SERVER, name))
    kind, text = _client_error(client, json.loads(body))
    assert text == message == json.loads(raw(SERVER, name))["error"]["message"]
    assert kind == TYPES[x["status"]][client]


@pytest.mark.parametrize("name", ERRORS)
def test_a_gemini_client_gets_litellms_error_in_googles_shape(name: str) -> None:
    """Same dialect: LiteLLM's error has Gemini's top-level ``error`` but OpenAI's inside
    (no ``status``, ``code`` a string), which Gemini clients do not read: re-shaped."""
    plan = plan_for("gemini", "gemini", stream=name.endswith(".sse"))
    assert foreign_error(plan, raw(SERVER, name))
    google = {"error": {"code": 400, "message": "m", "status": "INVALID_ARGUMENT"}}
    assert not foreign_error(plan, json.dumps(google).encode())
