"""End to end: key pools (issue 37). One mitmdump in reverse mode; a route whose
``api_key_env`` lists two keys of one scripted OpenAI-compatible upstream (which answers 401
to any other key). One key at 429 → the request is answered with the other, and later
requests of that conversation skip the cooled key; one key revoked (401) → left out, one log
line naming its variable; both keys at 429 → the client's 429 with ``Retry-After`` in its own
dialect. No key value in the log (``keyed.routed``). What revokes a key and what does not, on
two workers: ``test_key_revocation``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, Reply, ScriptedUpstream, free_port
from tests.e2e.keyed import chat, routed, two_workers
from tests.e2e.test_fallback import error_reply
from tests.real.clients.loop import answer, check_request

CLIENT_KEY = "sk-client-SECRET-pool"
KEYS = {"CB_E2E_POOL_A": "sk-pool-a-SECRET", "CB_E2E_POOL_B": "sk-pool-b-SECRET"}
BY_VALUE = {v: n for n, v in KEYS.items()}
ALL_KEYS = (CLIENT_KEY, *KEYS.values())
DEAD = free_port()
"""A loopback port with nothing listening: connection refused."""


def invalid_key() -> JSONReply:
    """OpenAI's 401 for a key it does not know (its error codes guide): the key's own fault."""
    body = {
        "error": {
            "message": "Incorrect API key provided: sk-pool-****CRET.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    return JSONReply(body, status=401)  # fmt: skip


@dataclass
class Pooled:
    """An OpenAI-compatible upstream that takes either key of the pool."""

    server: ScriptedUpstream

    def __call__(self, rec: Recorded) -> Reply:
        if key_of(rec) is None:
            return invalid_key()
        body = rec.json()
        check_request("openai_chat", body)
        return answer("openai_chat", bool(body.get("stream")), f"hello with {key_of(rec)}")


def key_of(rec: Recorded) -> str | None:
    """The pool's variable whose key the request carried."""
    auth = rec.headers.get("authorization", "")
    return BY_VALUE.get(auth.removeprefix("Bearer "))


@pytest.fixture
def pooled() -> Iterator[Pooled]:
    server = ScriptedUpstream().start()
    try:
        service = Pooled(server)
        server.script = service
        yield service
        assert not server.errors, server.errors
    finally:
        server.stop()


def routes_text(pooled: Pooled) -> str:
    names = ", ".join(f'"{n}"' for n in KEYS)
    return f"""
[[routes]]
name = "dead-pool"
model = "dead-*"
upstream_url = "http://127.0.0.1:{DEAD}"
api_key_env = [{names}]
fallback = ["pool"]

[[routes]]
name = "pool"
path = "*/chat/completions"
upstream_url = "{pooled.server.base_url}"
api_key_env = [{names}]
cooldown = 30

[[routes]]
name = "claude-pool"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_chat"
upstream_url = "{pooled.server.base_url}"
api_key_env = [{names}]
"""


@pytest.fixture
def pool(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    pooled: Pooled,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Proxy]:
    text = routes_text(pooled)
    with routed(start_proxy, tmp_path / "routes.toml", text, KEYS, monkeypatch, ALL_KEYS) as p:
        yield p
    assert not upstream.requests


def ask(proxy: Proxy, opening: str, stream: bool = False, model: str = "gpt-5") -> str:
    return chat(proxy, CLIENT_KEY, opening, model, stream)


