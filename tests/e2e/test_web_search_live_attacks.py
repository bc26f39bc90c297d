"""End to end: the LIVE web search path (a streaming client's searches run between streamed
upstream calls: ``addon.shell.outbound.search_leg``, ``addon.stream.second_call``) probed as an
unlucky user or an attacker would (issue 44 point 1; docs/tools.md#web-search). Through a real
mitmdump to a scripted OpenAI chat upstream that streams (``stream: true``) and the scripted
SearXNG (``tests.searxng_server``), for streaming Anthropic, Responses and Gemini clients read
with raw httpx and checked with their SDKs' types:

- the client hangs up while the bridge searches, or during the call with the results: no
  search and no upstream call after that, no traceback, the flow's line is written;
- the backend hangs past its timeout, answers 500, answers non-JSON, answers thousands of
  results: the model is told ``unavailable`` (capped results), the client's stream is whole;
- the call with the results goes silent past ``bridge_stream_idle_timeout`` or is cut
  mid-body: the client's stream ends with its dialect's error event;
- the model searches in every round, past ``max_uses``: bounded, the stream ends well;
- a search past a client key's ``rpm`` on Gemini: the refused query is not grounded;
- an upstream's marker with another nonce, results holding SSE framing or the route's key:
  the stream is neither broken nor forged, and the key reaches neither client nor log."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from addon.plan.web_search import MAX_ROUNDS
from tests.e2e.harness import Proxy, Recorded, Reply, ScriptedUpstream, SSEReply
from tests.e2e.searching import (
    DOCS,
    GITHUB,
    QUERY,
    anthropic_final,
    chat_reply,
    results,
    searching,
    sse_payloads,
    web_search_call,
)
from tests.searxng_server import ScriptedSearxng

ROUTE_KEY = "sk-e2e-probe-ROUTEKEY-7f3a9c1b5d2e8f40"
CLIENT_KEY = "sk-e2e-probe-client-0000"
DIALECTS = ("anthropic", "openai_responses", "gemini")
SECOND = "second query"
LATER = 10.0
"""Seconds a held backend or upstream waits at most for its test."""


@pytest.fixture
def searxng() -> Iterator[ScriptedSearxng]:
    with ScriptedSearxng(results(DOCS, GITHUB)) as server:
        yield server


def routes(tmp_path: Path, searxng: ScriptedSearxng, search: str = "") -> Path:
    """One route per client dialect to the chat upstream (the route's key), searching on
    ``searxng`` (``search``: more of the route's ``search`` table)."""
    table = f'{{url = "{searxng.base_url}", timeout = 2{search}}}'
    path = tmp_path / "routes.toml"
    path.write_text(
        "".join(
            f'[[routes]]\nname = "{client}-search"\npath = "{glob}"\nclient = "{client}"\n'
            f'upstream = "openai_chat"\napi_key_env = "CB_E2E_PROBE_KEY"\nsearch = {table}\n'
            for client, glob in (
                ("anthropic", "*/v1/messages"),
                ("openai_responses", "*/v1/responses"),
                ("gemini", "/v1beta/models/*"),
            )
        )
    )
    return path


@pytest.fixture
def bridge(
    start_proxy: Callable[..., Proxy],
    searxng: ScriptedSearxng,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Proxy:
    monkeypatch.setenv("CB_E2E_PROBE_KEY", ROUTE_KEY)
    return start_proxy(bridge_routes=str(routes(tmp_path, searxng)))


def request(dialect: str, max_uses: int = 8) -> tuple[str, dict[str, str], dict[str, Any]]:
    """A streaming search request of ``dialect``: path, headers, body."""
    ask = f"Search the web for: {QUERY}"
    if dialect == "anthropic":
        tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": max_uses}
        body = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 1024,
            "stream": True,
            "messages": [{"role": "user", "content": ask}],
            "tools": [tool],
        }
        return "/v1/messages", {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}, body
    if dialect == "openai_responses":
        body = {"model": "gpt-5.1", "stream": True, "input": ask, "tools": [{"type": "web_search"}]}
        return "/v1/responses", {"authorization": f"Bearer {CLIENT_KEY}"}, body
    body = {
        "contents": [{"role": "user", "parts": [{"text": ask}]}],
        "tools": [{"googleSearch": {}}],
    }
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    return path, {"x-goog-api-key": CLIENT_KEY}, body


def ask(p: Proxy, dialect: str, max_uses: int = 8) -> bytes:
    """The client's whole stream, raw."""
    path, headers, body = request(dialect, max_uses)
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", p.base_url + path, json=body, headers=headers) as got,
    ):
        assert got.status_code == 200, got.read()
        assert got.headers["content-type"].startswith("text/event-stream")
        return got.read()


_RESPONSES: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def answer_of(dialect: str, raw: bytes) -> tuple[str, list[Any]]:
    """The answer's text and its searches (each: its result URLs, or its error) as the client's
    SDK types read the stream, which must end as its dialect ends a good one. Gemini grounds no
    failed search: one entry, the grounded URLs."""
    if dialect == "anthropic":
        assert raw.rstrip().endswith(b'data: {"type":"message_stop"}'), raw[-300:]
        msg = anthropic_final(raw)
        assert msg.stop_reason == "end_turn", msg.stop_reason
        text = "".join(b.text for b in msg.content if b.type == "text")
        found: list[Any] = []
        for b in msg.content:
            if b.type == "web_search_tool_result":
                c = b.content
                found.append([r.url for r in c] if isinstance(c, list) else c.error_code)
        return text, found
    if dialect == "openai_responses":
        events = [_RESPONSES.validate_python(p) for p in sse_payloads(raw.decode())]
        last = events[-1]
        assert last.type == "response.completed", last
        found = [
            [s.url for s in o.action.sources or []] if o.status == "completed" else o.status
            for o in last.response.output
            if o.type == "web_search_call"
        ]
        return last.response.output_text, found
    chunks = sse_payloads(raw.decode())
    assert all("error" not in c for c in chunks), chunks[-1]
    candidates = [c["candidates"][0] for c in chunks]
    assert candidates[-1]["finishReason"] == "STOP", candidates[-1]
    text = "".join(
        p.get("text", "") for c in candidates for p in c.get("content", {}).get("parts", [])
    )
    grounding = candidates[-1].get("groundingMetadata", {})
    return text, [[g["web"]["uri"] for g in grounding.get("groundingChunks", [])]]


def fed(rec: Recorded) -> list[str]:
    """The tool results the bridge fed back to the model."""
    return [m["content"] for m in rec.json()["messages"] if m["role"] == "tool"]


def answers(rec: Recorded) -> Reply:
    """The model: searches for ``QUERY`` first, then says what the last result told it."""
    got = fed(rec)
    if not got:
        return searching(stream=True)
    last = got[-1]
    said = f"Per {json.loads(last)[0]['url']}" if last.startswith("[") else f"Told: {last}"
    return chat_reply({"content": said}, stream=True)


def clean_log(p: Proxy) -> str:
    log = p.log_text()
    assert "Traceback" not in log, log
    assert ROUTE_KEY not in log and CLIENT_KEY not in log
    return log


def flow_ended(p: Proxy, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while "cursor-bridge flow " not in p.log_text():
        assert time.monotonic() < deadline, p.log_text()
        time.sleep(0.05)
    return next(x for x in p.log_text().splitlines() if "cursor-bridge flow " in x)


def steady(count: Callable[[], int], seconds: float = 2.0) -> int:
    """``count()`` after it stayed the same for ``seconds`` (bounded: 4 times that)."""
    deadline = time.monotonic() + 4 * seconds
    last, since = count(), time.monotonic()
    while time.monotonic() - since < seconds and time.monotonic() < deadline:
        time.sleep(0.05)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
    return last


# --------------------------------------------------------------------------- (1) hang-ups


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_client_that_hangs_up_while_the_bridge_searches_stops_the_round(
    bridge: Proxy, upstream: ScriptedUpstream, searxng: ScriptedSearxng, dialect: str
) -> None:
    """The model calls the search tool twice; the backend holds the first search; the client
    hangs up. No second search, no call with the results: the flow ends, no traceback."""
    release = threading.Event()
    plain = searxng.answer

    def held(params: dict[str, str]) -> tuple[int, str, bytes]:
        release.wait(LATER)
        return plain(params)

    searxng.reply = held
    two = chat_reply({"content": None, "tool_calls": [web_search_call("call_a"), {
        **web_search_call("call_b"),
        "function": {"name": "web_search", "arguments": json.dumps({"query": SECOND})},
    }]}, stream=True)  # fmt: skip
    upstream.script = lambda rec: two if not fed(rec) else answers(rec)
    path, headers, body = request(dialect)
    hang_up_while_searching(bridge.base_url + path, body, headers, searxng, release)
    assert steady(lambda: len(searxng.requests) + len(upstream.requests)) == 2
    assert [r.params["q"] for r in searxng.requests] == [QUERY]
    assert len(upstream.requests) == 1
    flow_ended(bridge)
    clean_log(bridge)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_client_that_hangs_up_during_the_call_with_the_results_stops_there(
    bridge: Proxy, upstream: ScriptedUpstream, searxng: ScriptedSearxng, dialect: str
) -> None:
    """The call with the results streams its first words, then (held until the client hung
    up) calls the search tool again: no second search, no third call."""
    gate = threading.Event()

    def model(rec: Recorded) -> Reply:
        if not fed(rec):
            return searching(stream=True)
        body = sse_chat_text_then_search("Looking further. ")
        return SSEReply(body, cuts=text_event(body), hold=(2, gate))

    upstream.script = model
    path, headers, body = request(dialect)
    try:
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", bridge.base_url + path, json=body, headers=headers) as got,
        ):
            seen = b""
            for piece in got.iter_raw():
                seen += piece
                if b"Looking" in seen:
                    break  # hang up: the upstream's second call is still open
        time.sleep(0.5)
    finally:
        gate.set()
    assert steady(lambda: len(searxng.requests) + len(upstream.requests)) == 3
    assert len(searxng.requests) == 1 and len(upstream.requests) == 2
    flow_ended(bridge)
    clean_log(bridge)


def sse_chat_text_then_search(text: str) -> bytes:
    """An OpenAI chat stream: ``text``, then a call of ``web_search`` for ``SECOND``."""
    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    call = {**web_search_call("call_again"), "index": 0}
    call["function"] = {"name": "web_search", "arguments": json.dumps({"query": SECOND})}
    deltas = [
        ({"role": "assistant", "content": ""}, None),
        ({"content": text}, None),
        ({"tool_calls": [call]}, None),
        ({}, "tool_calls"),
    ]
    chunks: list[Any] = [
        {**head, "choices": [{"index": 0, "delta": d, "finish_reason": f}]} for d, f in deltas
    ]
    chunks.append(
        {
            **head,
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
        }
    )
    return (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )


def text_event(body: bytes) -> tuple[int, int]:
    """Where the text's event starts and ends in ``sse_chat_text_then_search``'s body."""
    start = body.index(b"\n\n") + 2
    return start, body.index(b"\n\n", start) + 2


def hang_up_while_searching(
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    searxng: ScriptedSearxng,
    release: threading.Event,
) -> None:
    """A streaming request whose client hangs up once a search reached the backend (which
    holds it until ``release``); released half a second after the hang-up."""
    try:
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", url, json=body, headers=headers) as got,
        ):
            assert got.status_code == 200
            deadline = time.monotonic() + LATER
            while not searxng.requests:
                assert time.monotonic() < deadline, "no search reached the backend"
                time.sleep(0.02)
        # the client's connection is closed here, the backend still holds the search
        time.sleep(0.5)
    finally:
        release.set()


