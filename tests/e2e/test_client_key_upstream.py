"""End to end (issue 40, points 3, 8, 10): with ``bridge_client_keys`` on, a client key never
goes upstream, and a request that carries one goes with the route's key.

One scripted provider stands for every upstream dialect (OpenAI chat and Responses, Anthropic,
Gemini), answering as each does: a model list, ``count_tokens``, a chat answer, or the real
401 / 403 to a request without a key it knows. It records every credential it got (headers,
``?key=``). A real mitmdump before it, in reverse and in regular mode, for: ``GET /v1/models``
(OpenAI and Anthropic SDKs), ``GET /v1beta/models`` (``x-goog-api-key`` and ``?key=``),
``count_tokens``, chat on each dialect, a key pool and a fallback chain, a body the bridge does
not read (passed through), a route that holds no key of the proxy's and a path no route takes.
After each test: no client key in anything the provider received, nor in the log.

Also: a relayed answer (key pool, fallback chain) honours the client's ``Connection: close``
as a plain route does; the start-up warning when no route spends a key of the proxy's."""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anthropic
import httpx
import openai
import pytest

from tests.e2e.harness import (
    HOST,
    JSONReply,
    ModeProxy,
    Proxy,
    Recorded,
    Reply,
    ScriptedUpstream,
    free_port,
)
from tests.e2e.keyed import CREDENTIAL_HEADERS
from tests.real.clients.loop import answer

ROUTE_KEY = "sk-e2e-route-SECRET-1111"
POOL = {"CB_CKU_POOL_A": "sk-e2e-pool-a-SECRET-2222", "CB_CKU_POOL_B": "sk-e2e-pool-b-SECRET-3333"}
POOL_A, POOL_B = POOL.values()
DEAD_KEY = "sk-e2e-dead-SECRET-4444"
ENV = {"CB_CKU_ROUTE": ROUTE_KEY, "CB_CKU_DEAD": DEAD_KEY, **POOL}
PROXY_KEYS = (ROUTE_KEY, POOL_A, POOL_B, DEAD_KEY)
ALICE = "sk-e2e-alice-SECRET-5555"
BOB = "sk-e2e-bob-SECRET-6666"
CLIENT_KEYS = (ALICE, BOB)
DEAD = free_port()
"""A loopback port with nothing listening: the fallback chain's first route is refused."""

GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
MESSAGES = [{"role": "user", "content": "hi"}]


def routes_text() -> str:
    pool = ", ".join(f'"{n}"' for n in POOL)
    return f"""
[[routes]]
name = "pool"
model = "pool-*"
api_key_env = [{pool}]

[[routes]]
name = "dead"
model = "fb-*"
upstream_url = "http://127.0.0.1:{DEAD}"
api_key_env = "CB_CKU_DEAD"
fallback = ["rescue"]

[[routes]]
name = "rescue"
model = "never-*"
api_key_env = "CB_CKU_ROUTE"

[[routes]]
name = "open"
model = "open-*"

[[routes]]
name = "chat"
api_key_env = "CB_CKU_ROUTE"

[[routes]]
name = "claude-pool"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"
model = "pool-*"
api_key_env = [{pool}]

[[routes]]
name = "messages"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"
api_key_env = "CB_CKU_ROUTE"

[[routes]]
name = "responses"
path = "*/responses"
client = "openai_responses"
upstream = "openai_responses"
api_key_env = "CB_CKU_ROUTE"

[[routes]]
name = "gemini"
path = "*/models/*:*enerateContent"
client = "gemini"
upstream = "gemini"
api_key_env = "CB_CKU_ROUTE"
"""


# --------------------------------------------------------------------------- the provider


def credentials(rec: Recorded) -> dict[str, str]:
    """Every credential a request carried: its credential headers and its ``?key=``."""
    got = {h: rec.headers[h] for h in CREDENTIAL_HEADERS if h in rec.headers}
    for name, value in parse_qsl(urlsplit(rec.path).query):
        if name == "key":
            got["?key"] = value
    return got


def dialect_of(rec: Recorded) -> str:
    path = urlsplit(rec.path).path
    if path.endswith(("/messages", "/count_tokens")) or "anthropic-version" in rec.headers:
        return "anthropic"
    if path.startswith("/v1beta/"):
        return "gemini"
    if path.endswith("/responses"):
        return "openai_responses"
    return "openai_chat"


