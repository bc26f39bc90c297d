"""End to end: the calibrated estimate of ``count_tokens`` lives in the store (issue 44
point 2, docs/dialects/anthropic.md#the-calibrated-estimate). An OpenAI-compatible upstream of
a model the bridge has no tables for answers with its real ``prompt_tokens`` (here OpenAI's
o200k tables' count of the body it got, standing for the upstream's counter); the text is
Japanese, which the plain estimate (about four characters a token) counts far too low.

- Two mitmdump workers on one real redis-server: 5 answers through the first, then the
  second's ``count_tokens`` answer is the calibrated one (within 15% of the upstream's count
  of the body it would get), although it relayed no answer itself; a third worker started
  after them answers the same at its first request.
- One worker on an SQLite store: after 5 answers it stops, a new one on the same file answers
  the calibrated count at once (a restart keeps the ratios)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest

from addon.transforms.tokenizers import count_chat
from addon.transforms.tokens import estimate_input_tokens
from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream
from tests.e2e.test_usage_ledger import chat_answer
from tests.redis_server import RedisServer, redis_server_or_skip

pytest.importorskip("bpe_openai")

ROUTES = """
[[routes]]
name = "local"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_chat"
count_tokens = "estimate"
model_map = { "claude-*" = "local-model" }
"""
LINE = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"


def ask(turns: int) -> dict[str, Any]:
    """A conversation of ``turns`` user turns (each a few Japanese lines), as Claude Code
    grows one."""
    messages: list[dict[str, Any]] = []
    for k in range(turns):
        if messages:
            messages.append({"role": "assistant", "content": f"はい、{k}。"})
        messages.append({"role": "user", "content": f"{k}: " + LINE * (3 + k)})
    return {
        "model": "claude-sonnet-4-6",
        "system": "日本語で答えてください。",
        "messages": messages,
    }


def real_count(rec: Recorded) -> int:
    n = count_chat("o200k", rec.json())
    assert n is not None
    return n


def counting(rec: Recorded) -> JSONReply:
    """The upstream: its answer's usage is its own count of the prompt it got."""
    prompt = real_count(rec)
    return JSONReply(
        chat_answer({"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1})
    )


def sdk(proxy: Proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.base_url, api_key="sk-ant-e2e-calibration", max_retries=0, timeout=15
    )


def five_answers(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    upstream.script = counting
    for turns in range(1, 6):
        sdk(proxy).messages.create(max_tokens=50, **ask(turns))
    assert len(upstream.requests) == 5


def truth(proxy: Proxy, upstream: ScriptedUpstream, body: dict[str, Any]) -> int:
    """The upstream's count of the chat body ``body`` becomes (sent once, answered)."""
    before = len(upstream.requests)
    sdk(proxy).messages.create(max_tokens=50, **body)
    return real_count(upstream.requests[before])


def test_a_second_worker_counts_with_the_first_ones_answers(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    server = RedisServer(redis_server_or_skip()).start()
    try:
        routes = tmp_path / "routes.toml"
        routes.write_text(ROUTES)
        first = start_proxy(bridge_routes=str(routes), bridge_store=server.url)
        second = start_proxy(bridge_routes=str(routes), bridge_store=server.url)
        body = ask(8)
        plain = sdk(second).messages.count_tokens(**body).input_tokens
        five_answers(first, upstream)
        deadline = time.monotonic() + 15  # the first worker writes its lessons within 1 s
        counted = plain
        while counted == plain and time.monotonic() < deadline:
            time.sleep(0.2)
            counted = sdk(second).messages.count_tokens(**body).input_tokens
        later = start_proxy(bridge_routes=str(routes), bridge_store=server.url)
        at_once = sdk(later).messages.count_tokens(**body).input_tokens  # its first request
        want = truth(second, upstream, body)
        assert abs(plain - want) > 0.5 * want, (plain, want)  # the plain estimate: far off
        assert abs(counted - want) <= 0.15 * want, (counted, want, plain)
        assert at_once == counted
    finally:
        server.close()


def test_a_restarted_worker_keeps_its_ratios_in_the_sqlite_store(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    store = tmp_path / "store.sqlite"
    first = start_proxy(bridge_routes=str(routes), bridge_store=str(store))
    five_answers(first, upstream)
    first.close()  # mitmproxy's done: what waits is written
    again = start_proxy(bridge_routes=str(routes), bridge_store=str(store))
    body = ask(8)
    counted = sdk(again).messages.count_tokens(**body).input_tokens
    want = truth(again, upstream, body)
    assert abs(estimate_input_tokens(body) - want) > 0.5 * want  # the plain estimate: far off
    assert abs(counted - want) <= 0.15 * want, (counted, want)
