"""The usage ledger end to end: a real mitmdump with an SQLite ``bridge_store`` before a
scripted upstream that reports known usage, streamed and whole; the ledger's sums are what the
upstream reported, by route, model as sent, key name and client; ``scripts/usage`` prints them
(CSV) with a cost for a model the price table knows. Two workers on one real ``redis-server``
with client keys: the ledger read from Redis sums each client key name's usage across both.
No key value lands in the ledger (nor in Redis) or a log."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from addon.report.usage_table import genai_prices
from addon.stores.ledger import Tokens, open_ledger
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
from tests.e2e.test_fallback import error_reply
from tests.e2e.test_shared_store import PASSWORD, store_url
from tests.redis_server import RedisServer, redis_server_or_skip

ROUTE_KEY = "sk-e2e-usage-route-key-0123456789"
ROOT = Path(__file__).resolve().parents[2]
ROUTES = """
[[routes]]
name = "keyed"
path = "/keyed/v1/chat/completions"
api_key_env = "CB_E2E_USAGE_KEY"
model_map = { "fast" = "gpt-4o" }
"""
USAGE: dict[str, Any] = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 100},
    "completion_tokens_details": {"reasoning_tokens": 10},
}


def chat_answer(usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": usage or USAGE,
    }


def chat_stream(usage: dict[str, Any] | None = None) -> bytes:
    base = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    return sse_from_payloads(
        [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**base, "choices": [], "usage": usage or USAGE},
            "[DONE]",
        ]
    )


def test_the_ledger_sums_what_the_upstream_reported(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    store = tmp_path / "store.db"
    monkeypatch.setenv("CB_E2E_USAGE_KEY", ROUTE_KEY)
    p = start_proxy(bridge_routes=str(routes), bridge_store=str(store))
    client = openai.OpenAI(
        base_url=f"{p.base_url}/keyed/v1", api_key="client-key", max_retries=0, timeout=15
    )
    messages: Any = [{"role": "user", "content": "hello"}]
    upstream.enqueue(JSONReply(chat_answer()))
    client.chat.completions.create(model="fast", messages=messages, user="alice")
    upstream.enqueue(SSEReply(chat_stream(), seed=3))
    with client.chat.completions.create(
        model="fast", messages=messages, user="alice", stream=True
    ) as stream:
        list(stream)
    upstream.enqueue(JSONReply(chat_answer()))
    client.chat.completions.create(model="fast", messages=messages, user="sk-" + "x" * 40)

    ledger = open_ledger(str(store))
    deadline = time.monotonic() + 10
    while sum(t.requests for t in ledger.rows().values()) < 3:  # counted at each flow's end
        assert time.monotonic() < deadline, ledger.rows()
        time.sleep(0.05)
    rows = ledger.rows()
    ledger.close()
    one = Tokens(1, 20, 100, 0, 30, 10)
    by_user = {key.user: tokens for key, tokens in rows.items()}
    assert by_user["alice"] == one + one
    (hashed,) = (c for c in by_user if c != "alice")
    assert hashed.startswith("user:") and by_user[hashed] == one
    for key in rows:
        assert (key.route, key.model, key.key) == ("keyed", "gpt-4o", "CB_E2E_USAGE_KEY")
        assert key.client == ""  # no client keys: the body's user names no client
    assert ROUTE_KEY.encode() not in store.read_bytes()

    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/usage.py"), "--store", str(store), "--csv"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert out[0].startswith("day,route,model,key,client,user,requests,")
    alice = next(cells for cells in (line.split(",") for line in out) if cells[5] == "alice")
    assert alice[4:14] == ["", "alice", "2", "40", "200", "0", "60", "20", "0", "83%"]
    if genai_prices() is not None:
        assert alice[14] != ""  # gpt-4o is priced
    text = subprocess.run(
        [sys.executable, str(ROOT / "scripts/usage.py"), "--store", str(store), "--by", "model"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "gpt-4o" in text and "total" in text
    assert "Traceback" not in p.log_text()


def test_a_client_keys_name_labels_its_usage(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``bridge_client_keys`` the ledger's client is the matched key's name (never the
    key), whatever ``user`` the client sends: that goes to the user column."""
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    keys = tmp_path / "clients.toml"
    bob_key = "sk-team-bob-0123456789abcdef"
    keys.write_text(f'bob = "{bob_key}"\n')
    store = tmp_path / "store.db"
    monkeypatch.setenv("CB_E2E_USAGE_KEY", ROUTE_KEY)
    p = start_proxy(
        bridge_routes=str(routes), bridge_store=str(store), bridge_client_keys=str(keys)
    )
    client = openai.OpenAI(
        base_url=f"{p.base_url}/keyed/v1", api_key=bob_key, max_retries=0, timeout=15
    )
    upstream.enqueue(JSONReply(chat_answer()))
    messages: Any = [{"role": "user", "content": "hello"}]
    client.chat.completions.create(model="fast", messages=messages, user="alice")
    ledger = open_ledger(str(store))
    deadline = time.monotonic() + 10
    while not ledger.rows():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    rows = ledger.rows()
    ledger.close()
    assert [(key.client, key.user) for key in rows] == [("bob", "alice")]
    assert bob_key.encode() not in store.read_bytes() and bob_key not in p.log_text()