def tag(key: str | None) -> str:
    """What the provider answers about the key it got: a digest, never the key (the bridge
    redacts every key of its own from answers, so an echoed key would read [REDACTED])."""
    return "key#" + hashlib.sha256((key or "").encode()).hexdigest()[:12]


def untag(text: str) -> str:
    """The pool key whose ``tag`` ``text`` is."""
    return next(k for k in (POOL_A, POOL_B, ROUTE_KEY) if tag(k) == text)


def key_in(dialect: str, creds: dict[str, str]) -> str | None:
    """The key a real service of ``dialect`` reads (Anthropic ``x-api-key``, Gemini
    ``x-goog-api-key`` or ``?key=``, OpenAI ``Authorization: Bearer``)."""
    if dialect == "anthropic":
        return creds.get("x-api-key")
    if dialect == "gemini":
        return creds.get("x-goog-api-key") or creds.get("?key")
    return creds.get("authorization", "").removeprefix("Bearer ") or None


def refused(dialect: str) -> JSONReply:
    """What the real service answers a request without a key it knows."""
    if dialect == "anthropic":
        error = {"type": "authentication_error", "message": "invalid x-api-key"}
        return JSONReply({"type": "error", "error": error}, status=401)
    if dialect == "gemini":
        error = {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                }
            ],
        }
        return JSONReply({"error": error}, status=400)
    error = {
        "message": "Incorrect API key provided. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
    return JSONReply({"error": error}, status=401)


@dataclass
class Provider:
    """Every upstream dialect at one address; a request is answered only with a key of the
    proxy's in the header its dialect reads."""

    server: ScriptedUpstream

    def __call__(self, rec: Recorded) -> Reply:
        dialect = dialect_of(rec)
        if key_in(dialect, credentials(rec)) not in PROXY_KEYS:
            return refused(dialect)
        path = urlsplit(rec.path).path
        if rec.method == "GET" and path.endswith("/models"):
            if dialect == "gemini":
                model = {"name": "models/gemini-up", "displayName": "Gemini Up"}
                return JSONReply({"models": [model]})
            if dialect == "anthropic":
                model = {
                    "type": "model",
                    "id": "claude-up",
                    "display_name": "Claude Up",
                    "created_at": "2025-01-01T00:00:00Z",
                }
                body = {"data": [model], "has_more": False, "first_id": "claude-up"}
                return JSONReply({**body, "last_id": "claude-up"})
            model = {"id": "gpt-up", "object": "model", "created": 0, "owned_by": "up"}
            return JSONReply({"object": "list", "data": [model]})
        if path.endswith("/count_tokens"):
            return JSONReply({"input_tokens": 7})
        if rec.method == "POST" and path.endswith("/embeddings"):
            return JSONReply({"object": "list", "data": [], "model": "e", "usage": {}})
        try:
            body = rec.json()
        except ValueError:
            error = {
                "message": "We could not parse the JSON body of your request.",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
            return JSONReply({"error": error}, status=400)
        stream = bool(body.get("stream")) or "streamGenerateContent" in path
        return answer(dialect, stream, f"hello with {tag(key_in(dialect, credentials(rec)))}")


@dataclass
class Bridge:
    mode: str
    proxy: Proxy
    provider: Provider

    @property
    def base(self) -> str:
        """Where a client sends: the proxy (reverse) or the provider through it (regular)."""
        return self.proxy.base_url if self.mode == "reverse" else self.provider.server.base_url

    def http(self) -> httpx.Client:
        proxy = self.proxy.base_url if self.mode == "regular" else None
        return httpx.Client(proxy=proxy, trust_env=False, timeout=30)

    def openai(self, key: str = ALICE) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.base}/v1", api_key=key, max_retries=0, http_client=self.http()
        )

    def anthropic(self, **kw: str) -> anthropic.Anthropic:
        import httpx2  # what anthropic's SDK is built on

        proxy = self.proxy.base_url if self.mode == "regular" else None
        http = httpx2.Client(proxy=proxy, trust_env=False, timeout=30)
        kw = kw or {"api_key": ALICE}
        return anthropic.Anthropic(base_url=self.base, max_retries=0, http_client=http, **kw)

    @property
    def requests(self) -> list[Recorded]:
        return self.provider.server.requests

    def sent(self, method: str, path: str) -> list[dict[str, str]]:
        """The credentials of each request the provider got at ``path`` (no query)."""
        return [
            credentials(r)
            for r in self.requests
            if r.method == method and urlsplit(r.path).path == path
        ]


