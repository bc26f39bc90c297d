"""The fallback addon on flows (issue 29), with the bridge's attempts replaced (``Retry.open``)
and the relay's leg run as the relay runs it: a flow on a route with a chain goes to the relay
with no key and no body; a refused route or a 429 sends the same client request to the next
route with its own key, its own dialect and none of the first upstream's signatures; the flow
then shows the request that route was sent and its answer is read with that route's plan; what
was tried is in the comment, the metadata and the line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import ctx, http
from mitmproxy.proxy.mode_specs import ProxyMode
from mitmproxy.test import taddons, tflow, tutils

from addon.plan.fallback import NoAnswer, Reason
from addon.shell.addons import Addons, make_addons
from addon.shell.flows import Attempts
from addon.shell.notes import META_KEY
from addon.shell.outbound.relay import TOKEN_HEADER
from tests.real.clients.loop import GEMINI_SIGNATURE, Call, chat_message, chat_sse, gemini_chunk

CLIENT_KEY = "sk-ant-client-SECRET"
CHAT_KEY = "sk-chat-route-SECRET"
SIGNATURE = "EqQBCkgIARABGAIiQL-anthropic-signature-SECRETISH"

ROUTES = """
[[routes]]
name = "ant"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"
upstream_url = "https://ant.example"
client_key = true
fallback = ["chat"]
cooldown = 20

[[routes]]
name = "chat"
path = "*/v1/messages"
model = "never-*"
client = "anthropic"
upstream = "openai_chat"
upstream_url = "http://chat.example:8080/v1x"
api_key_env = "CB_TEST_CHAT_KEY"
"""


class Clock:
    now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def messages_flow(stream: bool = False) -> http.HTTPFlow:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "stream": stream,
        "messages": [
            {"role": "user", "content": "first"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "let me think", "signature": SIGNATURE},
                    {"type": "text", "text": "an answer"},
                ],
            },
            {"role": "user", "content": "second"},
        ],
    }
    return client_flow("api.anthropic.com", "/v1/messages", ("x-api-key", CLIENT_KEY), body)


def client_flow(host: str, path: str, key: tuple[str, str], body: Any) -> http.HTTPFlow:
    """A client's HTTPS POST of ``body`` to ``host`` with its key header (``key``)."""
    req = tutils.treq(
        host=host,
        port=443,
        scheme=b"https",
        method=b"POST",
        path=path.encode(),
        headers=http.Headers(
            (
                (b"host", host.encode()),
                (b"content-type", b"application/json"),
                (key[0].encode(), key[1].encode()),
            )
        ),
        content=json.dumps(body).encode(),
    )
    return tflow.tflow(req=req)


@dataclass
class Reply:
    """An upstream's answer as ``Retry.open`` gives it (``addon.shell.outbound.http1.Opened``): headers
    read, the body still to come (here read off whole, as a body that ends with its
    connection)."""

    status_code: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    reason: bytes = b""
    framing: str = "close"
    passed_to: None = None
    closed: bool = False

    def header(self, name: str) -> str | None:
        got = [v for k, v in self.headers if k.lower() == name.encode()]
        return got[0].decode() if got else None

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        yield self.body

    async def aclose(self) -> None:
        self.closed = True

    def watch(self, idle: float) -> None:
        pass

    async def started(self, timeout: float) -> str | None:
        return None


type Answer = Reply | NoAnswer
"""What an attempt got: an answer (its body still to read) or why none came."""


class Bridge:
    """The addons, the attempts they made (``sent``) and what each upstream answers next, by
    host (``script``; the chat route answers ``hello from chat`` when nothing is queued)."""

    def __init__(self, addons: Addons) -> None:
        self.addons = addons
        self.sent: list[http.Request] = []
        self.script: dict[str, list[Answer]] = {}
        self.tctx: Any = None
        """The options' context (``taddons.context``): another routes file."""

    async def open(self, flow: http.HTTPFlow, request: http.Request, timeout: float) -> Answer:
        self.sent.append(request)
        queued = self.script.get(request.host)
        if queued:
            return queued.pop(0)
        if request.host == "chat.example":
            body = json.loads(request.content or b"{}")
            if body.get("stream"):
                return reply(200, chat_sse("hello from chat"), "text/event-stream")
            return reply(200, json.dumps(chat_message("hello from chat")).encode())
        return NoAnswer(Reason.UNREACHABLE, "connection refused")


