"""End to end: ``bridge_client_keys`` through a real mitmdump. On routes that send the route's
key (``api_key_env``), a request without a listed client key is answered 401 in its own
dialect (OpenAI chat, Anthropic, Responses, Gemini with ``x-goog-api-key`` and ``?key=``); a
listed key is let through and the upstream gets the route's key, never the client's; the log
names no key; a changed keys file takes effect without a restart."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream
from tests.e2e.keyed import sent
from tests.e2e.test_text_tools import openai_json

ROUTE_KEY = "sk-e2e-route-SECRET-0001"
ALICE = "sk-e2e-alice-SECRET-0002"
BOB = "sk-e2e-bob-SECRET-0003"
WRONG = "sk-e2e-wrong-SECRET-0004"
ROUTES = """
[[routes]]
name = "chat"
path = "*/chat/completions"
api_key_env = "CB_E2E_ROUTE_KEY"

[[routes]]
name = "messages"
path = "*/v1/messages"
client = "anthropic"
api_key_env = "CB_E2E_ROUTE_KEY"

[[routes]]
name = "responses"
path = "*/responses"
client = "openai_responses"
api_key_env = "CB_E2E_ROUTE_KEY"

[[routes]]
name = "gemini"
path = "*/models/*:*enerateContent"
client = "gemini"
api_key_env = "CB_E2E_ROUTE_KEY"
"""
GEMINI = "/v1beta/models/gemini-2.5-flash:generateContent"
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def gateway(rec: Recorded) -> JSONReply:
    if rec.headers.get("authorization") != f"Bearer {ROUTE_KEY}":
        return JSONReply({"error": {"message": "invalid api key"}}, status=401)
    return JSONReply(openai_json("hello from the gateway"))


@pytest.fixture
def keyed(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Proxy, Path]]:
    monkeypatch.setenv("CB_E2E_ROUTE_KEY", ROUTE_KEY)
    monkeypatch.setenv("CB_E2E_BOB", BOB)
    routes, keys = tmp_path / "routes.toml", tmp_path / "keys.toml"
    routes.write_text(ROUTES)
    keys.write_text(f'alice = "{ALICE}"\n')
    upstream.script = gateway
    proxy = start_proxy(bridge_routes=str(routes), bridge_client_keys=str(keys))
    yield proxy, keys
    log = proxy.log_text()
    assert not [k for k in (ROUTE_KEY, ALICE, BOB, WRONG) if k in log]
    assert "Traceback" not in log
    for rec in upstream.requests:
        assert sent(rec) == {"authorization": f"Bearer {ROUTE_KEY}"}
        assert not [k for k in (ALICE, BOB, WRONG) if k in str(rec.header_list) + rec.path]


def openai_chat(proxy: Proxy, key: str) -> str | None:
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key=key, max_retries=0, timeout=15)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return answer.choices[0].message.content


def test_openai_chat_clients_need_a_listed_key(
    keyed: tuple[Proxy, Path], upstream: ScriptedUpstream
) -> None:
    proxy, _ = keyed
    for key in (WRONG, "x"):
        with pytest.raises(openai.AuthenticationError) as err:
            openai_chat(proxy, key)
        assert err.value.code == "invalid_api_key"
    assert not upstream.requests
    assert openai_chat(proxy, ALICE) == "hello from the gateway"
    assert len(upstream.requests) == 1
    lines = [x for x in proxy.log_text().splitlines() if "outcome=rejected" in x]
    assert len(lines) == 2 and all("route=chat" in x and "authorization" in x for x in lines)


def test_anthropic_clients_need_a_listed_key_in_x_api_key_or_bearer(
    keyed: tuple[Proxy, Path], upstream: ScriptedUpstream
) -> None:
    proxy, _ = keyed

    def ask(**kw: str) -> str:
        client = anthropic.Anthropic(base_url=proxy.base_url, max_retries=0, timeout=15, **kw)
        m = client.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
        block = m.content[0]
        assert block.type == "text"
        return block.text

    with pytest.raises(anthropic.AuthenticationError):
        ask(api_key=WRONG)  # ANTHROPIC_API_KEY: x-api-key
    with pytest.raises(anthropic.AuthenticationError):
        ask(auth_token=WRONG)  # ANTHROPIC_AUTH_TOKEN: Authorization: Bearer
    assert not upstream.requests
    assert ask(api_key=ALICE) == "hello from the gateway"
    assert ask(auth_token=ALICE) == "hello from the gateway"


def test_responses_clients_need_a_listed_key(
    keyed: tuple[Proxy, Path], upstream: ScriptedUpstream
) -> None:
    proxy, _ = keyed

    def ask(key: str) -> str:
        client = openai.OpenAI(
            base_url=f"{proxy.base_url}/v1", api_key=key, max_retries=0, timeout=15
        )
        return client.responses.create(model="m", input="hi").output_text

    with pytest.raises(openai.AuthenticationError) as err:
        ask(WRONG)
    assert err.value.code == "invalid_api_key"
    assert not upstream.requests
    assert ask(ALICE) == "hello from the gateway"


@pytest.mark.parametrize("place", ["header", "query"])
def test_gemini_clients_need_a_listed_key(
    keyed: tuple[Proxy, Path], upstream: ScriptedUpstream, place: str
) -> None:
    proxy, _ = keyed

    def post(key: str) -> httpx.Response:
        if place == "header":
            headers, params = {"x-goog-api-key": key}, {}
        else:
            headers, params = {}, {"key": key}
        url = proxy.base_url + GEMINI
        return httpx.post(url, json=GEMINI_BODY, headers=headers, params=params, timeout=15)

    refused = post(WRONG)
    assert refused.status_code == 401
    error = refused.json()["error"]
    assert error["status"] == "UNAUTHENTICATED" and error["code"] == 401
    assert not upstream.requests
    ok = post(ALICE)
    assert ok.status_code == 200, ok.text
    assert ok.json()["candidates"][0]["content"]["parts"][0]["text"] == "hello from the gateway"


def test_a_changed_keys_file_takes_effect_without_a_restart(
    keyed: tuple[Proxy, Path], upstream: ScriptedUpstream
) -> None:
    proxy, keys = keyed
    assert openai_chat(proxy, ALICE) == "hello from the gateway"
    keys.write_text('bob = { env = "CB_E2E_BOB" }\n')
    os.utime(keys, ns=(1, 1))  # a new mtime whatever the clock's resolution
    assert openai_chat(proxy, BOB) == "hello from the gateway"
    with pytest.raises(openai.AuthenticationError):
        openai_chat(proxy, ALICE)
    keys.write_text("bob = ")  # a bad file: bob's key stays, one warning
    assert openai_chat(proxy, BOB) == "hello from the gateway"
    assert openai_chat(proxy, BOB) == "hello from the gateway"
    log = proxy.log_text()
    assert log.count("client keys not reloaded") == 1
    assert len(upstream.requests) == 4


def test_a_bad_keys_file_stops_mitmdump_naming_the_problem(
    start_proxy: Callable[..., Proxy], tmp_path: Path
) -> None:
    from tests.e2e.harness import ProxyStartError

    keys = tmp_path / "keys.toml"
    keys.write_text('alice = { env = "CB_E2E_NOT_SET" }\n')
    with pytest.raises(ProxyStartError) as err:
        start_proxy(bridge_client_keys=str(keys))
    assert "'CB_E2E_NOT_SET' is not set" in err.value.log
