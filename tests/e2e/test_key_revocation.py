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
from tests.e2e.keyed import WorkerPairs, Workers, chat, wait_for, worker_pairs
from tests.real.clients.loop import answer, check_request

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
def pairs(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[WorkerPairs]:
    """Workers on one redis-server with the pool's keys (``KEYS``), before one upstream."""
    routes = tmp_path / "routes.toml"
    with worker_pairs(start_proxy, upstream, routes, KEYS, monkeypatch, ALL_KEYS) as found:
        yield found


@pytest.fixture
def workers(pairs: WorkerPairs) -> Callable[..., Workers[Gate]]:
    """``make(provider, **options)``: two workers on one redis-server before a ``Gate``."""

    def make(provider: str, **options: object) -> Workers[Gate]:
        return pairs.start(Gate(pairs.server, provider), routes_text(pairs.server), **options)

    return make


def ask(proxy: Proxy, opening: str, model: str = "gpt-5", stream: bool = False) -> str:
    return chat(proxy, CLIENT_KEY, opening, model, stream)


def refused(proxy: Proxy, opening: str, model: str = "gpt-5") -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as e:
        ask(proxy, opening, model)
    return e.value


def left_out_lines(text: str) -> list[str]:
    return re.findall(r"key \w+ refused \([^)]*\): left out for .*", text)


@pytest.mark.parametrize("provider", sorted(FORBIDDEN))
def test_a_model_refused_per_request_leaves_every_key_to_the_other_clients(
    workers: Callable[..., Workers[Gate]], provider: str
) -> None:
    w = workers(provider)
    status = FORBIDDEN[provider][0]
    for n in range(4):  # one client asks again and again, on both workers
        error = refused(w.one if n % 2 else w.two, f"forbidden {n}", FORBIDDEN_MODEL)
        assert error.status_code == status
        assert len(w.up.used) == n + 1  # answered with the first key's refusal, no other
    # Every other client is served on both workers, by both keys as their conversations ask.
    for n in range(8):
        text = ask(w.two if n % 2 else w.one, f"other client {n}", stream=n % 3 == 0)
        assert text.startswith("hello with CB_E2E_REV_")
    assert len(w.up.used) == 12
    assert w.cooldown_entries() == []  # nothing left out, nothing cooling, on the store
    log = w.log()
    assert not left_out_lines(log) and "refused (" not in log
    assert len(re.findall(r"answered HTTP \d+, the request's own \(.*\): answered, no key", log))
    w.clean()


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
    workers: Callable[..., Workers[Gate]], provider: str
) -> None:
    w = workers(provider, bridge_key_recheck=RECHECK)
    w.up.invalid.add("CB_E2E_REV_A")
    assert first_key_a(w.one, w.up, "invalid") == "hello with CB_E2E_REV_B"
    (line,) = left_out_lines(w.one.log_text())
    assert line.startswith("key CB_E2E_REV_A refused (HTTP 401 ")
    assert f"left out for {RECHECK} s by every worker" in line
    assert "cursor-bridge:cool:revoked:pool#CB_E2E_REV_A" in w.cooldown_entries()
    for n in range(6):  # the other worker, any conversation: key B; A only after the recheck
        assert ask(w.two, f"after {n}", stream=n % 2 == 1) == "hello with CB_E2E_REV_B"
    # The recheck is the key's probe (the model list, which refuses a request without a
    # key): refused again, the key stays out, and no client's request is spent on it.
    wait_for(lambda: "key CB_E2E_REV_A still refused by its probe GET /v1/models" in w.log())
    (a_use,) = [t for k, t in w.up.used if k == "CB_E2E_REV_A"]
    # The key is renewed upstream: the next recheck probe takes it, and it is back by itself.
    w.up.invalid.clear()
    wait_for(lambda: "key CB_E2E_REV_A accepted by its probe GET /v1/models" in w.log())
    a_probes = [t for k, t in w.up.probed if k == "CB_E2E_REV_A"]
    # However slow the machine: key A was probed only once its recheck was due.
    assert len(a_probes) >= 2 and all(
        b - a >= RECHECK - 0.2 for a, b in itertools.pairwise(a_probes)
    )
    assert a_probes[0] - a_use >= RECHECK - 0.2
    assert [k for k, _ in w.up.used].count("CB_E2E_REV_A") == 1  # no client's request
    assert w.cooldown_entries() == []
    assert first_key_a(w.two, w.up, "back") == "hello with CB_E2E_REV_A"
    assert len(left_out_lines(w.log())) == 1
    w.clean()


def test_never_more_than_one_key_is_revoked_for_one_client_request(
    workers: Callable[..., Workers[Gate]],
) -> None:
    w = workers("openai")
    w.up.invalid.update(KEYS)
    error = refused(w.one, "both invalid")
    assert error.status_code == 401 and sorted(w.up.keys()) == sorted(KEYS)
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
    assert error.status_code == 401 and w.up.keys()[2:] == [kept]
    (line,) = left_out_lines(w.two.log_text())
    assert line.startswith(f"key {kept} refused")
    flow = re.findall(r"cursor-bridge flow route=pool .*", w.two.log_text())
    assert f"pool#{revoked} (revoked, tried again in " in flow[-1]
    # Both left out: the bridge answers 503 itself, the upstream is not asked.
    error = refused(w.one, "both invalid, third")
    assert error.status_code == 503 and len(w.up.used) == 3
    assert "every key of the route was refused" in str(error.body)
    w.clean()