def reply(status: int, body: bytes, ctype: str = "application/json", **headers: str) -> Answer:
    """An upstream's answer as ``Retry.open`` gives it: headers read, the body still to come."""
    fields = [("content-type", ctype), *((k.replace("_", "-"), v) for k, v in headers.items())]
    return Reply(status, [(k.encode(), v.encode()) for k, v in fields], body)


@pytest.fixture
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bridge]:
    monkeypatch.setenv("CB_TEST_CHAT_KEY", CHAT_KEY)
    addons = make_addons()
    addons.fallbacks.local_cooldowns.clock = Clock()
    bridge = Bridge(addons)
    monkeypatch.setattr(addons.retry, "open", bridge.open)

    async def start() -> int:
        addons.fallbacks.relay.port = 54321
        return 54321

    monkeypatch.setattr(addons.fallbacks.relay, "start", start)  # no server: legs run here
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    with taddons.context(*addons.all) as tctx:
        tctx.configure(addons.settings, bridge_routes=str(routes))
        bridge.tctx = tctx
        yield bridge


def request_hooks(bridge: Bridge, f: http.HTTPFlow) -> Awaitable[None] | None:
    """The request hooks as mitmproxy calls them: what the rewrite's returns (a whole
    answer's attempts, for mitmproxy to await; None: a stream, for the relay)."""
    pending = bridge.addons.fallbacks.request(f)  # None: a plain route, no chain to pick
    if pending is not None:
        asyncio.run(pending)  # type: ignore[arg-type]
    return bridge.addons.request.request(f)


def to_relay(bridge: Bridge, f: http.HTTPFlow) -> str:
    """The request hooks; a stream's flow leaves for the relay: plain HTTP to 127.0.0.1,
    never through an upstream proxy, no key, no body. Its token."""
    assert request_hooks(bridge, f) is None
    return at_relay(bridge, f)


def at_relay(bridge: Bridge, f: http.HTTPFlow) -> str:
    req = f.request
    assert (req.scheme, req.host, req.port) == ("http", "127.0.0.1", 54321)
    assert sorted(f.request.headers.keys()) == ["content-length", "host", TOKEN_HEADER]
    chain = chain_of(bridge, f)
    assert chain.attempt is not None
    sent = chain.attempt.request
    assert f.request.headers["host"] == sent.host_header  # what the view shows meanwhile
    assert f.request.content == b""
    assert f.server_conn.address is None and f.server_conn.via is None
    return f.request.headers[TOKEN_HEADER]


def chain_of(bridge: Bridge, f: http.HTTPFlow) -> Attempts:
    """The flow's chain as its record holds it."""
    record = bridge.addons.report.flows.get(f.id)
    assert record is not None and record.chain is not None
    return record.chain


