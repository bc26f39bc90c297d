"""The clients' web search through the bridge to the real llama-server (issue 44 point 1;
docs/tools.md#web-search). Each client's search request as the real program sent it
(``tests/e2e/searching``: Claude Code 2.1.197's WebSearch request, with only the
``web_search_20250305`` server tool and ``tool_choice`` naming it; Codex 0.169's turn with its
hosted ``web_search`` beside its function tools; Gemini CLI 0.61's ``google_web_search``
request with ``googleSearch``) goes through a real mitmdump to llama-server's OpenAI chat
endpoint, the route naming the scripted SearXNG Search API (``tests.searxng_server``): the
bridge offers the model a ``web_search`` function tool (Claude Code's forced choice sent as
``required``: the named object llama-server takes as ``auto``, and says so in its log), the
model calls it, the bridge runs the search and feeds the results back in a second call to
llama-server, and each client's SDK reads the answer, streamed and whole: anthropic's
``server_tool_use`` / ``web_search_tool_result`` blocks and ``usage.server_tool_use``, openai's
``web_search_call`` item, Gemini's ``groundingMetadata`` (raw httpx, google-genai's names).

Each request is given two earlier searches before its question, as the other real tests give
this 135M model a history of calls (``bridge_clients.HISTORY``): without one it writes text
however forced — llama-server's grammar for ``required`` lets text come before the call, and the
model never gets to it within a small output bound. Codex's and Gemini CLI's requests leave the
choice to the model (``auto``, as recorded): it calls the search given Codex's prompt after two
earlier searches, and Gemini CLI's bare query after three (after two it writes text, tried).
Bounded: 64 output tokens and temperature
0 (the recordings ask far more, at the model's default), the bridge's own bound of 6 upstream
calls per answer. The test server's context is 4096 tokens: Codex's two developer messages
(~26 kB of instructions), its environment message and its function tools but
``exec_command``, and Gemini CLI's ~23 kB system
instruction past its first paragraph, are left out; the search tool, the user's turn and the
request's other fields are as recorded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai.types.responses import ResponseFunctionWebSearch

from tests.e2e.harness import Proxy
from tests.e2e.searching import (
    CLAUDE_CODE,
    CODEX,
    GEMINI_CLI,
    GROUNDING_KEYS,
    anthropic_final,
    codex_params,
    recorded,
    sse_payloads,
)
from tests.real.bridge_clients import KEY, TIMEOUT
from tests.real.llama_cpp import LlamaServer
from tests.searxng_server import ScriptedSearxng

RESULTS = [
    {"url": "https://docs.mitmproxy.org/stable/api/events.html", "title": "Event Hooks",
     "content": "Addons hook into events such as request and response."},
    {"url": "https://github.com/mitmproxy/mitmproxy", "title": "mitmproxy on GitHub",
     "content": "An interactive TLS-capable intercepting proxy."},
]  # fmt: skip
URLS = [r["url"] for r in RESULTS]
EARLIER = ("python asyncio", "rust traits")
"""The queries of the two earlier searches each request is given."""
WRONG_TYPE = "Wrong type supplied for parameter 'tool_choice'"


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
        "".join(
            f'[[routes]]\nname = "{client}-search-llama"\npath = "{path}"\n'
            f'client = "{client}"\nupstream = "openai_chat"\n'
            f'search = {{url = "{searxng.base_url}"}}\n'
            for client, path in (
                ("anthropic", "*/v1/messages"),
                ("openai_responses", "*/v1/responses"),
                ("gemini", "/v1beta/models/*"),
            )
        )
    )
    with Proxy(llama_server.port, {"bridge_routes": str(routes)}) as proxy:
        yield proxy
        log = proxy.log_text()
    assert "Traceback" not in log, log


def _searched(bridge: Proxy, searxng: ScriptedSearxng, queries: list[str], count: int) -> None:
    """The bridge ran ``count`` searches (at least one), each for a query the model wrote (the
    first shown to the client) and logged."""
    assert count == len(searxng.requests) >= 1
    assert queries and all(isinstance(q, str) and q for q in queries), queries
    assert searxng.requests[0].params == {"q": queries[0], "format": "json"}
    bridge.wait_for_log(f"web search on {searxng.base_url}: {queries[0]}")


# --------------------------------------------------------------------------- Claude Code


def _claude_code_history() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, query in enumerate(EARLIER):
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
    path, headers, body = recorded(CLAUDE_CODE)
    assert body["tool_choice"] == {"type": "tool", "name": "web_search"}
    assert body["stream"] is True
    body.update(stream=stream, max_tokens=64, temperature=0)
    body["messages"] = [*_claude_code_history(), *body["messages"]]
    warned = llama_server.log_text(1_000_000).count(WRONG_TYPE)
    got = httpx.post(
        bridge.base_url + path,
        content=json.dumps(body).encode(),
        headers={**headers, "x-api-key": KEY},
        timeout=TIMEOUT * 6,  # up to 6 calls of the model
    )
    assert got.status_code == 200, got.text[:500]
    if stream:
        assert got.headers["content-type"].startswith("text/event-stream")
        final = anthropic_final(got.content)
    else:
        final = anthropic.types.Message.model_validate_json(got.content)

    use, result = final.content[:2]
    assert use.type == "server_tool_use" and use.name == "web_search"
    assert use.id.startswith("srvtoolu_")
    assert isinstance(use.input, dict)
    assert result.type == "web_search_tool_result" and result.tool_use_id == use.id
    assert isinstance(result.content, list), result.content  # the search ran
    assert [r.url for r in result.content] == URLS
    # The results went back to llama-server: a second call, whose answer ends the message.
    assert final.usage.server_tool_use is not None
    searched = final.usage.server_tool_use.web_search_requests
    kinds = [b.type for b in final.content]
    assert kinds[: 2 * searched] == ["server_tool_use", "web_search_tool_result"] * searched
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0
    _searched(bridge, searxng, [use.input.get("query")], searched)
    # The forced choice reached llama-server as one it reads (a named choice object is
    # "Wrong type supplied for parameter 'tool_choice'", taken as auto).
    assert llama_server.log_text(1_000_000).count(WRONG_TYPE) == warned


# --------------------------------------------------------------------------- Codex


def _codex_request() -> dict[str, Any]:
    """Codex's recorded turn, bounded: its search tool and ``exec_command`` as recorded, its
    ``tool_choice`` (``auto``), the user's prompt after earlier searches (``function_call``
    items of ``web_search``)."""
    body = recorded(CODEX)[2]
    body["tools"] = [t for t in body["tools"] if t.get("name", t["type"]) in
                     ("exec_command", "web_search")]  # fmt: skip
    assert [t["type"] for t in body["tools"]] == ["function", "web_search"]
    assert body["tool_choice"] == "auto"
    users = [i for i in body["input"] if i.get("role") == "user"][-1:]
    history: list[dict[str, Any]] = []
    for i, query in enumerate(EARLIER):
        history += [
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": f"Search the web for {query}."}]},
            {"type": "function_call", "call_id": f"call_{i}", "name": "web_search",
             "arguments": json.dumps({"query": query})},
            {"type": "function_call_output", "call_id": f"call_{i}", "output": "[]"},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "No results."}]},
        ]  # fmt: skip
    body["input"] = [*history, *users]
    return codex_params(body) | {"max_output_tokens": 64, "temperature": 0}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_codexs_web_search_on_llama_server(
    bridge: Proxy, searxng: ScriptedSearxng, stream: bool
) -> None:
    client = openai.OpenAI(
        base_url=bridge.base_url + "/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT * 6
    )
    if stream:
        with client.responses.stream(**_codex_request()) as s:
            got = s.get_final_response()
    else:
        got = client.responses.create(**_codex_request(), stream=False)
    searches = [i for i in got.output if i.type == "web_search_call"]
    assert searches, [i.type for i in got.output]
    assert all(isinstance(s, ResponseFunctionWebSearch) for s in searches)
    first = searches[0]
    assert isinstance(first, ResponseFunctionWebSearch)
    assert first.status == "completed" and first.id.startswith("ws_")
    assert first.action.type == "search"
    assert [s.url for s in first.action.sources or []] == URLS  # the search ran
    assert got.output[: len(searches)] == searches  # the searches first, then the answer
    assert got.status in ("completed", "incomplete")
    assert got.usage is not None and got.usage.output_tokens > 0
    queries = [s.action.query for s in searches if s.action.type == "search"]
    _searched(bridge, searxng, queries, len(searches))


# --------------------------------------------------------------------------- Gemini CLI


def _gemini_cli_request() -> tuple[str, dict[str, str], dict[str, Any]]:
    """Gemini CLI's recorded search request, bounded: its system instruction's first
    paragraph, three earlier searches (``functionCall`` / ``functionResponse`` of
    ``web_search``) before its query, 64 output tokens."""
    path, headers, body = recorded(GEMINI_CLI)
    assert body["tools"] == [{"googleSearch": {}}] and "toolConfig" not in body
    (instruction,) = body["systemInstruction"]["parts"]
    instruction["text"] = instruction["text"].split("\n\n")[0]
    history: list[dict[str, Any]] = []
    for query in (*EARLIER, "go generics"):
        call = {"name": "web_search", "args": {"query": query}}
        response = {"name": "web_search", "response": {"output": "[]"}}
        history += [
            {"role": "user", "parts": [{"text": query}]},
            {"role": "model", "parts": [{"functionCall": call}]},
            {"role": "user", "parts": [{"functionResponse": response}]},
            {"role": "model", "parts": [{"text": "No results."}]},
        ]
    body["contents"] = [*history, *body["contents"]]
    body["generationConfig"] = {**body["generationConfig"], "maxOutputTokens": 64}
    return path, headers, body


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_gemini_clis_web_search_on_llama_server(
    bridge: Proxy, searxng: ScriptedSearxng, stream: bool
) -> None:
    path, headers, body = _gemini_cli_request()
    if stream:
        path = path.replace(":generateContent", ":streamGenerateContent?alt=sse")
    got = httpx.post(
        bridge.base_url + path,
        json=body,
        headers={**headers, "x-goog-api-key": KEY},
        timeout=TIMEOUT * 6,
    )
    assert got.status_code == 200, got.text[:500]
    chunks = sse_payloads(got.text) if stream else [got.json()]
    candidate = chunks[-1]["candidates"][0]  # the grounding rides on the last chunk
    grounding = candidate["groundingMetadata"]
    assert set(grounding) <= GROUNDING_KEYS, grounding
    webs = [chunk["web"] for chunk in grounding["groundingChunks"]]
    assert [w["uri"] for w in webs][: len(URLS)] == URLS  # the search ran
    assert candidate["finishReason"] in ("STOP", "MAX_TOKENS")
    assert chunks[-1]["usageMetadata"]["candidatesTokenCount"] > 0
    _searched(bridge, searxng, grounding["webSearchQueries"], len(grounding["webSearchQueries"]))
