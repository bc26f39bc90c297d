"""End to end: Claude Code's billing line (issue 44 point 5, docs/caching.md#client-noise).

The request Claude Code 2.1.197 recorded (``tests/fixtures/claude_code``) through mitmdump:
to an OpenAI-compatible upstream and to an Anthropic-dialect upstream that is not
Anthropic's API, the line is left out, and a made-up per-request variant of it (a ``cch=``
hash) leaves the upstream's body the same on every turn, so its prefix cache can hit; on a
route that stands for Anthropic's API (``strip_client_noise = false``) the body arrives byte
for byte (also ``test_real_clients``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream, raw_request

FIXTURE = (
    Path(__file__).parents[1] / "fixtures/claude_code/claude-code-2.1.197-default-main.request.json"
)
LINE = "x-anthropic-billing-header: cc_version=2.1.197.1c0; cc_entrypoint=sdk-cli;"
HEADERS = {
    "content-type": "application/json",
    "x-api-key": "sk-ant-e2e-noise",
    "anthropic-version": "2023-06-01",
}

CHAT_ANSWER = {
    "id": "chatcmpl-noise",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
}
ANTHROPIC_ANSWER = {
    "id": "msg_noise",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 1},
}

MESSAGES_ROUTE = """
[[routes]]
name = "messages"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"
"""


def recorded(line: str = LINE) -> dict[str, Any]:
    body = json.loads(FIXTURE.read_text())["body"]
    assert body["system"][0]["text"] == LINE  # as Claude Code sent it
    body["system"][0]["text"] = line
    body["stream"] = False
    return body


def send(proxy: Proxy, body: dict[str, Any]) -> None:
    status, _, answer = raw_request(
        proxy.port, "POST", "/v1/messages", json.dumps(body).encode(), HEADERS, timeout=15
    )
    assert status == 200, answer[:300]
    assert json.loads(answer)["content"][0]["text"] == "ok"


def sent_text(rec: Recorded) -> str:
    return rec.body.decode()


def test_left_out_for_an_openai_upstream_and_the_same_on_every_turn(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.script = lambda rec: JSONReply(CHAT_ANSWER)
    send(proxy, recorded())
    send(proxy, recorded(LINE + " cch=5f1d2a;"))
    send(proxy, recorded(LINE + " cch=9c0e44;"))
    first, second, third = upstream.requests
    assert all(r.path == "/v1/chat/completions" for r in (first, second, third))
    assert "x-anthropic-billing-header" not in sent_text(first)
    # The rest of the system prompt is there, first.
    system = json.loads(first.body)["messages"][0]
    assert system["role"] == "system"
    assert "You are a Claude agent" in json.dumps(system)
    # A per-request hash in the line changes nothing the upstream gets.
    assert first.body == second.body == third.body


def test_left_out_for_an_anthropic_dialect_upstream_of_another_vendor(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text(MESSAGES_ROUTE)
    p = start_proxy(bridge_routes=str(routes))
    upstream.script = lambda rec: JSONReply(ANTHROPIC_ANSWER)
    send(p, recorded(LINE + " cch=5f1d2a;"))
    send(p, recorded(LINE + " cch=77aa01;"))
    first, second = upstream.requests
    assert "x-anthropic-billing-header" not in sent_text(first)
    assert json.loads(first.body)["system"][0]["text"].startswith("You are a Claude agent")
    assert first.body == second.body


def test_kept_byte_for_byte_where_the_route_says_anthropic_reads_it(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text(MESSAGES_ROUTE + "strip_client_noise = false\n")
    p = start_proxy(bridge_routes=str(routes))
    upstream.script = lambda rec: JSONReply(ANTHROPIC_ANSWER)
    body = json.dumps(recorded(LINE + " cch=5f1d2a;"), indent=1).encode()
    status, _, answer = raw_request(p.port, "POST", "/v1/messages", body, HEADERS, timeout=15)
    assert status == 200, answer[:300]
    (rec,) = upstream.requests
    assert rec.body == body