@pytest.fixture(scope="module", params=["reverse", "regular"])
def bridge_once(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Bridge]:
    tmp = tmp_path_factory.mktemp("client-key-upstream")
    routes, keys = tmp / "routes.toml", tmp / "keys.toml"
    routes.write_text(routes_text())
    keys.write_text(f'alice = "{ALICE}"\nbob = "{BOB}"\n')
    server = ScriptedUpstream().start()
    provider = Provider(server)
    server.script = provider
    options = {"bridge_routes": str(routes), "bridge_client_keys": str(keys)}
    mode = str(request.param)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in ENV.items():
            mp.setenv(name, value)
        if mode == "reverse":
            proxy = Proxy(server.port, options)
        else:
            proxy = ModeProxy(server.port, mode, options)
        try:
            with proxy:
                yield Bridge(mode, proxy, provider)
        finally:
            server.stop()


@pytest.fixture
def bridge(bridge_once: Bridge) -> Iterator[Bridge]:
    """The module's bridge, its provider emptied; after the test no client key reached the
    provider, and the log names no key and has no traceback."""
    server = bridge_once.provider.server
    server.reset()
    server.script = bridge_once.provider
    yield bridge_once
    assert not server.errors, server.errors
    assert not server.violations, server.violations
    for rec in server.requests:
        seen = str(rec.header_list) + rec.path + rec.body.decode("utf-8", "replace")
        assert not [k for k in CLIENT_KEYS if k in seen], (rec.method, rec.path)
    log = bridge_once.proxy.log_text()
    assert not [k for k in (*PROXY_KEYS, *CLIENT_KEYS) if k in log]
    assert "Traceback" not in log
    assert "no route sends a key of the proxy's" not in log


# --------------------------------------------------------------------------- model lists


def test_openai_model_lists_go_with_the_routes_key(bridge: Bridge) -> None:
    """``GET /v1/models``: the first route of that upstream with a key of the proxy's (the
    pool's first key), in OpenAI's header, never the client's."""
    ids = [m.id for m in bridge.openai().models.list()]
    assert "gpt-up" in ids  # the provider answered: it got a key it knows
    assert bridge.sent("GET", "/v1/models") == [{"authorization": f"Bearer {POOL_A}"}]


def test_anthropic_model_lists_go_with_the_routes_key(bridge: Bridge) -> None:
    """An Anthropic client's list (``anthropic-version``): an Anthropic route's key, in
    ``x-api-key``, whether the client sent its key there or as ``Bearer``."""
    for kw in ({"api_key": ALICE}, {"auth_token": BOB}):
        ids = [m.id for m in bridge.anthropic(**kw).models.list()]
        assert "claude-up" in ids
    assert bridge.sent("GET", "/v1/models") == [{"x-api-key": POOL_A}] * 2


@pytest.mark.parametrize("place", ["x-goog-api-key", "query"])
def test_gemini_model_lists_go_with_the_routes_key(bridge: Bridge, place: str) -> None:
    headers, params = ({"x-goog-api-key": ALICE}, {}) if place != "query" else ({}, {"key": ALICE})
    with bridge.http() as client:
        got = client.get(f"{bridge.base}/v1beta/models", headers=headers, params=params)
    assert got.status_code == 200, got.text
    assert got.json()["models"][0]["name"] == "models/gemini-up"
    assert bridge.sent("GET", "/v1beta/models") == [{"x-goog-api-key": ROUTE_KEY}]


def test_model_lists_without_a_client_key_are_refused(bridge: Bridge) -> None:
    """The lists spend a key of the proxy's: they need a client key like a chat request."""
    with pytest.raises(openai.AuthenticationError):
        bridge.openai(key="sk-not-a-client-key-0000").models.list()
    with bridge.http() as client:
        got = client.get(f"{bridge.base}/v1beta/models", params={"key": "sk-not-a-client-0000"})
    assert got.status_code == 401 and got.json()["error"]["status"] == "UNAUTHENTICATED", got.text
    assert not bridge.requests


# --------------------------------------------------------------------------- count_tokens, chat


def test_count_tokens_goes_with_the_routes_key(bridge: Bridge) -> None:
    for kw in ({"api_key": ALICE}, {"auth_token": ALICE}):
        counted = bridge.anthropic(**kw).messages.count_tokens(
            model="claude-x", messages=[{"role": "user", "content": "hi"}]
        )
        assert counted.input_tokens == 7
    assert bridge.sent("POST", "/v1/messages/count_tokens") == [{"x-api-key": ROUTE_KEY}] * 2