async def _run_leg(bridge: Bridge, token: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    leg = bridge.addons.report.flows.take_leg(token)
    assert leg is not None
    got = await leg()
    try:
        body = b"".join([chunk async for chunk in got.body])
    finally:
        await got.close()
    return got.status, got.headers, body


def relayed(bridge: Bridge, f: http.HTTPFlow) -> None:
    """A whole answer: the request hook runs the flow's leg and sets its response (mitmproxy
    opens no connection); a stream: the relay runs the leg, mitmproxy reads its answer. Then
    the answer hooks in order, a stream fed to the stream callable as mitmproxy feeds it."""
    addons = bridge.addons
    whole = request_hooks(bridge, f)
    if whole is not None:
        asyncio.run(whole)  # type: ignore[arg-type]
        assert f.response is not None and f.request.host != "127.0.0.1"
        assert TOKEN_HEADER not in f.request.headers
        addons.fallbacks.responseheaders(f)
        addons.stream.responseheaders(f)
        assert not f.response.stream  # mitmproxy would not run it for a response set here
    else:
        status, headers, body = asyncio.run(_run_leg(bridge, at_relay(bridge, f)))
        f.response = http.Response.make(status, b"", headers)
        addons.fallbacks.responseheaders(f)
        addons.stream.responseheaders(f)
        stream = f.response.stream
        if callable(stream):
            body = b"".join([*stream(body), *stream(b"")])
        f.response.set_content(body)
    asyncio.run(addons.answers.response(f))
    addons.report.response(f)


def anthropic_text(f: http.HTTPFlow, stream: bool) -> str:
    assert f.response is not None and f.response.status_code == 200
    if stream:
        assert f.response.headers["content-type"].startswith("text/event-stream")
        assert b"event: message_start" in f.response.content
        texts = [
            json.loads(line[6:])["delta"].get("text", "")
            for line in (f.response.text or "").splitlines()
            if line.startswith("data: ") and '"content_block_delta"' in line
        ]
        return "".join(texts)
    answer = json.loads(f.response.content or b"")
    assert answer["type"] == "message"
    return "".join(b["text"] for b in answer["content"] if b["type"] == "text")


def check_chat_request(request: http.Request) -> None:
    """The chat route's attempt: its address, its key only, none of the Anthropic signatures."""
    assert request.url == "http://chat.example:8080/v1x/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {CHAT_KEY}"
    assert CLIENT_KEY not in str(request.headers) and "x-api-key" not in request.headers
    text = request.get_text() or ""
    assert SIGNATURE not in text and "signature" not in text
    assert json.loads(text)["model"] == "claude-sonnet-4-6"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_refused_route_falls_back_and_cools_down(bundle: Bridge, stream: bool) -> None:
    f = messages_flow(stream)
    relayed(bundle, f)
    first, second = bundle.sent
    assert first.host == "ant.example" and first.headers["x-api-key"] == CLIENT_KEY
    check_chat_request(second)
    assert anthropic_text(f, stream) == "hello from chat"
    # The flow shows the request the serving route was sent, and that route's plan read it.
    assert f.request.url == second.url and f.request.content == second.content
    assert TOKEN_HEADER not in f.request.headers
    assert bundle.addons.fallbacks.cooldowns.left("ant") == 20
    meta = f.metadata[META_KEY]
    assert meta["route"] == "chat"
    assert meta["fallback"]["tried"] == ["ant (connection refused, cooling down 20 s)"]
    assert meta["fallback"]["upstream_url"] == "http://chat.example:8080"
    assert "served by chat (http://chat.example:8080, model claude-sonnet-4-6)" in f.comment
    assert CHAT_KEY not in f.comment and CHAT_KEY not in json.dumps(meta)
    assert f.marked == ":repeat:"  # the fallback the bridge sent counts as a retry

    # Within the cooldown the chain starts at the chat route: ant is not asked at all.
    g = messages_flow(stream)
    relayed(bundle, g)
    assert [r.host for r in bundle.sent[2:]] == ["chat.example"]
    assert anthropic_text(g, stream) == "hello from chat"
    assert g.metadata[META_KEY]["fallback"]["tried"][0].startswith("ant (skipped, cooling down")
    # Passing over a route that cools down is no fallback of this flow: counted once in all.
    assert bundle.addons.report.state.counters["fallbacks answered"] == 1
    assert g.marked != ":repeat:"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_429_falls_back_and_retry_after_sets_the_cooldown(bundle: Bridge, stream: bool) -> None:
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    bundle.script["ant.example"] = [reply(429, json.dumps(error).encode(), retry_after="45")]
    f = messages_flow(stream)
    relayed(bundle, f)
    _, second = bundle.sent
    check_chat_request(second)
    assert anthropic_text(f, stream) == "hello from chat"
    assert bundle.addons.fallbacks.cooldowns.left("ant") == 45
    meta = f.metadata[META_KEY]
    assert meta["fallback"]["served_by"] == "chat"
    assert meta["fallback"]["tried"] == ["ant (HTTP 429, cooling down 45 s)"]
    assert "tried: ant (HTTP 429, cooling down 45 s)" in f.comment


def test_a_4xx_other_than_429_does_not_fall_back(bundle: Bridge) -> None:
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    bundle.script["ant.example"] = [reply(400, json.dumps(error).encode())]
    f = messages_flow()
    relayed(bundle, f)
    assert [r.host for r in bundle.sent] == ["ant.example"]
    assert f.response is not None and f.response.status_code == 400
    assert json.loads(f.response.content or b"") == error
    assert f.request.host == "ant.example" and f.request.headers["x-api-key"] == CLIENT_KEY
    assert bundle.addons.fallbacks.cooldowns.left("ant") == 0
    assert "fallback" not in f.metadata[META_KEY]


def test_every_route_failing_gives_the_last_error_in_the_clients_dialect(bundle: Bridge) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    down = {"error": {"message": "chat is down", "type": "server_error", "code": None}}
    bundle.script["ant.example"] = [reply(529, json.dumps(overloaded).encode())]
    bundle.script["chat.example"] = [reply(503, json.dumps(down).encode())]
    f = messages_flow()
    relayed(bundle, f)
    assert f.response is not None and f.response.status_code == 503
    body = json.loads(f.response.content or b"")
    assert body["type"] == "error" and "chat is down" in body["error"]["message"]
    assert "no route answered; tried: ant (HTTP 529), chat (HTTP 503, cooling down 30 s)" in (
        f.comment
    )
    assert f.metadata[META_KEY]["fallback"]["served_by"] is None
    assert f.request.host == "chat.example"  # the flow shows the request that got this error


def test_no_route_reachable_is_answered_in_the_clients_dialect(bundle: Bridge) -> None:
    bundle.script["chat.example"] = [NoAnswer(Reason.TIMED_OUT, "connect timed out")]
    f = messages_flow()
    relayed(bundle, f)
    assert f.response is not None and f.response.status_code == 504  # the last one timed out
    body = json.loads(f.response.content or b"")
    assert body["type"] == "error" and body["error"]["type"] == "timeout_error"
    message = body["error"]["message"]
    assert "ant (connection refused, cooling down 20 s)" in message
    assert "chat (connect timed out, cooling down 30 s)" in message
    assert f.marked == ":no_entry:"
    assert f.metadata[META_KEY]["action"] == "rejected"


def test_behind_an_upstream_proxy_the_relay_leg_is_direct_and_the_attempts_are_not(
    bundle: Bridge,
) -> None:
    f = messages_flow(stream=True)
    f.client_conn.proxy_mode = ProxyMode.parse("upstream:http://127.0.0.1:3128")
    to_relay(bundle, f)  # mitmproxy reaches the relay directly (``via`` None)
    assert f.client_conn.proxy_mode.type_name == "upstream"  # the attempts go through it


def test_a_flow_that_ends_before_its_answer_shows_its_request_again(bundle: Bridge) -> None:
    f = messages_flow(stream=True)
    token = to_relay(bundle, f)
    f.error = flow_error()
    bundle.addons.fallbacks.error(f)  # the error hooks in order: the report's ends the flow
    bundle.addons.report.error(f)
    assert f.request.url == "https://ant.example/v1/messages"
    assert f.request.headers["x-api-key"] == CLIENT_KEY and f.request.content
    assert bundle.addons.report.flows.take_leg(token) is None  # the relay will not serve it
    assert f.id not in bundle.addons.report.flows  # nothing of it is held


def flow_error() -> Any:
    from mitmproxy.flow import Error

    return Error("client disconnected")


GEMINI_ROUTES = """
[[routes]]
name = "g"
model = "gemini-*"
upstream = "gemini"
upstream_url = "https://g.example"
api_key_env = "CB_TEST_G_KEY"
fallback = ["c2"]

[[routes]]
name = "c2"
model = "never-*"
upstream_url = "http://chat.example:8080/v1x"
api_key_env = "CB_TEST_CHAT_KEY"
"""
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def cursor_flow(messages: list[dict[str, Any]]) -> http.HTTPFlow:
    body = {"model": "gemini-3-pro-preview", "messages": messages, "tools": TOOLS}
    auth = ("authorization", f"Bearer {CLIENT_KEY}")
    return client_flow("api.openai.com", "/v1/chat/completions", auth, body)


def answered(bridge: Bridge, f: http.HTTPFlow, status: int, body: Any, host: str) -> None:
    bridge.script[host] = [reply(status, json.dumps(body).encode())]
    relayed(bridge, f)


def test_a_fallback_to_another_upstream_gets_none_of_the_first_upstreams_signatures(
    bundle: Bridge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turn 1 on the Gemini route: its thought signature goes into the reasoning store (Cursor
    drops it). Turn 2: the Gemini request gets it back (the store had it), the Gemini route
    answers 429, and the chat route's request carries none of it."""
    monkeypatch.setenv("CB_TEST_G_KEY", "AIza-g-SECRET")
    routes = tmp_path / "gemini.toml"
    routes.write_text(GEMINI_ROUTES)
    ctx.options.update(bridge_routes=str(routes), bridge_store_size=1000)  # the store on
    assert bundle.addons.store.store is not None
    first = cursor_flow([{"role": "user", "content": "read a"}])
    answered(
        bundle, first, 200, gemini_chunk(None, [Call("read_file", {"path": "a"})]), "g.example"
    )
    assert first.response is not None
    (call,) = json.loads(first.response.content or b"")["choices"][0]["message"]["tool_calls"]

    history = [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "file a"},
    ]
    second = cursor_flow(history)
    answered(bundle, second, 429, {"error": {"code": 429, "message": "quota"}}, "g.example")
    gemini, chat = bundle.sent[1:]
    assert gemini.host == "g.example"
    assert GEMINI_SIGNATURE in (gemini.get_text() or "")  # restored for Gemini
    assert chat.host == "chat.example"
    text = chat.get_text() or ""
    assert GEMINI_SIGNATURE not in text and "thoughtSignature" not in text
    assert json.loads(text)["messages"][1]["tool_calls"][0]["id"] == call["id"]
    assert second.response is not None and second.response.status_code == 200
    assert second.metadata[META_KEY]["fallback"]["served_by"] == "c2"


# ---------------------------------------------------------------------- one upstream path

PLAIN_ROUTES = """
[[routes]]
name = "chat"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_chat"
upstream_url = "http://chat.example:8080/v1x"
api_key_env = "CB_TEST_CHAT_KEY"
"""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_plain_routes_answers_go_through_the_relay(
    bundle: Bridge, tmp_path: Path, stream: bool
) -> None:
    """One upstream path (docs/architecture.md): a route without a chain or a key pool has its
    answers, streamed and whole, read by the bridge (the relay's leg, one attempt: a body the
    upstream breaks off is seen, issue 42); the flow shows the request its route was sent, the
    answer is the client's, and nothing falls back or cools down."""
    routes = tmp_path / "plain.toml"
    routes.write_text(PLAIN_ROUTES)
    bundle.tctx.configure(bundle.addons.settings, bridge_routes=str(routes))
    asyncio.run(bundle.addons.fallbacks.running())  # the relay starts with the proxy
    f = messages_flow(stream)
    assert bundle.addons.fallbacks.request(f) is None  # no chain to pick a route of
    relayed(bundle, f)
    assert [r.host for r in bundle.sent] == ["chat.example"]
    check_chat_request(f.request)
    assert anthropic_text(f, stream) == "hello from chat"
    meta = f.metadata[META_KEY]
    assert "fallback" not in meta and meta["route"] == "chat"
    assert bundle.addons.fallbacks.local_cooldowns.left("chat") == 0


def test_a_plain_routes_unreachable_upstream_is_a_502_in_the_clients_dialect(
    bundle: Bridge, tmp_path: Path
) -> None:
    """No answer on a plain route's stream: the bridge's 502 in the client's dialect (mitmproxy
    gave its own HTML page), and the route does not cool down (it has nothing to fall back to)."""
    routes = tmp_path / "plain.toml"
    routes.write_text(PLAIN_ROUTES)
    bundle.tctx.configure(bundle.addons.settings, bridge_routes=str(routes))
    asyncio.run(bundle.addons.fallbacks.running())
    bundle.script["chat.example"] = [NoAnswer(Reason.UNREACHABLE, "connection refused")]
    f = messages_flow(stream=True)
    relayed(bundle, f)
    assert f.response is not None and f.response.status_code == 502
    error = json.loads(f.response.content or b"")
    assert error["type"] == "error" and "connection refused" in error["error"]["message"]
    assert bundle.addons.fallbacks.local_cooldowns.left("chat") == 0
