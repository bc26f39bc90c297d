"""The fallback addon on flows (issue 29), with the connect check and the bridge's own attempts
replaced: a refused route is skipped before the rewrite and cools down; a 429 is held back
from the client and the next route asked with its own key, its own dialect and none of the
first upstream's signatures; what was tried is in the comment, the metadata and the line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import ctx, http
from mitmproxy.proxy.mode_specs import ProxyMode
from mitmproxy.test import taddons, tflow, tutils

from addon.shell.addons import Addons, make_addons
from addon.shell.common import META_KEY
from addon.shell.retry import RetryAnswer
from tests.real.clients.loop import GEMINI_SIGNATURE, Call, chat_message, gemini_chunk

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


@pytest.fixture
def bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Addons, list[http.Request]]]:
    monkeypatch.setenv("CB_TEST_CHAT_KEY", CHAT_KEY)
    addons = make_addons()
    clock = Clock()
    addons.fallbacks.cooldowns.clock = clock
    sent: list[http.Request] = []

    async def attempt(flow: http.HTTPFlow, request: http.Request, timeout: float) -> RetryAnswer:
        sent.append(request)
        body = json.dumps(chat_message("hello from chat")).encode()
        return RetryAnswer(200, "application/json", body)

    monkeypatch.setattr(addons.retry, "attempt", attempt)
    addons.fallbacks.check = reachable
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    with taddons.context(*addons.all) as tctx:
        tctx.configure(addons.settings, bridge_routes=str(routes))
        yield addons, sent


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
    req = tutils.treq(
        host="api.anthropic.com",
        port=443,
        scheme=b"https",
        method=b"POST",
        path=b"/v1/messages",
        headers=http.Headers(
            (
                (b"host", b"api.anthropic.com"),
                (b"content-type", b"application/json"),
                (b"x-api-key", CLIENT_KEY.encode()),
            )
        ),
        content=json.dumps(body).encode(),
    )
    return tflow.tflow(req=req)


async def reachable(host: str, port: int, timeout: float) -> str | None:
    return None


async def refused(host: str, port: int, timeout: float) -> str | None:
    return "connection refused" if host == "ant.example" else None


def run_request(addons: Addons, f: http.HTTPFlow) -> None:
    pending = addons.fallbacks.request(f)
    assert pending is not None
    asyncio.run(pending)  # type: ignore[arg-type]
    addons.request.request(f)


def test_a_refused_route_is_skipped_before_the_rewrite_and_cools_down(
    bundle: tuple[Addons, list[http.Request]],
) -> None:
    addons, _ = bundle
    addons.fallbacks.check = refused
    f = messages_flow()
    run_request(addons, f)
    assert f.request.url == "http://chat.example:8080/v1x/v1/chat/completions"
    assert f.request.headers["authorization"] == f"Bearer {CHAT_KEY}"
    assert CLIENT_KEY not in str(f.request.headers) and "x-api-key" not in f.request.headers
    assert SIGNATURE not in (f.request.get_text() or "")
    assert addons.fallbacks.cooldowns.left("ant") == 20
    meta = f.metadata[META_KEY]
    assert meta["route"] == "chat"
    assert meta["fallback"]["tried"] == ["ant (connection refused, cooling down 20 s)"]
    assert meta["fallback"]["upstream_url"] == "http://chat.example:8080"
    assert "served by chat (http://chat.example:8080, model claude-sonnet-4-6)" in f.comment
    assert CHAT_KEY not in f.comment and CHAT_KEY not in json.dumps(meta)

    # Within the cooldown: no check at all, straight to the fallback.
    checked: list[str] = []

    async def spy(host: str, port: int, timeout: float) -> str | None:
        checked.append(host)
        return None

    addons.fallbacks.check = spy
    g = messages_flow()
    run_request(addons, g)
    assert g.request.host == "chat.example" and "ant.example" not in checked
    assert g.metadata[META_KEY]["fallback"]["tried"][0].startswith("ant (skipped, cooling down")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_429_is_held_back_and_the_next_route_answers_in_the_clients_dialect(
    bundle: tuple[Addons, list[http.Request]], stream: bool
) -> None:
    addons, sent = bundle
    f = messages_flow(stream)
    run_request(addons, f)
    assert f.request.host == "ant.example"
    assert f.request.headers["x-api-key"] == CLIENT_KEY  # client_key = true
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    f.response = tutils.tresp(
        status_code=429,
        headers=http.Headers(content_type="application/json", retry_after="45"),
        content=json.dumps(error).encode(),
    )
    addons.fallbacks.responseheaders(f)
    addons.stream.responseheaders(f)
    assert not f.response.stream  # held back: nothing reached the client
    asyncio.run(addons.answers.response(f))
    addons.report.response(f)

    (request,) = sent
    assert request.url == "http://chat.example:8080/v1x/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {CHAT_KEY}"
    assert CLIENT_KEY not in str(request.headers)
    text = request.get_text() or ""
    assert SIGNATURE not in text and "signature" not in text  # no other upstream's signatures
    assert json.loads(text)["model"] == "claude-sonnet-4-6"
    assert f.response.status_code == 200
    if stream:
        assert f.response.headers["content-type"].startswith("text/event-stream")
        assert b"event: message_start" in f.response.content
        assert b"hello from chat" in f.response.content
    else:
        answer = json.loads(f.response.content)
        assert answer["type"] == "message"
        assert answer["content"][-1] == {"type": "text", "text": "hello from chat"}
    assert addons.fallbacks.cooldowns.left("ant") == 45
    meta = f.metadata[META_KEY]
    assert meta["fallback"]["served_by"] == "chat"
    assert meta["fallback"]["tried"] == ["ant (HTTP 429, cooling down 45 s)"]
    assert "tried: ant (HTTP 429, cooling down 45 s)" in f.comment
    assert f.marked == ":repeat:"


def test_a_4xx_other_than_429_does_not_fall_back(
    bundle: tuple[Addons, list[http.Request]],
) -> None:
    addons, sent = bundle
    f = messages_flow()
    run_request(addons, f)
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    f.response = tutils.tresp(
        status_code=400,
        headers=http.Headers(content_type="application/json"),
        content=json.dumps(error).encode(),
    )
    addons.fallbacks.responseheaders(f)
    addons.stream.responseheaders(f)
    asyncio.run(addons.answers.response(f))
    assert not sent and f.response.status_code == 400
    assert addons.fallbacks.cooldowns.left("ant") == 0


def test_behind_an_upstream_proxy_there_is_no_connect_check(
    bundle: tuple[Addons, list[http.Request]],
) -> None:
    addons, _ = bundle
    checked: list[str] = []

    async def spy(host: str, port: int, timeout: float) -> str | None:
        checked.append(host)
        return "connection refused"

    addons.fallbacks.check = spy
    f = messages_flow()
    f.client_conn.proxy_mode = ProxyMode.parse("upstream:http://127.0.0.1:3128")
    run_request(addons, f)
    assert not checked and f.request.host == "ant.example"


def test_no_route_reachable_is_answered_in_the_clients_dialect(
    bundle: tuple[Addons, list[http.Request]],
) -> None:
    addons, _ = bundle

    async def down(host: str, port: int, timeout: float) -> str | None:
        return "connection refused"

    addons.fallbacks.check = down
    f = messages_flow()
    pending = addons.fallbacks.request(f)
    assert pending is not None
    asyncio.run(pending)  # type: ignore[arg-type]
    assert f.response is not None and f.response.status_code == 502
    body = json.loads(f.response.content)
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    assert "tried: ant (connection refused" in body["error"]["message"]
    assert f.marked == ":no_entry:"
    addons.request.request(f)  # the rewrite leaves an answered flow alone
    assert f.response.status_code == 502


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
    req = tutils.treq(
        host="api.openai.com",
        port=443,
        scheme=b"https",
        method=b"POST",
        path=b"/v1/chat/completions",
        headers=http.Headers(
            (
                (b"host", b"api.openai.com"),
                (b"content-type", b"application/json"),
                (b"authorization", f"Bearer {CLIENT_KEY}".encode()),
            )
        ),
        content=json.dumps(body).encode(),
    )
    return tflow.tflow(req=req)


def answered(addons: Addons, f: http.HTTPFlow, status: int, body: Any) -> None:
    f.response = tutils.tresp(
        status_code=status,
        headers=http.Headers(content_type="application/json"),
        content=json.dumps(body).encode(),
    )
    addons.fallbacks.responseheaders(f)
    addons.stream.responseheaders(f)
    asyncio.run(addons.answers.response(f))
    addons.report.response(f)


def test_a_fallback_to_another_upstream_gets_none_of_the_first_upstreams_signatures(
    bundle: tuple[Addons, list[http.Request]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turn 1 on the Gemini route: its thought signature goes into the reasoning store (Cursor
    drops it). Turn 2: the Gemini request gets it back (the store had it), the Gemini route
    answers 429, and the chat route's request carries none of it."""
    addons, sent = bundle
    monkeypatch.setenv("CB_TEST_G_KEY", "AIza-g-SECRET")
    routes = tmp_path / "gemini.toml"
    routes.write_text(GEMINI_ROUTES)
    ctx.options.update(bridge_routes=str(routes), bridge_store_size=1000)  # the store on
    assert addons.store.store is not None
    first = cursor_flow([{"role": "user", "content": "read a"}])
    run_request(addons, first)
    answered(addons, first, 200, gemini_chunk(None, [Call("read_file", {"path": "a"})]))
    (call,) = json.loads(first.response.content)["choices"][0]["message"]["tool_calls"]

    history = [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "file a"},
    ]
    second = cursor_flow(history)
    run_request(addons, second)
    assert second.request.host == "g.example"
    assert GEMINI_SIGNATURE in (second.request.get_text() or "")  # restored for Gemini
    answered(addons, second, 429, {"error": {"code": 429, "message": "quota"}})
    (request,) = sent
    assert request.host == "chat.example"
    text = request.get_text() or ""
    assert GEMINI_SIGNATURE not in text and "thoughtSignature" not in text
    assert json.loads(text)["messages"][1]["tool_calls"][0]["id"] == call["id"]
    assert second.response.status_code == 200
    assert second.metadata[META_KEY]["fallback"]["served_by"] == "c2"
