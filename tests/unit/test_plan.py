"""What the bridge does with a flow, decided with plain values (``addon.plan``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.config import Settings
from addon.plan import Incoming, Pass, Reject, Rewrite, decide, dump, route_for
from addon.routes import Route

KEY = "sk-SECRET-route-key"
ANTHROPIC_BODY: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "hi"}],
    "context_management": {"edits": []},
}


def incoming(
    path: str, body: bytes | dict[str, Any], method: str = "POST", **headers: str
) -> Incoming:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Incoming(
        method, "api.example.com", path, {k.replace("_", "-"): v for k, v in headers.items()}, raw
    )


def run(inc: Incoming, settings: Settings | None = None, env: dict[str, str] | None = None) -> Any:
    s = settings or Settings()
    route = route_for(s, inc.method, inc.host, inc.path)
    if route is None:
        return Pass()
    return decide(s, route, inc, env or {})


@pytest.mark.parametrize(
    ("method", "path"),
    [("HEAD", "/"), ("GET", "/v1/models"), ("POST", "/v1/embeddings"), ("GET", "/v1/messages")],
)
def test_probes_and_other_paths_are_not_the_bridges(method: str, path: str) -> None:
    assert run(incoming(path, b"", method=method)) == Pass()


def test_unreadable_body_passes_on_the_same_dialect() -> None:
    d = run(incoming("/v1/chat/completions", b"not json"))
    assert isinstance(d, Pass) and d.reason and "not a JSON object" in d.reason


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1]", json.dumps({"model": "m", "messages": "nope"}).encode()],
)
def test_unreadable_body_on_a_dialect_change_gets_a_400_in_the_clients_dialect(body: bytes) -> None:
    d = run(incoming("/v1/messages", body))
    assert isinstance(d, Reject) and d.status == 400
    error = json.loads(d.body)
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "could not translate this anthropic request" in error["error"]["message"]


def test_deep_nesting_is_a_decision_not_a_traceback() -> None:
    deep = b'{"model":"m","messages":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert isinstance(run(incoming("/v1/chat/completions", deep)), Pass)
    assert isinstance(run(incoming("/v1/messages", deep)), Reject)


def test_anthropic_request_is_rewritten_for_an_openai_upstream() -> None:
    d = run(
        incoming("/v1/messages?beta=true", ANTHROPIC_BODY, x_api_key=KEY, anthropic_version="1")
    )
    assert isinstance(d, Rewrite)
    assert d.wire.path == "/v1/chat/completions" and d.wire.query == ()
    assert d.wire.body["messages"] == [{"role": "user", "content": "hi"}]
    assert dict(d.wire.set_headers)["authorization"] == f"Bearer {KEY}"
    assert "anthropic-only fields not sent: context_management" in d.summary
    meta = json.dumps(d.plan.meta())
    assert KEY not in meta + d.summary + repr(d)


def test_a_route_key_from_a_missing_variable_is_a_500_naming_the_variable() -> None:
    s = Settings(routes=(Route(name="gw", api_key_env="GW_KEY"),))
    d = run(incoming("/v1/chat/completions", {"model": "m", "messages": []}), s)
    assert isinstance(d, Reject) and d.status == 500
    assert "GW_KEY" in json.loads(d.body)["error"]["message"]
    ok = run(incoming("/v1/chat/completions", {"model": "m", "messages": []}), s, {"GW_KEY": KEY})
    assert isinstance(ok, Rewrite)
    assert dict(ok.wire.set_headers) == {"authorization": f"Bearer {KEY}"}


def test_reasoning_off_keeps_thinking_requests_away_from_the_upstream() -> None:
    body = {**ANTHROPIC_BODY, "thinking": {"type": "enabled", "budget_tokens": 2000}}
    on = run(incoming("/v1/messages", body))
    s = Settings(
        routes=(Route(name="m", path="*/v1/messages", client="anthropic", reasoning="off"),)
    )
    off = run(incoming("/v1/messages", body), s)
    assert isinstance(on, Rewrite) and isinstance(off, Rewrite)
    assert "reasoning_effort" not in off.wire.body
    assert "reasoning request not sent" in off.summary


def test_a_lone_surrogate_still_gives_an_answer() -> None:
    tool = {"name": "\ud83d", "input_schema": {"type": "object"}}
    body = {"model": "m", "max_tokens": 5, "messages": [], "tools": [tool, tool]}
    raw = json.dumps(body).encode()  # ASCII escapes: valid JSON holding a lone surrogate
    d = run(incoming("/v1/messages", raw))
    assert isinstance(d, Reject) and d.status == 400
    assert "declared twice" in json.loads(d.body)["error"]["message"]


def test_dump_writes_strict_utf8_json() -> None:
    assert dump({"a": "é"}) == '{"a":"é"}'.encode()
    assert dump({"a": "\ud83d"}) == b'{"a":"\\ud83d"}'
