"""End to end: an upstream's error reaches every client with the type its official API uses for
the status, whole and at the end of a stream, through the real mitmdump.

The upstreams answer as the real services do: OpenAI a 429 of type ``requests`` with code
``rate_limit_exceeded``, a 401 ``invalid_request_error`` / ``invalid_api_key``, a 500
``server_error``; Anthropic ``rate_limit_error``, ``overloaded_error`` (529) and an ``error``
event inside a 200 stream. The clients are the official SDKs (a Gemini client: plain HTTP).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.harness import (
    JSONReply,
    Proxy,
    ScriptedUpstream,
    SSEReply,
    raw_request,
    sse_from_payloads,
)

KEY = "sk-e2e-error-shapes-key"
ROUTES = """
[[routes]]
name = "chat-on-anthropic"
path = "/up-anthropic/v1/chat/completions"
client = "openai_chat"
upstream = "anthropic"

[[routes]]
name = "responses-on-anthropic"
path = "/up-anthropic/v1/responses"
client = "openai_responses"
upstream = "anthropic"

[[routes]]
name = "claude-on-openai"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_chat"

[[routes]]
name = "gemini-on-openai"
path = "/v1beta/models/*"
client = "gemini"
upstream = "openai_chat"
"""

OPENAI_ERRORS: dict[int, dict[str, Any]] = {
    401: {"message": "Incorrect API key provided.", "type": "invalid_request_error",
          "param": None, "code": "invalid_api_key"},
    429: {"message": "Rate limit reached for requests", "type": "requests", "param": None,
          "code": "rate_limit_exceeded"},
    500: {"message": "The server had an error while processing your request.",
          "type": "server_error", "param": None, "code": None},
    503: {"message": "That model is currently overloaded.", "type": "server_error",
          "param": None, "code": None},
}  # fmt: skip
ANTHROPIC_ERRORS: dict[int, str] = {
    401: "authentication_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@pytest.fixture
def proxy(start_proxy: Callable[..., Proxy], tmp_path: Path) -> Proxy:
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    p = start_proxy(bridge_routes=str(routes))
    yield p  # type: ignore[misc]
    assert "Traceback" not in p.log_text()


def claude(p: Proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=p.base_url, api_key=KEY, max_retries=0, timeout=15)


def cursor(p: Proxy) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{p.base_url}/up-anthropic/v1", api_key=KEY, max_retries=0, timeout=15
    )


def openai_chunks(*payloads: Any) -> bytes:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return sse_from_payloads(
        [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"},
                                  "finish_reason": None}]},
            *payloads,
        ]
    )  # fmt: skip


def anthropic_events(error_type: str) -> bytes:
    events: list[tuple[str, Any]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Hel"}}),
        ("error", {"type": "error", "error": {"type": error_type, "message": "upstream says no"}}),
    ]  # fmt: skip
    return b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in events)


# --------------------------------------------------------------------------- Anthropic clients


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("status", "raised", "kind"),
    [
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (401, anthropic.AuthenticationError, "authentication_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (503, anthropic.InternalServerError, "overloaded_error"),
    ],
)
def test_an_anthropic_client_gets_anthropics_type_for_an_openai_upstreams_error(
    proxy: Proxy,
    upstream: ScriptedUpstream,
    stream: bool,
    status: int,
    raised: type[anthropic.APIStatusError],
    kind: str,
) -> None:
    upstream.enqueue(JSONReply({"error": OPENAI_ERRORS[status]}, status=status))
    with pytest.raises(raised) as info:
        claude(proxy).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}], stream=stream
        )
    body: Any = info.value.body
    assert info.value.status_code == status
    assert body == {
        "type": "error",
        "error": {"type": kind, "message": OPENAI_ERRORS[status]["message"]},
    }


def test_an_anthropic_clients_stream_ends_with_anthropics_type_for_an_openai_error_chunk(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(SSEReply(openai_chunks({"error": OPENAI_ERRORS[429]}), seed=1))
    text: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as info:
        stream = claude(proxy).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}], stream=True
        )
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                text.append(event.delta.text)
    body: Any = info.value.body
    assert "".join(text) == "Hel"
    assert body["error"] == {
        "type": "rate_limit_error",
        "message": "Rate limit reached for requests",
    }


# --------------------------------------------------------------------------- OpenAI clients


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("status", "raised", "kind", "code"),
    [
        (429, openai.RateLimitError, "requests", "rate_limit_exceeded"),
        (401, openai.AuthenticationError, "invalid_request_error", None),
        (500, openai.InternalServerError, "server_error", None),
        (529, openai.InternalServerError, "server_error", None),
    ],
)
def test_an_openai_client_gets_openais_type_for_an_anthropic_upstreams_error(
    proxy: Proxy,
    upstream: ScriptedUpstream,
    stream: bool,
    status: int,
    raised: type[openai.APIStatusError],
    kind: str,
    code: str | None,
) -> None:
    error = {"type": "error", "error": {"type": ANTHROPIC_ERRORS[status], "message": "no"}}
    upstream.enqueue(JSONReply(error, status=status))
    with pytest.raises(raised) as info:
        cursor(proxy).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=stream
        )
    assert info.value.status_code == status
    body: Any = info.value.body
    assert (info.value.type, info.value.code, body["message"]) == (kind, code, "no")
    # The Responses API writes OpenAI's error bodies too.
    upstream.enqueue(JSONReply(error, status=status))
    with pytest.raises(raised) as again:
        cursor(proxy).responses.create(model="m", input="x", stream=stream)
    assert (again.value.type, again.value.code) == (kind, code)


@pytest.mark.parametrize(
    ("upstream_type", "kind", "code"),
    [
        ("rate_limit_error", "requests", "rate_limit_exceeded"),
        ("overloaded_error", "server_error", None),
        ("api_error", "server_error", None),
    ],
)
def test_an_openai_clients_stream_ends_with_openais_type_for_an_anthropic_error_event(
    proxy: Proxy, upstream: ScriptedUpstream, upstream_type: str, kind: str, code: str | None
) -> None:
    upstream.enqueue(SSEReply(anthropic_events(upstream_type), seed=2))
    text: list[str] = []
    with pytest.raises(openai.APIError) as info:
        for chunk in cursor(proxy).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        ):
            text += [c.delta.content or "" for c in chunk.choices]
    assert "".join(text) == "Hel"
    assert (info.value.type, info.value.code, info.value.message) == (
        kind,
        code,
        "upstream says no",
    )


@pytest.mark.parametrize(
    ("upstream_type", "code"),
    [("rate_limit_error", "rate_limit_exceeded"), ("overloaded_error", "server_error")],
)
def test_a_responses_clients_stream_fails_with_the_code_for_the_upstreams_error(
    proxy: Proxy, upstream: ScriptedUpstream, upstream_type: str, code: str
) -> None:
    upstream.enqueue(SSEReply(anthropic_events(upstream_type), seed=3))
    events = list(cursor(proxy).responses.create(model="m", input="x", stream=True))
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.error is not None
    assert (failed.response.error.code, failed.response.error.message) == (code, "upstream says no")


# --------------------------------------------------------------------------- Gemini clients


@pytest.mark.parametrize(
    ("status", "name", "in_stream"),
    [(429, "RESOURCE_EXHAUSTED", 429), (401, "UNAUTHENTICATED", 401), (500, "INTERNAL", 500),
     # In a stream only the chunk's type speaks: OpenAI's server_error is a 500.
     (503, "UNAVAILABLE", 500)],
)  # fmt: skip
def test_a_gemini_client_gets_googles_status_for_an_openai_upstreams_error(
    proxy: Proxy, upstream: ScriptedUpstream, status: int, name: str, in_stream: int
) -> None:
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "x"}]}]}).encode()
    headers = {"x-goog-api-key": KEY, "content-type": "application/json"}
    upstream.enqueue(JSONReply({"error": OPENAI_ERRORS[status]}, status=status))
    got, _, raw = raw_request(proxy.port, "POST", "/v1beta/models/m:generateContent", body, headers)
    assert got == status
    assert json.loads(raw) == {
        "error": {"code": status, "message": OPENAI_ERRORS[status]["message"], "status": name}
    }
    # Streamed: the error chunk that ends the stream names the same status.
    upstream.enqueue(SSEReply(openai_chunks({"error": OPENAI_ERRORS[status]}), seed=4))
    path = "/v1beta/models/m:streamGenerateContent?alt=sse"
    got, _, raw = raw_request(proxy.port, "POST", path, body, headers)
    last = json.loads(raw.decode().strip().split("\n\n")[-1].removeprefix("data: "))
    names = {429: "RESOURCE_EXHAUSTED", 401: "UNAUTHENTICATED", 500: "INTERNAL"}
    assert got == 200 and last["error"]["code"] == in_stream
    assert last["error"]["status"] == names[in_stream]
