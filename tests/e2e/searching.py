"""What the web search e2e tests share (docs/tools.md#web-search): the query and the results the
scripted SearXNG gives for it; the three clients' search requests as the real programs sent
them (``tests/fixtures/<client>_web_search``, recorded by ``tests/real/clients``), each sent
through a proxy and read with its client's SDK (``ask``) and checked (``check``); the upstreams'
models: an OpenAI chat model and a Gemini one (plain or behind Gemini Code Assist's envelope)
that search when offered ``web_search``, then answer from the results they are fed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from openai.types.responses import Response, ResponseFunctionWebSearch
from pydantic import TypeAdapter

from tests.e2e.harness import JSONReply, Proxy, Recorded, Reply, SSEReply, sse_from_payloads
from tests.e2e.test_codex_tools import GEMINI_DECLARATION_KEYS, GEMINI_TOOL_KEYS
from tests.e2e.test_text_tools import openai_json
from tests.searxng_server import ScriptedSearxng

QUERY = "mitmproxy addon hooks"
DOCS = {
    "url": "https://docs.mitmproxy.org/stable/api/events.html",
    "title": "Event Hooks",
    "content": "Addons hook into events such as request and response.",
}
GITHUB = {
    "url": "https://github.com/mitmproxy/mitmproxy",
    "title": "mitmproxy on GitHub",
    "content": "An interactive TLS-capable intercepting proxy.",
}
ANSWER = f"Per {DOCS['url']}: hooks are events."


def results(*found: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    """SearXNG's results for ``QUERY``: ``found``, in order."""
    return {QUERY: list(found)}


def search_bridge(
    start_proxy: Callable[..., Proxy],
    tmp_path: Path,
    searxng: ScriptedSearxng,
    routes: Iterable[tuple[str, str, str]],
    upstream: str = "openai_chat",
    keys: str = "",
    search: str = "",
    **options: object,
) -> Proxy:
    """A mitmdump with a search route each ``(name, path glob, client dialect)`` of ``routes``,
    on ``upstream`` (``keys``: more route keys, a line each), running its searches on
    ``searxng`` (``search``: more keys of the ``search`` table, after a comma)."""
    table = f'search = {{url = "{searxng.base_url}"{search}}}\n'
    path = tmp_path / "routes.toml"
    path.write_text(
        "".join(
            f'[[routes]]\nname = "{name}"\npath = "{glob}"\nclient = "{client}"\n'
            f'upstream = "{upstream}"\n{table}{keys}'
            for name, glob, client in routes
        )
    )
    return start_proxy(bridge_routes=str(path), **options)


SEARCH_TURN = [{"role": "user", "content": f"Perform a web search for the query: {QUERY}"}]
"""Claude Code's WebSearch tool's one message."""


def claude_search(
    c: anthropic.Anthropic,
    stream: bool,
    tool: dict[str, Any],
    model: str = "claude-sonnet-4-6",
    max_tokens: int = 1024,
) -> anthropic.types.Message:
    """Claude Code's WebSearch request (``SEARCH_TURN``, the server ``tool`` only), whole or
    streamed, as the anthropic SDK reads its answer."""
    params: Any = {"model": model, "max_tokens": max_tokens, "messages": SEARCH_TURN}
    params["tools"] = [tool]
    if stream:
        with c.messages.stream(**params) as s:
            return s.get_final_message()
    return c.messages.create(**params)


# --------------------------------------------------------------------------- the recordings

RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures"
CLAUDE_CODE = RECORDINGS / "claude_code_web_search/claude-code-2.1.197-web-search.request.json"
"""Claude Code's WebSearch tool's own request: only ``web_search_20250305``, choice naming it."""
CODEX = RECORDINGS / "codex_web_search/codex-0.169.0-web-search.request.json"
"""Codex's main turn with ``web_search = "live"``: the hosted tool beside its function tools."""
GEMINI_CLI = RECORDINGS / "gemini_cli_web_search/gemini-cli-0.61.0-web-search.request.json"
"""Gemini CLI's ``google_web_search`` tool's own request: ``generateContent``, ``googleSearch``."""
_NOT_REPLAYED = {"content-length", "host", "accept-encoding", "connection", "authorization"}


def recorded(path: Path) -> tuple[str, dict[str, str], dict[str, Any]]:
    """A recording's path, its headers as a replay sends them (no framing, no key), its body."""
    rec = json.loads(path.read_text())
    headers = {k: v for k, v in rec["headers"].items() if k.lower() not in _NOT_REPLAYED}
    return rec["path"], headers, rec["body"]


