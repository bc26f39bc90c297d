"""End to end: Claude Code's ``count_tokens`` on a route whose upstream is an OpenAI model
(issue 44 point 2, docs/dialects/anthropic.md#count_tokens). The anthropic SDK asks through
mitmdump; the bridge answers at once with OpenAI's own tables' count of the body it would
send (the upstream is not asked), and the same route's chat
request reaches the upstream as that body; ``count_tokens = "upstream"`` asks the upstream."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest

from addon.transforms.tokenizers import count_chat
from tests.e2e.harness import JSONReply, Proxy, ScriptedUpstream
from tests.e2e.test_usage_ledger import chat_answer

pytest.importorskip("bpe_openai")

ROUTE = """
[[routes]]
name = "gpt"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_chat"
model_map = {{ "claude-*" = "gpt-4o" }}
{extra}
"""
CODE = "def load(path):\n    with open(path) as f:\n        return json.load(f)  # é ü 日本\n" * 40
ASK: dict[str, Any] = {
    "model": "claude-sonnet-4-6",
    "system": "You are a careful engineer.",
    "messages": [{"role": "user", "content": f"Review this:\n{CODE}"}],
    "tools": [
        {
            "name": "Read",
            "description": "Read a file.",
            "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        }
    ],
}


def start(start_proxy: Callable[..., Proxy], tmp_path: Path, extra: str = "") -> Proxy:
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTE.format(extra=extra))
    return start_proxy(bridge_routes=str(routes))


def sdk(proxy: Proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.base_url, api_key="sk-ant-e2e-count", max_retries=0, timeout=15
    )


def test_the_tables_count_what_the_upstream_gets(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    p = start(start_proxy, tmp_path)
    counted = sdk(p).messages.count_tokens(**ASK)
    assert not upstream.requests  # answered by the bridge at once
    upstream.enqueue(JSONReply(chat_answer()))
    sdk(p).messages.create(max_tokens=100, **ASK)
    (sent,) = upstream.requests
    body = json.loads(sent.body)
    assert body["model"] == "gpt-4o"
    want = count_chat("o200k", body)
    assert want is not None
    assert abs(counted.input_tokens - want) <= 0.05 * want, (counted.input_tokens, want)


def test_the_route_may_send_it_upstream(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    p = start(start_proxy, tmp_path, 'count_tokens = "upstream"')
    upstream.enqueue(JSONReply({"input_tokens": 4321}))
    assert sdk(p).messages.count_tokens(**ASK).input_tokens == 4321
    assert upstream.requests[0].path == "/v1/messages/count_tokens"
