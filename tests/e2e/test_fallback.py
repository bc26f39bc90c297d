"""End to end: fallbacks (issue 29). One mitmdump in reverse mode; routes whose upstream is a
loopback port with nothing listening (connection refused) or a scripted upstream that answers
429 / 500 first, each backed by a route of another upstream dialect on its own port. Every
scripted upstream answers 401 in its own shape to anything but its own key in its own header,
and the test checks the headers each one received: keys never reach another host. Read by the
official SDKs, streamed and whole."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.harness import (
    JSONReply,
    Proxy,
    Recorded,
    Reply,
    ScriptedUpstream,
    SSEReply,
    free_port,
    sse_from_payloads,
)
from tests.real.clients.loop import answer, check_request

CLIENT_KEY = "sk-client-SECRET-fb"
KEYS = {
    "openai_chat": "sk-openai-fb-SECRET",
    "anthropic": "sk-ant-fb-SECRET",
    "gemini": "AIza-gemini-fb-SECRET",
}
ENV = {d: f"CB_E2E_FB_{d.upper()}_KEY" for d in KEYS}
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")
ALL_KEYS = (CLIENT_KEY, *KEYS.values())


@dataclass
class Service:
    """A scripted upstream of one dialect that wants its key in its dialect's header."""

    dialect: str
    key: str
    server: ScriptedUpstream

    def __call__(self, rec: Recorded) -> Reply:
        sent = {h: rec.headers[h] for h in CREDENTIAL_HEADERS if h in rec.headers}
        if sent != self.wanted():
            return error_reply(self.dialect, "invalid api key", 401)
        body = rec.json()
        check_request(self.dialect, body)
        if self.dialect == "gemini":
            stream = ":streamGenerateContent" in rec.path
        else:
            stream = bool(body.get("stream"))
        return answer(self.dialect, stream, f"hello from {self.dialect}")

    def wanted(self) -> dict[str, str]:
        if self.dialect == "anthropic":
            return {"x-api-key": self.key}
        if self.dialect == "gemini":
            return {"x-goog-api-key": self.key}
        return {"authorization": f"Bearer {self.key}"}


def error_reply(
    dialect: str, message: str, status: int, headers: dict[str, str] | None = None
) -> JSONReply:
    """An error as the service of that dialect writes it."""
    if dialect == "anthropic":
        kind = "rate_limit_error" if status == 429 else "api_error"
        body: Any = {"type": "error", "error": {"type": kind, "message": message}}
    elif dialect == "gemini":
        body = {"error": {"code": status, "message": message, "status": "UNAVAILABLE"}}
    else:
        body = {"error": {"message": message, "type": "server_error", "code": None}}
    return JSONReply(body, status=status, headers=headers or {})


@pytest.fixture
def services() -> Iterator[dict[str, Service]]:
    servers = {d: ScriptedUpstream().start() for d in KEYS}
    try:
        out = {d: Service(d, KEYS[d], s) for d, s in servers.items()}
        for service in out.values():
            service.server.script = service
        yield out
        for service in out.values():
            assert not service.server.errors, service.server.errors
            for rec in service.server.requests:  # keys never reach another host
                assert not [k for k in ALL_KEYS if k != service.key and k in str(rec.header_list)]
    finally:
        for server in servers.values():
            server.stop()


DEAD = free_port()
"""A loopback port with nothing listening: connection refused."""


def routes_text(services: dict[str, Service]) -> str:
    url = {d: s.server.base_url for d, s in services.items()}
    return f"""
[[routes]]
name = "dead"
model = "dead-*"
upstream_url = "http://127.0.0.1:{DEAD}"
api_key_env = "{ENV["openai_chat"]}"
fallback = ["claude"]

[[routes]]
name = "gpt"
model = "gpt-*"
upstream_url = "{url["openai_chat"]}"
api_key_env = "{ENV["openai_chat"]}"
fallback = ["claude"]
cooldown = 5

[[routes]]
name = "claude"
model = "claude-*"
upstream = "anthropic"
upstream_url = "{url["anthropic"]}"
api_key_env = "{ENV["anthropic"]}"
timeout = 20

[[routes]]
name = "main"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"
upstream_url = "{url["anthropic"]}"
api_key_env = "{ENV["anthropic"]}"
fallback = ["gem"]

[[routes]]
name = "gem"
path = "*/v1/messages"
model = "gemini-*"
client = "anthropic"
upstream = "gemini"
upstream_url = "{url["gemini"]}"
api_key_env = "{ENV["gemini"]}"

[[routes]]
name = "home"
"""


