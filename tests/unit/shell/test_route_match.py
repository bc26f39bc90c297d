"""A request's route is matched once (issue 41, point 2): the first request hook that needs it
matches it and keeps what it found on the flow's record (``FlowRecord.match``); the client
keys, fallback, Kiro and rewrite hooks read it there. Kiro credentials are read for the route
the flow is sent to, the fallback's pick included, and kept by route on the record.

Every request hook runs as mitmproxy runs them: each addon's ``request`` in the bridge's order
(``Addons.all``), a coroutine awaited before the next addon's."""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from addon.config import routes as routes_module
from addon.shell.addons import Addons, make_addons

ALICE = "sk-alice-0123456789abcdef"
CHAT_KEY = "sk-chat-route-SECRET-0123"
TOKEN_A = "aoa-route-A-SECRET-token"
ARN_A = "arn:aws:codewhisperer:us-east-1:1:profile/A"
MODEL = "claude-sonnet-4-6"

ROUTES = """
[[routes]]
name = "chat"
path = "*/v1/chat/completions"
client = "openai_chat"
upstream = "openai_chat"
upstream_url = "http://chat.example:8080/v1x"
api_key_env = "CB_TEST_CHAT_KEY"
fallback = ["chat-two"]

[[routes]]
name = "chat-two"
path = "*/v1/chat/completions"
model = "never-*"
client = "openai_chat"
upstream = "openai_chat"
upstream_url = "http://two.example:8080/v1x"
api_key_env = "CB_TEST_CHAT_KEY"

[[routes]]
name = "kiro-a"
path = "*/v1/messages"
client = "anthropic"
upstream = "kiro"
upstream_url = "http://kiro-a.example:8080"
token_file = "{a}"
model_map = {{"{model}" = "claude-sonnet-4.5"}}
fallback = ["chat-b"]

[[routes]]
name = "chat-b"
path = "*/v1/messages"
model = "never-*"
client = "anthropic"
upstream = "openai_chat"
upstream_url = "http://chat-b.example:8080/v1x"
api_key_env = "CB_TEST_CHAT_KEY"
"""


def token_file(path: Path, token: str, arn: str) -> str:
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    path.write_text(
        json.dumps(
            {"accessToken": token, "refreshToken": "aor-x", "expiresAt": later, "profileArn": arn}
        )
    )
    path.chmod(0o600)
    return str(path)


@pytest.fixture
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Addons]:
    monkeypatch.setenv("CB_TEST_CHAT_KEY", CHAT_KEY)
    a = token_file(tmp_path / "a.json", TOKEN_A, ARN_A)
    routes, keys = tmp_path / "routes.toml", tmp_path / "keys.toml"
    routes.write_text(ROUTES.format(a=a, model=MODEL))
    keys.write_text(f'alice = "{ALICE}"\n')
    addons = make_addons()

    async def start() -> int:  # no relay server: the flow is only handed to it
        addons.fallbacks.relay.port = 54321
        return 54321

    monkeypatch.setattr(addons.fallbacks.relay, "start", start)
    with taddons.context(*addons.all) as tctx:
        tctx.configure(addons.settings, bridge_routes=str(routes))
        tctx.configure(addons.client_keys, bridge_client_keys=str(keys))
        yield addons


