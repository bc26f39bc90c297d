"""End to end through a real mitmdump, read by the official SDKs (a Gemini client: plain HTTP):

- token counts from the real servers' recordings (``tests/fixtures/``): a Gemini client of
  an Anthropic upstream (llama-server's input at ``message_start``, output at
  ``message_delta``; LiteLLM's zeros first) gets every count, none as a wrong 0; an
  Anthropic client of a chat upstream gets the cache reads as ``cache_read_input_tokens``,
  apart from ``input_tokens``;
- an upstream error answered with a 200 (a JSON error body, to a streamed request or not)
  reaches the client in its own dialect with the status its type names (rate limit → 429,
  invalid request → 400, a type that names none → 502), as an error answered with its
  status does; a 200 stream whose first event is an error ends the client's stream with
  the type for the same status.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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

KEY = "sk-e2e-usage-and-200-errors"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROUTES = """
[[routes]]
name = "gemini-on-anthropic"
path = "/v1beta/models/*"
client = "gemini"
upstream = "anthropic"

[[routes]]
name = "claude-on-openai"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_chat"

[[routes]]
name = "chat-on-anthropic"
path = "/up-anthropic/v1/chat/completions"
client = "openai_chat"
upstream = "anthropic"

[[routes]]
name = "chat-on-openai"
path = "/up-openai/v1/chat/completions"
client = "openai_chat"
upstream = "openai_chat"
"""
GEMINI_BODY = json.dumps({"contents": [{"role": "user", "parts": [{"text": "x"}]}]}).encode()
GEMINI_HEADERS = {"x-goog-api-key": KEY, "content-type": "application/json"}
STREAM_PATH = "/v1beta/models/m:streamGenerateContent?alt=sse"
WHOLE_PATH = "/v1beta/models/m:generateContent"


@pytest.fixture(scope="module")
def proxy(
    _upstream_server: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    """One mitmdump with these routes for the module, before the session's upstream."""
    routes = tmp_path_factory.mktemp("routes") / "routes.toml"
    routes.write_text(ROUTES)
    with Proxy(_upstream_server.port, {"bridge_routes": str(routes)}) as p:
        yield p
        assert "Traceback" not in p.log_text()


def claude(p: Proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=p.base_url, api_key=KEY, max_retries=0, timeout=15)


def cursor(p: Proxy, prefix: str = "/up-anthropic") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{p.base_url}{prefix}/v1", api_key=KEY, max_retries=0, timeout=15
    )


def recorded(server: str, name: str) -> bytes:
    return (FIXTURES / server / name).read_bytes()


def anthropic_counts(body: bytes) -> dict[str, int]:
    """A recorded ``/v1/messages`` answer's counts, later events' over earlier ones'."""
    if not body.lstrip().startswith(b"event:"):
        counts: dict[str, int] = json.loads(body)["usage"]
        return counts
    counts = {}
    for block in body.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                counts.update((event.get("message") or event).get("usage") or {})
    return counts


def sse_chunks(raw: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(block.removeprefix("data: "))
        for block in raw.decode().strip().split("\n\n")
        if block.startswith("data: ") and block != "data: [DONE]"
    ]


# --------------------------------------------------------------------------- usage


@pytest.mark.parametrize(
    "name", ["messages_text_stream.sse", "messages_tools_stream.sse", "messages_text.json"]
)
@pytest.mark.parametrize("server", ["llama_cpp", "litellm"])
def test_a_gemini_client_gets_every_count_an_anthropic_upstream_gave(
    proxy: Proxy, upstream: ScriptedUpstream, server: str, name: str
) -> None:
    body = recorded(server, name)
    stream = name.endswith(".sse")
    upstream.enqueue(SSEReply(body, seed=5) if stream else JSONReply(json.loads(body)))
    status, _, raw = raw_request(
        proxy.port, "POST", STREAM_PATH if stream else WHOLE_PATH, GEMINI_BODY, GEMINI_HEADERS
    )
    assert status == 200
    meta = (sse_chunks(raw)[-1] if stream else json.loads(raw))["usageMetadata"]
    counts = anthropic_counts(body)
    read = counts.get("cache_read_input_tokens", 0)
    prompt = counts["input_tokens"] + read
    assert read > 0 and counts["output_tokens"] > 0
    assert meta == {
        "promptTokenCount": prompt,
        "candidatesTokenCount": counts["output_tokens"],
        "totalTokenCount": prompt + counts["output_tokens"],
        "cachedContentTokenCount": read,
    }


