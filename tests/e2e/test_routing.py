"""End to end: one base URL, many upstreams (issue 29). One mitmdump in reverse mode before
a home gateway, and three scripted upstreams on their own ports (OpenAI chat, Anthropic,
Gemini) reached by routes that pick a request by its model and send it to their
``upstream_url`` with their own key. Each upstream answers 401 in its own shape to anything
but its own key in its own header, and the test checks every header each one received:
keys never reach another host."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, Reply, ScriptedUpstream
from tests.e2e.keyed import CREDENTIAL_HEADERS, routed, running, sent, wanted
from tests.real.clients.loop import answer, check_request

CLIENT_KEY = "sk-cursor-client-SECRET"
KEYS = {
    "openai_chat": "sk-openai-route-SECRET",
    "anthropic": "sk-ant-route-SECRET",
    "gemini": "AIza-gemini-route-SECRET",
}
ENV = {
    "openai_chat": "CB_E2E_OPENAI_KEY",
    "anthropic": "CB_E2E_ANTHROPIC_KEY",
    "gemini": "CB_E2E_GEMINI_KEY",
}
MODEL_LISTS: dict[str, dict[str, Any]] = {
    "openai_chat": {"object": "list", "data": [{"id": m, "object": "model"} for m in (
        "gpt-5.1", "o3", "dall-e-3")]},
    "anthropic": {"data": [{"id": m, "type": "model"} for m in (
        "claude-sonnet-4-6", "claude-opus-4-8")], "has_more": False},
    "gemini": {"models": [{"name": f"models/{m}"} for m in ("gemini-2.5-pro", "embedding-001")]},
}  # fmt: skip
"""What each scripted service lists at ``GET …/models`` (in its API's own shape)."""
ALL_KEYS = (CLIENT_KEY, *KEYS.values())


@dataclass
class Service:
    """A scripted upstream of one dialect that wants one key in its dialect's header (or, for
    ``keyless`` paths, none at all) and answers in its dialect."""

    dialect: str
    key: str
    server: ScriptedUpstream

    def __call__(self, rec: Recorded) -> Reply:
        got = sent(rec)
        if rec.method == "GET" and rec.path.endswith("/models"):
            if rec.path.startswith("/free/"):
                return self.refuse("a key-free service lists nothing", 401)
            if got != self.wanted():
                return self.refuse("invalid api key", 401)
            return JSONReply(MODEL_LISTS[self.dialect])
        body = rec.json()
        if rec.path.startswith("/free/"):
            if got:
                return self.refuse(f"a key-free service got {sorted(got)}", 400)
        elif got != self.wanted():
            return self.refuse("invalid api key", 401)
        check_request(self.dialect, body)
        stream = self.streams(rec, body)
        return answer(self.dialect, stream, f"hello from {self.dialect}")

    def wanted(self) -> dict[str, str]:
        return wanted(self.dialect, self.key)

    def streams(self, rec: Recorded, body: dict[str, Any]) -> bool:
        if self.dialect == "gemini":
            assert ":streamGenerateContent" in rec.path or ":generateContent" in rec.path
            return ":streamGenerateContent" in rec.path
        return bool(body.get("stream"))

    def refuse(self, message: str, status: int) -> JSONReply:
        if self.dialect == "anthropic":
            error = {"type": "error", "error": {"type": "authentication_error", "message": message}}
            return JSONReply(error, status=status)
        if self.dialect == "gemini":
            return JSONReply({"error": {"code": status, "message": message}}, status=status)
        return JSONReply({"error": {"message": message, "type": "invalid_request_error"}}, status)


@pytest.fixture
def services() -> Iterator[dict[str, Service]]:
    with running(KEYS, Service, ALL_KEYS) as out:
        yield out


def routes_text(services: dict[str, Service]) -> str:
    url = {d: s.server.base_url for d, s in services.items()}
    return f"""
[[routes]]
name = "claude-code-background"
path = "*/v1/messages"
client = "anthropic"
when = {{background = true}}
upstream = "openai_chat"
upstream_url = "{url["openai_chat"]}/cheap"
api_key_env = "{ENV["openai_chat"]}"
model_map = {{"*" = "cheap-model"}}

[[routes]]
name = "claude-code-main"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"
upstream_url = "{url["anthropic"]}"
api_key_env = "{ENV["anthropic"]}"

[[routes]]
name = "openai"
model = ["gpt-5*", "o3"]
upstream = "openai_chat"
upstream_url = "{url["openai_chat"]}/openai"
api_key_env = "{ENV["openai_chat"]}"
model_map = {{"gpt-5*" = "upstream-gpt"}}

[[routes]]
name = "claude"
model = "claude-*"
upstream = "anthropic"
upstream_url = "{url["anthropic"]}"
api_key_env = "{ENV["anthropic"]}"

[[routes]]
name = "gemini"
model = "gemini-*"
upstream = "gemini"
upstream_url = "{url["gemini"]}"
api_key_env = "{ENV["gemini"]}"

[[routes]]
name = "free"
model = "free-*"
upstream_url = "{url["openai_chat"]}/free"

[[routes]]
name = "home"
"""


@pytest.fixture
def router(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    services: dict[str, Service],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Proxy]:
    home = Service("openai_chat", CLIENT_KEY, upstream)
    upstream.script = home
    env = {ENV[d]: KEYS[d] for d in KEYS}
    text = routes_text(services)
    with routed(start_proxy, tmp_path / "routes.toml", text, env, monkeypatch, ALL_KEYS) as p:
        yield p


def cursor(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy.base_url}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20
    )


