"""End to end: fallbacks (issue 29). One mitmdump in reverse mode; routes whose upstream is a
loopback port with nothing listening (connection refused), a port that speaks no TLS where TLS
is asked, a scripted upstream that answers 429 / 500 first or sends no first byte in time, each
backed by a route of another upstream dialect on its own port; the answer that serves streams
to the client as it comes (the bridge's relay makes every attempt of a chain). Every
scripted upstream answers 401 in its own shape to anything but its own key in its own header,
and the test checks the headers each one received: keys never reach another host. Read by the
official SDKs, streamed and whole."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.e2e import harness
from tests.e2e.harness import (
    HOST,
    JSONReply,
    ModeProxy,
    Proxy,
    Recorded,
    Reply,
    ScriptedUpstream,
    SSEReply,
    free_port,
    sse_from_payloads,
)
from tests.e2e.keyed import routed, running, sent, wanted
from tests.real.clients.loop import answer, chat_message, check_request

CLIENT_KEY = "sk-client-SECRET-fb"
KEYS = {
    "openai_chat": "sk-openai-fb-SECRET",
    "anthropic": "sk-ant-fb-SECRET",
    "gemini": "AIza-gemini-fb-SECRET",
}
ENV = {d: f"CB_E2E_FB_{d.upper()}_KEY" for d in KEYS}
ALL_KEYS = (CLIENT_KEY, *KEYS.values())


@dataclass
class Service:
    """A scripted upstream of one dialect that wants its key in its dialect's header."""

    dialect: str
    key: str
    server: ScriptedUpstream
    delay: float = 0.0
    """Seconds before the answer's first byte."""
    linger: float = 0.0
    """Seconds a streamed answer's body stays open after its last event."""

    def __call__(self, rec: Recorded) -> Reply:
        time.sleep(self.delay)
        if sent(rec) != self.wanted():
            return error_reply(self.dialect, "invalid api key", 401)
        body = rec.json()
        check_request(self.dialect, body)
        if self.dialect == "gemini":
            stream = ":streamGenerateContent" in rec.path
        else:
            stream = bool(body.get("stream"))
        reply = answer(self.dialect, stream, f"hello from {self.dialect}")
        if self.linger and isinstance(reply, SSEReply):
            reply = dataclasses.replace(reply, linger=self.linger)
        return reply

    def wanted(self) -> dict[str, str]:
        return wanted(self.dialect, self.key)


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
    with running(KEYS, Service, ALL_KEYS) as out:
        yield out


DEAD = free_port()
"""A loopback port with nothing listening: connection refused."""


@pytest.fixture(scope="module")
def no_tls() -> Iterator[int]:
    """A loopback port that answers anything with a plain-HTTP 400: a TLS handshake fails."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    server.close()


def routes_text(services: dict[str, Service], no_tls: int) -> str:
    url = {d: s.server.base_url for d, s in services.items()}
    return f"""
[[routes]]
name = "hang"
model = "hang-*"
upstream_url = "{url["openai_chat"]}"
api_key_env = "{ENV["openai_chat"]}"
fallback = ["claude"]
timeout = 1

[[routes]]
name = "tls"
model = "tls-*"
upstream_url = "https://127.0.0.1:{no_tls}"
api_key_env = "{ENV["openai_chat"]}"
fallback = ["claude"]

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
name = "gone"
model = "gone-*"
upstream_url = "http://127.0.0.1:{DEAD}"
api_key_env = "{ENV["openai_chat"]}"
fallback = ["dead"]

[[routes]]
name = "chain"
model = "chain-*"
upstream_url = "{url["openai_chat"]}"
api_key_env = "{ENV["openai_chat"]}"
fallback = ["slow", "claude"]

[[routes]]
name = "slow"
model = "slow-*"
upstream = "gemini"
upstream_url = "{url["gemini"]}"
api_key_env = "{ENV["gemini"]}"
timeout = 1

