"""End to end: a client's explicit ``"stream": false`` reaches the upstream as one across a
dialect change, through the real mitmdump (some gateways stream when the field is absent).

The recorded upstream body is read back; the client gets its whole answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import JSONReply, Proxy, ScriptedUpstream, raw_request
from tests.e2e.test_text_tools import openai_json

HEADERS = {"authorization": "Bearer k", "x-api-key": "k", "content-type": "application/json"}
ANTHROPIC_ANSWER = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
    "content": [{"type": "text", "text": "whole"}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
}  # fmt: skip
RESPONSES_ANSWER = {
    "id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "m",
    "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "whole", "annotations": []}]}],
    "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
}  # fmt: skip


def sent_stream(upstream: ScriptedUpstream) -> Any:
    (rec,) = upstream.wait_for_requests(1)
    body = rec.json()
    assert "stream" in body, body
    return body["stream"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("/v1/messages", {"model": "m", "max_tokens": 5, "stream": False,
                     "messages": [{"role": "user", "content": "hi"}]}, id="anthropic"),
        pytest.param("/v1/responses", {"model": "m", "input": "hi", "stream": False},
                     id="openai_responses"),
        pytest.param("/v1beta/models/m:generateContent",
                     {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, id="gemini"),
    ],
)  # fmt: skip
def test_an_explicit_false_reaches_an_openai_upstream(
    proxy: Proxy, upstream: ScriptedUpstream, path: str, body: dict[str, Any]
) -> None:
    upstream.enqueue(JSONReply(openai_json("whole")))
    status, _, raw = raw_request(proxy.port, "POST", path, json.dumps(body).encode(), HEADERS)
    assert status == 200 and b"whole" in raw
    assert sent_stream(upstream) is False


@pytest.mark.parametrize(
    ("upstream_dialect", "answer"),
    [("anthropic", ANTHROPIC_ANSWER), ("openai_responses", RESPONSES_ANSWER)],
)
def test_an_explicit_false_reaches_anthropic_and_responses_upstreams(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    upstream_dialect: str,
    answer: dict[str, Any],
) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text(f'[[routes]]\nname = "r"\nupstream = "{upstream_dialect}"\n')
    p = start_proxy(bridge_routes=str(routes))
    upstream.enqueue(JSONReply(answer))
    body = {"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]}
    status, _, raw = raw_request(
        p.port, "POST", "/v1/chat/completions", json.dumps(body).encode(), HEADERS
    )
    assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] == "whole"
    assert sent_stream(upstream) is False