def test_chat_on_every_dialect_goes_with_the_routes_key(bridge: Bridge) -> None:
    chat = bridge.openai().chat.completions.create(model="gpt-x", messages=MESSAGES)  # type: ignore[arg-type]
    assert chat.choices[0].message.content == f"hello with {tag(ROUTE_KEY)}"
    assert bridge.sent("POST", "/v1/chat/completions") == [{"authorization": f"Bearer {ROUTE_KEY}"}]
    for kw in ({"api_key": ALICE}, {"auth_token": BOB}):
        msg = bridge.anthropic(**kw).messages.create(
            model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
        block = msg.content[0]
        assert block.type == "text" and block.text == f"hello with {tag(ROUTE_KEY)}"
    assert bridge.sent("POST", "/v1/messages") == [{"x-api-key": ROUTE_KEY}] * 2
    done = bridge.openai().responses.create(model="gpt-x", input="hi")
    assert done.output_text == f"hello with {tag(ROUTE_KEY)}"
    assert bridge.sent("POST", "/v1/responses") == [{"authorization": f"Bearer {ROUTE_KEY}"}]
    path = "/v1beta/models/gemini-2.5-flash:generateContent"
    with bridge.http() as client:
        for headers, params in (({"x-goog-api-key": ALICE}, {}), ({}, {"key": ALICE})):
            got = client.post(bridge.base + path, json=GEMINI_BODY, headers=headers, params=params)
            assert got.status_code == 200, got.text
            text = got.json()["candidates"][0]["content"]["parts"][0]["text"]
            assert text == f"hello with {tag(ROUTE_KEY)}"
    assert bridge.sent("POST", path) == [{"x-goog-api-key": ROUTE_KEY}] * 2


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_pool_and_fallback_routes_go_with_their_keys(bridge: Bridge, stream: bool) -> None:
    client = bridge.openai()

    def ask(model: str) -> str:
        if not stream:
            done = client.chat.completions.create(model=model, messages=MESSAGES)  # type: ignore[arg-type]
            return done.choices[0].message.content or ""
        chunks = client.chat.completions.create(model=model, messages=MESSAGES, stream=True)  # type: ignore[arg-type]
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    pooled = ask("pool-1")
    assert pooled in (f"hello with {tag(POOL_A)}", f"hello with {tag(POOL_B)}")
    assert ask("fb-1") == f"hello with {tag(ROUTE_KEY)}"  # the dead route refused, the rescue's key
    (first, second) = bridge.sent("POST", "/v1/chat/completions")
    assert first == {"authorization": f"Bearer {untag(pooled.removeprefix('hello with '))}"}
    assert second == {"authorization": f"Bearer {ROUTE_KEY}"}
    msg = bridge.anthropic(auth_token=ALICE).messages.create(
        model="pool-2", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    block = msg.content[0]
    assert block.type == "text" and block.text in (
        f"hello with {tag(POOL_A)}",
        f"hello with {tag(POOL_B)}",
    )
    assert bridge.sent("POST", "/v1/messages") == [
        {"x-api-key": untag(block.text[len("hello with ") :])}
    ]


def test_a_body_the_bridge_passes_through_goes_with_the_routes_key(bridge: Bridge) -> None:
    """Not JSON: not rewritten, passed on as it came — with the route's key, not the client's."""
    bridge.provider.server.strict = False  # the provider answers its own 400 to this body
    with bridge.http() as client:
        got = client.post(
            f"{bridge.base}/v1/chat/completions",
            content=b"not json",
            headers={"authorization": f"Bearer {ALICE}", "content-type": "application/json"},
        )
    assert got.status_code == 400 and "could not parse the JSON" in got.text
    assert bridge.sent("POST", "/v1/chat/completions") == [{"authorization": f"Bearer {ROUTE_KEY}"}]


def test_a_client_key_is_removed_where_no_key_of_the_proxys_replaces_it(bridge: Bridge) -> None:
    """A route that holds no key of the proxy's, and a path no route takes: the client key
    is not checked there (nothing of the proxy's is spent) and does not go upstream either;
    the upstream gets no credential, and says so as it does."""
    with pytest.raises(openai.AuthenticationError):
        bridge.openai().chat.completions.create(model="open-1", messages=MESSAGES)  # type: ignore[arg-type]
    with pytest.raises(openai.AuthenticationError):
        bridge.openai(key=BOB).embeddings.create(model="e", input="hi")
    assert bridge.sent("POST", "/v1/chat/completions") == [{}]
    assert bridge.sent("POST", "/v1/embeddings") == [{}]
    # Another key than a client key goes on as it came (it is the client's own).
    own = "sk-the-clients-own-upstream-key"
    with pytest.raises(openai.AuthenticationError):
        bridge.openai(key=own).embeddings.create(model="e", input="hi")
    assert bridge.sent("POST", "/v1/embeddings")[-1] == {"authorization": f"Bearer {own}"}


# --------------------------------------------------------------------------- Connection: close


def closes_after_answer(bridge: Bridge, model: str, stream: bool) -> tuple[bytes, bool]:
    """One request with ``Connection: close`` on a raw socket to the proxy (absolute-form in
    regular mode); the bytes read and whether the proxy closed the connection (read until it
    does, 15 s at most)."""
    port = bridge.proxy.port
    body = json.dumps({"model": model, "messages": MESSAGES, "stream": stream}).encode()
    target, host = "/v1/chat/completions", f"{HOST}:{port}"
    if bridge.mode == "regular":
        target = bridge.provider.server.base_url + target
        host = f"{HOST}:{bridge.provider.server.port}"
    head = (
        f"POST {target} HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {ALICE}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    got = b""
    with socket.create_connection((HOST, port), timeout=15) as sock:
        sock.sendall(head + body)
        sock.settimeout(0.5)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                piece = sock.recv(65536)
            except TimeoutError:
                continue
            if not piece:
                return got, True
            got += piece
    return got, False


@pytest.mark.parametrize("model", ["gpt-x", "pool-1", "fb-1"], ids=["plain", "pool", "fallback"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_relayed_answer_honours_connection_close(
    bridge: Bridge, model: str, stream: bool
) -> None:
    got, closed = closes_after_answer(bridge, model, stream)
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    assert (b"data: [DONE]" if stream else b"hello with") in got  # the whole answer
    assert closed, "the proxy kept the connection open after a Connection: close request"


# --------------------------------------------------------------------------- the warning


def test_client_keys_without_a_route_that_spends_a_key_warn_at_start(
    tmp_path: Path, upstream: ScriptedUpstream
) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'alice = "{ALICE}"\n')
    with Proxy(upstream.port, {"bridge_client_keys": str(keys)}) as proxy:
        line = proxy.wait_for_log("no route sends a key of the proxy's", timeout=10)
        text = proxy.log_text()
        start = text.rfind("\n", 0, line.start()) + 1
        whole: Any = text[start : text.find("\n", line.end())]
        assert "bridge_client_keys" in whole and "every request is served" in whole
        assert text.count("no route sends a key of the proxy's") == 1
        assert ALICE not in text


def test_a_request_mitmproxy_streams_goes_without_the_client_key(tmp_path: Path) -> None:
    """``stream_large_bodies``: mitmproxy sends a large request's head upstream before its
    body is read (before any ``request`` hook): the client key is removed from it first."""
    routes, keys = tmp_path / "routes.toml", tmp_path / "keys.toml"
    routes.write_text(routes_text())
    keys.write_text(f'alice = "{ALICE}"\n')
    server = ScriptedUpstream(strict=False).start()
    server.script = Provider(server)
    options = {
        "bridge_routes": str(routes),
        "bridge_client_keys": str(keys),
        "stream_large_bodies": "1k",
    }
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name, value in ENV.items():
                mp.setenv(name, value)
            with Proxy(server.port, options, check_options=False) as proxy:
                big = {"model": "gpt-x", "messages": [{"role": "user", "content": "x" * 4096}]}
                got = httpx.post(
                    f"{proxy.base_url}/v1/chat/completions",
                    json=big,
                    headers={"authorization": f"Bearer {ALICE}"},
                    timeout=30,
                    trust_env=False,
                )
                log = proxy.log_text()
        (rec,) = server.requests
        assert ALICE not in str(rec.header_list)
        assert credentials(rec) == {}  # not rewritten (streamed): no key of the proxy's either
        assert got.status_code == 401  # the provider's own answer to no key
        assert ALICE not in log and "Traceback" not in log
    finally:
        server.stop()
