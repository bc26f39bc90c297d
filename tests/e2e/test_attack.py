"""End to end, as an attacker would try it (issue 8): every promise holds through the real mitmdump.

Each test sends a class of bad input through a real ``mitmdump -s addon/main.py``
in front of the scripted upstream (loopback only, bounded waits) and checks
what the client got, what the upstream got, and the proxy's log: never a
traceback, never a key. Flows are also saved (``save_stream_file``) and read
back, so what the bridge put in comments and metadata must serialize.

Classes: text that breaks writing (lone surrogates, invalid UTF-8 in path and
headers, control characters), non-strict JSON (``NaN``, ``Infinity``,
``1e400``) in requests and answers, deep nesting in every hook, unreadable
answers on a dialect change, ``allow_hosts`` / ``ignore_hosts`` in regular
mode, a passed-through request's stream, fields the client set, secrets in the
query and in upstream errors, retries through ``--mode upstream``, bad options
and routes files at start, and a smoke run of mutated real bodies.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mitmproxy import io as mitmio

from addon.jsonio import loads as strict_loads
from tests.e2e import harness
from tests.e2e.harness import (
    HOST,
    MAIN_SCRIPT,
    MITMDUMP,
    SAME_DIALECT_ROUTES,
    JSONReply,
    ModeProxy,
    Proxy,
    RawReply,
    ScriptedUpstream,
    SSEReply,
    raw_request,
    sse_from_payloads,
    stream_request,
)
from tests.realdata import FIXTURES

GOOGLE_KEY = "AIzaSyE2E0123456789abcdefghijklmnopq"
CLIENT_KEY = "sk-ant-api03-e2e-CLIENT-SECRET-0123"
ECHOED = "sk-proj-ECHOED-SECRET-0123456789"
BAD_LOG = ("Traceback", "Logging error", "internal error", "Addon error", "Error logged")

ANTHROPIC = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
CHAT_ANSWER = {
    "id": "chatcmpl-e2e",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def make_proxy(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[Callable[..., Proxy]]:
    """Start a proxy that saves its flows to ``tmp_path/flows``; closed after the test."""
    started: list[Proxy] = []

    def make(mode: str | None = None, options: dict[str, object] | None = None) -> Proxy:
        opts = {"save_stream_file": str(tmp_path / "flows"), **(options or {})}
        p = (
            ModeProxy(upstream.port, mode, opts, check_options=False)
            if mode
            else Proxy(upstream.port, opts, check_options=False)
        )
        started.append(p)
        return p.start()

    yield make
    for p in started:
        p.close()


def saved_flows(tmp_path: Path) -> list[Any]:
    with (tmp_path / "flows").open("rb") as f:
        return list(mitmio.FlowReader(f).stream())


def assert_clean_log(p: Proxy, *secrets: str) -> str:
    text = p.log_text()
    for bad in BAD_LOG:
        assert bad not in text, f"{bad!r} in the log:\n{text}"
    for secret in secrets:
        assert secret not in text
    return text


def still_answers(p: Proxy, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(JSONReply(CHAT_ANSWER))
    status, _, body = raw_request(p.port, "POST", "/v1/chat/completions", json.dumps(CHAT).encode())
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "fine"


def raw_http(port: int, head: bytes, body: bytes = b"", timeout: float = 10.0) -> tuple[int, bytes]:
    """A request with bytes http.client refuses to send (invalid UTF-8, control characters)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def anthropic_error(body: bytes) -> str:
    error = json.loads(body)
    assert error["type"] == "error" and isinstance(error["error"]["type"], str)
    return str(error["error"]["message"])


# --------------------------------------------------------------------------- writing never raises


