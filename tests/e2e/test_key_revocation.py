"""End to end: a key of a pool is revoked only for what the key did (issue 40, point 1).

Two mitmdump workers on one real redis-server; a route whose ``api_key_env`` lists two keys of
one scripted OpenAI-compatible upstream that answers as OpenRouter, LiteLLM or OpenAI do:
- a model the key may not use, refused per request (OpenRouter's moderation 403, LiteLLM's
  ``key_model_access_denied`` 401, OpenAI's ``model_not_found`` 403): the client gets it, no
  key is left out, the pool serves every other client;
- a key that is invalid (OpenAI ``invalid_api_key``, OpenRouter's "User not found.",
  LiteLLM's ``auth_error``): that key alone is left out by both workers, never more than one
  key per client request, and probed again after ``bridge_key_recheck`` (the model list
  beside the chat path, which refuses a request without a key): back by itself once the
  upstream takes it, without a client's request spent on it.

The bodies (``FORBIDDEN``, ``INVALID``) are the providers' documented error shapes; where each
comes from is said beside it (the same shapes are judged in tests/unit/plan/test_key_errors.py).
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, Reply, ScriptedUpstream
from tests.real.clients.loop import answer, check_request
from tests.redis_server import RedisServer, redis_server_or_skip

CLIENT_KEY = "sk-client-SECRET-revocation"
KEYS = {"CB_E2E_REV_A": "sk-rev-a-SECRET-0001", "CB_E2E_REV_B": "sk-rev-b-SECRET-0002"}
BY_VALUE = {v: n for n, v in KEYS.items()}
ALL_KEYS = (CLIENT_KEY, *KEYS.values())
FORBIDDEN_MODEL = "gpt-forbidden"
RECHECK = 3
"""``bridge_key_recheck`` of the recheck test: short, and the test waits for it, never less."""

FORBIDDEN: dict[str, tuple[int, dict[str, Any]]] = {
    # openrouter.ai/docs/api-reference/errors: "403: Your chosen model requires moderation and
    # your input was flagged", with ModerationErrorMetadata (reasons, flagged_input,
    # provider_name, model_slug) in error.metadata.
    "openrouter": (403, {"error": {
        "code": 403,
        "message": f"{FORBIDDEN_MODEL} requires moderation on OpenAI. Your input was flagged "
        'for "violence". No credits were charged.',
        "metadata": {"reasons": ["violence"], "flagged_input": "conversation...",
                     "provider_name": "OpenAI", "model_slug": FORBIDDEN_MODEL}}}),
    # LiteLLM's proxy, litellm/proxy/auth/auth_checks.py (ProxyErrorTypes
    # .key_model_access_denied, ProxyException code 401): a virtual key limited to models=[…].
    "litellm": (401, {"error": {
        "message": "key not allowed to access model. This key can only access models="
        f"['gpt-5']. Tried to access {FORBIDDEN_MODEL}",
        "type": "key_model_access_denied", "param": "model", "code": "401"}}),
    # OpenAI: a project without access to a model, 403 with code model_not_found.
    "openai": (403, {"error": {
        "message": f"Project `proj_e2e` does not have access to model `{FORBIDDEN_MODEL}`",
        "type": "invalid_request_error", "param": None, "code": "model_not_found"}}),
}  # fmt: skip

INVALID: dict[str, tuple[int, dict[str, Any]]] = {
    # OpenAI's error codes guide: 401 "Incorrect API key provided" (the key masked).
    "openai": (401, {"error": {
        "message": "Incorrect API key provided: sk-rev-****0001. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}),
    # OpenRouter: 401 for a key it does not know (deleted or mistyped).
    "openrouter": (401, {"error": {"message": "User not found.", "code": 401}}),
    # LiteLLM's proxy, litellm/proxy/auth/user_api_key_auth.py: a virtual key not in its
    # table (ProxyErrorTypes.auth_error).
    "litellm": (401, {"error": {
        "message": "Authentication Error, Invalid proxy server token passed. Received API Key "
        "= sk-...0001, Key Hash (Token) =9f3c. Unable to find token in cache or "
        "`LiteLLM_VerificationTokenTable`", "type": "auth_error", "param": "None",
        "code": "401"}}),
}  # fmt: skip


@dataclass
class Gate:
    """An OpenAI-compatible upstream that takes both keys of the pool, answering errors the
    way ``provider`` does: ``FORBIDDEN_MODEL`` refused per request, a key in ``invalid``
    refused as invalid. Keeps which key each request carried, and when."""

    server: ScriptedUpstream
    provider: str
    invalid: set[str] = field(default_factory=set)
    used: list[tuple[str | None, float]] = field(default_factory=list)
    probed: list[tuple[str | None, float]] = field(default_factory=list)
    """The keys' probes (``GET /v1/models``, the model list beside the chat path): each key,
    None without one."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, rec: Recorded) -> Reply:
        key = key_of(rec)
        with self.lock:
            if rec.method == "GET":  # the model list: refused without a key, as the chat
                assert rec.path == "/v1/models" and rec.body == b""
                self.probed.append((key, time.monotonic()))
            else:
                self.used.append((key, time.monotonic()))
            refused = key is None or key in self.invalid
        if refused:
            status, body = INVALID[self.provider]
            return JSONReply(body, status=status)
        if rec.method == "GET":
            return JSONReply({"object": "list", "data": [{"id": "gpt-5", "object": "model"}]})
        if refused:
            status, body = INVALID[self.provider]
            return JSONReply(body, status=status)
        request = rec.json()
        check_request("openai_chat", request)
        if request["model"] == FORBIDDEN_MODEL:
            status, body = FORBIDDEN[self.provider]
            return JSONReply(body, status=status)
        return answer("openai_chat", bool(request.get("stream")), f"hello with {key}")

    def keys(self) -> list[str | None]:
        with self.lock:
            return [k for k, _ in self.used]


