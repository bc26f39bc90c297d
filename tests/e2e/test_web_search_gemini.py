"""End to end: Gemini CLI's ``google_web_search`` on an OpenAI chat upstream, the route naming a
SearXNG backend (issue 44 point 1; docs/tools.md#web-search). Gemini CLI's tool makes a request
of its own, recorded with the real Gemini CLI 0.61 (``tests/fixtures/gemini_cli_web_search``):
``generateContent`` with the query as the one user turn and ``tools: [{"googleSearch": {}}]``;
it reads the candidate's ``groundingMetadata.groundingChunks`` as its sources. Here its
``googleSearch`` names ``excludeDomains`` (Gemini's ``GoogleSearch`` field): the bridge leaves
those results out. Through a real mitmdump to a scripted chat upstream (its model calls the
``web_search`` function tool, then answers from the results) and the scripted SearXNG Search
API; raw httpx reads the answer whole and as ``streamGenerateContent?alt=sse``, checking
google-genai's field names (``searching.check_grounding``). The request as recorded runs on
every upstream in ``test_web_search_clients.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Proxy, ScriptedUpstream
from tests.e2e.searching import (
    DOCS,
    GEMINI_CLI,
    GITHUB,
    QUERY,
    ask_gemini_cli,
    chat_model,
    check_grounding,
    recorded,
    results,
    search_bridge,
)
from tests.searxng_server import ScriptedSearxng

RESULTS = results(
    DOCS, {"url": "https://pinterest.com/pin/1", "title": "Pin", "content": "excluded"}, GITHUB
)


@pytest.fixture
def searxng() -> Iterator[ScriptedSearxng]:
    with ScriptedSearxng(RESULTS) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_gemini_clis_web_search_leaves_out_excluded_domains(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    stream: bool,
) -> None:
    gemini = [("gemini-search", "/v1beta/models/*", "gemini")]
    p = search_bridge(start_proxy, tmp_path, searxng, gemini)
    upstream.script = chat_model
    body = recorded(GEMINI_CLI)[2]
    assert body["tools"] == [{"googleSearch": {}}]
    body["tools"] = [{"googleSearch": {"excludeDomains": ["pinterest.com"]}}]
    chunks = ask_gemini_cli(p.base_url, stream, "gm-e2e", body)
    check_grounding(chunks, [DOCS["url"], GITHUB["url"]])  # pinterest.com left out
    if not stream:
        usage = chunks[0]["usageMetadata"]
        assert (usage["promptTokenCount"], usage["candidatesTokenCount"]) == (100, 40)

    (searched,) = searxng.requests
    assert searched.params == {"q": QUERY, "format": "json"}
    first, second = (r.json() for r in upstream.requests)
    assert [t["function"]["name"] for t in first["tools"]] == ["web_search"]
    assert first["messages"][0]["role"] == "system"  # Gemini CLI's systemInstruction
    fed = second["messages"]
    assert fed[-1]["role"] == "tool" and fed[-1]["tool_call_id"] == "call_s1"
    p.wait_for_log(rf"web search on {searxng.base_url}: {QUERY}")
