"""End to end: the API key follows the upstream's dialect, or comes from the route's variable.

A Bearer-only gateway answers 401 to anything else; the proxy must never show a
key in its log.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anthropic
import openai
import pytest

from tests.e2e.harness import JSONReply, Proxy, ProxyStartError, Recorded, ScriptedUpstream
from tests.e2e.test_text_tools import openai_json

CLIENT_KEY = "sk-ant-e2e-client-SECRET"
ROUTE_KEY = "sk-e2e-route-SECRET"


def bearer_gateway(key: str) -> Callable[[Recorded], JSONReply]:
    def answer(rec: Recorded) -> JSONReply:
        if rec.headers.get("authorization") != f"Bearer {key}" or "x-api-key" in rec.headers:
            return JSONReply({"error": {"message": "invalid api key"}}, status=401)
        if rec.path != "/v1/chat/completions":
            return JSONReply({"error": {"message": f"no route {rec.path}"}}, status=404)
        return JSONReply(openai_json("hello from the gateway"))

    return answer


def test_claude_codes_x_api_key_reaches_a_bearer_gateway(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.script = bearer_gateway(CLIENT_KEY)
    client = anthropic.Anthropic(
        base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=15
    )
    message = client.messages.create(
        model="claude-opus-4-8",
        max_tokens=64,
        messages=[{"role": "user", "content": "hi"}],
        extra_query={"beta": "true"},
        extra_headers={"anthropic-beta": "mid-conversation-system-2026-04-07"},
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "hello from the gateway"
    (rec,) = upstream.requests
    assert rec.path == "/v1/chat/completions"  # ?beta=true stays with Anthropic
    assert not any(h.startswith("anthropic-") for h in rec.headers)
    assert CLIENT_KEY not in proxy.log_text()


def test_an_upstream_401_reaches_an_anthropic_client_in_its_own_shape(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.script = bearer_gateway("another key")
    client = anthropic.Anthropic(
        base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=15
    )
    with pytest.raises(anthropic.AuthenticationError) as err:
        client.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert "invalid api key" in str(err.value)


def test_a_route_can_take_the_key_from_the_environment(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text('[[routes]]\nname = "gw"\napi_key_env = "CB_E2E_ROUTE_KEY"\n')
    monkeypatch.setenv("CB_E2E_ROUTE_KEY", ROUTE_KEY)
    p = start_proxy(bridge_routes=str(routes))
    upstream.script = bearer_gateway(ROUTE_KEY)
    client = openai.OpenAI(base_url=f"{p.base_url}/v1", api_key="client-key", max_retries=0)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "hello from the gateway"
    assert ROUTE_KEY not in p.log_text()


def test_a_missing_key_variable_stops_the_proxy_at_start_naming_it(
    start_proxy: Callable[..., Proxy], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes = tmp_path / "routes.toml"
    routes.write_text('[[routes]]\nname = "gw"\napi_key_env = "CB_E2E_UNSET_KEY"\n')
    monkeypatch.delenv("CB_E2E_UNSET_KEY", raising=False)
    with pytest.raises(ProxyStartError, match="CB_E2E_UNSET_KEY"):
        start_proxy(bridge_routes=str(routes))