def test_surrogates_invalid_utf8_and_control_characters_never_stop_an_answer(
    make_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    p = make_proxy()
    upstream.script = lambda rec: JSONReply(CHAT_ANSWER)
    tool = {"name": "\ud83d\x1b[2J", "input_schema": {"type": "object"}}
    dup = json.dumps({**ANTHROPIC, "tools": [tool, tool]}).encode()  # a 400 quoting the name
    status, _, body = raw_request(p.port, "POST", "/v1/messages", dup)
    assert status == 400 and "declared twice" in anthropic_error(body)
    odd = json.dumps({**ANTHROPIC, "\ud800odd\x07key": 1, "model": "m\ud83d"}).encode()
    status, _, body = raw_request(p.port, "POST", "/v1/messages", odd)
    assert status == 200  # rewritten; its note names the odd key
    # Invalid UTF-8 in the path, a header and the body; control characters in the path.
    head = (
        b"POST /v1/messages?q=\xff\xfe%00\x01&key=" + GOOGLE_KEY.encode() + b" HTTP/1.1\r\n"
        b"Host: x\r\nContent-Type: application/json\r\nX-Odd: \xff\x01\r\n"
    )
    status, body = raw_http(p.port, head, b'{"model":"\xff","messages":"no"}')
    assert status == 400 and "could not translate" in anthropic_error(body)
    status, body = raw_http(
        p.port, b"POST /v1/chat/completions?\xed\xb0\x80=1 HTTP/1.1\r\nHost: x\r\n", b"\xed\xb0\x80"
    )
    assert status == 200  # same dialect: passed through untouched
    still_answers(p, upstream)
    p.stop()
    assert_clean_log(p, GOOGLE_KEY)
    flows = saved_flows(tmp_path)  # comments and metadata serialized
    assert len(flows) == 5
    written = "".join(f.comment + json.dumps(f.metadata, ensure_ascii=False) for f in flows)
    written.encode("utf-8")
    assert "\\ud83d\\x1b[2J" in written and "\x1b" not in written and GOOGLE_KEY not in written


# --------------------------------------------------------------------------- strict JSON

NON_STRICT = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999"]


@pytest.mark.parametrize("number", NON_STRICT, ids=lambda n: n.decode())
def test_requests_that_are_not_strict_json_pass_or_get_a_400(
    proxy: Proxy, upstream: ScriptedUpstream, number: bytes
) -> None:
    upstream.script = lambda rec: JSONReply(CHAT_ANSWER)
    same = b'{"model":"m","temperature":' + number + b',"messages":[{"role":"user","content":"x"}]}'
    status, _, _ = raw_request(proxy.port, "POST", "/v1/chat/completions", same)
    assert status == 200
    (rec,) = upstream.wait_for_requests(1)
    assert rec.body == same  # untouched, never re-written with Infinity / NaN
    other = b'{"model":"m","max_tokens":5,"temperature":' + number + b',"messages":[]}'
    status, _, body = raw_request(proxy.port, "POST", "/v1/messages", other)
    assert status == 400
    message = anthropic_error(body)
    assert "not JSON" in message or "does not fit in a float" in message
    assert len(upstream.requests) == 1  # the upstream never saw it
    assert_clean_log(proxy)


@pytest.mark.parametrize("number", NON_STRICT, ids=lambda n: n.decode())
def test_answers_that_are_not_strict_json_pass_or_become_an_error(
    proxy: Proxy, upstream: ScriptedUpstream, number: bytes
) -> None:
    answer = json.dumps(CHAT_ANSWER).replace('"total_tokens": 4', '"total_tokens": N')
    raw = answer.replace("N", number.decode()).encode()
    reply = RawReply(raw, headers={"content-type": "application/json"})
    upstream.enqueue(reply, reply)
    status, _, body = raw_request(
        proxy.port, "POST", "/v1/chat/completions", json.dumps(CHAT).encode()
    )
    assert status == 200 and body == raw  # same dialect: the upstream's bytes, not re-written
    status, _, body = raw_request(
        proxy.port, "POST", "/v1/messages", json.dumps(ANTHROPIC).encode()
    )
    assert status == 502 and "not strict JSON" in anthropic_error(body)
    assert_clean_log(proxy)


# --------------------------------------------------------------------------- deep nesting

DEEP_BYTES = b"[" * 100_000 + b"]" * 100_000


def test_deep_nesting_in_every_hook_is_one_line_never_a_traceback(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream
) -> None:
    p = start_proxy(bridge_models="m1")
    upstream.strict = False  # a body no service takes, sent on purpose
    upstream.script = lambda rec: JSONReply(CHAT_ANSWER)
    deep_request = b'{"model":"m","max_tokens":5,"messages":' + DEEP_BYTES + b"}"
    # request hook: same dialect passes, another dialect gets a 400
    assert raw_request(p.port, "POST", "/v1/chat/completions", deep_request)[0] == 200
    status, _, body = raw_request(p.port, "POST", "/v1/messages", deep_request)
    assert status == 400 and "nested too deeply" in anthropic_error(body)
    # response hook: a deep answer, a deep error, for an Anthropic client
    json_type = {"content-type": "application/json"}
    upstream.enqueue(RawReply(b'{"choices":' + DEEP_BYTES + b"}", headers=json_type))
    status, _, body = raw_request(p.port, "POST", "/v1/messages", json.dumps(ANTHROPIC).encode())
    assert status == 502 and "could not translate" in anthropic_error(body)
    upstream.enqueue(RawReply(b'{"error":' + DEEP_BYTES + b"}", status=500, headers=json_type))
    status, _, body = raw_request(p.port, "POST", "/v1/messages", json.dumps(ANTHROPIC).encode())
    assert status == 500 and "upstream answered HTTP 500" in anthropic_error(body)
    # count_tokens: the upstream answers for itself (no estimate over a body it cannot read)
    upstream.enqueue(JSONReply({"error": {"message": "no such endpoint"}}, status=404))
    status, _, _ = raw_request(p.port, "POST", "/v1/messages/count_tokens", deep_request)
    assert status == 404
    # models: a deep upstream list is replaced by the configured one
    upstream.enqueue(RawReply(b'{"data":' + DEEP_BYTES + b"}", headers=json_type))
    status, _, body = raw_request(p.port, "GET", "/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["m1", "m1-thinking"]
    still_answers(p, upstream)
    text = assert_clean_log(p)
    assert "nested too deeply" in text


# --------------------------------------------------------------------------- dialect change


@pytest.mark.parametrize(
    ("status", "content_type", "raw"),
    [
        (200, "text/html", b"<html>a gateway page</html>"),
        (200, "application/json", b'"a string"'),
        (200, "application/json", b'{"choices": "not a list"}'),
        (200, "application/json", b""),
    ],
)
def test_an_answer_an_anthropic_client_cannot_read_is_an_error_in_its_shape(
    proxy: Proxy, upstream: ScriptedUpstream, status: int, content_type: str, raw: bytes
) -> None:
    upstream.enqueue(RawReply(raw, status=status, headers={"content-type": content_type}))
    got, headers, body = raw_request(
        proxy.port, "POST", "/v1/messages", json.dumps(ANTHROPIC).encode()
    )
    assert got == 502 and headers["content-type"] == "application/json"
    assert "could not translate the openai_chat upstream's answer" in anthropic_error(body)
    assert_clean_log(proxy)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/messages", b'{"model": "m", "messages": ['),
        ("/v1/messages", b'{"model": "m", "max_tokens": 5, "messages": "not a list"}'),
        ("/v1/responses", b'{"model": "m", "input": '),
        ("/v1/responses", b'{"model": "m", "input": [{"type": "message", "role": 7}]}'),
        ("/v1beta/models/gemini-2.5-pro:generateContent", b'{"contents": [{"parts": '),
        ("/v1beta/models/gemini-2.5-pro:generateContent", b'{"contents": {"x": 1}}'),
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", b"[1, 2, 3]"),
    ],
)
def test_a_body_no_dialect_change_can_read_is_a_400_in_the_clients_own_shape(
    proxy: Proxy, upstream: ScriptedUpstream, path: str, body: bytes
) -> None:
    """Every client dialect the default routes take to another upstream dialect: what the
    bridge cannot read never reaches the upstream (it would answer in the wrong shape)."""
    status, headers, answer = raw_request(proxy.port, "POST", path, body)
    assert status == 400 and headers["content-type"].startswith("application/json")
    error = json.loads(answer)
    if path.startswith("/v1/messages"):
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        message = error["error"]["message"]
    elif path.startswith("/v1/responses"):
        message = error["error"]["message"]
    else:  # Google's shape
        assert error["error"]["code"] == 400 and error["error"]["status"] == "INVALID_ARGUMENT"
        message = error["error"]["message"]
    assert "cursor-bridge" in message
    assert upstream.requests == []
    assert_clean_log(proxy)