def usage_of(n: int) -> tuple[dict[str, Any], Tokens]:
    """The ``n``th answer's usage as the upstream reports it, and what the ledger counts."""
    prompt, cached, completion, reasoning = 100 + 7 * n, 10 * n, 20 + 3 * n, n
    reported = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    return reported, Tokens(1, prompt - cached, cached, 0, completion, reasoning)


def redis_contents(url: str) -> list[str]:
    """Every key of the Redis at ``url`` and every value under it, as text."""
    import redis

    def text(item: object) -> str:
        return item.decode(errors="replace") if isinstance(item, bytes) else str(item)

    client = redis.Redis.from_url(url)
    found: list[object] = []
    try:
        for key in client.scan_iter(count=1000):
            found.append(key)
            kind = text(client.type(key))
            if kind == "string":
                found.append(client.get(key))
            elif kind == "hash":
                found.extend(itertools.chain(*client.hgetall(key).items()))
            elif kind == "set":
                found.extend(client.smembers(key))
            elif kind == "list":
                found.extend(client.lrange(key, 0, -1))
            elif kind == "zset":
                found.extend(client.zrange(key, 0, -1))
            else:
                raise AssertionError(f"a Redis {kind} this test cannot read: {key!r}")
    finally:
        client.close()
    return [text(item) for item in found]


