"""End to end: Gemini CLI's ``google_web_search`` on an OpenAI chat upstream, the route naming a
SearXNG backend (issue 44 point 1; docs/tools.md#web-search). Gemini CLI's tool makes a request
of its own — ``generateContent`` with the query as the one user turn and
``tools: [{"googleSearch": {}}]`` (its ``web-search`` model config; packages/core/src/tools/
web-search.ts) — and reads the candidate's ``groundingMetadata.groundingChunks`` as its
sources. Through a real mitmdump to a scripted chat upstream (its model calls the
``web_search`` function tool, then answers from the results) and the scripted SearXNG Search
API; raw httpx reads the answer whole and as ``streamGenerateContent?alt=sse``, checking the
field names google-genai's ``GroundingMetadata`` / ``GroundingChunk`` / ``GroundingChunkWeb``
take."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import Proxy, ScriptedUpstream
from tests.e2e.searching import ANSWER, DOCS, GITHUB, QUERY, chat_model, results
from tests.searxng_server import ScriptedSearxng

MODEL = "gemini-3.8-flash"
RESULTS = results(
    DOCS, {"url": "https://pinterest.com/pin/1", "title": "Pin", "content": "excluded"}, GITHUB
)
# Gemini CLI's web search request (its "web-search" model config carries the tool).
BODY: dict[str, Any] = {
    "contents": [{"role": "user", "parts": [{"text": QUERY}]}],
    "tools": [{"googleSearch": {}}],
    "generationConfig": {"temperature": 0, "topP": 1},
}


@pytest.fixture
def searxng() -> Iterator[ScriptedSearxng]:
    with ScriptedSearxng(RESULTS) as server:
        yield server


def _proxy(start_proxy: Callable[..., Proxy], tmp_path: Path, searxng: ScriptedSearxng) -> Proxy:
    routes = tmp_path / "routes.toml"
    routes.write_text(
        '[[routes]]\nname = "gemini-search"\npath = "/v1beta/models/*"\nclient = "gemini"\n'
        f'upstream = "openai_chat"\nsearch = {{url = "{searxng.base_url}"}}\n'
    )
    return start_proxy(bridge_routes=str(routes))


def _check_grounding(grounding: dict[str, Any]) -> None:
    assert grounding["webSearchQueries"] == [QUERY]
    assert grounding["groundingChunks"] == [
        {
            "web": {
                "uri": "https://docs.mitmproxy.org/stable/api/events.html",
                "title": "Event Hooks",
            }
        },
        {"web": {"uri": "https://github.com/mitmproxy/mitmproxy", "title": "mitmproxy on GitHub"}},
    ]  # excludeDomains kept pinterest.com out


def _body() -> dict[str, Any]:
    return {**BODY, "tools": [{"googleSearch": {"excludeDomains": ["pinterest.com"]}}]}


def test_gemini_clis_web_search_whole(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
) -> None:
    p = _proxy(start_proxy, tmp_path, searxng)
    upstream.script = chat_model
    got = httpx.post(
        f"{p.base_url}/v1beta/models/{MODEL}:generateContent",
        json=_body(),
        headers={"x-goog-api-key": "gm-e2e"},
        timeout=20,
    )
    assert got.status_code == 200, got.text
    (candidate,) = got.json()["candidates"]
    assert candidate["content"]["parts"] == [{"text": ANSWER}]
    assert candidate["finishReason"] == "STOP"
    _check_grounding(candidate["groundingMetadata"])
    usage = got.json()["usageMetadata"]
    assert (usage["promptTokenCount"], usage["candidatesTokenCount"]) == (100, 40)

    (searched,) = searxng.requests
    assert searched.params == {"q": QUERY, "format": "json"}
    first, second = upstream.requests
    sent = first.json()
    assert sent["stream"] is False
    assert [t["function"]["name"] for t in sent["tools"]] == ["web_search"]
    fed = second.json()["messages"]
    assert fed[-1]["role"] == "tool" and fed[-1]["tool_call_id"] == "call_s1"
    p.wait_for_log(rf"web search on {searxng.base_url}: {QUERY}")


def test_gemini_clis_web_search_streamed(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
) -> None:
    p = _proxy(start_proxy, tmp_path, searxng)
    upstream.script = chat_model
    got = httpx.post(
        f"{p.base_url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse",
        json=_body(),
        headers={"x-goog-api-key": "gm-e2e"},
        timeout=20,
    )
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("text/event-stream")
    chunks = [
        json.loads(line.removeprefix("data: "))
        for line in got.text.splitlines()
        if line.startswith("data: ")
    ]
    text = "".join(
        part.get("text", "")
        for c in chunks
        for part in c["candidates"][0].get("content", {}).get("parts", [])
    )
    assert text == ANSWER
    last = chunks[-1]["candidates"][0]
    assert last["finishReason"] == "STOP"
    _check_grounding(last["groundingMetadata"])  # on the last chunk, as Gemini sends it
    assert all("groundingMetadata" not in c["candidates"][0] for c in chunks[:-1])
    assert len(searxng.requests) == 1 and len(upstream.requests) == 2
