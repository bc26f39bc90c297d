"""End to end, issue 8's streams: what an upstream's stream breaks never reaches a client wrongly.

Through a real ``mitmdump -s addon/main.py`` on the default routes (``/v1/chat/completions``
OpenAI → OpenAI; ``/v1/messages`` Anthropic → OpenAI; ``/v1/responses`` Responses → OpenAI;
``…:streamGenerateContent`` Gemini → OpenAI) in front of the scripted upstream:

- a 200 ``text/event-stream`` whose body is JSON, HTML or plain text passes on untouched to a
  same-dialect client and is an error in its own dialect for every other client (a whole
  answer in it is rewritten);
- a stream the upstream cut shows as cut to every client (no ``[DONE]``, an ``error`` event
  and no ``message_stop``, ``response.failed``, a Gemini error chunk);
- a malformed event on a dialect-changing route is skipped with one log line;
- a line that never ends is bounded (``bridge_max_event_bytes``): passed on (same dialect) or
  ended with an error event, and the proxy's memory does not follow it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.e2e.harness import (
    Proxy,
    ScriptedUpstream,
    SSEReply,
    raw_request,
    stream_request,
)

BAD_LOG = ("Traceback", "Logging error", "internal error", "Addon error", "Error logged")
CHUNK = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({**CHUNK, "choices": [choice]}).encode() + b"\n\n"


HELLO = chunk({"role": "assistant"}) + chunk({"content": "Hel"}) + chunk({"content": "lo"})
END = chunk({}, "stop") + b"data: [DONE]\n\n"

CLIENTS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai_chat": (
        "/v1/chat/completions",
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "anthropic": (
        "/v1/messages",
        {
            "model": "m",
            "max_tokens": 50,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        },
    ),
    "openai_responses": ("/v1/responses", {"model": "m", "stream": True, "input": "hi"}),
    "gemini": (
        "/v1beta/models/m:streamGenerateContent?alt=sse",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    ),
}


def send(proxy: Proxy, client: str) -> tuple[int, bytes]:
    path, body = CLIENTS[client]
    got = stream_request(proxy.port, "POST", path, json.dumps(body).encode(), timeout=10)
    return got.status, got.body


def outcome_of_next_flow(proxy: Proxy, since: int) -> str:
    """The ``outcome`` of the first ``cursor-bridge flow`` line logged after ``since``."""
    regex = re.compile(r"cursor-bridge flow .*?outcome=(\w+)")
    deadline = time.monotonic() + 10
    while (m := regex.search(proxy.log_text(), since)) is None:
        assert time.monotonic() < deadline, proxy.log_text()[since:]
        time.sleep(0.05)
    return m.group(1)


def events(body: bytes) -> list[tuple[str | None, Any]]:
    """``(event name, data)`` of an SSE body, data parsed as JSON where it is JSON."""
    out: list[tuple[str | None, Any]] = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, []
        for line in block.decode().split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            text = "\n".join(data)
            try:
                out.append((name, json.loads(text)))
            except ValueError:
                out.append((name, text))
    return out


def failure(client: str, body: bytes) -> str:
    """The error message a client of ``client``'s dialect got at the end of its stream, after
    checking that the stream does not also claim to be complete."""
    evs = events(body)
    assert evs, body
    name, last = evs[-1]
    names = [n for n, _ in evs]
    match client:
        case "openai_chat":
            assert "[DONE]" not in [d for _, d in evs]
            return str(last["error"]["message"])
        case "anthropic":
            assert name == "error" and "message_stop" not in names, names
            return str(last["error"]["message"])
        case "openai_responses":
            assert name == "response.failed" and "response.completed" not in names, names
            return str(last["response"]["error"]["message"])
        case _:
            assert "error" in last, last
            finishes = [c.get("finishReason") for _, d in evs for c in (d.get("candidates") or [])]
            assert not any(finishes)
            return str(last["error"]["message"])


def text_of(client: str, body: bytes) -> str:
    out = []
    for name, d in events(body):
        if not isinstance(d, dict):
            continue
        if client == "openai_chat":
            out += [c["delta"].get("content") or "" for c in d.get("choices", [])]
        elif client == "anthropic" and name == "content_block_delta":
            out.append(d["delta"].get("text", ""))
        elif client == "openai_responses" and name == "response.output_text.delta":
            out.append(d["delta"])
        elif client == "gemini":
            for c in d.get("candidates") or []:
                out += [p.get("text", "") for p in c.get("content", {}).get("parts", [])]
    return "".join(out)


def clean_log(proxy: Proxy) -> str:
    text = proxy.log_text()
    for bad in BAD_LOG:
        assert bad not in text, f"{bad!r} in the log:\n{text}"
    return text


# --------------------------------------------------------------------------- not an event stream

NOT_STREAMS = {
    "json error": (
        b'{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}}',
        "You exceeded your current quota",
    ),
    "html page": (b"<html><body><h1>502 Bad Gateway</h1></body></html>\n", "502 Bad Gateway"),
    "plain text": (b"upstream connect error or disconnect/reset before headers", "reset"),
}


@pytest.mark.parametrize("kind", list(NOT_STREAMS))
@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_200_event_stream_that_is_not_one_is_never_eaten(
    proxy: Proxy, upstream: ScriptedUpstream, client: str, kind: str
) -> None:
    body, said = NOT_STREAMS[kind]
    upstream.enqueue(SSEReply(body, chunk_min=5, chunk_max=40))
    since = len(proxy.log_text())
    status, got = send(proxy, client)
    assert status == 200
    if client == "openai_chat":
        assert got == body  # same dialect: as the upstream sent it
    else:
        assert said in failure(client, got)
    # Passed through, or ended with an error the bridge wrote: ⚠ either way.
    assert outcome_of_next_flow(proxy, since) == "not_rewritten"
    clean_log(proxy)


def test_a_client_that_hangs_up_after_the_streams_error_leaves_it_an_error(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    """The upstream's 200 is not an event stream and it keeps its connection open; the client
    reads the error event the bridge wrote and hangs up. The flow is still ⚠ not_rewritten
    with that error as its reason (not ``rewritten`` with "Client disconnected")."""
    body, said = NOT_STREAMS["html page"]
    upstream.enqueue(SSEReply(body, chunk_min=5, chunk_max=40, linger=3.0))
    since = len(proxy.log_text())
    path, request = CLIENTS["anthropic"]
    with (
        httpx.Client(timeout=10) as http_client,
        http_client.stream(
            "POST", f"{proxy.base_url}{path}", json=request, headers={"x-api-key": "k"}
        ) as resp,
    ):
        seen = b""
        for part in resp.iter_bytes():
            seen += part
            if b"event: error" in seen and seen.endswith(b"\n\n"):
                break  # hang up at once, the upstream still open
    assert said.encode() in seen
    assert outcome_of_next_flow(proxy, since) == "not_rewritten"
    line = re.search(r"cursor-bridge flow .*", proxy.log_text()[since:])
    assert line is not None and "Client disconnected" not in line.group(0), line
    clean_log(proxy)


@pytest.mark.parametrize("client", ["anthropic", "openai_responses", "gemini"])
def test_a_whole_answer_sent_as_an_event_stream_is_rewritten(
    proxy: Proxy, upstream: ScriptedUpstream, client: str
) -> None:
    answer = {
        "id": "chatcmpl-w",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "fine"},
                "finish_reason": "stop",
            }
        ],
    }
    upstream.enqueue(SSEReply(json.dumps(answer).encode(), chunk_min=3, chunk_max=30))
    since = len(proxy.log_text())
    status, got = send(proxy, client)
    assert status == 200 and text_of(client, got) == "fine"
    assert "upstream_error" not in got.decode()
    assert outcome_of_next_flow(proxy, since) == "rewritten"
    clean_log(proxy)


# --------------------------------------------------------------------------- cut streams


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_cut_stream_shows_as_cut_to_every_client(
    proxy: Proxy, upstream: ScriptedUpstream, client: str
) -> None:
    upstream.enqueue(SSEReply(HELLO, chunk_min=4, chunk_max=30))
    since = len(proxy.log_text())
    status, got = send(proxy, client)
    assert status == 200 and text_of(client, got) == "Hello"
    assert "cut" in failure(client, got)
    assert outcome_of_next_flow(proxy, since) == "not_rewritten"  # the bridge ended it: ⚠
    clean_log(proxy)


def test_real_sdks_raise_on_a_cut_stream(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(SSEReply(HELLO))
    oai = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=10)
    seen = []
    with pytest.raises(openai.APIError, match="cut"):
        for c in oai.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            seen += [ch.delta.content or "" for ch in c.choices]
    assert "".join(seen) == "Hello"

    upstream.enqueue(SSEReply(HELLO))
    ant = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=10)
    with (
        pytest.raises(anthropic.APIStatusError, match="cut"),
        ant.messages.stream(
            model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        for _ in stream:
            pass


def test_a_complete_stream_still_ends_cleanly(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    for client in CLIENTS:
        upstream.enqueue(SSEReply(HELLO + END))
        status, got = send(proxy, client)
        assert status == 200 and text_of(client, got) == "Hello"
        assert b"upstream_cut" not in got and b"cut short" not in got, (client, got)
        names = [n for n, _ in events(got)]
        assert "error" not in names and "response.failed" not in names


# --------------------------------------------------------------------------- malformed events


def test_a_malformed_event_is_skipped_for_another_dialect(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    body = HELLO[:-10] + HELLO[-10:] + b"data: {not json\n\n" + chunk({"content": "!"}) + END
    upstream.enqueue(SSEReply(body, chunk_min=3, chunk_max=20))
    ant = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=10)
    with ant.messages.stream(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        message = stream.get_final_message()
    assert [b.text for b in message.content if b.type == "text"] == ["Hello!"]
    assert message.stop_reason == "end_turn"
    log = proxy.wait_for_log("1 unreadable upstream event(s) skipped").string
    assert log.count("unreadable upstream event") == 1
    clean_log(proxy)


def test_a_malformed_event_passes_through_to_the_same_dialect(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    body = HELLO + b"data: {not json\n\n" + END
    upstream.enqueue(SSEReply(body))
    status, got = send(proxy, "openai_chat")
    assert status == 200 and got.endswith(b"data: {not json\n\n" + END)
    clean_log(proxy)


# --------------------------------------------------------------------------- bounds

LIMIT = 64 * 1024


def peak_rss_kb(proxy: Proxy) -> int:
    pid = proxy._proc.pid if proxy._proc is not None else None
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))


def test_a_line_that_never_ends_is_bounded(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream
) -> None:
    p = start_proxy(bridge_max_event_bytes=LIMIT)
    flood = b"data: " + b"x" * (1024 * 1024)  # no newline, ever
    # Same dialect: passed on as sent.
    upstream.enqueue(SSEReply(HELLO + flood, chunk_min=16384, chunk_max=16384))
    status, got = send(p, "openai_chat")
    assert status == 200 and got.endswith(flood) and len(got) < len(HELLO + flood) + 100
    assert text_of("openai_chat", got[: -len(flood)]) == "Hello"
    # Another dialect: the client's stream ends with an error event in its dialect.
    upstream.enqueue(SSEReply(HELLO + flood, chunk_min=16384, chunk_max=16384))
    status, got = send(p, "anthropic")
    assert status == 200 and text_of("anthropic", got) == "Hello"
    assert str(LIMIT) in failure("anthropic", got)
    # The proxy answers the next request normally.
    upstream.enqueue(SSEReply(HELLO + END))
    assert text_of("anthropic", send(p, "anthropic")[1]) == "Hello"
    log = clean_log(p)
    assert "stream ended with an error for the client" in log


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc for RSS")
def test_memory_does_not_follow_a_line_that_never_ends(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream
) -> None:
    p = start_proxy(bridge_max_event_bytes=LIMIT)
    upstream.enqueue(SSEReply(HELLO + END))
    send(p, "anthropic")
    before = peak_rss_kb(p)
    flood = b"data: " + b"x" * (96 * 1024 * 1024)
    upstream.enqueue(SSEReply(HELLO + flood, chunk_min=65536, chunk_max=65536))
    status, got = send(p, "anthropic")
    assert status == 200 and str(LIMIT) in failure("anthropic", got)
    grown_mb = (peak_rss_kb(p) - before) / 1024
    assert grown_mb < 48, f"the proxy grew {grown_mb:.0f} MB for a 96 MB line"
    clean_log(p)


def test_an_error_answer_of_another_status_is_unchanged(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    # Not a stream at all (a 429 JSON error): the Anthropic client gets it in its shape.
    from tests.e2e.harness import JSONReply

    upstream.enqueue(JSONReply({"error": {"message": "slow down", "type": "rate"}}, status=429))
    path, body = CLIENTS["anthropic"]
    status, _, got = raw_request(proxy.port, "POST", path, json.dumps(body).encode())
    assert status == 429 and json.loads(got)["error"]["message"] == "slow down"


# --------------------------------------------------------------------------- early hang-up


def read_with_sdk(proxy: Proxy, client: str) -> str:
    """The answer's text, read by the client's official SDK, which closes the connection as
    soon as it has read the stream's end."""
    if client == "openai_chat":
        oai = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0)
        stream = oai.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(c.delta.content or "" for chunk in stream for c in chunk.choices)
        stream.close()
        return text
    if client == "openai_responses":
        oai = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0)
        with oai.responses.stream(model="m", input="hi") as events:
            return events.get_final_response().output_text
    ant = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
    with ant.messages.stream(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    ) as s:
        return s.get_final_text()


@pytest.mark.parametrize("client", ["openai_chat", "anthropic", "openai_responses"])
def test_a_client_that_hangs_up_at_the_streams_end_gets_its_report_once(
    proxy: Proxy, upstream: ScriptedUpstream, client: str
) -> None:
    """The upstream closes its side a while after ``[DONE]``. OpenAI's SDK has hung up by
    then (the flow ends with "client disconnected"); the others read on to the body's end.
    Either way the flow's line is the whole report (counts, no disconnect reason), once."""
    upstream.enqueue(SSEReply(HELLO + END, linger=1.0))
    since = len(proxy.log_text())
    assert read_with_sdk(proxy, client) == "Hello"
    outcome_of_next_flow(proxy, since)
    time.sleep(1.3)  # the upstream's end arrives after the line: still one line
    lines = re.findall(r"cursor-bridge flow .*", proxy.log_text()[since:])
    assert len(lines) == 1, lines
    assert "outcome=rewritten" in lines[0] and "events_in=5" in lines[0], lines[0]
    assert "reason=" not in lines[0]
    clean_log(proxy)