[[routes]]
name = "home"
"""


@pytest.fixture
def router(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    services: dict[str, Service],
    no_tls: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Proxy]:
    env = {ENV[d]: KEYS[d] for d in KEYS}
    text = routes_text(services, no_tls)
    with routed(start_proxy, tmp_path / "routes.toml", text, env, monkeypatch, ALL_KEYS) as p:
        yield p
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


def flow_line(proxy: Proxy, route: str, nth: int = 1, timeout: float = 10.0) -> str:
    """The ``nth`` flow line served by ``route`` (the line is written when the flow is over,
    which may be just after its client read the answer)."""
    pattern = re.compile(rf"cursor-bridge flow route={route} .*")
    deadline = time.monotonic() + timeout
    while True:
        lines = pattern.findall(proxy.log_text())
        if len(lines) >= nth:
            return str(lines[nth - 1])
        if time.monotonic() > deadline:
            raise AssertionError(f"no flow line {nth} for route {route}: {lines}")
        time.sleep(0.05)


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
    assert "dead (skipped, cooling down" in flow_line(router, "claude", 2)


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


def test_a_fallback_that_times_out_before_its_first_byte_goes_on_down_the_chain(
    router: Proxy, services: dict[str, Service]
) -> None:
    services["openai_chat"].server.enqueue(error_reply("openai_chat", "down", 502))
    services["gemini"].delay = 10.0  # the slow route's timeout is 1 s
    started = time.monotonic()
    assert ask(router, "chain-model", True) == "hello from anthropic"
    assert time.monotonic() - started < 8.0  # not waited for
    assert len(services["gemini"].server.requests) == 1
    line = flow_line(router, "claude")
    assert "chain (HTTP 502, cooling down 30 s), slow (timed out before the first byte" in line
    assert "HTTP Request:" not in router.log_text()  # httpx's lines (a URL may hold a key)


def test_no_route_reachable_is_a_502_in_the_clients_dialect_naming_them(
    router: Proxy, services: dict[str, Service]
) -> None:
    with pytest.raises(openai.APIStatusError) as e:
        ask(router, "gone-model", True)
    assert e.value.status_code == 502
    message = str(e.value.body)
    assert "gone (connection refused" in message and "dead (connection refused" in message
    line = flow_line(router, "dead")
    assert "outcome=rejected" in line and "tried=" in line
    assert not any(s.server.requests for s in services.values())


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_first_attempt_with_no_first_byte_in_time_falls_back(
    router: Proxy, services: dict[str, Service], stream: bool
) -> None:
    services["openai_chat"].delay = 10.0  # the hang route's timeout is 1 s
    started = time.monotonic()
    assert ask(router, "hang-model", stream) == "hello from anthropic"
    assert time.monotonic() - started < 8.0  # not waited for
    assert len(services["openai_chat"].server.requests) == 1
    line = flow_line(router, "claude")
    assert 'tried="hang (timed out before the first byte, cooling down 30 s)' in line


def test_a_first_attempt_whose_tls_handshake_fails_falls_back(
    router: Proxy, services: dict[str, Service]
) -> None:
    assert ask(router, "tls-model", True) == "hello from anthropic"
    assert 'tried="tls (TLS handshake failed, cooling down 30 s)' in flow_line(router, "claude")


def test_a_fallbacks_answer_streams_to_the_client_as_it_comes(
    router: Proxy, services: dict[str, Service]
) -> None:
    """The Anthropic route answers 500; the Gemini route's stream sends its events, then keeps
    its body open 3 s: the client has the text long before the stream ends."""
    services["anthropic"].server.enqueue(error_reply("anthropic", "overloaded", 500))
    services["gemini"].linger = 3.0
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    headers = {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}
    started = time.monotonic()
    text, texted = "", 0.0
    url = f"{router.base_url}/v1/messages"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as got:
        assert got.status_code == 200
        for line in got.iter_lines():
            if line.startswith("data: ") and "text_delta" in line:
                text += json.loads(line[6:])["delta"]["text"]
                texted = time.monotonic() - started
    ended = time.monotonic() - started
    assert text == "hello from gemini"
    assert ended >= 3.0 and texted < ended - 2.0, (texted, ended)
    assert "main (HTTP 500)" in flow_line(router, "gem")


def test_a_client_that_hangs_up_while_the_first_attempt_waits_leaves_the_proxy_well(
    router: Proxy, services: dict[str, Service]
) -> None:
    services["openai_chat"].delay = 4.0
    client = openai.OpenAI(
        base_url=f"{router.base_url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=0.5
    )
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(
            model="chain-model", messages=[{"role": "user", "content": "hi"}]
        )
    services["openai_chat"].delay = 0.0
    assert ask(router, "gpt-5", True) == "hello from openai_chat"
    assert "Traceback" not in router.log_text()


UPSTREAM_MODE_ROUTES = """
[[routes]]
name = "a"
path = "*/chat/completions"
upstream_url = "http://a.invalid"
client_key = true
fallback = ["b"]

