"""End to end: each client's web search request, as the real program sent it (recorded by
``tests/real/clients``: Claude Code's WebSearch request, Codex's turn with its hosted
``web_search``, Gemini CLI's ``google_web_search`` request), through a real mitmdump on an OpenAI
chat, a Gemini and a Gemini Code Assist upstream, the route naming the scripted SearXNG Search
API (issue 44 point 1; docs/tools.md#web-search); whole and streamed. Each answer is read with
its client's SDK (anthropic: the ``server_tool_use`` / ``web_search_tool_result`` blocks;
openai Responses: the ``web_search_call`` item; Gemini: raw httpx, google-genai's field names
of ``groundingMetadata``).

Where the upstream cannot run the client's search tool the bridge offers the model a
``web_search`` function, runs the search the model calls and feeds the results back (a second
upstream call); a Gemini upstream (Code Assist too) runs Gemini CLI's ``googleSearch`` itself,
so that request is passed through and its grounding reaches the client. The upstreams refuse
what their services refuse (``searching.GeminiModel``; ``tests.upstream_rules`` through the
strict scripted upstream)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Proxy, ScriptedUpstream
from tests.e2e.searching import (
    CLIENTS,
    DOCS,
    GITHUB,
    PROJECT,
    QUERY,
    UPSTREAM_MODEL,
    GeminiModel,
    chat_model,
    results,
    search_bridge,
)
from tests.searxng_server import ScriptedSearxng

KEY = "sk-search-e2e-SECRET"
FOUND = [DOCS, GITHUB]
URLS = [r["url"] for r in FOUND]
UPSTREAM_KEYS = {
    "openai_chat": "",
    "gemini": f'model_map = {{"*" = "{UPSTREAM_MODEL}"}}\n',
    "gemini_code_assist": f'model_map = {{"*" = "{UPSTREAM_MODEL}"}}\nproject = "{PROJECT}"\n',
}
"""Each upstream dialect's route keys beside ``client``, ``upstream`` and ``search``."""


@pytest.fixture
def searxng() -> Iterator[ScriptedSearxng]:
    with ScriptedSearxng(results(*FOUND)) as server:
        yield server


def _bridge(
    start_proxy: Callable[..., Proxy], tmp_path: Path, searxng: ScriptedSearxng, upstream: str
) -> Proxy:
    routes = [(f"{c.name}-search", c.path, c.dialect) for c in CLIENTS.values()]
    return search_bridge(start_proxy, tmp_path, searxng, routes, upstream, UPSTREAM_KEYS[upstream])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_recorded_search_on_a_chat_upstream(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    client: str,
    stream: bool,
) -> None:
    p = _bridge(start_proxy, tmp_path, searxng, "openai_chat")
    upstream.script = chat_model
    CLIENTS[client].check(CLIENTS[client].ask(p.base_url, stream, KEY), URLS)

    (searched,) = searxng.requests
    assert searched.params == {"q": QUERY, "format": "json"}
    first, second = (r.json() for r in upstream.requests)
    # A streaming client's calls stream too: the searches run live between them.
    assert first.get("stream", False) is stream and second.get("stream", False) is stream
    names = [t["function"]["name"] for t in first["tools"]]
    assert names[-1] == "web_search"  # in its place: last in each recorded tool list
    assert ("exec_command" in names) == (client == "codex")  # beside Codex's tools
    # A choice naming the only tool (Claude Code's) is sent as "required", once: fed back
    # with "auto", the model answers instead of searching until the rounds run out.
    assert first.get("tool_choice", "auto") == ("required" if client == "claude_code" else "auto")
    assert second.get("tool_choice", "auto") == "auto"
    fed = second["messages"]
    assert fed[-2]["tool_calls"][0]["function"]["name"] == "web_search"
    assert fed[-1]["role"] == "tool" and fed[-1]["tool_call_id"] == "call_s1"
    assert [r["url"] for r in json.loads(fed[-1]["content"])] == URLS
    p.wait_for_log(rf"web search on {searxng.base_url}: {QUERY}")
    assert KEY not in p.log_text() and "Traceback" not in p.log_text()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("code_assist", [False, True], ids=["gemini", "code_assist"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_recorded_search_on_a_gemini_upstream(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    client: str,
    code_assist: bool,
    stream: bool,
) -> None:
    dialect = "gemini_code_assist" if code_assist else "gemini"
    p = _bridge(start_proxy, tmp_path, searxng, dialect)
    model = GeminiModel(FOUND, KEY, code_assist=code_assist)
    upstream.script = model
    CLIENTS[client].check(CLIENTS[client].ask(p.base_url, stream, KEY), URLS)

    assert not upstream.violations
    if client == "gemini_cli":  # Gemini's own search: passed through, the bridge searches none
        (sent,) = model.bodies
        assert sent["tools"] == [{"googleSearch": {}}]
        assert searxng.requests == []
    else:
        model.check_fed_back(URLS)
        assert [":streamGenerateContent?alt=sse" in path for path in model.paths] == [stream] * 2
        (searched,) = searxng.requests
        assert searched.params == {"q": QUERY, "format": "json"}
        first, second = model.bodies
        if client == "claude_code":  # the named choice forces the first call only
            assert first["toolConfig"]["functionCallingConfig"]["mode"] == "ANY"
        mode = second.get("toolConfig", {}).get("functionCallingConfig", {}).get("mode", "AUTO")
        assert mode == "AUTO"
    assert KEY not in p.log_text() and "Traceback" not in p.log_text()


def test_code_assist_refuses_what_the_service_refuses(upstream: ScriptedUpstream) -> None:
    """The scripted Code Assist answers as the service does a request with no Bearer token or
    no project (checked without a bridge: through one, the route always sets both)."""
    import httpx

    model = GeminiModel(FOUND, KEY, code_assist=True)
    upstream.script = model
    url = f"{upstream.base_url}/v1internal:generateContent"
    inner = {"contents": [{"role": "user", "parts": [{"text": QUERY}]}]}
    envelope = {"model": UPSTREAM_MODEL, "project": PROJECT, "request": inner}
    no_token = httpx.post(url, json=envelope, timeout=10)
    assert no_token.status_code == 401
    assert no_token.json()["error"]["status"] == "UNAUTHENTICATED"
    bearer = {"authorization": f"Bearer {KEY}"}
    no_project = httpx.post(url, json={**envelope, "project": ""}, headers=bearer, timeout=10)
    assert no_project.status_code == 403
    assert no_project.json()["error"]["status"] == "PERMISSION_DENIED"
    assert model.bodies == []