# --------------------------------------------------------------------------- allow / ignore hosts


@pytest.mark.parametrize(
    ("option", "rewritten"),
    [
        ({}, True),
        ({"allow_hosts": r"127\.0\.0\.1"}, True),
        ({"allow_hosts": r"api\.example\.com"}, False),
        ({"ignore_hosts": r"127\.0\.0\.1"}, False),
        ({"ignore_hosts": r"api\.example\.com"}, True),
    ],
)
def test_allow_and_ignore_hosts_bind_plain_http_in_regular_mode(
    make_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    option: dict[str, str],
    rewritten: bool,
) -> None:
    p = make_proxy("regular", {**option, "bridge_models": "m1"})
    upstream.script = lambda rec: JSONReply({"error": {"message": f"seen {rec.path}"}}, status=404)
    base = f"http://{HOST}:{upstream.port}"

    def via(method: str, url: str, body: bytes = b"") -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(HOST, p.port, timeout=10)
        try:
            conn.request(
                method, url, body=body or None, headers={"content-type": "application/json"}
            )
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    status, body = via("POST", f"{base}/v1/messages", json.dumps(ANTHROPIC).encode())
    assert status == 404
    assert upstream.requests[-1].path == ("/v1/chat/completions" if rewritten else "/v1/messages")
    assert (json.loads(body).get("type") == "error") is rewritten  # re-shaped for Anthropic
    status, body = via("POST", f"{base}/v1/messages/count_tokens", json.dumps(ANTHROPIC).encode())
    assert (status == 200) is rewritten  # estimated only when the bridge may touch the host
    status, body = via("GET", f"{base}/v1/models")
    assert (status == 200) is rewritten
    assert_clean_log(p)