def test_a_gemini_client_is_told_no_count_that_never_came(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    """An Anthropic stream that says only its output: no prompt count and no total, rather
    than a 0 the Gemini SDK would read as a count."""
    events = [
        e
        for e in recorded("llama_cpp", "messages_text_stream.sse").decode().split("\n\n")
        if e.strip()
    ]
    start = json.loads(events[0].split("data: ", 1)[1])
    del start["message"]["usage"]
    events[0] = f"event: message_start\ndata: {json.dumps(start)}"
    upstream.enqueue(SSEReply(("\n\n".join(events) + "\n\n").encode(), seed=6))
    status, _, raw = raw_request(proxy.port, "POST", STREAM_PATH, GEMINI_BODY, GEMINI_HEADERS)
    assert status == 200
    assert sse_chunks(raw)[-1]["usageMetadata"] == {"candidatesTokenCount": 7}


@pytest.mark.parametrize("name", ["chat_tools_stream.sse", "chat_tools.json"])
@pytest.mark.parametrize("server", ["llama_cpp", "litellm"])
def test_an_anthropic_client_gets_a_chat_upstreams_cache_reads_apart(
    proxy: Proxy, upstream: ScriptedUpstream, server: str, name: str
) -> None:
    body = recorded(server, name)
    stream = name.endswith(".sse")
    upstream.enqueue(SSEReply(body, seed=7) if stream else JSONReply(json.loads(body)))
    ask: Any = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "x"}]}
    if stream:
        with claude(proxy).messages.stream(**ask) as s:
            usage = s.get_final_message().usage
        sent = next(c["usage"] for c in sse_chunks(body)[::-1] if c.get("usage"))
    else:
        usage = claude(proxy).messages.create(**ask).usage
        sent = json.loads(body)["usage"]
    cached = sent["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0
    assert usage.cache_read_input_tokens == cached
    assert usage.input_tokens == sent["prompt_tokens"] - cached
    assert usage.output_tokens == sent["completion_tokens"]


# --------------------------------------------------------------------------- 200 errors

OPENAI_RATE_LIMIT = {
    "error": {
        "message": "Rate limit reached",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
OPENAI_INVALID = {
    "error": {
        "message": "context too long",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("error", "status", "raised", "kind"),
    [
        (OPENAI_RATE_LIMIT, 429, anthropic.RateLimitError, "rate_limit_error"),
        (OPENAI_INVALID, 400, anthropic.BadRequestError, "invalid_request_error"),
        ({"error": "the gateway broke"}, 502, anthropic.InternalServerError, "api_error"),
    ],
)
def test_an_anthropic_client_gets_a_200_error_with_the_status_its_type_names(
    proxy: Proxy,
    upstream: ScriptedUpstream,
    stream: bool,
    error: dict[str, Any],
    status: int,
    raised: type[anthropic.APIStatusError],
    kind: str,
) -> None:
    upstream.enqueue(JSONReply(error, status=200))
    with pytest.raises(raised) as info:
        claude(proxy).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}], stream=stream
        )
    body: Any = info.value.body
    assert info.value.status_code == status
    assert body["type"] == "error" and body["error"]["type"] == kind
    message = error["error"] if isinstance(error["error"], str) else error["error"]["message"]
    assert body["error"]["message"] == message


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("prefix", ["/up-anthropic", "/up-openai"])
def test_an_openai_client_gets_a_200_error_with_the_status_its_type_names(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool, prefix: str
) -> None:
    """From an Anthropic upstream (re-shaped) and from an OpenAI one (same dialect: its own
    body, the status its type names)."""
    if prefix == "/up-anthropic":
        error: Any = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}
    else:
        error = {**OPENAI_RATE_LIMIT, "error": {**OPENAI_RATE_LIMIT["error"], "message": "slow"}}
    upstream.enqueue(JSONReply(error, status=200))
    with pytest.raises(openai.RateLimitError) as info:
        cursor(proxy, prefix).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=stream
        )
    assert info.value.status_code == 429
    body: Any = info.value.body
    assert (info.value.type, info.value.code, body["message"]) == (
        "requests",
        "rate_limit_exceeded",
        "slow",
    )


@pytest.mark.parametrize("path", [WHOLE_PATH, STREAM_PATH])
def test_a_gemini_client_gets_a_200_error_with_the_status_its_type_names(
    proxy: Proxy, upstream: ScriptedUpstream, path: str
) -> None:
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "too long"}}
    upstream.enqueue(JSONReply(error, status=200))
    status, headers, raw = raw_request(proxy.port, "POST", path, GEMINI_BODY, GEMINI_HEADERS)
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert json.loads(raw) == {
        "error": {"code": 400, "message": "too long", "status": "INVALID_ARGUMENT"}
    }


def test_a_200_stream_that_is_a_json_error_ends_with_the_type_for_its_status(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    """Sent as ``text/event-stream`` (the headers are on their way): the client's stream
    ends with the error its type names (a rate limit), not a 502's."""
    upstream.enqueue(SSEReply(json.dumps(OPENAI_RATE_LIMIT).encode(), seed=8))
    with pytest.raises(anthropic.APIStatusError) as info:
        for _ in claude(proxy).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}], stream=True
        ):
            pass
    body: Any = info.value.body
    assert body["error"] == {"type": "rate_limit_error", "message": "Rate limit reached"}


def test_a_200_stream_whose_first_event_is_an_error_ends_with_the_type_for_its_status(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(SSEReply(sse_from_payloads([OPENAI_INVALID]), seed=9))
    with pytest.raises(anthropic.APIStatusError) as info:
        for _ in claude(proxy).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}], stream=True
        ):
            pass
    body: Any = info.value.body
    assert body["error"] == {"type": "invalid_request_error", "message": "context too long"}