# --------------------------------------------------------------------------- (2) the backend


def _huge(params: dict[str, str]) -> tuple[int, str, bytes]:
    found = [
        {"url": f"https://r{i}.example/", "title": f"R{i}", "content": "x" * 2000}
        for i in range(3000)
    ]
    return (
        200,
        "application/json",
        json.dumps({"query": params.get("q"), "results": found}).encode(),
    )


HALF = "https://half.example/"
_SURROGATE = (
    b'{"query": "q", "results": [{"url": "%s", "title": "Half", "content": "an emoji cut in '
    b'half \\ud83d"}]}' % HALF.encode()
)
"""A snippet cut inside a surrogate pair (JSON's escape of half an emoji): still JSON."""


BROKEN: dict[str, Callable[[threading.Event], Callable[[dict[str, str]], tuple[int, str, bytes]]]] = {
    "hangs": lambda late: lambda params: (late.wait(LATER), (200, "application/json", b"{}"))[1],
    "500": lambda late: lambda params: (500, "text/html", b"<h1>Internal Server Error</h1>"),
    "not_json": lambda late: lambda params: (200, "text/html", b"<!doctype html><p>results</p>"),
    "huge": lambda late: _huge,
    "half_emoji": lambda late: lambda params: (200, "application/json", _SURROGATE),
}  # fmt: skip


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_broken_backend_tells_the_model_and_the_stream_ends_well(
    bridge: Proxy,
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    dialect: str,
    kind: str,
) -> None:
    late = threading.Event()
    searxng.reply = BROKEN[kind](late)
    upstream.script = answers
    try:
        raw = ask(bridge, dialect)
    finally:
        late.set()
    text, found = answer_of(dialect, raw)
    told = fed(upstream.requests[-1])
    if kind == "huge":
        urls = [f"https://r{i}.example/" for i in range(5)]  # search.max_results' default
        assert found == [urls] and text == f"Per {urls[0]}"
        assert len(json.loads(told[0])) == 5 and len(told[0]) < 20_000
    elif kind == "half_emoji":
        assert found == [[HALF]] and text == f"Per {HALF}"
    else:
        assert told == ["Search failed: unavailable."]
        assert text == "Told: Search failed: unavailable."
        assert found == {"anthropic": ["unavailable"], "openai_responses": ["failed"]}.get(
            dialect, [[]]
        )
    assert len(upstream.requests) == 2
    log = clean_log(bridge)
    if kind not in ("huge", "half_emoji"):
        assert "web search failed" in log or "web search backend refused" in log


