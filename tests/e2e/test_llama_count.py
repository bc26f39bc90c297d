"""End to end: ``count_tokens = "llama"`` (issue 44 point 2, docs/dialects/anthropic.md#count_tokens).
The anthropic SDK asks through mitmdump; the bridge asks the llama.cpp server itself, at its
root: ``POST /apply-template`` with the conversation and tools as chat messages, then
``POST /tokenize`` of the prompt, with the route's key; the count is the number of tokens.
A server that does not count: the estimate answers, said in one log line. The scripted server
answers as llama-server does (``llama_server``; the real one: tests/real/test_llama_count.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream
from tests.e2e.test_token_counts import ASK

ROUTE = """
[[routes]]
name = "local"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_chat"
count_tokens = "llama"
api_key_env = "LLAMA_KEY"
{extra}
"""
KEY = "sk-llama-route-key-0123456789"


def llama_server(rec: Recorded) -> JSONReply:
    """llama-server's two endpoints as it answers them: ``/apply-template`` renders the
    messages (and the tools) with a ChatML template, ``/tokenize`` splits the content (its
    special tokens parsed) into tokens; another path is its 404."""
    body = rec.json()
    if rec.path.endswith("/apply-template"):
        tools = body.get("tools")
        head = (
            f"<|im_start|>system\n<tools>{json.dumps(tools)}</tools><|im_end|>\n" if tools else ""
        )
        turns = "".join(
            f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n"
            for m in body["messages"]
        )
        return JSONReply({"prompt": head + turns + "<|im_start|>assistant\n"})
    if rec.path.endswith("/tokenize"):
        assert body["add_special"] is True and body["parse_special"] is True
        pieces = re.findall(r"<\|[a-z_]+\|>|\w+|[^\w\s]", body["content"])
        return JSONReply({"tokens": list(range(len(pieces)))})
    return JSONReply({"error": {"code": 404, "message": "File Not Found"}}, status=404)


def start(
    start_proxy: Callable[..., Proxy],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: str = "",
) -> Proxy:
    monkeypatch.setenv("LLAMA_KEY", KEY)
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTE.format(extra=extra))
    return start_proxy(bridge_routes=str(routes))


def count(proxy: Proxy) -> int:
    sdk = anthropic.Anthropic(
        base_url=proxy.base_url, api_key="sk-ant-e2e-count", max_retries=0, timeout=15
    )
    return sdk.messages.count_tokens(**ASK).input_tokens


def expected(upstream: ScriptedUpstream) -> int:
    """What the scripted server's /tokenize answered."""
    tokenize = upstream.requests[-1]
    got: dict[str, Any] = llama_server(tokenize).body
    return len(got["tokens"])


def test_the_llama_server_counts(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = start(start_proxy, tmp_path, monkeypatch)
    upstream.script = llama_server
    counted = count(p)
    template, tokenize = upstream.requests
    assert (template.path, tokenize.path) == ("/apply-template", "/tokenize")
    sent = template.json()
    assert sent["messages"][0] == {"role": "system", "content": ASK["system"]}
    assert sent["tools"][0]["function"]["name"] == "Read"
    assert tokenize.json()["content"] == llama_server(template).body["prompt"]
    for rec in (template, tokenize):
        assert rec.headers["authorization"] == f"Bearer {KEY}"
        assert "x-api-key" not in rec.headers
    assert counted == expected(upstream) > 100
    assert KEY not in p.log_text()


def test_a_prefix_of_the_upstream_url_is_the_servers_root(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra = f'upstream_url = "{upstream.base_url}/llama/v1"'
    p = start(start_proxy, tmp_path, monkeypatch, extra)
    upstream.script = llama_server
    assert count(p) == expected(upstream)
    assert [r.path for r in upstream.requests] == ["/llama/apply-template", "/llama/tokenize"]


def test_a_server_that_does_not_count_gets_the_estimate_said_once(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = start(start_proxy, tmp_path, monkeypatch)
    # An OpenAI-compatible server without llama.cpp's endpoints: its 404.
    upstream.enqueue(JSONReply({"error": {"message": "Not Found"}}, status=404))
    counted = count(p)
    assert [r.path for r in upstream.requests] == ["/apply-template"]
    assert counted > 100  # the estimate
    line = p.wait_for_log(
        re.compile(r"count_tokens estimated, the llama.cpp server did not count: .*")
    )
    assert "/apply-template: HTTP 404" in line.group(0)
    assert p.log_text().count("the llama.cpp server did not count") == 1
