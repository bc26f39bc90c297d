"""Issue 35, end to end through the session's mitmdump: an Anthropic client (the official SDK)
of a chat upstream that reports its prompt cache (OpenRouter's ``cached_tokens`` and
``cache_write_tokens``) gets the counts in its own dialect, and the flow's log line says them
(``cache_read``, ``cache_write``, ``cache_share``), streamed and whole; an upstream that
reports no cache counts gets no cache fields."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import anthropic
import pytest

from tests.e2e.harness import JSONReply, Proxy, ScriptedUpstream, SSEReply

ASK: Any = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "x"}]}
HEAD = {"id": "c1", "created": 1, "model": "m"}


def usage(prompt: int, read: int | None, written: int | None) -> dict[str, Any]:
    details = {
        k: v for k, v in (("cached_tokens", read), ("cache_write_tokens", written)) if v is not None
    }
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": 3}
    out["total_tokens"] = prompt + 3
    if details:
        out["prompt_tokens_details"] = details
    return out


def chat_stream(counts: dict[str, Any]) -> bytes:
    head = {**HEAD, "object": "chat.completion.chunk"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi."}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": counts},
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def chat_whole(counts: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": "Hi."}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {**HEAD, "object": "chat.completion", "choices": [choice], "usage": counts}


def flow_line(proxy: Proxy, since: int) -> str:
    """The first ``cursor-bridge flow`` line logged after ``since`` characters of the log."""
    deadline = time.monotonic() + 10
    while not (found := re.search(r"cursor-bridge flow [^\n]*", proxy.log_text()[since:])):
        assert time.monotonic() < deadline, proxy.log_text()[since:]
        time.sleep(0.05)
    return found.group(0)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_an_anthropic_clients_flow_line_says_the_chat_upstreams_cache(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool
) -> None:
    counts = usage(2000, 1800, 188)
    upstream.enqueue(
        SSEReply(chat_stream(counts), seed=35) if stream else JSONReply(chat_whole(counts))
    )
    since = len(proxy.log_text())
    client = anthropic.Anthropic(
        base_url=proxy.base_url, api_key="sk-ant-e2e-cache-report", max_retries=0, timeout=15
    )
    if stream:
        with client.messages.stream(**ASK) as s:
            got = s.get_final_message().usage
    else:
        got = client.messages.create(**ASK).usage
    assert (got.input_tokens, got.cache_read_input_tokens) == (12, 1800)
    assert got.cache_creation_input_tokens == 188
    line = flow_line(proxy, since)
    assert f"mode={'stream' if stream else 'whole'}" in line
    assert " cache_read=1800 cache_write=188 cache_share=90% " in line, line


def test_no_cache_counts_no_cache_fields(proxy: Proxy, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(SSEReply(chat_stream(usage(20, None, None)), seed=36))
    since = len(proxy.log_text())
    client = anthropic.Anthropic(
        base_url=proxy.base_url, api_key="sk-ant-e2e-cache-report", max_retries=0, timeout=15
    )
    with client.messages.stream(**ASK) as s:
        assert s.get_final_message().usage.input_tokens == 20
    line = flow_line(proxy, since)
    assert "cache_" not in line and "mode=stream" in line