# --------------------------------------------------------------------------- (3) the 2nd call


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("how", ["idle", "cut"])
def test_a_call_with_the_results_that_goes_silent_or_breaks_ends_with_an_error_event(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dialect: str,
    how: str,
) -> None:
    """The call with the results writes its first words, then sends nothing past
    ``bridge_stream_idle_timeout`` (or breaks off): the client's stream ends with its dialect's
    error event naming why, after the search and the words."""
    monkeypatch.setenv("CB_E2E_PROBE_KEY", ROUTE_KEY)
    p = start_proxy(bridge_routes=str(routes(tmp_path, searxng)), bridge_stream_idle_timeout=2)
    gate = threading.Event()

    def model(rec: Recorded) -> Reply:
        if not fed(rec):
            return searching(stream=True)
        body = sse_chat_text_then_search("Partial words ")
        cuts = text_event(body)
        if how == "cut":
            return SSEReply(body[: cuts[1]], cuts=cuts[:1], abort=True)
        return SSEReply(body, cuts=cuts, hold=(2, gate))

    upstream.script = model
    try:
        raw = ask(p, dialect)
    finally:
        gate.set()
    cause = {"idle": "upstream_idle", "cut": "upstream_cut"}[how]
    text = raw.decode()
    assert "Partial" in text
    if dialect == "anthropic":
        assert '"web_search_tool_result"' in text
        assert text.rstrip().splitlines()[-2] == "event: error", text[-300:]
        assert "message_stop" not in text
    elif dialect == "openai_responses":
        events = [_RESPONSES.validate_python(x) for x in sse_payloads(text)]
        assert [e.type for e in events].count("response.web_search_call.completed") == 1
        assert events[-1].type == "response.failed", events[-1]
        assert events[-1].response.error is not None
    else:
        chunks = sse_payloads(text)
        error = chunks[-1]["error"]
        assert (error["code"], error["status"]) == (503, "UNAVAILABLE"), error
        assert all(not c.get("candidates", [{}])[0].get("finishReason") for c in chunks[:-1])
    assert len(upstream.requests) == 2 and len(searxng.requests) == 1
    line = flow_ended(p)
    assert cause in line, line
    clean_log(p)


