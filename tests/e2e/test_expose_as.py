"""End to end: a route's ``expose_as`` (issue 44 point 3). One mitmdump in reverse mode before
a home Anthropic gateway (the session's upstream: it lists its models in Anthropic's shape and
answers Messages), and a DeepSeek-like OpenAI-compatible service on its own port that wants
its own key. The routes send Claude Code's own model names home, and expose the DeepSeek
models under ``claude-…`` names (what Claude Code's model discovery keeps) and, for OpenAI
clients, under a rule of their own. Driven by the official SDKs: each client's list holds its
exposed names in its dialect's shape, and a request for one reaches DeepSeek with the model it
stands for."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anthropic
import openai
import pytest
from anthropic.types import ModelInfo
from openai.types import Model

from tests.e2e.harness import JSONReply, Proxy, Recorded, Reply, ScriptedUpstream
from tests.e2e.keyed import sent, wanted
from tests.real.clients.loop import answer, check_request

CLIENT_KEY = "sk-client-expose-SECRET"
DS_KEY = "sk-deepseek-route-SECRET"
DS_ENV = "CB_E2E_EXPOSE_DS_KEY"
HOME_LIST = {
    "data": [{"type": "model", "id": "claude-sonnet-4-6", "display_name": "Claude Sonnet 4.6",
              "created_at": "2026-02-17T00:00:00Z", "lifecycle": "active"}],
    "has_more": False, "first_id": "claude-sonnet-4-6", "last_id": "claude-sonnet-4-6",
}  # fmt: skip
"""What the home gateway lists (Anthropic's shape, to every client: it is an Anthropic API)."""
DS_LIST = {"object": "list", "data": [
    {"id": m, "object": "model", "owned_by": "deepseek"} for m in ("deepseek-chat", "qwen3-coder")
]}  # fmt: skip


def deepseek(rec: Recorded) -> Reply:
    """An OpenAI-compatible service: its key in ``Authorization``, else 401 in its shape."""
    if sent(rec) != wanted("openai_chat", DS_KEY):
        error = {"message": "Authentication Fails", "type": "authentication_error"}
        return JSONReply({"error": error}, status=401)
    if rec.method == "GET":
        assert urlsplit(rec.path).path == "/v1/models", rec.path
        return JSONReply(DS_LIST)
    body = rec.json()
    check_request("openai_chat", body)
    return answer("openai_chat", bool(body.get("stream")), f"deepseek answers {body['model']}")


def home(rec: Recorded) -> Reply:
    """The home gateway: Anthropic's API with the client's own key."""
    if rec.method == "GET":
        return JSONReply(HOME_LIST)
    body = rec.json()
    check_request("anthropic", body)
    return answer("anthropic", bool(body.get("stream")), f"home answers {body['model']}")


def routes_text(ds: str) -> str:
    return f"""
[[routes]]
name = "claude-home"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"

[[routes]]
name = "deepseek-for-claude-code"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_chat"
upstream_url = "{ds}"
api_key_env = "{DS_ENV}"
model_map = {{"*haiku*" = "deepseek-chat", "*" = "deepseek-reasoner"}}
expose_as = "claude-{{model}}"

[[routes]]
name = "deepseek-for-cursor"
model = "qwen3-coder"
upstream_url = "{ds}"
api_key_env = "{DS_ENV}"
expose_as = "gw-{{model}}"
"""


@pytest.fixture
def bridge(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Proxy, ScriptedUpstream]]:
    with ScriptedUpstream() as ds:
        ds.script = deepseek
        upstream.script = home
        monkeypatch.setenv(DS_ENV, DS_KEY)
        routes = tmp_path / "routes.toml"
        routes.write_text(routes_text(ds.base_url))
        proxy = start_proxy(bridge_routes=str(routes))
        yield proxy, ds
        assert not ds.errors, ds.errors
        log = proxy.log_text()
        assert DS_KEY not in log and CLIENT_KEY not in log and "Traceback" not in log
        for rec in ds.requests:  # the client's key never reaches DeepSeek
            assert CLIENT_KEY not in str(rec.header_list)
        for rec in upstream.requests:  # nor DeepSeek's the home gateway
            assert DS_KEY not in str(rec.header_list)


def claude(proxy: Proxy) -> anthropic.Anthropic:
    """Claude Code's headers: ``x-api-key`` and ``anthropic-version``."""
    return anthropic.Anthropic(base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0)