def ask(proxy: Proxy, model: str, stream: bool) -> tuple[str, set[str]]:
    """The answer's text and the model names it gave."""
    messages: Any = [{"role": "user", "content": "hi"}]
    if not stream:
        done = cursor(proxy).chat.completions.create(model=model, messages=messages)
        return done.choices[0].message.content or "", {done.model}
    chunks = list(
        cursor(proxy).chat.completions.create(model=model, messages=messages, stream=True)
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, {c.model for c in chunks}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("model", "dialect", "path"),
    [
        pytest.param("gpt-5.1", "openai_chat", "/openai/v1/chat/completions", id="openai"),
        pytest.param("claude-sonnet-4-6", "anthropic", "/v1/messages", id="anthropic"),
        pytest.param("gemini-2.5-pro", "gemini", "/v1beta/models/gemini-2.5-pro:", id="gemini"),
    ],
)
def test_each_model_reaches_its_own_upstream_with_its_own_key(
    router: Proxy,
    upstream: ScriptedUpstream,
    services: dict[str, Service],
    model: str,
    dialect: str,
    path: str,
    stream: bool,
) -> None:
    text, named = ask(router, model, stream)
    assert text == f"hello from {dialect}"
    (rec,) = services[dialect].server.requests
    assert rec.path.startswith(path)
    if dialect == "openai_chat":  # the route's model_map: the client still reads its own name
        assert rec.json()["model"] == "upstream-gpt" and named == {model}
    assert sent(rec) == (services[dialect].wanted())
    assert not [k for k in ALL_KEYS if k != KEYS[dialect] and k in str(rec.header_list)]
    others = [s for d, s in services.items() if d != dialect]
    assert not any(s.server.requests for s in others) and not upstream.requests


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_other_models_stay_with_the_home_gateway_and_the_clients_key(
    router: Proxy, upstream: ScriptedUpstream, services: dict[str, Service], stream: bool
) -> None:
    assert ask(router, "my-own-model", stream)[0] == "hello from openai_chat"
    (rec,) = upstream.requests
    assert rec.headers["authorization"] == f"Bearer {CLIENT_KEY}"
    assert not any(s.server.requests for s in services.values())


def test_a_route_to_another_host_without_a_key_of_its_own_gets_no_key(
    router: Proxy, services: dict[str, Service]
) -> None:
    assert ask(router, "free-model", False)[0] == "hello from openai_chat"
    (rec,) = services["openai_chat"].server.requests
    assert rec.path == "/free/v1/chat/completions"
    assert not [h for h in CREDENTIAL_HEADERS if h in rec.headers]
    assert not [k for k in ALL_KEYS if k in str(rec.header_list)]