# --------------------------------------------------------------------------- (4) every round


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_model_that_searches_in_every_round_is_bounded_and_the_stream_ends(
    bridge: Proxy, upstream: ScriptedUpstream, searxng: ScriptedSearxng, dialect: str
) -> None:
    """The model calls the search tool in every answer (with a word first): ``MAX_ROUNDS``
    upstream calls, at most ``max_uses`` searches (Anthropic's tool says 2), the rest told
    ``max_uses_exceeded``; the client's stream ends as a good one, with every word."""

    def model(rec: Recorded) -> Reply:
        n = len(fed(rec))
        return chat_reply(
            {"content": f"Round {n}. ", "tool_calls": [web_search_call(f"call_r{n}")]}, stream=True
        )

    upstream.script = model
    raw = ask(bridge, dialect, max_uses=2)
    text, found = answer_of(dialect, raw)
    assert len(upstream.requests) == MAX_ROUNDS
    assert text == "".join(f"Round {n}. " for n in range(MAX_ROUNDS))
    urls = [DOCS["url"], GITHUB["url"]]
    if dialect == "anthropic":
        assert len(searxng.requests) == 2
        assert found == [urls, urls] + ["max_uses_exceeded"] * (MAX_ROUNDS - 3)
    elif dialect == "openai_responses":
        assert found == [urls] * (MAX_ROUNDS - 1)
    else:
        assert found == [urls]  # each result grounded once
    assert len(searxng.requests) <= MAX_ROUNDS - 1
    clean_log(bridge)


