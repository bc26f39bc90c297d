"""End to end: the clients' web search on a Gemini upstream, the route naming a SearXNG backend
(issue 44 point 1; docs/tools.md#web-search). A real mitmdump before a scripted Gemini
``generateContent`` upstream whose Gemini 3 model calls the offered ``web_search`` function
(a ``functionCall`` part with its ``thoughtSignature``), then answers from the
``functionResponse`` it is given, and the scripted SearXNG Search API. The upstream refuses
what Gemini refuses (``tests.upstream_rules``: a function call fed back without its signature,
a function response that does not follow its call) and, as Gemini does, obeys
``toolConfig.functionCallingConfig``: ``ANY`` with ``allowedFunctionNames`` makes it call the
function again. Claude Code's recorded WebSearch request (the anthropic SDK reads its
``server_tool_use`` / ``web_search_tool_result`` blocks) and Codex's recorded turn (the openai
SDK reads its ``web_search_call`` items), whole and streamed; Gemini CLI's ``googleSearch``
request is Gemini's own: passed through, Gemini's grounding read with raw httpx."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai.types.responses import ResponseFunctionWebSearch

from tests.e2e.harness import (
    JSONReply,
    Proxy,
    Recorded,
    ScriptedUpstream,
    SSEReply,
    sse_from_payloads,
)
from tests.e2e.test_codex_tools import GEMINI_DECLARATION_KEYS, GEMINI_TOOL_KEYS
from tests.e2e.test_web_search import RECORDED as CLAUDE_RECORDED
from tests.e2e.test_web_search import _final_of_stream
from tests.e2e.test_web_search_codex import RECORDED as CODEX_RECORDED
from tests.e2e.test_web_search_gemini import BODY as GEMINI_CLI_BODY
from tests.searxng_server import ScriptedSearxng

UPSTREAM_MODEL = "gemini-3-flash-preview"
KEY = "AIza-e2e-search-SECRET"
QUERY = "mitmproxy addon hooks"
SIGNATURE = "c2lnbmF0dXJlLW9mLXRoZS1zZWFyY2gtY2FsbA=="
RESULTS = {
    QUERY: [
        {"url": "https://docs.mitmproxy.org/stable/api/events.html", "title": "Event Hooks",
         "content": "Addons hook into events such as request and response."},
        {"url": "https://github.com/mitmproxy/mitmproxy", "title": "mitmproxy on GitHub",
         "content": "An interactive TLS-capable intercepting proxy."},
    ]
}  # fmt: skip
ANSWER = "Per https://docs.mitmproxy.org/stable/api/events.html: hooks are events."


@pytest.fixture
def searxng() -> Iterator[ScriptedSearxng]:
    with ScriptedSearxng(RESULTS) as server:
        yield server


def _proxy(start_proxy: Callable[..., Proxy], tmp_path: Path, searxng: ScriptedSearxng) -> Proxy:
    routes = tmp_path / "routes.toml"
    search = f'search = {{url = "{searxng.base_url}"}}\n'
    routes.write_text(
        "".join(
            f'[[routes]]\nname = "{client}-gemini"\npath = "{path}"\nclient = "{client}"\n'
            f'upstream = "gemini"\nmodel_map = {{"*" = "{UPSTREAM_MODEL}"}}\n{search}'
            for client, path in (
                ("anthropic", "*/v1/messages"),
                ("openai_responses", "*/v1/responses"),
                ("gemini", "/v1beta/models/*"),
            )
        )
    )
    return start_proxy(bridge_routes=str(routes))


def _candidate(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 20},
        "modelVersion": UPSTREAM_MODEL,
    }


def _refused(message: str) -> JSONReply:
    error = {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}
    return JSONReply({"error": error}, status=400)


class GeminiModel:
    """Gemini's ``generateContent``: refuses a tool it does not know; calls ``web_search`` when
    the conversation has no function response yet or when ``toolConfig`` forces it (``ANY``
    naming it), else answers from the last function response."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []

    def __call__(self, rec: Recorded) -> JSONReply | SSEReply:
        path, _, query = rec.path.partition("?")
        stream = path.endswith(":streamGenerateContent")
        assert path.startswith(f"/v1beta/models/{UPSTREAM_MODEL}:"), rec.path
        assert rec.headers.get("x-goog-api-key") == KEY
        body = rec.json()
        self.bodies.append(body)
        self.paths.append(rec.path)
        for i, tool in enumerate(body.get("tools") or []):
            unknown = sorted(set(tool) - GEMINI_TOOL_KEYS) or sorted(
                k for d in tool.get("functionDeclarations") or [] for k in d
                if k not in GEMINI_DECLARATION_KEYS
            )  # fmt: skip
            if unknown:
                return _refused(
                    f'Invalid JSON payload received. Unknown name "{unknown[0]}" at '
                    f"'tools[{i}]': Cannot find field."
                )
        answer = self._answer(body)
        if stream:
            assert query == "alt=sse"
            return SSEReply(sse_from_payloads([answer]), seed=len(self.bodies))
        return JSONReply(answer)

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        tools = body.get("tools") or []
        if {"googleSearch": {}} in tools:  # Gemini runs its own search
            found = _candidate([{"text": ANSWER}])
            found["candidates"][0]["groundingMetadata"] = {
                "webSearchQueries": [QUERY],
                "groundingChunks": [
                    {"web": {"uri": r["url"], "title": r["title"]}} for r in RESULTS[QUERY]
                ],
            }
            return found
        names = [d["name"] for t in tools for d in t.get("functionDeclarations") or []]
        assert "web_search" in names, names
        calling = body.get("toolConfig", {}).get("functionCallingConfig", {})
        forced = calling.get("mode") == "ANY" and "web_search" in calling.get(
            "allowedFunctionNames", names
        )
        responses = [
            p["functionResponse"]
            for c in body["contents"]
            for p in c["parts"]
            if "functionResponse" in p
        ]
        if forced or not responses:
            call = {"functionCall": {"name": "web_search", "args": {"query": QUERY}}}
            return _candidate([{**call, "thoughtSignature": SIGNATURE}])
        found = json.loads(_text_of(responses[-1]["response"]))
        return _candidate([{"text": f"Per {found[0]['url']}: hooks are events."}])


