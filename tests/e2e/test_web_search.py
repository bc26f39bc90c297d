"""End to end: Claude Code's web search (Anthropic's ``web_search_20250305`` server tool) on an
OpenAI chat upstream that cannot run it, the route naming a SearXNG backend (issue 44 point 1;
docs/tools.md#web-search). A real mitmdump before a scripted OpenAI chat upstream (its model
calls the ``web_search`` function tool, then answers from the results) and the scripted SearXNG
Search API; the anthropic SDK reads the answer's ``server_tool_use`` and
``web_search_tool_result`` blocks, whole and streamed. The request's shape is the anthropic
SDK's ``WebSearchTool20250305Param``, with ``blocked_domains``; the request the real Claude Code
2.1.197 sent is replayed on every upstream in ``test_web_search_clients.py``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from addon.stores.ledger import Tokens, open_ledger
from tests.e2e.harness import Proxy, Recorded, Reply, ScriptedUpstream
from tests.e2e.searching import (
    DOCS,
    GITHUB,
    QUERY,
    chat_model,
    chat_reply,
    claude_search,
    results,
    search_bridge,
    searching,
)
from tests.searxng_server import ScriptedSearxng

RESULTS = results(
    DOCS, {"url": "https://blocked.example/x", "title": "Blocked", "content": "never shown"}, GITHUB
)
# Claude Code's WebSearch tool: its own request, carrying only the server tool.
TOOL = {
    "type": "web_search_20250305",
    "name": "web_search",
    "max_uses": 8,
    "blocked_domains": ["blocked.example"],
}


@pytest.fixture
def searxng() -> Iterator[ScriptedSearxng]:
    with ScriptedSearxng(RESULTS) as server:
        yield server


def _proxy(
    start_proxy: Callable[..., Proxy], tmp_path: Path, searxng: ScriptedSearxng, **options: str
) -> Proxy:
    claude = [("claude-search", "*/v1/messages", "anthropic")]
    return search_bridge(
        start_proxy, tmp_path, searxng, claude, search=", max_results = 5", **options
    )


def _ask(p: Proxy, stream: bool) -> anthropic.types.Message:
    c = anthropic.Anthropic(base_url=p.base_url, api_key="sk-ant-e2e", max_retries=0, timeout=20)
    return claude_search(c, stream, TOOL)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_claude_codes_web_search_runs_on_the_bridge(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    stream: bool,
) -> None:
    p = _proxy(start_proxy, tmp_path, searxng)
    upstream.script = chat_model
    got = _ask(p, stream)

    use, result, text = got.content
    assert use.type == "server_tool_use" and use.name == "web_search"
    assert use.input == {"query": QUERY} and use.id.startswith("srvtoolu_")
    assert result.type == "web_search_tool_result" and result.tool_use_id == use.id
    assert isinstance(result.content, list)
    assert [(r.type, r.url, r.title) for r in result.content] == [
        ("web_search_result", "https://docs.mitmproxy.org/stable/api/events.html", "Event Hooks"),
        ("web_search_result", "https://github.com/mitmproxy/mitmproxy", "mitmproxy on GitHub"),
    ]  # the blocked domain left out
    assert all(r.encrypted_content for r in result.content)
    assert text.type == "text"
    assert text.text == "Per https://docs.mitmproxy.org/stable/api/events.html: hooks are events."
    assert got.stop_reason == "end_turn"
    assert got.usage.server_tool_use is not None
    assert got.usage.server_tool_use.web_search_requests == 1
    assert (got.usage.input_tokens, got.usage.output_tokens) == (100, 40)  # both calls

    (searched,) = searxng.requests
    assert searched.params == {"q": QUERY, "format": "json"}
    first, second = upstream.requests
    sent = first.json()
    # A streaming client's upstream streams too: the searches run live between its calls.
    assert sent["stream"] is stream and second.json()["stream"] is stream
    assert [t["function"]["name"] for t in sent["tools"]] == ["web_search"]
    fed = second.json()["messages"]
    assert fed[-2]["tool_calls"][0]["function"]["name"] == "web_search"
    assert fed[-1]["role"] == "tool" and fed[-1]["tool_call_id"] == "call_s1"
    assert [r["url"] for r in json.loads(fed[-1]["content"])] == [
        "https://docs.mitmproxy.org/stable/api/events.html",
        "https://github.com/mitmproxy/mitmproxy",
    ]
    assert "sk-ant-e2e" not in p.log_text()
    p.wait_for_log(rf"web search on {searxng.base_url}: {QUERY}")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_max_uses_is_honoured(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    stream: bool,
) -> None:
    """A model that searches past ``max_uses`` is told ``max_uses_exceeded``; the client sees it
    as Anthropic's error block, and the backend is asked only ``max_uses`` times (streamed:
    live, three streamed calls)."""
    p = _proxy(start_proxy, tmp_path, searxng)
    calls = 0

    def greedy(rec: Recorded) -> Reply:
        nonlocal calls
        calls += 1
        streams = bool(rec.json().get("stream"))
        if calls <= 2:
            return searching(f"call_{calls}", streams)
        return chat_reply({"content": "done"}, streams)

    upstream.script = greedy
    c = anthropic.Anthropic(base_url=p.base_url, api_key="sk-ant-e2e", max_retries=0, timeout=20)
    params: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "search twice"}],
        "tools": [{**TOOL, "max_uses": 1}],
    }
    if stream:
        with c.messages.stream(**params) as s:
            got = s.get_final_message()
    else:
        got = c.messages.create(**params)
    kinds = [b.type for b in got.content]
    assert kinds == ["server_tool_use", "web_search_tool_result"] * 2 + ["text"]
    second = got.content[3]
    assert second.type == "web_search_tool_result"
    assert not isinstance(second.content, list)
    assert second.content.error_code == "max_uses_exceeded"
    assert got.usage.server_tool_use is not None
    assert got.usage.server_tool_use.web_search_requests == 1
    assert len(searxng.requests) == 1 and len(upstream.requests) == 3
    assert all(r.json()["stream"] is stream for r in upstream.requests)


def test_no_backend_is_todays_400_said_in_the_comment(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    c = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=15)
    with pytest.raises(anthropic.BadRequestError) as info:
        c.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=100,
            messages=[{"role": "user", "content": "search the web"}],
            tools=[TOOL],  # type: ignore[list-item]
        )
    assert "web_search" in str(info.value)
    assert upstream.requests == []


def test_the_ledger_counts_the_searches_and_every_calls_tokens(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
) -> None:
    """A searched answer is one request in the usage ledger, with its searches (the
    ``searches`` column) and the tokens of both upstream calls (50 + 50 in, 20 + 20 out)."""
    store = tmp_path / "store.db"
    p = _proxy(start_proxy, tmp_path, searxng, bridge_store=str(store))
    upstream.script = chat_model
    _ask(p, stream=False)
    _ask(p, stream=True)
    ledger = open_ledger(str(store))
    deadline = time.monotonic() + 10
    while sum(t.requests for t in ledger.rows().values()) < 2:  # counted at each flow's end
        assert time.monotonic() < deadline, ledger.rows()
        time.sleep(0.05)
    rows = ledger.rows()
    ledger.close()
    ((key, tokens),) = rows.items()
    assert key.route == "claude-search"
    assert tokens == Tokens(requests=2, input=200, output=80, searches=2)