def key_of(rec: Recorded) -> str | None:
    return BY_VALUE.get(rec.headers.get("authorization", "").removeprefix("Bearer "))


@dataclass
class Workers:
    one: Proxy
    two: Proxy
    gate: Gate
    redis_url: str

    def cooldown_entries(self) -> list[str]:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            return sorted(k.decode() for k in client.keys("cursor-bridge:cool:*"))
        finally:
            client.close()

    def log(self) -> str:
        return self.one.log_text() + self.two.log_text()


def routes_text(server: ScriptedUpstream) -> str:
    names = ", ".join(f'"{n}"' for n in KEYS)
    return f"""
[[routes]]
name = "pool"
path = "*/chat/completions"
upstream_url = "{server.base_url}"
api_key_env = [{names}]
"""


@pytest.fixture
def workers(
    request: pytest.FixtureRequest,
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[..., Workers]]:
    """``make(provider, **options)``: two workers on one redis-server before a ``Gate``."""
    server = ScriptedUpstream().start()
    stack: list[RedisServer] = []

    def make(provider: str, **options: object) -> Workers:
        redis = RedisServer(redis_server_or_skip()).start()
        stack.append(redis)
        for name, value in KEYS.items():
            monkeypatch.setenv(name, value)
        gate = Gate(server, provider)
        server.script = gate
        routes = tmp_path / "routes.toml"
        routes.write_text(routes_text(server))
        started = [
            start_proxy(bridge_routes=str(routes), bridge_store=redis.url, **options)
            for _ in range(2)
        ]
        return Workers(started[0], started[1], gate, redis.url)

    try:
        yield make
        assert not server.errors, server.errors
        assert not upstream.requests
    finally:
        server.stop()
        for redis in stack:
            redis.stop()