def _text_of(response: Any) -> str:
    """The tool result's text, wherever the bridge put it in ``functionResponse.response``."""
    if isinstance(response, str):
        return response
    assert isinstance(response, dict), response
    (value,) = response.values()
    return _text_of(value)


@pytest.fixture
def gemini(upstream: ScriptedUpstream) -> GeminiModel:
    script = GeminiModel()
    upstream.script = script
    return script


def _check_fed_back(script: GeminiModel, searxng: ScriptedSearxng, stream: bool) -> None:
    # A streaming client's calls stream too: the searches run live between them.
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    assert script.paths == [f"/v1beta/models/{UPSTREAM_MODEL}:{method}"] * 2
    first, second = script.bodies
    assert [d["name"] for t in first["tools"] for d in t["functionDeclarations"]][-1:] == [
        "web_search"
    ]
    assert all("googleSearch" not in t for t in first["tools"])
    call_turn, response_turn = second["contents"][-2:]
    assert call_turn["role"] == "model"
    (call,) = [p for p in call_turn["parts"] if "functionCall" in p]
    assert call["functionCall"]["name"] == "web_search"
    assert call["functionCall"]["args"] == {"query": QUERY}
    assert call["thoughtSignature"] == SIGNATURE  # Gemini 3 refuses the call without it
    (response,) = response_turn["parts"]
    assert response["functionResponse"]["name"] == "web_search"
    found = json.loads(_text_of(response["functionResponse"]["response"]))
    assert [r["url"] for r in found] == [r["url"] for r in RESULTS[QUERY]]
    (searched,) = searxng.requests
    assert searched.params == {"q": QUERY, "format": "json"}