def codex_params(body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Codex's recorded turn as the openai SDK's arguments (``stream`` set by the caller)."""
    body = dict(body or recorded(CODEX)[2])
    body.pop("stream")
    client_metadata = body.pop("client_metadata")
    return {**body, "extra_body": {"client_metadata": client_metadata}}


def anthropic_final(raw: bytes) -> anthropic.types.Message:
    """The message an Anthropic stream carries, read with the anthropic SDK's accumulator."""
    adapter: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)
    message = None
    bufs: dict[int, bytes] = {}
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            event = adapter.validate_json(line.removeprefix("data: "))
            message = accumulate_event(event=event, current_snapshot=message, json_bufs=bufs)
    assert message is not None
    return message


def sse_payloads(text: str) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body's ``data:`` lines."""
    return [
        json.loads(line.removeprefix("data: "))
        for line in text.splitlines()
        if line.startswith("data: ")
    ]


@dataclass(frozen=True)
class Client:
    """A client's recorded search request, sent through a bridge and read with its SDK."""

    name: str
    dialect: str
    path: str
    """The route's path glob."""
    ask: Callable[[str, bool, str], Any]
    """``(base_url, stream, key)`` → the answer as its SDK reads it."""
    check: Callable[[Any, list[str]], None]
    """The answer holds the search (its result URLs, in order) and the model's answer."""
    bridged: bool = True
    """The bridge runs the search (else a Gemini upstream runs Gemini CLI's own)."""


def ask_claude_code(base_url: str, stream: bool, key: str) -> anthropic.types.Message:
    path, headers, body = recorded(CLAUDE_CODE)
    body["stream"] = stream
    got = httpx.post(
        base_url + path,
        content=json.dumps(body).encode(),
        headers={**headers, "x-api-key": key},
        timeout=20,
    )
    assert got.status_code == 200, got.text
    if stream:
        return anthropic_final(got.content)
    return anthropic.types.Message.model_validate_json(got.content)


def check_claude_code(got: anthropic.types.Message, urls: list[str]) -> None:
    use, result, text = [b for b in got.content if b.type != "thinking"]
    assert use.type == "server_tool_use" and use.name == "web_search"
    assert use.input == {"query": QUERY} and use.id.startswith("srvtoolu_")
    assert result.type == "web_search_tool_result" and result.tool_use_id == use.id
    assert isinstance(result.content, list), result.content
    assert [r.url for r in result.content] == urls
    assert all(r.type == "web_search_result" and r.encrypted_content for r in result.content)
    assert text.type == "text" and text.text == ANSWER
    assert got.stop_reason == "end_turn"
    assert got.usage.server_tool_use is not None
    assert got.usage.server_tool_use.web_search_requests == 1
    assert (got.usage.input_tokens, got.usage.output_tokens) == (100, 40)  # both calls


def ask_codex(base_url: str, stream: bool, key: str) -> Response:
    c = openai.OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=20)
    if stream:
        with c.responses.stream(**codex_params()) as s:
            return s.get_final_response()
    return c.responses.create(**codex_params(), stream=False)


def check_codex(got: Response, urls: list[str]) -> None:
    search, message = [i for i in got.output if i.type != "reasoning"]
    assert isinstance(search, ResponseFunctionWebSearch)
    assert search.status == "completed" and search.id.startswith("ws_")
    assert search.action.type == "search" and search.action.query == QUERY
    assert [s.url for s in search.action.sources or []] == urls
    assert message.type == "message" and got.output_text == ANSWER
    assert got.status == "completed"
    assert got.usage is not None
    assert (got.usage.input_tokens, got.usage.output_tokens) == (100, 40)  # both calls


GROUNDING_KEYS = {
    "webSearchQueries", "groundingChunks", "groundingSupports", "searchEntryPoint",
    "retrievalMetadata", "retrievalQueries", "imageSearchQueries", "sourceFlaggingUris",
    "googleMapsWidgetContextToken",
}  # fmt: skip
"""google-genai's ``GroundingMetadata`` fields (camelCase, as Gemini writes them)."""
WEB_CHUNK_KEYS = {"uri", "title", "domain"}
"""google-genai's ``GroundingChunkWeb`` fields."""