def test_two_workers_on_one_redis_store_sum_each_client_keys_usage(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two workers, one Redis ledger: alice's and bob's requests, streamed and whole, spread
    over both workers; the ledger read from Redis sums, per client key name, exactly what the
    upstream reported. No key value in Redis or in a log."""
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    team = {"alice": "sk-team-alice-0123456789abcdef", "bob": "sk-team-bob-fedcba9876543210"}
    keys = tmp_path / "clients.toml"
    keys.write_text("".join(f'{name} = "{key}"\n' for name, key in team.items()))
    monkeypatch.setenv("CB_E2E_USAGE_KEY", ROUTE_KEY)
    with RedisServer(redis_server_or_skip(), extra=("--requirepass", PASSWORD)) as redis:
        url = store_url(redis)
        options = {"bridge_routes": str(routes), "bridge_store": url}
        workers = [start_proxy(**options, bridge_client_keys=str(keys)) for _ in range(2)]
        expected = {name: Tokens() for name in team}
        messages: Any = [{"role": "user", "content": "hello"}]
        plan = itertools.product(range(2), team, [False, True], range(2))
        for n, (worker, name, stream, _) in enumerate(plan):
            reported, counted = usage_of(n)
            expected[name] += counted
            client = openai.OpenAI(
                base_url=f"{workers[worker].base_url}/keyed/v1",
                api_key=team[name],
                max_retries=0,
                timeout=15,
            )
            if stream:
                upstream.enqueue(SSEReply(chat_stream(reported), seed=n))
                with client.chat.completions.create(
                    model="fast", messages=messages, user="carol", stream=True
                ) as chunks:
                    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                upstream.enqueue(JSONReply(chat_answer(reported)))
                done = client.chat.completions.create(model="fast", messages=messages)
                assert done.choices[0].message.content == "hi"
        assert len(upstream.requests) == 16
        for rec in upstream.requests:
            assert rec.headers["authorization"] == f"Bearer {ROUTE_KEY}"

        ledger = open_ledger(url)
        deadline = time.monotonic() + 10
        while sum(t.requests for t in ledger.rows().values()) < 16:  # counted at flow's end
            assert time.monotonic() < deadline, ledger.rows()
            time.sleep(0.05)
        time.sleep(0.3)  # nothing more comes
        rows = ledger.rows()
        ledger.close()
        by_client: dict[str, Tokens] = {}
        for key, tokens in rows.items():
            assert (key.route, key.model, key.key) == ("keyed", "gpt-4o", "CB_E2E_USAGE_KEY")
            by_client[key.client] = by_client.get(key.client, Tokens()) + tokens
        assert by_client == expected
        assert expected["alice"].requests == expected["bob"].requests == 8

        secrets = [ROUTE_KEY, PASSWORD, *team.values()]
        stored = list(redis_contents(url))
        assert any("usage" in item for item in stored)  # the ledger's counters were read
        assert not [s for s in secrets if any(s in item for item in stored)]
        for w in workers:
            log = w.log_text()
            assert "Traceback" not in log and not [s for s in secrets if s in log]


POOL = {
    "CB_E2E_USAGE_POOL_A": "sk-e2e-usage-pool-a-0123456789",
    "CB_E2E_USAGE_POOL_B": "sk-e2e-usage-pool-b-9876543210",
}
DEAD = free_port()
"""A loopback port with nothing listening: the chain's first route gets no answer."""


def gateway_routes(upstream: ScriptedUpstream) -> str:
    pool = ", ".join(f'"{name}"' for name in POOL)
    return f"""{ROUTES}
[[routes]]
name = "pool"
path = "/pool/v1/chat/completions"
upstream_url = "{upstream.base_url}"
api_key_env = [{pool}]

[[routes]]
name = "flaky"
path = "/flaky/v1/chat/completions"
upstream_url = "http://127.0.0.1:{DEAD}"
api_key_env = "CB_E2E_USAGE_KEY"
fallback = ["pool"]
"""


def test_the_client_is_the_client_keys_name_on_plain_pool_and_fallback_routes(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two workers on one Redis, client keys on: alice sends ``"user": "bob"`` and bob sends
    ``"user": "alice"``, on a plain route, a key pool's route and a chain whose first route
    is down (the pool answers), streamed and whole. Every request is booked under the client
    key's name with the body's ``user`` in its own column, summed exactly as the upstream
    reported (issue 40 point 4: the pool's were booked under the body's user)."""
    routes = tmp_path / "routes.toml"
    routes.write_text(gateway_routes(upstream))
    team = {"alice": "sk-team-alice-0123456789abcdef", "bob": "sk-team-bob-fedcba9876543210"}
    says = {"alice": "bob", "bob": "alice"}  # the user each one's body claims
    keys = tmp_path / "clients.toml"
    keys.write_text("".join(f'{name} = "{key}"\n' for name, key in team.items()))
    monkeypatch.setenv("CB_E2E_USAGE_KEY", ROUTE_KEY)
    for name, value in POOL.items():
        monkeypatch.setenv(name, value)
    upstream_keys = {ROUTE_KEY, *POOL.values()}

    def service(rec: Recorded) -> Reply:
        """The OpenAI-compatible upstream: 401 to a key it does not hold, else the usage of
        the request's number (its message) as it reports it."""
        if rec.headers.get("authorization", "").removeprefix("Bearer ") not in upstream_keys:
            return error_reply("openai_chat", "Incorrect API key provided", 401)
        body = rec.json()
        n = int(body["messages"][0]["content"].split()[-1])
        reported, _ = usage_of(n)
        if body.get("stream"):
            return SSEReply(chat_stream(reported), seed=n)
        return JSONReply(chat_answer(reported))

    upstream.script = service
    with RedisServer(redis_server_or_skip(), extra=("--requirepass", PASSWORD)) as redis:
        url = store_url(redis)
        options = {"bridge_routes": str(routes), "bridge_store": url}
        workers = [start_proxy(**options, bridge_client_keys=str(keys)) for _ in range(2)]
        expected: dict[tuple[str, str, str], Tokens] = {}
        plan = itertools.product(range(2), ("keyed", "pool", "flaky"), team, [False, True])
        for n, (worker, path, name, stream) in enumerate(plan):
            served = "keyed" if path == "keyed" else "pool"  # a chain: the route that answered
            group = (served, name, says[name])
            expected[group] = expected.get(group, Tokens()) + usage_of(n)[1]
            client = openai.OpenAI(
                base_url=f"{workers[worker].base_url}/{path}/v1",
                api_key=team[name],
                max_retries=0,
                timeout=15,
            )
            messages: Any = [{"role": "user", "content": f"hello {n}"}]
            if stream:
                with client.chat.completions.create(
                    model="fast", messages=messages, user=says[name], stream=True
                ) as chunks:
                    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                done = client.chat.completions.create(
                    model="fast", messages=messages, user=says[name]
                )
                assert done.choices[0].message.content == "hi"

        ledger = open_ledger(url)
        deadline = time.monotonic() + 10
        while sum(t.requests for t in ledger.rows().values()) < 24:  # counted at flow's end
            assert time.monotonic() < deadline, ledger.rows()
            time.sleep(0.05)
        time.sleep(0.3)  # nothing more comes
        rows = ledger.rows()
        ledger.close()
        found: dict[tuple[str, str, str], Tokens] = {}
        for key, tokens in rows.items():
            if key.route == "keyed":
                assert key.key == "CB_E2E_USAGE_KEY"
            else:
                assert key.route == "pool" and key.key in POOL, key
            group = (key.route, key.client, key.user)
            found[group] = found.get(group, Tokens()) + tokens
        assert found == expected
        assert {g[1:] for g in found} == {("alice", "bob"), ("bob", "alice")}

        csv_out = subprocess.run(
            [sys.executable, str(ROOT / "scripts/usage.py"), "--store", url, "--csv",
             "--by", "route,client,user"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout.splitlines()  # fmt: skip
        assert csv_out[0].startswith("route,client,user,requests,")
        assert {tuple(line.split(",")[:4]) for line in csv_out[1:]} == {
            ("keyed", "alice", "bob", "4"),
            ("keyed", "bob", "alice", "4"),
            ("pool", "alice", "bob", "8"),
            ("pool", "bob", "alice", "8"),
        }
        secrets = [ROUTE_KEY, PASSWORD, *team.values(), *POOL.values()]
        stored = redis_contents(url)
        assert not [s for s in secrets if any(s in item for item in stored)]
        for w in workers:
            log = w.log_text()
            assert "Traceback" not in log and not [s for s in secrets if s in log]
            pooled = re.findall(r"cursor-bridge flow route=pool .*", log)
            assert pooled and all("client_name=" in line for line in pooled), pooled