# ----------------------------------------------------------------------------- Claude Code

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "claude_code"


def claude_code_request(name: str) -> dict[str, Any]:
    """A request Claude Code 2.1.197 really sent (tests/fixtures/claude_code/README.md)."""
    rec = json.loads((RECORDED / f"claude-code-2.1.197-{name}.request.json").read_text())
    return dict(rec["body"])


def send_as_claude_code(proxy: Proxy, body: dict[str, Any], stream: bool) -> str:
    client = anthropic.Anthropic(
        base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=20
    )
    known = ("model", "max_tokens", "messages", "system", "tools", "thinking", "metadata")
    kwargs: dict[str, Any] = {k: body[k] for k in known if k in body}
    extra = {k: v for k, v in body.items() if k not in (*known, "stream")}
    query = {"beta": "true"}
    if not stream:
        done = client.messages.create(**kwargs, extra_body=extra, extra_query=query)
        return "".join(b.text for b in done.content if b.type == "text")
    with client.messages.stream(**kwargs, extra_body=extra, extra_query=query) as events:
        final = events.get_final_message()
    return "".join(b.text for b in final.content if b.type == "text")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("name", "dialect", "path"),
    [
        pytest.param("haiku-model-title", "openai_chat", "/cheap/v1/chat/completions", id="title"),
        pytest.param(
            "default-title", "openai_chat", "/cheap/v1/chat/completions", id="title-main-model"
        ),
        pytest.param("haiku-model-main", "anthropic", "/v1/messages", id="main"),
    ],
)
def test_claude_codes_background_calls_take_their_own_route(
    router: Proxy,
    upstream: ScriptedUpstream,
    services: dict[str, Service],
    name: str,
    dialect: str,
    path: str,
    stream: bool,
) -> None:
    body = claude_code_request(name)
    assert send_as_claude_code(router, body, stream) == f"hello from {dialect}"
    (rec,) = services[dialect].server.requests
    assert rec.path.split("?", 1)[0] == path
    carried = sent(rec)
    assert carried == services[dialect].wanted()
    assert not [k for k in ALL_KEYS if k != KEYS[dialect] and k in str(rec.header_list)]
    if dialect == "openai_chat":
        assert rec.json()["model"] == "cheap-model" and not rec.json().get("tools")
    else:
        assert rec.json()["model"] == body["model"] and len(rec.json()["tools"]) == 25
    others = [s for d, s in services.items() if d != dialect]
    assert not any(s.server.requests for s in others) and not upstream.requests


# ----------------------------------------------------------------------------- GET /models


def test_the_model_list_is_the_union_of_every_routes_upstream(
    router: Proxy, upstream: ScriptedUpstream, services: dict[str, Service]
) -> None:
    """Cursor's model list: the home gateway's own, the routes' literal names, and what each
    route's own upstream lists (asked with that route's key, kept to the route's globs)."""
    upstream.script = lambda rec: (
        JSONReply({"object": "list", "data": [{"id": "my-own-model", "object": "model"}]})
        if rec.method == "GET"
        else Service("openai_chat", CLIENT_KEY, upstream)(rec)
    )
    listed = [m.id for m in cursor(router).models.list()]
    assert listed[0] == "my-own-model"
    assert set(listed) == {
        "my-own-model",
        "o3",
        "gpt-5.1",
        "claude-sonnet-4-6",
        "claude-opus-4-8",
        "gemini-2.5-pro",
    }
    assert len(listed) == len(set(listed))
    for dialect, service in services.items():
        gets = [r for r in service.server.requests if r.method == "GET"]
        assert gets, dialect
        for rec in gets:
            carried = sent(rec)
            assert carried in ({}, service.wanted()), (dialect, rec.path)
            assert not [k for k in ALL_KEYS if k != KEYS[dialect] and k in str(rec.header_list)]
    paths = {r.path for s in services.values() for r in s.server.requests}
    assert {"/openai/v1/models", "/v1/models", "/v1beta/models", "/free/v1/models"} <= paths