@pytest.fixture
def matches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every time any module of the bridge matches routes (``addon.config.routes.match``, as
    ``route_for``, ``count_route`` and ``guarded_route`` call it): the path matched."""
    seen: list[str] = []
    real = routes_module.match

    def counted(routes: Any, host: str, path: str, method: str, *rest: Any) -> Any:
        seen.append(path)
        return real(routes, host, path, method, *rest)

    for name, module in list(sys.modules.items()):
        if name.startswith("addon") and getattr(module, "match", None) is real:
            monkeypatch.setattr(module, "match", counted)
    return seen


def request_hooks(addons: Addons, f: http.HTTPFlow) -> None:
    """Every addon's ``request`` in the bridge's order, as mitmproxy calls them: a coroutine
    one returns is awaited before the next runs."""

    async def run() -> None:
        for addon in addons.all:
            hook: Callable[[http.HTTPFlow], Any] | None = getattr(addon, "request", None)
            if hook is None:
                continue
            got = hook(f)
            if inspect.isawaitable(got):
                await got

    asyncio.run(run())


def client_flow(path: str, body: dict[str, Any], key: tuple[str, str]) -> http.HTTPFlow:
    req = tutils.treq(
        host="api.example.com",
        port=443,
        scheme=b"https",
        method=b"POST",
        path=path.encode(),
        headers=http.Headers(
            (
                (b"host", b"api.example.com"),
                (b"content-type", b"application/json"),
                (key[0].encode(), key[1].encode()),
            )
        ),
        content=json.dumps(body).encode(),
    )
    return tflow.tflow(req=req)


def chat_flow() -> http.HTTPFlow:
    """A streamed request: it is handed to the relay (a whole one's attempts run in the
    request hook itself, ``Fallbacks._whole``)."""
    body = {"model": "gpt-x", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    return client_flow("/v1/chat/completions", body, ("authorization", f"Bearer {ALICE}"))


def messages_flow() -> http.HTTPFlow:
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return client_flow("/v1/messages", body, ("x-api-key", ALICE))


def sent(addons: Addons, f: http.HTTPFlow) -> tuple[str, http.Request]:
    """The route the flow is sent to and its request, as the relay's leg will send it."""
    record = addons.report.flows.get(f.id)
    assert record is not None and record.chain is not None
    attempt = record.chain.attempt
    assert attempt is not None
    return attempt.route.name, attempt.request


def test_a_routed_request_is_matched_once_through_every_request_hook(
    bundle: Addons, matches: list[str]
) -> None:
    f = chat_flow()
    request_hooks(bundle, f)
    # Checked for its client key, its chain's first route picked, rewritten, to the relay.
    assert f.response is None
    assert (f.request.host, f.request.port) == ("127.0.0.1", 54321)
    route, request = sent(bundle, f)
    assert route == "chat"
    assert request.url == "http://chat.example:8080/v1x/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {CHAT_KEY}"
    record = bundle.report.flows.get(f.id)
    assert record is not None and record.client_name == "alice"
    assert matches == ["/v1/chat/completions"]  # once, for four hooks that ask


def test_a_request_no_route_takes_is_matched_once(bundle: Addons, matches: list[str]) -> None:
    f = client_flow("/v1/embeddings", {"input": "x"}, ("authorization", "Bearer sk-x"))
    request_hooks(bundle, f)
    assert f.response is None and f.request.host == "api.example.com"
    assert matches == ["/v1/embeddings"]


@pytest.mark.parametrize("file", ["readable", "missing"])
def test_kiro_credentials_are_read_for_the_route_the_flow_goes_to(
    bundle: Addons, matches: list[str], tmp_path: Path, file: str
) -> None:
    """The matched Kiro route cools down: the fallback picks its other route, which has a key
    of its own. The Kiro route's token file is not read for this flow — a file that cannot be
    read is no 500 for a flow that does not go there — and its token goes nowhere."""
    if file == "missing":
        (tmp_path / "a.json").unlink()
    bundle.fallbacks.local_cooldowns.cool("kiro-a", 60)
    f = messages_flow()
    request_hooks(bundle, f)
    assert f.response is None
    route, request = sent(bundle, f)
    assert route == "chat-b"
    assert request.url == "http://chat-b.example:8080/v1x/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {CHAT_KEY}"
    assert TOKEN_A not in str(request.headers) and ARN_A not in (request.text or "")
    assert bundle.kiro.held_tokens() == ()  # the file was not read
    assert matches == ["/v1/messages"]


def test_kiro_credentials_on_the_matched_route(bundle: Addons, matches: list[str]) -> None:
    f = messages_flow()
    request_hooks(bundle, f)
    route, request = sent(bundle, f)
    assert route == "kiro-a" and request.host == "kiro-a.example"
    assert request.headers["authorization"] == f"Bearer {TOKEN_A}"
    assert json.loads(request.content or b"")["profileArn"] == ARN_A
    assert TOKEN_A in bundle.kiro.held_tokens()
    record = bundle.report.flows.get(f.id)
    assert record is not None and record.credentials == {}  # taken by the rewrite
    assert matches == ["/v1/messages"]
