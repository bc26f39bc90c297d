"""Claude Code's web search through the bridge to the real llama-server (issue 44 point 1;
docs/tools.md#web-search). The request Claude Code 2.1.197's WebSearch tool sent
(``tests/fixtures/claude_code_web_search``: only the ``web_search_20250305`` server tool, and
``tool_choice`` naming it) goes through a real mitmdump to llama-server's OpenAI chat endpoint,
the route naming the scripted SearXNG Search API (``tests.searxng_server``): the bridge offers
the model a ``web_search`` function tool and sends the forced choice as ``required`` (the named
object llama-server takes as ``auto``, and says so in its log), the model calls it, the bridge
runs the search and feeds the results back in a second call to llama-server, and the anthropic
SDK reads the answer (the stream, as recorded, and whole): a ``server_tool_use`` and a
``web_search_tool_result`` block, ``usage.server_tool_use``.

The recorded request with two earlier searches before its question, as the other real tests
give this 135M model a history of calls (``bridge_clients.HISTORY``): without one it writes text
however forced — llama-server's grammar for ``required`` lets text come before the call, and the
model never gets to it within a small ``max_tokens``. Bounded: ``max_tokens`` 64 and
``temperature`` 0 (the recording asks 32000 at 1), the bridge's own bound of 6 upstream calls
per answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.e2e.harness import Proxy
from tests.e2e.searching import CLAUDE_CODE as RECORDED
from tests.e2e.searching import anthropic_final as _final_of_stream
from tests.real.bridge_clients import KEY, TIMEOUT
from tests.real.llama_cpp import LlamaServer
from tests.searxng_server import ScriptedSearxng

RESULTS = [
    {"url": "https://docs.mitmproxy.org/stable/api/events.html", "title": "Event Hooks",
     "content": "Addons hook into events such as request and response."},
    {"url": "https://github.com/mitmproxy/mitmproxy", "title": "mitmproxy on GitHub",
     "content": "An interactive TLS-capable intercepting proxy."},
]  # fmt: skip


class AnyQuery(dict[str, list[dict[str, Any]]]):
    """The same results for whatever query the model writes (a small model's words vary)."""

    def get(self, key: str, default: Any = None) -> list[dict[str, Any]]:
        return RESULTS


@pytest.fixture
def searxng() -> Iterator[ScriptedSearxng]:
    with ScriptedSearxng(AnyQuery()) as server:
        yield server


@pytest.fixture
def bridge(llama_server: LlamaServer, searxng: ScriptedSearxng, tmp_path: Path) -> Iterator[Proxy]:
    routes = tmp_path / "routes.toml"
    routes.write_text(
        '[[routes]]\nname = "claude-search-llama"\npath = "*/v1/messages"\n'
        'client = "anthropic"\nupstream = "openai_chat"\n'
        f'search = {{url = "{searxng.base_url}"}}\n'
    )
    with Proxy(llama_server.port, {"bridge_routes": str(routes)}) as proxy:
        yield proxy
        log = proxy.log_text()
    assert "Traceback" not in log, log


def _earlier_searches() -> list[dict[str, Any]]:
    """Two earlier searches as tool calls of ``web_search`` with their (empty) results."""
    out: list[dict[str, Any]] = []
    for i, query in enumerate(("python asyncio", "rust traits")):
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "web_search",
               "input": {"query": query}}  # fmt: skip
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "[]"}
        out += [
            {"role": "user", "content": f"Perform a web search for the query: {query}"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
            {"role": "assistant", "content": "No results."},
        ]
    return out


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_claude_codes_web_search_on_llama_server(
    bridge: Proxy, searxng: ScriptedSearxng, llama_server: LlamaServer, stream: bool
) -> None:
    recorded = json.loads(RECORDED.read_text())
    body = recorded["body"]
    assert body["tool_choice"] == {"type": "tool", "name": "web_search"}
    assert body["stream"] is True
    body["stream"] = stream
    body["max_tokens"] = 64
    body["temperature"] = 0
    body["messages"] = [*_earlier_searches(), *body["messages"]]
    wrong_type = "Wrong type supplied for parameter 'tool_choice'"
    warned = llama_server.log_text(1_000_000).count(wrong_type)
    skip = {"content-length", "host", "accept-encoding", "connection"}
    headers = {k: v for k, v in recorded["headers"].items() if k.lower() not in skip}
    got = httpx.post(
        bridge.base_url + recorded["path"],
        content=json.dumps(body).encode(),
        headers={**headers, "x-api-key": KEY},
        timeout=TIMEOUT * 6,  # up to 6 calls of the model
    )
    assert got.status_code == 200, got.text[:500]
    if stream:
        assert got.headers["content-type"].startswith("text/event-stream")
        final = _final_of_stream(got.content)
    else:
        final = anthropic.types.Message.model_validate_json(got.content)

    use, result = final.content[:2]
    assert use.type == "server_tool_use" and use.name == "web_search"
    assert use.id.startswith("srvtoolu_")
    assert isinstance(use.input, dict) and isinstance(use.input.get("query"), str)
    assert result.type == "web_search_tool_result" and result.tool_use_id == use.id
    assert isinstance(result.content, list), result.content  # the search ran
    assert [r.url for r in result.content] == [r["url"] for r in RESULTS]
    # The results went back to llama-server: a second call, whose answer ends the message.
    assert final.usage.server_tool_use is not None
    searched = final.usage.server_tool_use.web_search_requests
    assert searched == len(searxng.requests) >= 1
    assert searxng.requests[0].params == {"q": use.input["query"], "format": "json"}
    kinds = [b.type for b in final.content]
    assert kinds[: 2 * searched] == ["server_tool_use", "web_search_tool_result"] * searched
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0
    # The forced choice reached llama-server as one it reads (a named choice object is
    # "Wrong type supplied for parameter 'tool_choice'", taken as auto).
    assert llama_server.log_text(1_000_000).count(wrong_type) == warned
    bridge.wait_for_log(f"web search on {searxng.base_url}: {use.input['query']}")
