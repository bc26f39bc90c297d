"""The usage ledger end to end: a real mitmdump with an SQLite ``bridge_store`` before a
scripted upstream that reports known usage, streamed and whole; the ledger's sums are what the
upstream reported, by route, model as sent, key name and client; ``scripts/usage`` prints them
(CSV) with a cost for a model the price table knows. No key value lands in the ledger."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from addon.usage import Tokens, open_ledger
from addon.usage_table import genai_prices
from tests.e2e.harness import JSONReply, Proxy, ScriptedUpstream, SSEReply, sse_from_payloads

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


def chat_answer() -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": USAGE,
    }


def chat_stream() -> bytes:
    base = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    return sse_from_payloads(
        [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**base, "choices": [], "usage": USAGE},
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
    by_client = {key.client: tokens for key, tokens in rows.items()}
    assert by_client["alice"] == one + one
    (hashed,) = (c for c in by_client if c != "alice")
    assert hashed.startswith("user:") and by_client[hashed] == one
    for key in rows:
        assert (key.route, key.model, key.key) == ("keyed", "gpt-4o", "CB_E2E_USAGE_KEY")
    assert ROUTE_KEY.encode() not in store.read_bytes()

    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/usage.py"), "--store", str(store), "--csv"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert out[0].startswith("day,route,model,key,client,requests,")
    alice = next(line for line in out if ",alice," in line).split(",")
    assert alice[5:12] == ["2", "40", "200", "0", "60", "20", "83%"]
    if genai_prices() is not None:
        assert alice[12] != ""  # gpt-4o is priced
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
    key), whatever ``user`` the client sends."""
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
    assert [key.client for key in rows] == ["bob"]
    assert bob_key.encode() not in store.read_bytes() and bob_key not in p.log_text()