# --------------------------------------------------------------------------- passthrough streams


def test_a_routed_request_passed_through_still_streams(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    events = [{"i": i} for i in range(6)]
    upstream.strict = False  # a body no service takes, sent on purpose
    upstream.enqueue(SSEReply(sse_from_payloads(events), chunk_min=8, chunk_max=8, delay=0.25))
    got = stream_request(proxy.port, "POST", "/v1/chat/completions", b'{"model": NaN}')
    assert got.status == 200 and got.body == sse_from_payloads(events)
    first, last = got.pieces[0][0], got.pieces[-1][0]
    assert last - first > 1.0, "the answer was buffered, not streamed"
    assert "passed through" in assert_clean_log(proxy)


# --------------------------------------------------------------------------- fields kept

CLIENT_DIALECTS = {
    "claude-code-": "anthropic",
    "ai-sdk-6.0.326-anthropic-": "anthropic",
    "codex-": "openai_responses",
    "opencode-": "openai_chat",
    "ai-sdk-6.0.326-openai-compatible-": "openai_chat",
}


def _real_bodies() -> list[tuple[str, str, dict[str, Any]]]:
    clients = FIXTURES / "clients"
    if not clients.is_dir():
        return []
    out = []
    for f in sorted(clients.glob("*-turn*.request.json")):
        if any(f.name.startswith(k) for k in CLIENT_DIALECTS):
            rec = json.loads(f.read_text())
            out.append((f.name, rec["path"], rec["body"]))
    return out


EXPLICIT = [
    ("/v1/chat/completions", {**CHAT, "stream": False, "tool_choice": None, "n": 1, "stop": []}),
    ("/v1/messages", {**ANTHROPIC, "stream": False, "system": "", "stop_sequences": []}),
    ("/v1/responses", {"model": "m", "input": "x", "stream": False, "store": False,
                       "instructions": None, "reasoning": None, "include": []}),
]  # fmt: skip


def test_every_field_the_client_set_reaches_a_same_dialect_upstream(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.toml"
    # keep: the client's breakpoints only (an Anthropic upstream's default adds the bridge's)
    keep = 'upstream = "anthropic"\ncache_control = "keep"\n'
    routes.write_text(SAME_DIALECT_ROUTES.replace('upstream = "anthropic"\n', keep))
    p = start_proxy(bridge_routes=str(routes))
    upstream.script = lambda rec: RawReply(b"{}", headers={"content-type": "text/plain"})
    cases = [(path, body) for path, body in EXPLICIT] + [
        (path, body) for _, path, body in _real_bodies()
    ]
    for i, (path, body) in enumerate(cases):
        raw_request(p.port, "POST", path, json.dumps(body).encode())
        rec = upstream.wait_for_requests(i + 1)[i]
        assert rec.json() == body, f"{path}: {sorted(set(body) ^ set(rec.json()))}"
    assert len(cases) > len(EXPLICIT) or not (FIXTURES / "clients").is_dir()
    assert_clean_log(p)


# --------------------------------------------------------------------------- secrets


def test_keys_in_the_query_and_in_upstream_errors_are_never_written(
    make_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    p = make_proxy()
    query = f"?key={GOOGLE_KEY}&api_key=hunter2secret&access_token=tok3nvalue"
    headers = {"x-api-key": CLIENT_KEY, "content-type": "application/json"}
    # passthrough (same dialect, not JSON), 400 (another dialect), upstream 401 echoing keys
    raw_request(p.port, "POST", "/v1/chat/completions" + query, b"not json", headers)
    raw_request(p.port, "POST", "/v1/messages" + query, b"not json", headers)
    message = (
        f"Incorrect API key provided: {ECHOED}. Your key {GOOGLE_KEY} and "
        f"Bearer {CLIENT_KEY} are invalid; token=hunter2secret"
    )
    upstream.enqueue(JSONReply({"error": {"message": message}}, status=401))
    status, _, body = raw_request(
        p.port, "POST", "/v1/messages" + query, json.dumps(ANTHROPIC).encode(), headers
    )
    # The client sees its upstream's message in the body the bridge builds for it, without
    # the flow's own credentials (its ?key=, api_key= and x-api-key values).
    seen = message.replace(GOOGLE_KEY, "[REDACTED]").replace(CLIENT_KEY, "[REDACTED]")
    assert status == 401 and anthropic_error(body) == seen.replace("hunter2secret", "[REDACTED]")
    p.stop()
    secrets = (GOOGLE_KEY, "hunter2secret", "tok3nvalue", ECHOED, CLIENT_KEY)
    text = assert_clean_log(p, *secrets)
    assert text.count("[REDACTED]") >= 5
    written = "".join(f.comment + json.dumps(f.metadata) for f in saved_flows(tmp_path))
    assert "passed through" in written and "answered 400" in written
    for secret in secrets:
        assert secret not in written


# --------------------------------------------------------------------------- retries


def test_a_retry_goes_through_the_upstream_proxy_with_its_auth_never_the_environment(
    upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--mode upstream:`` with ``upstream_auth``: the scripted upstream plays the upstream
    proxy (it gets absolute-form requests); HTTP(S)_PROXY points at a trap."""
    with ScriptedUpstream() as trap:
        env = harness._child_env()
        env.update(HTTP_PROXY=trap.base_url, HTTPS_PROXY=trap.base_url, NO_PROXY="")
        env.update(http_proxy=trap.base_url, https_proxy=trap.base_url, no_proxy="")
        monkeypatch.setattr(harness, "_child_env", lambda: env)
        p = ModeProxy(
            upstream.port,
            f"upstream:http://{HOST}:{upstream.port}",
            {"bridge_tool_mode": "bracket", "upstream_auth": "proxyuser:proxypass"},
            check_options=False,
        )
        with p:
            none = {**CHAT_ANSWER}
            call = json.loads(json.dumps(CHAT_ANSWER))
            call["choices"][0]["message"]["content"] = '[Calling tool: Read]\nInput: {"path": "a"}'
            upstream.enqueue(JSONReply(none), JSONReply(call))
            body = {
                **CHAT,
                "tools": [{"type": "function", "function": {"name": "Read", "parameters": {}}}],
                "tool_choice": "required",
            }
            conn = http.client.HTTPConnection(HOST, p.port, timeout=15)
            conn.request(
                "POST",
                "http://api.invalid/v1/chat/completions",
                body=json.dumps(body),
                headers={"content-type": "application/json", "authorization": "Bearer sk-e2e-x"},
            )
            resp = conn.getresponse()
            answer = json.loads(resp.read())
            conn.close()
            assert resp.status == 200
            assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "Read"
            first, again = upstream.wait_for_requests(2)
            for rec in (first, again):
                assert rec.path == "http://api.invalid/v1/chat/completions"
                assert rec.headers["proxy-authorization"] == "Basic cHJveHl1c2VyOnByb3h5cGFzcw=="
            assert again.body == first.body
            assert trap.requests == []
            assert_clean_log(p, "sk-e2e-x", "proxypass")


# --------------------------------------------------------------------------- configuration


def run_mitmdump(tmp_path: Path, *sets: str, timeout: float = 40.0) -> tuple[int, str]:
    """mitmdump with the addon and ``--set`` values; it must exit by itself."""
    args = [str(MITMDUMP), "-s", str(MAIN_SCRIPT), "--mode", f"reverse:http://{HOST}:9",
            "--listen-host", HOST, "--listen-port", "0", "--set", f"confdir={tmp_path}"]  # fmt: skip
    for s in sets:
        args += ["--set", s]
    try:
        done = subprocess.run(
            args, capture_output=True, timeout=timeout, cwd=harness.REPO, env=harness._child_env()
        )
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(
            errors="replace"
        )
        pytest.fail(f"mitmdump started instead of refusing {sets}:\n{out}")
    return done.returncode, done.stdout.decode(errors="replace") + done.stderr.decode(
        errors="replace"
    )


def _routes_file(tmp_path: Path, content: bytes) -> str:
    path = tmp_path / "routes.toml"
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize(
    ("setting", "line"),
    [
        ("bridge_tool_strict=maybe", "cursor-bridge: bridge_tool_strict takes true or false, not 'maybe'"),
        ("bridge_tool_desc_max_chars=abc", "cursor-bridge: bridge_tool_desc_max_chars takes a whole number, not 'abc'"),
        ("bridge_retry_timeout=1.5", "cursor-bridge: bridge_retry_timeout takes a whole number"),
        ("bridge_tool_mod=invoke", "cursor-bridge: unknown option bridge_tool_mod (did you mean bridge_tool_mode?)"),
        ("bridge_tool_mode=xyz", "cursor-bridge: bridge_tool_mode must be one of native, invoke, bracket, not 'xyz'"),
        ("bridge_models=a,a", "cursor-bridge: bridge_models lists a more than once"),
        (b'[[routes]]\nname = "a"\nmethods = []\n', "routes[0].methods: must list at least one HTTP method"),
        (b'[[routes]]\nname = "a"\npath = ""\n', "routes[0].path: must not be empty"),
        (b'[[routes]]\nname = "caf\xe9"\n', "not UTF-8 text"),
        (b'[[routes]]\nname = "a"\nclient = "cursor"\n', "routes[0].client: Input should be 'openai_chat', 'anthropic', 'openai_responses'"),
        (b'[[routes]]\nname = "a"\nhots = "x"\n', "routes[0].hots: unknown key (allowed: name, host, path"),
        (b"[[routes]\n", "not valid TOML"),
    ],
)  # fmt: skip
def test_bad_options_and_routes_files_stop_the_start_with_one_clear_line(
    tmp_path: Path, setting: str | bytes, line: str
) -> None:
    if isinstance(setting, bytes):
        path = _routes_file(tmp_path, setting)
        setting = f"bridge_routes={path}"
        line = f"cursor-bridge: routes file '{path}': {line}"
    code, out = run_mitmdump(tmp_path, setting)
    assert code != 0, out
    ours = [x for x in out.splitlines() if "cursor-bridge" in x]
    assert len(ours) == 1 and line in ours[0], out
    assert "Traceback" not in out and "Error logged during startup" in out


# --------------------------------------------------------------------------- smoke campaign


def test_mutated_real_bodies_never_break_the_proxy(
    make_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """The unit campaign's mutations (``tests/unit/plan/test_campaign.py``) drawn by hypothesis and
    sent for real through one mitmdump: every answer is the faithful rewrite (the upstream got
    strict JSON at its own dialect's path), the untouched original (same dialect only) or a
    400 in the client's dialect (the upstream got nothing); no traceback, no key in the log;
    and the proxy still answers the next request. ``CB_E2E_CAMPAIGN_EXAMPLES`` runs longer."""
    from tests.unit.plan.test_campaign import (
        DEEP,
        HUGE,
        SEEDS,
        VALUE_MUTATIONS,
        _mutate_value,
        _paths,
    )

    if not SEEDS:
        pytest.skip("recordings not available")
    p = make_proxy()
    upstream.strict = False  # mutated bodies break the services' rules on purpose
    upstream.script = lambda rec: JSONReply(CHAT_ANSWER)
    paths = {"openai_chat": "/v1/chat/completions", "anthropic": "/v1/messages",
             "openai_responses": "/v1/responses"}  # fmt: skip
    examples = int(os.environ.get("CB_E2E_CAMPAIGN_EXAMPLES", "30"))

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def campaign(data: st.DataObject) -> None:
        def pick(options: list[Any]) -> Any:
            return data.draw(st.sampled_from(options))

        seed = pick(SEEDS)
        body: Any = json.loads(json.dumps(seed.body))
        for _ in range(data.draw(st.integers(1, 3))):
            _mutate_value(body, pick(_paths(body)), pick(VALUE_MUTATIONS), pick)
        text = json.dumps(body, ensure_ascii=data.draw(st.booleans()))
        text = text.replace(json.dumps(HUGE), "1e400")
        text = text.replace(json.dumps(DEEP), "[" * 50_000 + "]" * 50_000)
        raw = text.encode("utf-8", "surrogatepass")
        if data.draw(st.booleans()):
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        path = paths[seed.dialect] + f"?key={GOOGLE_KEY}"
        before = len(upstream.requests)
        status, _, answer = raw_request(p.port, "POST", path, raw, timeout=15)
        sent = upstream.requests[before:]
        assert status in (200, 400), (seed.name, status, answer[:300])
        if status == 400:  # the bridge's own answer, in the client's dialect
            assert sent == [], seed.name
            error = json.loads(answer)
            assert "error" in error
            if seed.dialect == "anthropic":
                assert error["type"] == "error" and error["error"]["message"]
            else:
                assert error["error"]["message"]
            return
        (got,) = sent
        if got.body == raw:  # untouched: only where client and upstream speak one dialect
            assert seed.dialect == "openai_chat", (seed.name, "passed through to another dialect")
            return
        assert got.path.split("?")[0] == "/v1/chat/completions", (seed.name, got.path)
        assert isinstance(strict_loads(got.body), dict), seed.name

    campaign()
    still_answers(p, upstream)
    p.stop()
    assert_clean_log(p, GOOGLE_KEY)
    for f in saved_flows(tmp_path):
        (f.comment + json.dumps(f.metadata, ensure_ascii=False)).encode("utf-8")
