"""An upstream error answered with a 200 — a JSON error body (whole, or where a stream was
promised), an error as a stream's first event — reaches the client in its own dialect with
the status the error's type names, as an error answered with its status does (``success_error``
for whole bodies, the stream's ``StreamError`` status for a body read whole in a stream)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, stream_processor
from addon.plan.errors import named_status, success_error
from tests.unit.helpers import feed_pieces, pairs_of, payloads

CLIENTS = ("openai_chat", "anthropic", "openai_responses", "gemini")
PATHS = {
    "openai_chat": ("*/chat/completions", "/v1/chat/completions"),
    "anthropic": ("*/v1/messages", "/v1/messages"),
    "openai_responses": ("*/responses", "/v1/responses"),
    "gemini": ("*/models/*", "/v1beta/models/m:generateContent"),
}
BODIES: dict[str, dict[str, Any]] = {
    "openai_chat": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
    "anthropic": {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]},
    "openai_responses": {"model": "m", "input": "x"},
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "x"}]}]},
}
ERRORS: dict[str, dict[int, Any]] = {
    "openai_chat": {
        429: {"error": {"message": "m", "type": "requests", "code": "rate_limit_exceeded"}},
        400: {"error": {"message": "m", "type": "invalid_request_error", "code": None}},
    },
    "anthropic": {
        429: {"type": "error", "error": {"type": "rate_limit_error", "message": "m"}},
        400: {"type": "error", "error": {"type": "invalid_request_error", "message": "m"}},
    },
    "gemini": {
        429: {"error": {"code": 429, "message": "m", "status": "RESOURCE_EXHAUSTED"}},
        400: {"error": {"code": 400, "message": "m", "status": "INVALID_ARGUMENT"}},
    },
}
ERRORS["openai_responses"] = ERRORS["openai_chat"]
CLIENT_TYPES = {
    "openai_chat": {429: "requests", 400: "invalid_request_error", 502: "server_error"},
    "anthropic": {429: "rate_limit_error", 400: "invalid_request_error", 502: "api_error"},
    "openai_responses": {429: "requests", 400: "invalid_request_error", 502: "server_error"},
    "gemini": {429: "RESOURCE_EXHAUSTED", 400: "INVALID_ARGUMENT", 502: "UNAVAILABLE"},
}


def plan_for(client: str, upstream: str, stream: bool) -> FlowPlan:
    glob, path = PATHS[client]
    body = dict(BODIES[client])
    if client == "gemini":
        path = path.replace(":generateContent", ":streamGenerateContent?alt=sse" if stream else ":generateContent")  # fmt: skip
    else:
        body["stream"] = stream
    route = Route(name="r", client=client, path=glob, upstream=upstream)  # type: ignore[arg-type]
    incoming = Incoming("POST", "h", path, {"authorization": "Bearer t"}, json.dumps(body).encode())
    d = decide(Settings(), route, incoming, {})
    assert isinstance(d, Rewrite), d
    return d.plan


def client_error(client: str, body: Any) -> tuple[str, str]:
    """``(type, message)`` of an error body in the client's dialect."""
    if client == "anthropic":
        assert body["type"] == "error"
        return body["error"]["type"], body["error"]["message"]
    if client == "gemini":
        return body["error"]["status"], body["error"]["message"]
    return body["error"]["type"], body["error"]["message"]


@pytest.mark.parametrize("status", [429, 400])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("upstream", CLIENTS)
def test_a_200_error_body_gets_the_status_its_type_names(
    upstream: str, client: str, stream: bool, status: int
) -> None:
    plan = plan_for(client, upstream, stream)
    raw = json.dumps(ERRORS[upstream][status]).encode()
    got = success_error(plan, raw)
    assert got is not None
    answered, body, message = got
    assert answered == status and message == "m"
    if upstream == client:
        assert body == raw  # its own shape, as it came
    assert client_error(client, json.loads(body)) == (CLIENT_TYPES[client][status], "m")


@pytest.mark.parametrize("client", CLIENTS)
def test_a_200_error_that_names_no_status_is_a_502(client: str) -> None:
    plan = plan_for(client, "openai_chat", stream=True)
    got = success_error(plan, b'{"error": "the gateway broke"}')
    assert got is not None
    assert got[0] == 502
    if client == "openai_chat":  # same dialect: its own shape, as it came
        assert got[1] == b'{"error": "the gateway broke"}'
        return
    assert client_error(client, json.loads(got[1])) == (
        CLIENT_TYPES[client][502],
        "the gateway broke",
    )