def ask_gemini_cli(
    base_url: str, stream: bool, key: str, body: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The answer's chunks (one when whole): Gemini CLI asks whole (``generateContent``);
    streamed, the same body as ``streamGenerateContent?alt=sse``."""
    path, headers, recorded_body = recorded(GEMINI_CLI)
    if stream:
        path = path.replace(":generateContent", ":streamGenerateContent?alt=sse")
    got = httpx.post(
        base_url + path,
        json=body or recorded_body,
        headers={**headers, "x-goog-api-key": key},
        timeout=20,
    )
    assert got.status_code == 200, got.text
    if stream:
        assert got.headers["content-type"].startswith("text/event-stream")
        return sse_payloads(got.text)
    return [got.json()]


def check_grounding(chunks: list[dict[str, Any]], urls: list[str]) -> None:
    """The text is the model's answer; the grounding (on the last chunk, as Gemini sends it,
    in google-genai's field names) names the query and each result."""
    candidates = [c["candidates"][0] for c in chunks]
    parts = [p for c in candidates for p in c.get("content", {}).get("parts", [])]
    assert "".join(p.get("text", "") for p in parts) == ANSWER
    assert candidates[-1]["finishReason"] == "STOP"
    assert all("groundingMetadata" not in c for c in candidates[:-1])
    grounding = candidates[-1]["groundingMetadata"]
    assert set(grounding) <= GROUNDING_KEYS, grounding
    assert grounding["webSearchQueries"] == [QUERY]
    webs = [chunk["web"] for chunk in grounding["groundingChunks"]]
    assert all(set(w) <= WEB_CHUNK_KEYS for w in webs), webs
    assert [w["uri"] for w in webs] == urls
    titles = {r["url"]: r["title"] for r in (DOCS, GITHUB)}
    assert [w["title"] for w in webs] == [titles[u] for u in urls]


CLIENTS = {
    c.name: c
    for c in (
        Client("claude_code", "anthropic", "*/v1/messages", ask_claude_code, check_claude_code),
        Client("codex", "openai_responses", "*/v1/responses", ask_codex, check_codex),
        Client("gemini_cli", "gemini", "/v1beta/models/*", ask_gemini_cli, check_grounding),
    )
}


# --------------------------------------------------------------------------- chat upstream


def web_search_call(call_id: str = "call_s1") -> dict[str, Any]:
    """An OpenAI chat tool call of the ``web_search`` function the bridge offers."""
    args = json.dumps({"query": QUERY})
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "web_search", "arguments": args},
    }


def chat_reply(message: dict[str, Any], stream: bool = False) -> Reply:
    """A chat completion of ``message`` (usage 50 in, 20 out), whole or as OpenAI streams it."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    whole = openai_json("")
    whole["choices"][0].update(message={"role": "assistant", **message}, finish_reason=finish)
    if not stream:
        return JSONReply(whole)
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
    base = {k: whole[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks: list[Any] = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**base, "choices": [], "usage": whole["usage"]},
        "[DONE]",
    ]
    return SSEReply(sse_from_payloads(chunks))


def searching(call_id: str = "call_s1", stream: bool = False) -> Reply:
    """A chat completion whose one choice calls ``web_search`` for ``QUERY``."""
    return chat_reply({"content": None, "tool_calls": [web_search_call(call_id)]}, stream)


def chat_model(rec: Recorded) -> Reply:
    """The upstream's model: searches while it has no result, or when ``tool_choice`` makes it
    (a function named there, or ``required`` where ``web_search`` is the only tool, as OpenAI
    defines them); else answers from the last tool result. Streams when asked."""
    body = rec.json()
    stream = bool(body.get("stream"))
    choice = body.get("tool_choice")
    named = isinstance(choice, dict) and choice.get("function", {}).get("name") == "web_search"
    only = [t["function"]["name"] for t in body.get("tools", [])] == ["web_search"]
    fed = [m for m in body["messages"] if m["role"] == "tool"]
    if named or (choice == "required" and only) or not fed:
        return searching(f"call_s{len(fed) + 1}", stream)
    found = json.loads(fed[-1]["content"])
    return chat_reply({"content": f"Per {found[0]['url']}: hooks are events."}, stream)


# --------------------------------------------------------------------------- Gemini upstream

UPSTREAM_MODEL = "gemini-3-flash-preview"
SIGNATURE = "c2lnbmF0dXJlLW9mLXRoZS1zZWFyY2gtY2FsbA=="
PROJECT = "search-e2e-project"
_CODE_ASSIST_PATH = re.compile(r"/v1internal:(streamGenerateContent\?alt=sse|generateContent)")


def _refused(code: int, status: str, message: str) -> JSONReply:
    return JSONReply({"error": {"code": code, "message": message, "status": status}}, status=code)


def _candidate(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 20},
        "modelVersion": UPSTREAM_MODEL,
    }


def _text_of(response: Any) -> str:
    """The tool result's text, wherever the bridge put it in ``functionResponse.response``."""
    if isinstance(response, str):
        return response
    assert isinstance(response, dict), response
    (value,) = response.values()
    return _text_of(value)


