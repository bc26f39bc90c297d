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
import openai
import pytest
from openai.types.responses.input_token_count_params import InputTokenCountParams

from addon.transforms.tokenizers import count_chat
from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream
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


RESPONSES_ROUTE = """
[[routes]]
name = "responses"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_responses"
model_map = { "claude-*" = "gpt-5" }
"""
INPUT_TOKENS_FIELDS = frozenset(InputTokenCountParams.__annotations__)
"""What OpenAI's ``POST /v1/responses/input_tokens`` takes (the openai SDK's
``responses.input_tokens.count``); another field is refused, as OpenAI refuses it."""


def input_tokens_service(rec: Recorded) -> JSONReply:
    """OpenAI's token counter as it answers: 400 ``unknown_parameter`` for a field it does not
    take, else ``{"object": "response.input_tokens", "input_tokens": N}``."""
    assert rec.path == "/v1/responses/input_tokens", rec.path
    body = rec.json()
    unknown = sorted(set(body) - INPUT_TOKENS_FIELDS)
    if unknown:
        error = {
            "message": f"Unknown parameter: '{unknown[0]}'.",
            "type": "invalid_request_error",
            "param": unknown[0],
            "code": "unknown_parameter",
        }
        return JSONReply({"error": error}, status=400)
    return JSONReply({"object": "response.input_tokens", "input_tokens": 100 + len(rec.body)})


def test_the_scripted_counter_takes_what_the_openai_sdk_sends(upstream: ScriptedUpstream) -> None:
    upstream.script = input_tokens_service
    sdk_client = openai.OpenAI(
        base_url=f"{upstream.base_url}/v1", api_key="sk-e2e", max_retries=0, timeout=10
    )
    got = sdk_client.responses.input_tokens.count(
        model="gpt-5",
        input="hi",
        instructions="be brief",
        tools=[
            {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": False}
        ],
    )
    assert got.input_tokens > 100
    with pytest.raises(openai.BadRequestError):
        sdk_client.responses.input_tokens.count(
            model="gpt-5", input="hi", extra_body={"max_output_tokens": 10}
        )


def test_a_responses_route_counts_with_the_upstreams_own_counter(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text(RESPONSES_ROUTE)
    p = start_proxy(bridge_routes=str(routes))
    upstream.script = input_tokens_service
    counted = sdk(p).messages.count_tokens(**ASK)
    (sent,) = upstream.requests
    assert sent.json()["model"] == "gpt-5"
    assert counted.input_tokens == 100 + len(sent.body)
