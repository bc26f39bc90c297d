"""End to end (issue 40, point 2): no key the proxy holds reaches a client, whatever the upstream
echoes, through a real mitmdump.

An upstream that echoes the key it got ("Bad request made with key sk-…") — in a 400 whole or
streamed (an event stream, a chunked JSON body), in the text of a 2xx stream cut inside the key,
in an error event of a 2xx stream, JSON-escaped (``\\/``) and URL-encoded in a whole answer, in a
response header — for each client dialect (OpenAI chat, Anthropic, Responses, Gemini), on a
same-dialect and a translated route, each with one ``api_key_env`` key and with a key pool (the
relay): the client's bytes (headers and body) never hold the key in any form; a masked echo
(``sk-…abcd``, ``sk-proj-****abcd``) reaches it as it was written. Also a request the bridge
passes through (``not_rewritten``), and a client key of ``bridge_client_keys`` an upstream got.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, quote_plus, urlsplit

import pytest

from tests.e2e.harness import (
    JSONReply,
    Proxy,
    RawReply,
    Recorded,
    Reply,
    ScriptedUpstream,
    SSEReply,
    stream_request,
)
from tests.real.clients.loop import answer

ROUTE_KEY = "sk-e2e-redact/ROUTE+key=7f3a9c1e5b"
POOL = {"CB_E2E_REDACT_POOL_A": "sk-e2e-pool/A+key=0d9e8f7a6b",
        "CB_E2E_REDACT_POOL_B": "sk-e2e-pool/B+key=1c2d3e4f5a"}  # fmt: skip
ENV = {"CB_E2E_REDACT_ROUTE": ROUTE_KEY, **POOL}
PROXY_KEYS = (ROUTE_KEY, *POOL.values())
CLIENT_OWN_KEY = "sk-e2e-client-own-0123456789"
"""The key the client sends (a keyed route replaces it upstream)."""

CLIENTS = ("openai_chat", "anthropic", "openai_responses", "gemini")
TRANSLATED = {"openai_chat": "anthropic", "anthropic": "openai_chat",
              "openai_responses": "openai_chat", "gemini": "openai_chat"}  # fmt: skip
PATHS = {"openai_chat": "/v1/chat/completions", "anthropic": "/v1/messages",
         "openai_responses": "/v1/responses", "gemini": "/v1beta/models/*"}  # fmt: skip
KINDS = ("same-key", "same-pool", "tr-key", "tr-pool")


def routes_text(upstream_url: str) -> str:
    out = [
        f'[[routes]]\nname = "passed"\npath = "/passed/v1/chat/completions"\n'
        f'upstream_url = "{upstream_url}"\napi_key_env = "CB_E2E_REDACT_ROUTE"\n'
    ]
    pool = ", ".join(f'"{n}"' for n in POOL)
    for client in CLIENTS:
        for kind in KINDS:
            upstream = client if kind.startswith("same") else TRANSLATED[client]
            keys = '"CB_E2E_REDACT_ROUTE"' if kind.endswith("key") else f"[{pool}]"
            out.append(
                f'[[routes]]\nname = "{client}-{kind}"\npath = "/{kind}{PATHS[client]}"\n'
                f'client = "{client}"\nupstream = "{upstream}"\napi_key_env = {keys}\n'
            )
    return "\n".join(out)


def forms(key: str) -> tuple[str, ...]:
    """Every way a body may quote ``key``: as it is, JSON-escaped (``\\/``), URL-encoded."""
    return (key, key.replace("/", "\\/"), quote(key, safe=""), quote_plus(key, safe=""))


def leaked(text: str, keys: tuple[str, ...] = PROXY_KEYS) -> list[str]:
    return [f for key in keys for f in forms(key) if f in text]


# --------------------------------------------------------------------------- the upstream


def dialect_of(path: str) -> str:
    bare = path.split("?", 1)[0]
    if bare.endswith("/chat/completions"):
        return "openai_chat"
    if bare.endswith("/messages"):
        return "anthropic"
    if bare.endswith("/responses"):
        return "openai_responses"
    assert ":generateContent" in bare or ":streamGenerateContent" in bare, path
    return "gemini"


def key_got(rec: Recorded) -> str:
    """The key the request carried, wherever its dialect puts it."""
    for name in ("x-api-key", "x-goog-api-key"):
        if name in rec.headers:
            return str(rec.headers[name])
    if "authorization" in rec.headers:
        return str(rec.headers["authorization"]).removeprefix("Bearer ")
    return parse_qs(urlsplit(rec.path).query).get("key", [""])[0]


def error_body(dialect: str, message: str) -> dict[str, Any]:
    """A 400 as the service of ``dialect`` writes it."""
    if dialect == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    if dialect == "gemini":
        return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": None}}  # fmt: skip


def error_event(dialect: str, message: str) -> bytes:
    """An error inside a 200 stream, as the service of ``dialect`` sends one."""
    if dialect == "anthropic":
        payload = {"type": "error", "error": {"type": "api_error", "message": message}}
        return b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"
    if dialect == "openai_responses":
        payload = {"type": "error", "code": "server_error", "message": message, "param": None,
                   "sequence_number": 5}  # fmt: skip
        return b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"
    if dialect == "gemini":
        payload = {"error": {"code": 500, "message": message, "status": "INTERNAL"}}
        return b"data: " + json.dumps(payload).encode() + b"\n\n"
    payload = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def cut_inside(body: bytes, key: str) -> tuple[int, ...]:
    """Offsets that cut the first quote of ``key`` in ``body`` in three."""
    at = body.index(key.encode())
    return (at + 3, at + 11)


def first_events(body: bytes, n: int) -> bytes:
    return b"".join(e + b"\n\n" for e in body.split(b"\n\n")[:n])


MASKED = "sk-…{tail} sk-proj-****{tail} sk-...{tail}"


@dataclass
class Echo:
    """An upstream of any dialect that quotes the key it got, the way ``case`` says."""

    case: str = "error"

    def __call__(self, rec: Recorded) -> Reply:
        dialect = dialect_of(rec.path)
        key = key_got(rec)
        body = rec.json() if rec.body.startswith(b"{") else {}
        stream = bool(body.get("stream")) or ":streamGenerateContent" in rec.path
        said = f"Bad request made with key {key}"
        if self.case == "error":
            return JSONReply(error_body(dialect, said), status=400)
        if self.case == "masked":
            return JSONReply(error_body(dialect, MASKED.format(tail=key[-4:])), status=400)
        if self.case == "error-stream":  # a 400 sent as an event stream, cut inside the key
            raw = error_event(dialect, said)
            return SSEReply(raw, status=400, cuts=cut_inside(raw, key), delay=0.05)
        if self.case == "error-chunked":  # a 400 JSON body sent chunked, cut inside the key
            raw = json.dumps(error_body(dialect, said)).encode()
            headers = {"content-type": "application/json"}
            return SSEReply(raw, status=400, cuts=cut_inside(raw, key), delay=0.05,
                            headers=headers)  # fmt: skip
        if self.case == "text":  # a 200 stream whose text quotes the key, cut inside it
            reply = answer(dialect, True, f"Your key is {key} indeed")
            assert isinstance(reply, SSEReply)
            return replace(reply, cuts=cut_inside(reply.body, key), delay=0.05)
        if self.case == "event":  # an error event in a 200 stream, cut inside the key
            start = answer(dialect, True, "Hel lo")
            assert isinstance(start, SSEReply)
            head = first_events(start.body, {"anthropic": 3, "openai_responses": 5}.get(dialect, 1))
            raw = head + error_event(dialect, said)
            return SSEReply(raw, cuts=cut_inside(raw, key), delay=0.05)
        if self.case == "escaped":  # JSON-escaped (``\/``) and URL-encoded, in a whole answer
            text = f"see https://example.test/v1?key={quote(key, safe='')} made with KEYHERE"
            reply = answer(dialect, False, text)
            assert isinstance(reply, JSONReply)
            raw = json.dumps(reply.body).replace("KEYHERE", key.replace("/", "\\/"))
            assert key not in raw
            return RawReply(raw.encode(), headers={"content-type": "application/json"})
        if self.case == "header":
            reply = answer(dialect, stream, "Hello")
            return replace(reply, headers={**reply.headers, "x-echo": f"made with key {key}"})
        raise AssertionError(self.case)


# --------------------------------------------------------------------------- the clients


def request_of(
    client: str, prefix: str, stream: bool
) -> tuple[str, dict[str, Any], dict[str, str]]:
    """Path, body and headers of a request of ``client``'s dialect, with the client's own key."""
    if client == "gemini":
        verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
        body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        return f"{prefix}/v1beta/models/m:{verb}", body, {"x-goog-api-key": CLIENT_OWN_KEY}
    if client == "anthropic":
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        headers = {"x-api-key": CLIENT_OWN_KEY, "anthropic-version": "2023-06-01"}
        return f"{prefix}/v1/messages", {**body, "stream": stream}, headers
    auth = {"authorization": f"Bearer {CLIENT_OWN_KEY}"}
    if client == "openai_responses":
        return f"{prefix}/v1/responses", {"model": "m", "input": "hi", "stream": stream}, auth
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return f"{prefix}/v1/chat/completions", body, auth


@dataclass
class Answer:
    status: int
    headers: str
    body: str
    pieces: int


def ask(p: Proxy, client: str, prefix: str, stream: bool) -> Answer:
    path, body, headers = request_of(client, prefix, stream)
    got = stream_request(
        p.port, "POST", path, json.dumps(body).encode(),
        {**headers, "content-type": "application/json"},
    )  # fmt: skip
    head = "\n".join(f"{k}: {v}" for k, v in got.headers.items())
    return Answer(got.status, head, got.body.decode("utf-8", "replace"), len(got.pieces))


# --------------------------------------------------------------------------- the matrix


@pytest.fixture(scope="module")
def keyed_proxy(
    _upstream_server: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    routes = tmp_path_factory.mktemp("keys-in-answers") / "routes.toml"
    routes.write_text(routes_text(_upstream_server.base_url))
    with pytest.MonkeyPatch.context() as mp:
        for name, value in ENV.items():
            mp.setenv(name, value)
        with Proxy(_upstream_server.port, {"bridge_routes": str(routes)}) as p:
            yield p
            log = p.log_text()
    assert "Traceback" not in log and "internal error" not in log, log
    assert not leaked(log), "a key in the log"


CASES: tuple[tuple[str, bool], ...] = (
    ("error", False),
    ("error", True),
    ("error-stream", True),
    ("error-chunked", True),
    ("text", True),
    ("event", True),
    ("escaped", False),
    ("header", False),
    ("header", True),
)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("client", CLIENTS)
def test_no_key_of_the_proxys_reaches_a_client(
    keyed_proxy: Proxy, upstream: ScriptedUpstream, client: str, kind: str
) -> None:
    echo = Echo()
    upstream.script = echo
    wrong: list[str] = []
    """Every case that went wrong (all are tried: the message lists each)."""
    for case, stream in CASES:
        echo.case = case
        before = len(upstream.requests)
        got = ask(keyed_proxy, client, f"/{kind}", stream)
        what = f"{case}, {'streamed' if stream else 'whole'}"
        assert len(upstream.requests) == before + 1, what  # one request, one echo
        sent = key_got(upstream.requests[-1])
        assert sent in PROXY_KEYS, what  # the proxy's key went upstream, not the client's
        if leaked(got.headers + got.body):
            wrong.append(f"{what}: the key reached the client")
        elif case == "header":
            echoed = (
                "x-echo" not in got.headers or "x-echo: made with key [REDACTED]" in got.headers
            )
            if got.status != 200 or not echoed:
                wrong.append(f"{what}: {got.status} {got.headers}")
        elif case.startswith("error") and got.status != 400:
            wrong.append(f"{what}: HTTP {got.status} {got.body}")
        elif "[REDACTED]" not in got.body:
            wrong.append(f"{what}: no echo: {got.body}")
    assert not wrong, f"{client} on {kind}:\n" + "\n".join(wrong)
    # A masked echo is no key: it reaches the client as the upstream wrote it.
    echo.case = "masked"
    got = ask(keyed_proxy, client, f"/{kind}", False)
    tail = key_got(upstream.requests[-1])[-4:]
    assert got.status == 400
    message = json.dumps(json.loads(got.body), ensure_ascii=False)
    assert MASKED.format(tail=tail) in message, message


def test_a_passed_through_request_gets_no_key_back(
    keyed_proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    """A same-dialect body the bridge cannot read is passed through (``not_rewritten``) with
    the route's key (a route with ``upstream_url``): the upstream's echo of it, whole and
    streamed, holds no key."""
    upstream.strict = False  # a body no service takes, sent on purpose
    key = f"Bearer {CLIENT_OWN_KEY}"
    for case in ("error", "error-stream"):
        upstream.script = lambda rec, case=case: Echo(case)(
            replace(rec, path="/v1/chat/completions", body=b"{}")
        )
        got = stream_request(
            keyed_proxy.port, "POST", "/passed/v1/chat/completions", b'{"model": NaN}',
            {"authorization": key, "content-type": "application/json"},
        )  # fmt: skip
        assert key_got(upstream.requests[-1]) == ROUTE_KEY
        text = got.body.decode()
        assert got.status == 400 and "with key [REDACTED]" in text, text
        assert not leaked(text + str(got.headers))
    assert "passed through" in keyed_proxy.log_text()


def test_a_listed_client_key_an_upstream_got_is_not_echoed(
    upstream: ScriptedUpstream, start_proxy: Callable[..., Proxy], tmp_path: Path
) -> None:
    """A client key of ``bridge_client_keys`` on a route that sends the client's own key
    upstream: the upstream's echo of it is redacted; another client's own key (not listed,
    not the proxy's) is its own to get back."""
    client_key = "sk-e2e-listed-client-9a8b7c6d5e"
    keys = tmp_path / "clients.toml"
    keys.write_text(f'alice = "{client_key}"\n')
    routes = tmp_path / "routes.toml"
    routes.write_text('[[routes]]\nname = "open"\npath = "/open/v1/chat/completions"\n')
    p = start_proxy(bridge_routes=str(routes), bridge_client_keys=str(keys))
    upstream.script = Echo("error")
    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    for who in (client_key, CLIENT_OWN_KEY):
        got = stream_request(
            p.port, "POST", "/open/v1/chat/completions", chat,
            {"authorization": f"Bearer {who}", "content-type": "application/json"},
        )  # fmt: skip
        text = got.body.decode()
        assert got.status == 400, text
        if key_got(upstream.requests[-1]) == who == client_key:
            assert "with key [REDACTED]" in text, text
        if who == client_key:
            assert client_key not in text
        else:
            assert f"with key {CLIENT_OWN_KEY}" in text  # not the proxy's: not redacted
    assert client_key not in p.log_text()