def ask(proxy: Proxy, opening: str, model: str = "gpt-5", stream: bool = False) -> str:
    client = openai.OpenAI(
        base_url=f"{proxy.base_url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=30
    )
    messages: Any = [{"role": "user", "content": opening}]
    if not stream:
        done = client.chat.completions.create(model=model, messages=messages)
        return done.choices[0].message.content or ""
    chunks = client.chat.completions.create(model=model, messages=messages, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def refused(proxy: Proxy, opening: str, model: str = "gpt-5") -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as e:
        ask(proxy, opening, model)
    return e.value


def left_out_lines(text: str) -> list[str]:
    return re.findall(r"key \w+ refused \([^)]*\): left out for .*", text)


def clean(w: Workers) -> None:
    for proxy in (w.one, w.two):
        log = proxy.log_text()
        assert "Traceback" not in log and not [k for k in ALL_KEYS if k in log]


@pytest.mark.parametrize("provider", sorted(FORBIDDEN))
def test_a_model_refused_per_request_leaves_every_key_to_the_other_clients(
    workers: Callable[..., Workers], provider: str
) -> None:
    w = workers(provider)
    status = FORBIDDEN[provider][0]
    for n in range(4):  # one client asks again and again, on both workers
        error = refused(w.one if n % 2 else w.two, f"forbidden {n}", FORBIDDEN_MODEL)
        assert error.status_code == status
        assert len(w.gate.used) == n + 1  # answered with the first key's refusal, no other
    # Every other client is served on both workers, by both keys as their conversations ask.
    for n in range(8):
        text = ask(w.two if n % 2 else w.one, f"other client {n}", stream=n % 3 == 0)
        assert text.startswith("hello with CB_E2E_REV_")
    assert len(w.gate.used) == 12
    assert w.cooldown_entries() == []  # nothing left out, nothing cooling, on the store
    log = w.log()
    assert not left_out_lines(log) and "refused (" not in log
    assert len(re.findall(r"answered HTTP \d+, the request's own \(.*\): answered, no key", log))
    clean(w)


def first_key_a(proxy: Proxy, gate: Gate, prefix: str, tries: int = 40) -> str:
    """An opening whose conversation asks key A first (its request goes to A)."""
    for n in range(tries):
        before = len(gate.used)
        text = ask(proxy, f"{prefix} {n}")
        if gate.keys()[before] == "CB_E2E_REV_A":
            return text
    raise AssertionError(f"no conversation of {tries} asked key A first")


@pytest.mark.parametrize("provider", sorted(INVALID))
def test_an_invalid_key_alone_is_left_out_by_both_workers_then_rechecked(
    workers: Callable[..., Workers], provider: str
) -> None:
    w = workers(provider, bridge_key_recheck=RECHECK)
    w.gate.invalid.add("CB_E2E_REV_A")
    assert first_key_a(w.one, w.gate, "invalid") == "hello with CB_E2E_REV_B"
    (line,) = left_out_lines(w.one.log_text())
    assert line.startswith("key CB_E2E_REV_A refused (HTTP 401 ")
    assert f"left out for {RECHECK} s by every worker" in line
    assert "cursor-bridge:cool:revoked:pool#CB_E2E_REV_A" in w.cooldown_entries()
    for n in range(6):  # the other worker, any conversation: key B; A only after the recheck
        assert ask(w.two, f"after {n}", stream=n % 2 == 1) == "hello with CB_E2E_REV_B"
    # The recheck is the key's probe (the model list, which refuses a request without a
    # key): refused again, the key stays out, and no client's request is spent on it.
    wait_for(lambda: "key CB_E2E_REV_A still refused by its probe GET /v1/models" in w.log())
    (a_use,) = [t for k, t in w.gate.used if k == "CB_E2E_REV_A"]
    # The key is renewed upstream: the next recheck probe takes it, and it is back by itself.
    w.gate.invalid.clear()
    wait_for(lambda: "key CB_E2E_REV_A accepted by its probe GET /v1/models" in w.log())
    a_probes = [t for k, t in w.gate.probed if k == "CB_E2E_REV_A"]
    # However slow the machine: key A was probed only once its recheck was due.
    assert len(a_probes) >= 2 and all(
        b - a >= RECHECK - 0.2 for a, b in itertools.pairwise(a_probes)
    )
    assert a_probes[0] - a_use >= RECHECK - 0.2
    assert [k for k, _ in w.gate.used].count("CB_E2E_REV_A") == 1  # no client's request
    assert w.cooldown_entries() == []
    assert first_key_a(w.two, w.gate, "back") == "hello with CB_E2E_REV_A"
    assert len(left_out_lines(w.log())) == 1
    clean(w)


def wait_for(what: Callable[[], bool], seconds: float = 90.0) -> None:
    """Until ``what`` holds (bounded: a wait, never a time the test asserts)."""
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.1)


def test_never_more_than_one_key_is_revoked_for_one_client_request(
    workers: Callable[..., Workers],
) -> None:
    w = workers("openai")
    w.gate.invalid.update(KEYS)
    error = refused(w.one, "both invalid")
    assert error.status_code == 401 and sorted(w.gate.keys()) == sorted(KEYS)
    first = w.one.log_text()
    (revoked,) = re.findall(r"key (\w+) refused \(HTTP 401 invalid_api_key, OpenAI\): left", first)
    (kept,) = re.findall(r"key (\w+) refused \(HTTP 401 invalid_api_key, OpenAI\): not left", first)
    assert {revoked, kept} == set(KEYS)
    assert w.cooldown_entries() == sorted(
        f"cursor-bridge:cool:{p}pool#{revoked}" for p in ("", "revoked:")
    )
    # The next request, on the other worker: the key left untouched is tried (and is the one
    # left out now); the revoked one is skipped.
    error = refused(w.two, "both invalid, again")
    assert error.status_code == 401 and w.gate.keys()[2:] == [kept]
    (line,) = left_out_lines(w.two.log_text())
    assert line.startswith(f"key {kept} refused")
    flow = re.findall(r"cursor-bridge flow route=pool .*", w.two.log_text())
    assert f"pool#{revoked} (revoked, tried again in " in flow[-1]
    # Both left out: the bridge answers 503 itself, the upstream is not asked.
    error = refused(w.one, "both invalid, third")
    assert error.status_code == 503 and len(w.gate.used) == 3
    assert "every key of the route was refused" in str(error.body)
    clean(w)