class GeminiModel:
    """Gemini's ``generateContent`` (``code_assist``: behind Gemini Code Assist's
    ``/v1internal`` envelope, as the recorded Code Assist stream shows: ``{model, project,
    request}`` in, ``{"response": …, "traceId": …}`` out, a Bearer token). Refuses what the
    service refuses: a tool field it does not know; Code Assist a request with no Bearer token
    (401) or no project (403); and, before this script, the strict ``ScriptedUpstream`` what
    ``tests.upstream_rules`` finds Gemini refusing (a call fed back without its signature …). Runs ``googleSearch`` itself (grounding from the
    scripted results); offered ``web_search``, calls it (a ``functionCall`` with its
    ``thoughtSignature``) when it has no function response yet or ``toolConfig`` forces it
    (``ANY`` naming it), else answers from the last function response."""

    def __init__(self, found: list[dict[str, str]], key: str, code_assist: bool = False) -> None:
        self.found = found
        self.key = key
        self.code_assist = code_assist
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []

    def __call__(self, rec: Recorded) -> Reply:
        refused = self._refusal(rec)
        if refused is not None:
            return refused
        body = rec.json()["request"] if self.code_assist else rec.json()
        self.bodies.append(body)
        self.paths.append(rec.path)
        for i, tool in enumerate(body.get("tools") or []):
            unknown = sorted(set(tool) - GEMINI_TOOL_KEYS) or sorted(
                k for d in tool.get("functionDeclarations") or [] for k in d
                if k not in GEMINI_DECLARATION_KEYS
            )  # fmt: skip
            if unknown:
                return _refused(
                    400,
                    "INVALID_ARGUMENT",
                    f'Invalid JSON payload received. Unknown name "{unknown[0]}" at '
                    f"'tools[{i}]': Cannot find field.",
                )
        answer: dict[str, Any] = self._answer(body)
        if self.code_assist:
            answer = {"response": answer, "traceId": "search-e2e-trace"}
        if ":streamGenerateContent" in rec.path:
            assert rec.path.endswith("?alt=sse"), rec.path
            return SSEReply(sse_from_payloads([answer]), seed=len(self.bodies))
        return JSONReply(answer)

    def _refusal(self, rec: Recorded) -> JSONReply | None:
        if not self.code_assist:
            assert rec.path.startswith(f"/v1beta/models/{UPSTREAM_MODEL}:"), rec.path
            assert rec.headers.get("x-goog-api-key") == self.key
            return None
        assert _CODE_ASSIST_PATH.fullmatch(rec.path), rec.path
        assert "x-goog-api-key" not in rec.headers
        if rec.headers.get("authorization") != f"Bearer {self.key}":
            return _refused(401, "UNAUTHENTICATED", "Request had invalid authentication.")
        envelope = rec.json()
        if not envelope.get("project"):
            return _refused(403, "PERMISSION_DENIED", "The caller does not have permission")
        assert envelope.get("model") == UPSTREAM_MODEL, envelope.get("model")
        return None

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        tools = body.get("tools") or []
        if any("googleSearch" in t for t in tools):  # Gemini runs its own search
            grounded = _candidate([{"text": ANSWER}])
            grounded["candidates"][0]["groundingMetadata"] = {
                "webSearchQueries": [QUERY],
                "groundingChunks": [{"web": {"uri": r["url"], "title": r["title"]}}
                                    for r in self.found],
            }  # fmt: skip
            return grounded
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

    def check_fed_back(self, urls: list[str]) -> None:
        """Two calls: the first offered ``web_search`` (no ``googleSearch``), the second fed
        back the signed call and its response holding the results."""
        first, second = self.bodies
        names = [d["name"] for t in first["tools"] for d in t["functionDeclarations"]]
        assert names[-1:] == ["web_search"], names
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
        assert [r["url"] for r in found] == urls