def cursor(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key=CLIENT_KEY, max_retries=0)


def test_claude_codes_list_holds_the_exposed_names_and_a_request_reaches_deepseek(
    bridge: tuple[Proxy, ScriptedUpstream], upstream: ScriptedUpstream
) -> None:
    proxy, ds = bridge
    client = claude(proxy)
    raw = client.models.with_raw_response.list(extra_query={"limit": 1000})
    listed: dict[str, Any] = raw.http_response.json()
    infos = [ModelInfo.model_validate(m) for m in listed["data"]]  # each what the SDK declares
    ids = [m.id for m in infos]
    assert ids[0] == "claude-sonnet-4-6"  # the home gateway's own, first
    assert {"claude-deepseek-chat", "claude-deepseek-reasoner"} <= set(ids)
    assert "gw-qwen3-coder" not in ids  # an OpenAI route's name is not in Claude Code's list
    assert len(ids) == len(set(ids)) and listed["has_more"] is False
    assert (listed["first_id"], listed["last_id"]) == (ids[0], ids[-1])
    shown = {m.id: m.display_name for m in infos}
    assert shown["claude-deepseek-reasoner"] == "deepseek-reasoner"
    # what Claude Code 2.1.197's discovery keeps: ids starting claude or anthropic
    assert [i for i in ids if i.lower().startswith(("claude", "anthropic"))] == [
        i for i in ids if not i.startswith(("deepseek", "qwen"))
    ]
    assert [m.id for m in client.models.list()] == ids  # the SDK's own page reads the same
    gets = [r for r in upstream.requests if r.method == "GET"]
    assert gets and all(r.headers.get("anthropic-version") for r in gets)

    for stream in (False, True):
        if stream:
            with client.messages.stream(
                model="claude-deepseek-reasoner",
                max_tokens=64,
                messages=[{"role": "user", "content": "hi"}],
            ) as s:
                msg = s.get_final_message()
        else:
            msg = client.messages.create(
                model="claude-deepseek-reasoner",
                max_tokens=64,
                messages=[{"role": "user", "content": "hi"}],
            )
        assert msg.content[0].type == "text"
        assert msg.content[0].text == "deepseek answers deepseek-reasoner"
        assert msg.model == "claude-deepseek-reasoner"  # the name the client asked for
    posts = [r for r in ds.requests if r.method == "POST"]
    assert [urlsplit(r.path).path for r in posts] == ["/v1/chat/completions"] * 2
    assert [r.json()["model"] for r in posts] == ["deepseek-reasoner"] * 2
    # Claude Code's own model names still go home, as they are
    home_before = len([r for r in upstream.requests if r.method == "POST"])
    msg = client.messages.create(
        model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    )
    assert msg.content[0].type == "text" and msg.content[0].text == "home answers claude-sonnet-4-6"
    home_posts = [r for r in upstream.requests if r.method == "POST"]
    assert len(home_posts) == home_before + 1
    assert [r for r in ds.requests if r.method == "POST"] == posts


def test_an_openai_clients_list_holds_its_rules_names_and_a_request_reaches_deepseek(
    bridge: tuple[Proxy, ScriptedUpstream],
) -> None:
    proxy, ds = bridge
    client = cursor(proxy)
    raw = client.models.with_raw_response.list()
    listed: dict[str, Any] = raw.http_response.json()
    assert listed["object"] == "list"
    models = [Model.model_validate(m) for m in listed["data"]]
    ids = [m.id for m in models]
    # the home gateway's Anthropic-shaped list written in OpenAI's, then the bridge's names
    assert ids[0] == "claude-sonnet-4-6" and "gw-qwen3-coder" in ids
    assert not [i for i in ids if i.startswith("claude-deepseek")]
    assert [m.id for m in client.models.list()] == ids

    for stream in (False, True):
        got = client.chat.completions.create(
            model="gw-qwen3-coder", messages=[{"role": "user", "content": "hi"}], stream=stream
        )
        if stream:
            chunks = list(got)  # type: ignore[arg-type]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            names = {c.model for c in chunks}
        else:
            text = got.choices[0].message.content or ""  # type: ignore[union-attr]
            names = {got.model}  # type: ignore[union-attr]
        assert text == "deepseek answers qwen3-coder"
        assert names == {"gw-qwen3-coder"}
    posts = [r for r in ds.requests if r.method == "POST"]
    assert [r.json()["model"] for r in posts] == ["qwen3-coder"] * 2