[[routes]]
name = "b"
path = "*/chat/completions"
model = "never-*"
upstream_url = "http://b.invalid"
client_key = true
"""


def test_behind_an_upstream_proxy_every_attempt_goes_through_it_never_the_environments(
    upstream: ScriptedUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--mode upstream:`` with ``upstream_auth``: the scripted upstream plays the upstream
    proxy (it gets absolute-form requests) and answers the first route 503; HTTP(S)_PROXY
    point at a trap. The relay leg goes to 127.0.0.1 directly: the proxy never sees it."""
    routes = tmp_path / "routes.toml"
    routes.write_text(UPSTREAM_MODE_ROUTES)
    with ScriptedUpstream() as trap:
        env = harness._child_env()
        env.update(HTTP_PROXY=trap.base_url, HTTPS_PROXY=trap.base_url, NO_PROXY="")
        env.update(http_proxy=trap.base_url, https_proxy=trap.base_url, no_proxy="")
        monkeypatch.setattr(harness, "_child_env", lambda: env)
        options = {"bridge_routes": str(routes), "upstream_auth": "proxyuser:proxypass"}
        mode = f"upstream:http://{HOST}:{upstream.port}"
        with ModeProxy(upstream.port, mode, options, check_options=False) as p:
            upstream.enqueue(
                error_reply("openai_chat", "down", 503),
                JSONReply(chat_message("hello through the proxy")),
            )
            client = openai.OpenAI(
                base_url="http://api.invalid/v1",
                api_key=CLIENT_KEY,
                max_retries=0,
                timeout=30,
                http_client=httpx.Client(proxy=f"http://{HOST}:{p.port}", trust_env=False),
            )
            done = client.chat.completions.create(
                model="gpt-4.1", messages=[{"role": "user", "content": "hi"}]
            )
            assert done.choices[0].message.content == "hello through the proxy"
            first, second = upstream.wait_for_requests(2)
            assert first.path == "http://a.invalid/v1/chat/completions"
            assert second.path == "http://b.invalid/v1/chat/completions"
            for rec in (first, second):
                assert rec.headers["proxy-authorization"] == "Basic cHJveHl1c2VyOnByb3h5cGFzcw=="
                assert rec.headers["authorization"] == f"Bearer {CLIENT_KEY}"
            assert len(upstream.requests) == 2  # the relay leg never went through it
            assert trap.requests == []
            assert 'tried="a (HTTP 503, cooling down 30 s)"' in flow_line(p, "b")


def test_in_regular_mode_an_https_request_through_connect_falls_back(
    upstream: ScriptedUpstream, services: dict[str, Service], tmp_path: Path
) -> None:
    """A client that uses the bridge as its HTTPS proxy (CONNECT, mitmproxy's CA): its
    request for ``api.openai.com`` is routed to a refused address, falls back through the
    relay to the Anthropic service, and the answer comes back inside the tunnel."""
    routes = tmp_path / "routes.toml"
    routes.write_text(
        f"""
[[routes]]
name = "dead"
path = "*/chat/completions"
upstream_url = "http://127.0.0.1:{DEAD}"
api_key_env = "{ENV["openai_chat"]}"
fallback = ["claude"]

[[routes]]
name = "claude"
path = "*/chat/completions"
model = "never-*"
upstream = "anthropic"
upstream_url = "{services["anthropic"].server.base_url}"
api_key_env = "{ENV["anthropic"]}"
"""
    )
    env = harness._child_env()
    env.update({ENV[d]: KEYS[d] for d in KEYS})
    options = {"bridge_routes": str(routes)}
    with contextlib.ExitStack() as stack:
        stack.enter_context(pytest.MonkeyPatch.context()).setattr(
            harness, "_child_env", lambda: env
        )
        p = stack.enter_context(ModeProxy(upstream.port, "regular", options, check_options=False))
        ca = p.confdir / "mitmproxy-ca-cert.pem"
        client = openai.OpenAI(
            base_url="https://api.openai.com/v1",
            api_key=CLIENT_KEY,
            max_retries=0,
            timeout=30,
            http_client=httpx.Client(
                proxy=f"http://{HOST}:{p.port}",
                verify=ssl.create_default_context(cafile=str(ca)),
                trust_env=False,
            ),
        )
        done = client.chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": "hi"}]
        )
        assert done.choices[0].message.content == "hello from anthropic"
        assert 'tried="dead (connection refused' in flow_line(p, "claude")
    assert not upstream.requests