def lines(proxy: Proxy, pattern: str, n: int, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        found = re.findall(pattern, proxy.log_text())
        if len(found) >= n or time.monotonic() > deadline:
            return [str(f) for f in found]
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_key_at_429_is_cooled_and_the_other_key_answers(
    pool: Proxy, pooled: Pooled, stream: bool
) -> None:
    server = pooled.server
    server.enqueue(error_reply("openai_chat", "slow down", 429))  # no Retry-After: cooldown
    text = ask(pool, "conversation one", stream)
    first, second = server.requests
    cooled, other = key_of(first), key_of(second)
    assert cooled != other and text == f"hello with {other}"
    (line,) = lines(pool, r"cursor-bridge flow route=pool .*", 1)
    assert f"pool#{cooled} (HTTP 429, cooling down 30 s)" in line and f"key={other}" in line
    # The same conversation again, and other ones: never the cooled key while it cools.
    for opening in ["conversation one", "two", "three", "four", "five"]:
        assert ask(pool, opening, stream) == f"hello with {other}"
    assert [key_of(r) for r in server.requests[2:]] == [other] * 5


def test_the_sticky_key_serves_every_turn_of_a_conversation(pool: Proxy, pooled: Pooled) -> None:
    for _ in range(3):
        ask(pool, "a conversation of its own")
    keys = {key_of(r) for r in pooled.server.requests}
    assert len(keys) == 1 and len(pooled.server.requests) == 3
    (key,) = keys
    found = lines(pool, r"cursor-bridge flow route=pool .*", 3)
    assert len(found) == 3 and all(f"key={key}" in line for line in found)


def test_a_revoked_key_is_left_out_with_one_line_naming_it(pool: Proxy, pooled: Pooled) -> None:
    server = pooled.server
    server.enqueue(invalid_key())
    text = ask(pool, "revoked one")
    first, second = server.requests
    revoked, other = key_of(first), key_of(second)
    assert revoked is not None and revoked != other and text == f"hello with {other}"
    for opening in ["a", "b", "c", "d", "e", "f"]:
        assert ask(pool, opening) == f"hello with {other}"
    assert [key_of(r) for r in server.requests[2:]] == [other] * 6
    found = lines(pool, r".*key \w+ refused \(HTTP 401 invalid_api_key, OpenAI\).*", 1)
    assert len(found) == 1 and f"key {revoked} refused" in found[0]
    assert (
        "left out for 3600 s by this process, then probed with GET /v1/models (bridge_key_recheck)"
        in found[0]
    )


def test_an_unreachable_upstream_cools_every_key_of_its_route(pool: Proxy, pooled: Pooled) -> None:
    """No connection is the upstream's failure, not a key's: the route's other keys are not
    tried against it; its fallback (a pool of its own) answers."""
    assert ask(pool, "dead one", model="dead-1").startswith("hello with ")
    assert len(pooled.server.requests) == 1
    (line,) = lines(pool, r"cursor-bridge flow route=pool .*", 1)
    assert line.count("connection refused") == 1 and "dead-pool#CB_E2E_POOL_" in line
    assert ask(pool, "dead two", model="dead-2").startswith("hello with ")
    second = lines(pool, r"cursor-bridge flow route=pool .*", 2)[1]
    assert second.count("(skipped, cooling down") == 2 and len(pooled.server.requests) == 2


def test_both_keys_at_429_give_the_client_its_429_with_retry_after(
    pool: Proxy, pooled: Pooled
) -> None:
    server = pooled.server
    server.enqueue(
        error_reply("openai_chat", "slow down", 429, {"retry-after": "20"}),
        error_reply("openai_chat", "slow down", 429, {"retry-after": "7"}),
    )
    body = {"model": "claude-x", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}
    url = f"{pool.base_url}/v1/messages"
    got = httpx.post(url, json=body, headers=headers, timeout=30)
    assert got.status_code == 429 and got.json()["type"] == "error"
    assert {key_of(r) for r in server.requests} == set(KEYS)
    # Both keys cool down: the next request is answered at once, upstream not asked.
    again = httpx.post(url, json=body, headers=headers, timeout=30)
    assert again.status_code == 429 and len(server.requests) == 2
    assert again.json()["type"] == "error" and "every key" in again.text
    assert 1 <= int(again.headers["retry-after"]) <= 7
    found = lines(pool, r"cursor-bridge flow route=claude-pool outcome=rejected .*", 1)
    assert "every key cooling down" in found[0]


def test_two_workers_on_one_redis_store_share_the_keys_and_their_cooldowns(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    pooled: Pooled,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every worker on one store picks a conversation's key alike (the store's secret), and a
    key one worker saw at 429 is skipped by the other."""
    routes, text = tmp_path / "routes.toml", routes_text(pooled)
    with two_workers(start_proxy, routes, text, KEYS, monkeypatch, pooled, ALL_KEYS) as w:
        one, two, server = w.one, w.two, pooled.server
        for n in range(6):
            ask(one, f"shared {n}")
            ask(two, f"shared {n}")
        picked = [key_of(r) for r in server.requests]
        assert picked[0::2] == picked[1::2]  # each conversation: one key on both workers
        server.reset()
        server.script = pooled
        server.enqueue(error_reply("openai_chat", "slow down", 429))
        ask(one, "cooled on one")
        cooled, other = (key_of(r) for r in server.requests)
        assert cooled != other
        for opening in ["cooled on one", "p", "q", "r", "s", "t"]:
            assert ask(two, opening) == f"hello with {other}"
        assert [key_of(r) for r in server.requests[2:]] == [other] * 6
        w.clean()
    assert not upstream.requests


def test_every_key_revoked_gives_the_client_a_503_naming_no_key(
    pool: Proxy, pooled: Pooled
) -> None:
    """One key revoked per client request: the first request leaves one out and tries the
    other (refused too, not left out), the second leaves that one out, the third is the
    bridge's 503."""
    server = pooled.server
    server.enqueue(*[invalid_key()] * 3)
    body = {"model": "claude-x", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}
    url = f"{pool.base_url}/v1/messages"
    for n in (2, 3):
        got = httpx.post(url, json=body, headers=headers, timeout=30)
        assert got.status_code == 401 and got.json()["type"] == "error"  # the upstream's last
        assert len(server.requests) == n
    again = httpx.post(url, json=body, headers=headers, timeout=30)
    assert again.status_code == 503 and "retry-after" not in again.headers
    assert again.json()["type"] == "error" and len(server.requests) == 3
    found = lines(pool, r".*key \w+ refused \(HTTP 401 invalid_api_key, OpenAI\): left out.*", 2)
    assert sorted(re.findall(r"key (\w+) refused", "\n".join(found))) == sorted(KEYS)


def test_the_tried_line_names_a_key_passed_over_because_it_cools_down(
    pool: Proxy, pooled: Pooled
) -> None:
    """Issue 40, point 9: a key cooling down is named wherever the chain passes it over —
    before the key tried, and after it (``no route answered; tried: pool#B (HTTP 500)`` left
    it out) — with how long it still cools, to a tenth of a second."""
    server = pooled.server
    server.enqueue(error_reply("openai_chat", "slow down", 429))  # the cooldown: 30 s
    ask(pool, "cool one key")
    cooled = key_of(server.requests[0])
    other = next(k for k in KEYS if k != cooled)
    for n in range(30):  # until a conversation asks the other key first, the cooled one next
        server.enqueue(error_reply("openai_chat", "upstream broke", 500))
        with pytest.raises(openai.InternalServerError):
            ask(pool, f"a 500 {n}")
        found = lines(pool, r"(?<=\]: )no route answered; tried: .*", n + 1)
        assert len(found) == n + 1 and f"pool#{other} (HTTP 500)" in found[-1]
        assert re.search(rf"pool#{cooled} \(skipped, cooling down (2\d|30)(\.\d)? s\)", found[-1])
        if found[-1].startswith(f"no route answered; tried: pool#{other}"):
            break
    else:
        raise AssertionError("no conversation of 30 asked the key that was not cooling first")


def test_a_key_revoked_on_one_worker_is_skipped_by_the_other_on_one_redis_store(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    pooled: Pooled,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A conversation's sticky key answers 401 on worker A: A answers with the other key, and
    worker B, on the same Redis store, never sends that conversation (or any other) to the
    revoked key; one line, on A, names the key's variable, never its value."""
    routes, text = tmp_path / "routes.toml", routes_text(pooled)
    with two_workers(start_proxy, routes, text, KEYS, monkeypatch, pooled, ALL_KEYS) as w:
        one, two, server = w.one, w.two, pooled.server
        server.enqueue(invalid_key())
        text = ask(one, "revoked on one")
        first, second = server.requests
        revoked, other = key_of(first), key_of(second)
        assert revoked is not None and other is not None and revoked != other
        assert text == f"hello with {other}"
        for n, opening in enumerate(["revoked on one", "u", "v", "w", "x", "y"]):
            assert ask(two, opening, stream=n % 2 == 1) == f"hello with {other}"
        assert [key_of(r) for r in server.requests[2:]] == [other] * 6
        (line,) = lines(one, r".*key \w+ refused \(HTTP 401 invalid_api_key, OpenAI\).*", 1)
        assert f"key {revoked} refused" in line and "left out for 3600 s by every worker" in line
        assert not re.findall(r"refused \(HTTP 401", two.log_text())
        w.clean()
    assert not upstream.requests