@pytest.fixture
def router(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    services: dict[str, Service],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Proxy]:
    for dialect, name in ENV.items():
        monkeypatch.setenv(name, KEYS[dialect])
    routes = tmp_path / "routes.toml"
    routes.write_text(routes_text(services))
    proxy = start_proxy(bridge_routes=str(routes))
    yield proxy
    log = proxy.log_text()
    assert not [k for k in ALL_KEYS if k in log]
    assert "Traceback" not in log
    assert not upstream.requests  # the reverse target (home) is never asked


def cursor(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy.base_url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=30
    )


def ask(proxy: Proxy, model: str, stream: bool) -> str:
    messages: Any = [{"role": "user", "content": "hi"}]
    if not stream:
        done = cursor(proxy).chat.completions.create(model=model, messages=messages)
        return done.choices[0].message.content or ""
    chunks = cursor(proxy).chat.completions.create(model=model, messages=messages, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def flow_line(proxy: Proxy, route: str) -> str:
    """The last flow line served by ``route``."""
    match = proxy.wait_for_log(re.compile(rf"cursor-bridge flow route={route} .*"))
    lines = re.findall(rf"cursor-bridge flow route={route} .*", proxy.log_text())
    return lines[-1] if lines else match.group(0)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_connection_refused_falls_back_to_the_next_route(
    router: Proxy, services: dict[str, Service], stream: bool
) -> None:
    assert ask(router, "dead-model", stream) == "hello from anthropic"
    (rec,) = services["anthropic"].server.requests
    assert rec.path == "/v1/messages"
    line = flow_line(router, "claude")
    assert "tried=" in line and "dead (connection refused, cooling down 30 s)" in line
    # Within the cooldown the next request is not even checked: it goes to the fallback.
    assert ask(router, "dead-model", stream) == "hello from anthropic"
    assert "dead (skipped, cooling down" in flow_line(router, "claude")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_429_with_retry_after_falls_back_and_the_route_cools_down(
    router: Proxy, services: dict[str, Service], stream: bool
) -> None:
    gpt = services["openai_chat"].server
    gpt.enqueue(error_reply("openai_chat", "slow down", 429, {"retry-after": "30"}))
    assert ask(router, "gpt-5", stream) == "hello from anthropic"
    assert len(gpt.requests) == 1
    assert "gpt (HTTP 429, cooling down 30 s)" in flow_line(router, "claude")
    # The second request within the Retry-After goes straight to the fallback.
    assert ask(router, "gpt-5", stream) == "hello from anthropic"
    assert len(gpt.requests) == 1
    assert len(services["anthropic"].server.requests) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_500_falls_back_from_an_anthropic_client_to_a_gemini_route(
    router: Proxy, services: dict[str, Service], stream: bool
) -> None:
    services["anthropic"].server.enqueue(error_reply("anthropic", "overloaded", 500))
    client = anthropic.Anthropic(
        base_url=router.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=30
    )
    messages: Any = [{"role": "user", "content": "hi"}]
    if stream:
        with client.messages.stream(
            model="claude-sonnet-4-6", max_tokens=64, messages=messages
        ) as s:
            text = "".join(s.text_stream)
    else:
        done = client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=messages)
        text = "".join(b.text for b in done.content if b.type == "text")
    assert text == "hello from gemini"
    (rec,) = services["gemini"].server.requests
    assert rec.path.startswith("/v1beta/models/claude-sonnet-4-6:")
    assert "main (HTTP 500)" in flow_line(router, "gem")


def test_no_fallback_once_a_stream_has_started(router: Proxy, services: dict[str, Service]) -> None:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-5",
        "choices": [{"index": 0, "delta": {"content": "par"}, "finish_reason": None}],
    }
    error = {"error": {"message": "upstream died", "type": "server_error"}}
    services["openai_chat"].server.enqueue(SSEReply(sse_from_payloads([chunk, error])))
    got: list[str] = []
    with pytest.raises(openai.APIError):
        stream = cursor(router).chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        for c in stream:
            got.append((c.choices[0].delta.content or "") if c.choices else "")
    assert "".join(got) == "par"  # the stream had started: the client got its first piece
    assert not services["anthropic"].server.requests  # the fallback received nothing


def test_every_route_failing_gives_the_last_error_in_the_clients_dialect(
    router: Proxy, services: dict[str, Service]
) -> None:
    services["openai_chat"].server.enqueue(error_reply("openai_chat", "down", 503))
    services["anthropic"].server.enqueue(error_reply("anthropic", "overloaded too", 529))
    with pytest.raises(openai.APIStatusError) as e:
        ask(router, "gpt-5", False)
    assert e.value.status_code == 529
    assert "overloaded too" in str(e.value.body)
    line = router.wait_for_log(re.compile(r"no route answered; tried: .*")).group(0)
    assert "gpt (HTTP 503, cooling down 5 s)" in line and "claude (HTTP 529" in line