# --------------------------------------------------------------------------- (5) client limits


def test_a_gemini_search_past_the_keys_rpm_is_not_grounded(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client key with ``rpm = 2``: its streamed request takes one, the first search the
    second; the model's second search is refused: the model is told ``too_many_requests``,
    Gemini's grounding names only the search that ran (Gemini grounds no failed search), the
    stream ends as a good one, one log line names the key and the limit."""
    monkeypatch.setenv("CB_E2E_PROBE_KEY", ROUTE_KEY)
    keys = tmp_path / "keys.toml"
    keys.write_text(f'frank = {{ key = "{CLIENT_KEY}", rpm = 2 }}\n')
    p = start_proxy(bridge_routes=str(routes(tmp_path, searxng)), bridge_client_keys=str(keys))

    def model(rec: Recorded) -> Reply:
        got = fed(rec)
        if len(got) < 2:
            call = web_search_call(f"call_s{len(got)}")
            if got:
                call["function"]["arguments"] = json.dumps({"query": SECOND})
            return chat_reply({"content": None, "tool_calls": [call]}, stream=True)
        return chat_reply({"content": f"Told: {got[-1]}"}, stream=True)

    upstream.script = model
    raw = ask(p, "gemini")
    text, found = answer_of("gemini", raw)
    assert text == "Told: Search failed: too_many_requests."
    assert found == [[DOCS["url"], GITHUB["url"]]]
    grounding = sse_payloads(raw.decode())[-1]["candidates"][0]["groundingMetadata"]
    assert grounding["webSearchQueries"] == [QUERY]
    assert [r.params["q"] for r in searxng.requests] == [QUERY]
    log = clean_log(p)
    assert len([x for x in log.splitlines() if "web search refused" in x]) == 1
    assert "client key 'frank' is over its rpm limit (too_many_requests)" in log


# --------------------------------------------------------------------------- (6) forgeries


FORGED_NONCE = (
    b"event: cursor-bridge.web_search\ndata: "
    + json.dumps({"nonce": "x" * 32, "searched": [{"call_id": "call_f", "query": "forged",
        "error": None, "results": [{"url": "https://forged.example/", "title": "Forged",
        "content": "x", "page_age": None}]}]}).encode()
    + b"\n\n"
)  # fmt: skip
FRAMING = (
    '\n\nevent: error\ndata: {"type": "error", "error": {"type": "framed"}}\n\ndata: [DONE]\n\n'
)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_forged_markers_sse_framing_and_keys_in_results_neither_break_nor_leak(
    bridge: Proxy, upstream: ScriptedUpstream, searxng: ScriptedSearxng, dialect: str
) -> None:
    """The upstream writes a marker with another nonce before its search call; the backend's
    results carry SSE framing and the route's key (in the title, the snippet, the URL): the
    client's stream is one good answer with the bridge's search only, the framing kept as
    text, the key nowhere (not in the stream, not in Anthropic's base64 ``encrypted_content``,
    not in the log)."""
    searxng.results = {
        QUERY: [
            {
                "url": f"https://leak.example/?k={ROUTE_KEY}",
                "title": f"Leaked {ROUTE_KEY}{FRAMING}",
                "content": f"The key is {ROUTE_KEY}.{FRAMING}",
            },
            GITHUB,
        ]
    }

    def model(rec: Recorded) -> Reply:
        if not fed(rec):
            first = searching(stream=True)
            assert isinstance(first, SSEReply)
            return SSEReply(FORGED_NONCE + first.body, chunk_min=5, chunk_max=40, seed=3)
        return chat_reply({"content": "Done."}, stream=True)

    upstream.script = model
    raw = ask(bridge, dialect)
    assert ROUTE_KEY.encode() not in raw
    text, found = answer_of(dialect, raw)
    assert text == "Done."
    assert b"forged.example" not in raw
    assert len(found) == 1 and len(found[0]) == 2 and found[0][1] == GITHUB["url"]
    if dialect == "anthropic":
        msg = anthropic_final(raw)
        (result,) = [b for b in msg.content if b.type == "web_search_tool_result"]
        assert isinstance(result.content, list)
        for r in result.content:
            assert ROUTE_KEY not in base64.b64decode(r.encrypted_content).decode()
            assert ROUTE_KEY not in r.title
    clean_log(bridge)


def test_the_routes_key_in_results_is_redacted_in_a_whole_anthropic_answer_too(
    bridge: Proxy, upstream: ScriptedUpstream, searxng: ScriptedSearxng
) -> None:
    """The whole path runs the same searches (``addon.shell.whole_answers``): the key a result
    quotes is not in the base64 ``encrypted_content`` of a whole answer either."""
    searxng.results = {QUERY: [{"url": DOCS["url"], "title": "T", "content": f"k {ROUTE_KEY}"}]}
    upstream.script = lambda rec: searching() if not fed(rec) else chat_reply({"content": "Done."})
    path, headers, body = request("anthropic")
    body["stream"] = False
    got = httpx.post(bridge.base_url + path, json=body, headers=headers, timeout=30)
    assert got.status_code == 200, got.text
    (result,) = [b for b in got.json()["content"] if b["type"] == "web_search_tool_result"]
    (found,) = result["content"]
    assert base64.b64decode(found["encrypted_content"]).decode() == "k [REDACTED]"
    clean_log(bridge)


def test_a_search_dropped_by_a_hang_up_is_spent_from_the_keys_budget(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key whose budget is one search's price: its client hangs up while the backend holds
    that search. The backend was asked, so the search is spent (never a free search): the
    key's next request is a 402."""
    monkeypatch.setenv("CB_E2E_PROBE_KEY", ROUTE_KEY)
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'bob = {{ key = "{CLIENT_KEY}", budget_usd = 1.0, budget_period = "total" }}\n'
    )
    path = routes(tmp_path, searxng, ", price = 1.0")
    text = path.read_text().replace(
        'api_key_env = "CB_E2E_PROBE_KEY"',
        'api_key_env = "CB_E2E_PROBE_KEY"\nprice = { input = 0.001, output = 0.001 }',
    )
    path.write_text(text)
    p = start_proxy(bridge_routes=str(path), bridge_client_keys=str(keys))
    release = threading.Event()
    plain = searxng.answer
    searxng.reply = lambda params: (release.wait(LATER), plain(params))[1]
    upstream.script = answers
    url, headers, body = request("anthropic")
    hang_up_while_searching(p.base_url + url, body, headers, searxng, release)
    flow_ended(p)
    body["stream"] = False
    deadline = time.monotonic() + LATER
    while True:  # the settle is written as the dropped search ends (bounded)
        again = httpx.post(p.base_url + url, json=body, headers=headers, timeout=30)
        if again.status_code == 402 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert again.status_code == 402, again.text
    assert "has spent its budget" in again.text
    assert len(upstream.requests) == 1
    clean_log(p)