@pytest.mark.parametrize("raw", [b'{"id": "x", "choices": []}', b"[1, 2]", b"not json", b"{}"])
def test_a_body_without_an_error_is_none(raw: bytes) -> None:
    assert success_error(plan_for("anthropic", "openai_chat", stream=False), raw) is None


def test_a_foreign_shape_names_its_status_too() -> None:
    """llama-server writes OpenAI's error shape on ``/v1/messages``: read as OpenAI's."""
    plan = plan_for("anthropic", "anthropic", stream=True)
    llama = {"error": {"code": 400, "message": "too long", "type": "exceed_context_size_error"}}
    assert named_status(plan, llama) == 400
    got = success_error(plan, json.dumps(llama).encode())
    assert got is not None and got[0] == 400
    assert client_error("anthropic", json.loads(got[1])) == ("invalid_request_error", "too long")


def stream_error_type(client: str, out: bytes) -> tuple[str, str]:
    """The type and message of the error that ends a client's stream."""
    if client == "anthropic":
        name, data = pairs_of(out)[-1]
        assert name == "error"
        return client_error(client, json.loads(data))
    if client == "openai_responses":
        response = json.loads(pairs_of(out)[-1][1])["response"]
        return response["error"]["code"], response["error"]["message"]
    chunks = [json.loads(d) for d in payloads(out) if d != "[DONE]"]
    return client_error(client, chunks[-1])


CODES = {429: "rate_limit_exceeded", 400: "invalid_prompt"}
"""A Responses client's stream fails with ``response.error.code`` (the code for the status)."""


@pytest.mark.parametrize("status", [429, 400])
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("upstream", ["openai_chat", "anthropic", "openai_responses"])
def test_a_json_error_where_a_stream_was_promised_ends_it_with_the_type_for_its_status(
    upstream: str, client: str, status: int
) -> None:
    """Sent as ``text/event-stream`` (the status is on its way): the error event's type."""
    if upstream == client:
        pytest.skip("a same-dialect client gets such a body as it came")
    plan = plan_for(client, upstream, stream=True)
    processor = stream_processor(
        plan, AnswerState.of(plan), None, status=200, content_type="text/event-stream"
    )
    out = feed_pieces(processor, [json.dumps(ERRORS[upstream][status]).encode()])
    kind, message = stream_error_type(client, out)
    want = CODES[status] if client == "openai_responses" else CLIENT_TYPES[client][status]
    assert (kind, message) == (want, "m")


RESPONSES_ERROR = {
    429: {"type": "error", "code": "rate_limit_exceeded", "message": "m", "param": None},
    400: {"type": "error", "code": "invalid_prompt", "message": "m", "param": None},
}
FIRST_EVENT = {
    "openai_chat": lambda s: f"data: {json.dumps(ERRORS['openai_chat'][s])}\n\n",
    "anthropic": lambda s: f"event: error\ndata: {json.dumps(ERRORS['anthropic'][s])}\n\n",
    "openai_responses": lambda s: f"event: error\ndata: {json.dumps(RESPONSES_ERROR[s])}\n\n",
    "gemini": lambda s: f"data: {json.dumps(ERRORS['gemini'][s])}\n\n",
}


@pytest.mark.parametrize("status", [429, 400])
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("upstream", sorted(FIRST_EVENT))
def test_an_error_as_a_streams_first_event_ends_it_with_the_type_for_its_status(
    upstream: str, client: str, status: int
) -> None:
    if upstream == client:
        pytest.skip("a same-dialect client gets the upstream's own event")
    plan = plan_for(client, upstream, stream=True)
    processor = stream_processor(plan, AnswerState.of(plan), None)
    out = feed_pieces(processor, [FIRST_EVENT[upstream](status).encode()])
    kind, message = stream_error_type(client, out)
    want = CODES[status] if client == "openai_responses" else CLIENT_TYPES[client][status]
    assert (kind, message) == (want, "m")


def test_a_kiro_json_naming_no_status_is_told_as_what_came() -> None:
    """Kiro answers in frames only: a JSON body (a gateway's sign-in note) that names no
    status is left to the description of what came instead (status, type, first bytes)."""
    route = Route(name="k", client="anthropic", path="*/v1/messages", upstream="kiro")  # type: ignore[arg-type]
    body = json.dumps(BODIES["anthropic"]).encode()
    incoming = Incoming("POST", "h", "/v1/messages", {"authorization": "Bearer t"}, body)
    d = decide(Settings(), route, incoming, {})
    assert isinstance(d, Rewrite), d
    assert d.plan.upstream_framing == "aws_eventstream"
    assert success_error(d.plan, b'{"message": "Session expired, sign in again"}') is None
