"""How an answer's head decides its reading (``attach_kind``, docs/streams.md "Stream rules"),
the headers a rewritten stream changes, and the error stream a same-dialect route passes on:
when the upstream breaks it off, the client's dialect error event ends it well-formed."""

from __future__ import annotations

import dataclasses
import json

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.config.search_backend import SearchBackend
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import Attach, attach_kind, error_stream, stream_headers

ASK = {
    "openai_chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    "anthropic": (
        "/v1/messages",
        {"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
    ),
}


def decided(client: str, upstream: str, search: bool = False) -> Rewrite:
    """The decision on ``client``'s streaming request (``ASK``) on a route to ``upstream``; with
    ``search``, the request offers Anthropic's web search tool, the route runs it on SearXNG."""
    path, body = ASK[client]
    body = {**body, "model": "m", "stream": True}
    backend = None
    if search:
        body["tools"] = [{"type": "web_search_20250305", "name": "web_search"}]
        backend = SearchBackend("http://127.0.0.1:8888")
    route = Route(name="r", client=client, upstream=upstream, search=backend)
    inc = Incoming("POST", "h", path, {}, json.dumps(body).encode())
    d = decide(Settings(), route, inc, {"X": "k"})
    assert isinstance(d, Rewrite), d
    return d


def plan_for(client: str, upstream: str) -> FlowPlan:
    return decided(client, upstream).plan


SSE = "text/event-stream; charset=utf-8"


@pytest.mark.parametrize(
    ("upstream", "status", "ctype", "kind"),
    [
        ("openai_chat", 200, SSE, Attach.REWRITE),
        ("anthropic", 200, SSE, Attach.REWRITE),
        ("openai_chat", 200, "application/json", Attach.LEAVE),
        ("openai_chat", 503, SSE, Attach.ERROR_STREAM),  # same dialect: as it comes
        ("anthropic", 503, SSE, Attach.LEAVE),  # another: buffered, re-shaped whole
        ("openai_chat", 429, "application/json", Attach.LEAVE),
    ],
)
def test_the_head_decides_how_the_body_is_read(
    upstream: str, status: int, ctype: str, kind: Attach
) -> None:
    plan = plan_for("openai_chat", upstream)
    assert attach_kind(plan, status, ctype, passed=False, loop_retry=False) is kind


def test_a_searching_flow_streams_live_and_reads_geminis_whole_json_whole() -> None:
    """A streaming client whose web search the bridge runs asks Gemini for a stream
    (``:streamGenerateContent?alt=sse``): the searches run live between streamed calls, under a
    nonce of the flow's (issue 44). A search not live asked for whole answers: Gemini's JSON is
    one answer, not a stream's JSON array."""
    d = decided("anthropic", "gemini", search=True)
    plan = d.plan
    assert d.wire.path.endswith(":streamGenerateContent") and ("alt", "sse") in d.wire.query
    assert plan.search is not None and plan.search.live and len(plan.search.nonce) >= 16
    assert plan.stream and plan.upstream_streams and plan.upstream_framing == "sse"
    assert attach_kind(plan, 200, SSE, passed=False, loop_retry=False) is Attach.REWRITE
    whole = dataclasses.replace(plan, search=dataclasses.replace(plan.search, live=False))
    assert not whole.upstream_streams
    assert attach_kind(whole, 200, "application/json", passed=False, loop_retry=False) is (
        Attach.LEAVE
    )
    array = dataclasses.replace(plan, search=None, upstream_framing="json_array")
    assert attach_kind(array, 200, "application/json", passed=False, loop_retry=False) is (
        Attach.REWRITE
    )


def test_a_flow_not_rewritten_streams_only_when_passed_through() -> None:
    assert attach_kind(None, 200, SSE, passed=True, loop_retry=False) is Attach.RAW
    assert attach_kind(None, 200, SSE, passed=False, loop_retry=False) is Attach.LEAVE


def test_a_held_loop_is_read_whole_when_the_guard_may_ask_again() -> None:
    plan = dataclasses.replace(plan_for("openai_chat", "openai_chat"), loop_fallback=True)
    assert plan.loop_held
    assert attach_kind(plan, 200, SSE, passed=False, loop_retry=True) is Attach.LEAVE
    assert attach_kind(plan, 200, SSE, passed=False, loop_retry=False) is Attach.REWRITE


def test_a_rewritten_stream_drops_its_length_and_encoding() -> None:
    plan = plan_for("openai_chat", "openai_chat")
    assert stream_headers(plan, "gzip", True) == (
        ["content-length", "content-encoding"],
        [("transfer-encoding", "chunked")],
    )
    assert stream_headers(plan, None, False) == (["content-length"], [])


@pytest.mark.parametrize(
    ("client", "kind"), [("openai_chat", "server_error"), ("anthropic", "overloaded_error")]
)
def test_an_error_stream_cut_ends_with_the_clients_error_event(client: str, kind: str) -> None:
    """After a half-written event: a blank line, then the client's error event naming the
    cause; after a whole event, the error event at once; a body that ended whole: nothing."""
    plan = plan_for(client, client)
    cause: list[str | None] = [None]
    read = error_stream(plan, lambda: cause[0])
    assert read(b'data: {"error": {"mess') == [b'data: {"error": {"mess']
    cause[0] = "upstream_reset"
    (end,) = read(b"")
    assert end.startswith(b"\n\n")
    data = json.loads(end.strip().split(b"data: ", 1)[1])
    assert data["error"]["type"] == kind and "(upstream_reset)" in data["error"]["message"]
    whole = error_stream(plan, lambda: "upstream_cut")
    assert whole(b"data: {}\n") == [b"data: {}\n"] and whole(b"\n") == [b"\n"]
    (end,) = whole(b"")
    assert not end.startswith(b"\n") and b"(upstream_cut)" in end
    assert error_stream(plan, lambda: None)(b"") == []