# --------------------------------------------------------------------------- Claude Code


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_claude_codes_recorded_web_search_on_gemini(
    start_proxy: Callable[..., Proxy],
    gemini: GeminiModel,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    stream: bool,
) -> None:
    """Claude Code 2.1.197's WebSearch request (``tool_choice`` names the tool): the first
    call forces ``web_search`` in Gemini's ``toolConfig``, the second no longer does (else
    Gemini would search again until the rounds ran out)."""
    recorded = json.loads(CLAUDE_RECORDED.read_text())
    body = recorded["body"]
    body["stream"] = stream
    skip = {"content-length", "host", "accept-encoding", "connection", "authorization"}
    headers = {k: v for k, v in recorded["headers"].items() if k.lower() not in skip}
    p = _proxy(start_proxy, tmp_path, searxng)
    got = httpx.post(
        p.base_url + recorded["path"],
        content=json.dumps(body).encode(),
        headers={**headers, "x-api-key": KEY},
        timeout=20,
    )
    assert got.status_code == 200, got.text
    if stream:
        final = _final_of_stream(got.content)
    else:
        final = anthropic.types.Message.model_validate_json(got.content)
    use, result, text = [b for b in final.content if b.type != "thinking"]
    assert use.type == "server_tool_use" and use.input == {"query": QUERY}
    assert result.type == "web_search_tool_result" and result.tool_use_id == use.id
    assert isinstance(result.content, list)
    assert [r.url for r in result.content] == [r["url"] for r in RESULTS[QUERY]]
    assert text.type == "text" and text.text == ANSWER
    assert final.stop_reason == "end_turn"
    assert final.usage.server_tool_use is not None
    assert final.usage.server_tool_use.web_search_requests == 1
    assert (final.usage.input_tokens, final.usage.output_tokens) == (100, 40)  # both calls

    _check_fed_back(gemini, searxng, stream)
    first, second = gemini.bodies
    assert first["toolConfig"]["functionCallingConfig"]["mode"] == "ANY"
    assert second.get("toolConfig", {}).get("functionCallingConfig", {}).get("mode", "AUTO") == (
        "AUTO"
    )
    assert KEY not in p.log_text()
    assert "Traceback" not in p.log_text()


# --------------------------------------------------------------------------- Codex


def _codex_params() -> dict[str, Any]:
    body = json.loads(CODEX_RECORDED.read_text())["body"]
    assert any(t["type"] == "web_search" for t in body["tools"])
    body.pop("stream")
    client_metadata = body.pop("client_metadata")
    return {**body, "extra_body": {"client_metadata": client_metadata}}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_codexs_recorded_web_search_on_gemini(
    start_proxy: Callable[..., Proxy],
    gemini: GeminiModel,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    stream: bool,
) -> None:
    p = _proxy(start_proxy, tmp_path, searxng)
    client = openai.OpenAI(base_url=p.base_url + "/v1", api_key=KEY, max_retries=0, timeout=20)
    if stream:
        with client.responses.stream(**_codex_params()) as s:
            got = s.get_final_response()
    else:
        got = client.responses.create(**_codex_params(), stream=False)
    search, message = [i for i in got.output if i.type != "reasoning"]
    assert isinstance(search, ResponseFunctionWebSearch)
    assert search.status == "completed" and search.id.startswith("ws_")
    assert search.action.type == "search" and search.action.query == QUERY
    assert [s.url for s in search.action.sources or []] == [r["url"] for r in RESULTS[QUERY]]
    assert message.type == "message" and got.output_text == ANSWER
    assert got.status == "completed"
    assert got.usage is not None
    assert (got.usage.input_tokens, got.usage.output_tokens) == (100, 40)
    _check_fed_back(gemini, searxng, stream)
    assert "Traceback" not in p.log_text()


# --------------------------------------------------------------------------- Gemini CLI


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_gemini_clis_google_search_is_geminis_own(
    start_proxy: Callable[..., Proxy],
    gemini: GeminiModel,
    searxng: ScriptedSearxng,
    tmp_path: Path,
    stream: bool,
) -> None:
    """Gemini runs ``googleSearch`` itself: the tool reaches it as sent, the bridge searches
    nothing, and Gemini's grounding reaches Gemini CLI."""
    p = _proxy(start_proxy, tmp_path, searxng)
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    got = httpx.post(
        f"{p.base_url}/v1beta/models/gemini-3.8-flash:{method}",
        json=GEMINI_CLI_BODY,
        headers={"x-goog-api-key": KEY},
        timeout=20,
    )
    assert got.status_code == 200, got.text
    if stream:
        chunks = [
            json.loads(line.removeprefix("data: "))
            for line in got.text.splitlines()
            if line.startswith("data: ")
        ]
    else:
        chunks = [got.json()]
    parts = [p for c in chunks for p in c["candidates"][0].get("content", {}).get("parts", [])]
    assert "".join(p["text"] for p in parts) == ANSWER
    candidate = chunks[-1]["candidates"][0]  # the grounding rides on the last chunk
    assert candidate["finishReason"] == "STOP"
    grounding = candidate["groundingMetadata"]
    assert grounding["webSearchQueries"] == [QUERY]
    assert [c["web"]["uri"] for c in grounding["groundingChunks"]] == [
        r["url"] for r in RESULTS[QUERY]
    ]
    (sent,) = gemini.bodies
    assert sent["tools"] == [{"googleSearch": {}}]
    assert searxng.requests == []
