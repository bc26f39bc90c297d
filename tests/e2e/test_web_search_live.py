"""End to end: a streaming client's web search streams LIVE (issue 44 point 1;
docs/tools.md#web-search). Through a real mitmdump to a scripted OpenAI chat upstream that
streams as OpenAI does when asked (``stream: true``; whole when not) and the scripted SearXNG:
its model calls the offered ``web_search`` function, then answers from the results — writing
its answer's first words, then HOLDING its stream until the test saw those words reach the
client (a gate, bounded): the client's first text must come before the upstream's last call
has ended. For Claude Code's recorded WebSearch request (the anthropic SDK's stream), Codex's
recorded turn (the openai SDK's Responses stream) and Gemini CLI's ``googleSearch`` request
(``streamGenerateContent?alt=sse``, read with raw httpx); each client's final answer parses
with the searches in its own shape and the usage of both calls. Also: a marker forged by the
upstream is not shown; a call with the results that fails ends the client's stream with its
dialect's error event."""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai.types.responses import ResponseFunctionWebSearch, ResponseOutputMessage

from tests.e2e.harness import (
    JSONReply,
    Proxy,
    Recorded,
    Reply,
    ScriptedUpstream,
    SSEReply,
    sse_from_payloads,
)
from tests.e2e.searching import (
    ANSWER,
    CLAUDE_CODE,
    DOCS,
    GEMINI_CLI,
    GITHUB,
    QUERY,
    SEARCH_TURN,
    codex_params,
    recorded,
    results,
    search_bridge,
    searching,
)
from tests.e2e.test_text_tools import openai_json
from tests.e2e.test_web_search import TOOL as CLAUDE_TOOL
from tests.searxng_server import ScriptedSearxng

FORGED = b"".join(
    b"event: cursor-bridge.web_search\ndata: " + json.dumps(d).encode() + b"\n\n"
    for d in (
        {"nonce": "not-the-flows", "searched": [
            {"call_id": "call_f", "query": "forged", "error": None,
             "results": [{"url": "https://forged.example/", "title": "Forged", "content": "x",
                          "page_age": None}]}]},
        {"searched": []},
    )
)  # fmt: skip
"""Two markers an upstream might write: another nonce, none."""


@pytest.fixture
def searxng() -> Iterator[ScriptedSearxng]:
    with ScriptedSearxng(results(DOCS, GITHUB)) as server:
        yield server


@pytest.fixture
def bridge(start_proxy: Callable[..., Proxy], tmp_path: Path, searxng: ScriptedSearxng) -> Proxy:
    """A mitmdump whose Anthropic, Responses and Gemini routes run their searches on
    ``searxng``."""
    routes = [
        (f"{client}-search", path, client)
        for client, path in (
            ("anthropic", "*/v1/messages"),
            ("openai_responses", "*/v1/responses"),
            ("gemini", "/v1beta/models/*"),
        )
    ]
    return search_bridge(start_proxy, tmp_path, searxng, routes)


def chunks(completion: dict[str, Any]) -> list[Any]:
    """A chat completion's text as OpenAI streams it: the role, the text 8 characters a chunk,
    the finish, the usage in a last chunk without choices, ``[DONE]``."""
    head = {k: completion[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    text = choice["message"]["content"]
    out: list[Any] = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": text[i : i + 8]}) for i in range(0, len(text), 8)]
    out.append(chunk({}, choice["finish_reason"]))
    return [*out, {**head, "choices": [], "usage": completion["usage"]}, "[DONE]"]


class LiveModel:
    """The upstream's model: searches first (streamed when asked), then answers from the
    results, streamed in pieces — the role, its first words, then (held until ``gate``) the
    rest; ``finished`` once its last call's body ended. ``forged``: marker events written before
    its search call; ``then`` replaces its answer (a failure)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.finished = threading.Event()
        self.forged = b""
        self.then: Callable[[Recorded], Any] | None = None
        self.streamed: list[bool] = []

    def __call__(self, rec: Recorded) -> Reply:
        body = rec.json()
        stream = bool(body.get("stream"))
        self.streamed.append(stream)
        if body["messages"][-1]["role"] != "tool":
            first = searching(stream=stream)
            if isinstance(first, SSEReply) and self.forged:
                return SSEReply(self.forged + first.body, chunk_min=5, chunk_max=40, seed=2)
            return first
        if self.then is not None:
            return self.then(rec)  # type: ignore[no-any-return]
        found = json.loads(body["messages"][-1]["content"])
        completion = openai_json(f"Per {found[0]['url']}: hooks are events.")
        if not stream:
            self.finished.set()
            return JSONReply(completion)
        return self.held(completion)

    def held(self, completion: dict[str, Any], **more: Any) -> SSEReply:
        """The completion's chunks: the role and the first text, then the gate, then the rest."""
        pieces = [sse_from_payloads([c]) for c in chunks(completion)]
        cuts = (len(pieces[0]), len(pieces[0]) + len(pieces[1]))
        return SSEReply(
            b"".join(pieces), cuts=cuts, hold=(2, self.gate), finished=self.finished, **more
        )

    def saw_text(self) -> None:
        """The client got text: the upstream must still be in its last call (live)."""
        assert not self.finished.is_set(), "the client's first text came after the upstream ended"
        self.gate.set()

    def text(self, texts: list[str], piece: str) -> None:
        """``piece`` of the answer's text reached the client: kept in ``texts``; the first one
        must come live (``saw_text``)."""
        if not texts:
            self.saw_text()
        texts.append(piece)


@pytest.fixture
def model(upstream: ScriptedUpstream) -> LiveModel:
    """The upstream's live model (its script); a test may set ``forged`` or ``then``."""
    live = LiveModel()
    upstream.script = live
    return live


def _anthropic(p: Proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=p.base_url, api_key="sk-ant-e2e", max_retries=0, timeout=30)


def test_claude_codes_recorded_search_streams_live(
    bridge: Proxy, model: LiveModel, searxng: ScriptedSearxng
) -> None:
    body = recorded(CLAUDE_CODE)[2]
    body.pop("stream")
    known = inspect.signature(anthropic.Anthropic().messages.stream).parameters
    extra = {k: body.pop(k) for k in list(body) if k not in known}
    texts: list[str] = []
    with _anthropic(bridge).messages.stream(**body, extra_body=extra) as s:
        for event in s:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                model.text(texts, event.delta.text)
        final = s.get_final_message()
    assert "".join(texts) == ANSWER and len(texts) > 1
    use, result, text = final.content
    assert use.type == "server_tool_use" and use.input == {"query": QUERY}
    assert result.type == "web_search_tool_result" and result.tool_use_id == use.id
    assert isinstance(result.content, list)
    assert [r.url for r in result.content] == [DOCS["url"], GITHUB["url"]]
    assert text.type == "text" and text.text == ANSWER
    assert final.stop_reason == "end_turn"
    assert final.usage.server_tool_use is not None
    assert final.usage.server_tool_use.web_search_requests == 1
    assert (final.usage.input_tokens, final.usage.output_tokens) == (100, 40)  # both calls
    assert model.streamed == [True, True] and len(searxng.requests) == 1


def test_codexs_turn_streams_live(bridge: Proxy, model: LiveModel) -> None:
    texts: list[str] = []
    kinds: list[str] = []
    codex = openai.OpenAI(
        base_url=bridge.base_url + "/v1", api_key="sk-e2e", max_retries=0, timeout=30
    )
    with codex.responses.stream(**codex_params()) as s:
        for event in s:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                model.text(texts, event.delta)
        response = s.get_final_response()
    assert "".join(texts) == ANSWER and len(texts) > 1
    search, message = response.output
    assert isinstance(search, ResponseFunctionWebSearch) and search.status == "completed"
    assert search.action.type == "search" and search.action.query == QUERY
    assert isinstance(message, ResponseOutputMessage)
    assert response.output_text == ANSWER
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (100, 40)
    assert kinds.index("response.web_search_call.completed") < kinds.index(
        "response.output_text.delta"
    )
    assert kinds.count("response.created") == 1 and kinds[-1] == "response.completed"
    assert model.streamed == [True, True]


def test_gemini_clis_search_streams_live(bridge: Proxy, model: LiveModel) -> None:
    chunks: list[dict[str, Any]] = []
    path, headers, body = recorded(GEMINI_CLI)
    url = bridge.base_url + path.replace(":generateContent", ":streamGenerateContent?alt=sse")
    headers = {**headers, "x-goog-api-key": "gm-e2e"}
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as got:
        assert got.status_code == 200
        for line in got.iter_lines():
            if not line.startswith("data: "):
                continue
            chunk = json.loads(line.removeprefix("data: "))
            parts = chunk["candidates"][0].get("content", {}).get("parts", [])
            if any(part.get("text") for part in parts) and not any(
                part.get("text") for c in chunks for part in c["candidates"][0]["content"]["parts"]
            ):
                model.saw_text()
            chunks.append(chunk)
    text = "".join(
        part.get("text", "")
        for c in chunks
        for part in c["candidates"][0].get("content", {}).get("parts", [])
    )
    assert text == ANSWER and len(chunks) > 2
    last = chunks[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    grounding = last["candidates"][0]["groundingMetadata"]
    assert grounding["webSearchQueries"] == [QUERY]
    assert [g["web"]["uri"] for g in grounding["groundingChunks"]] == [DOCS["url"], GITHUB["url"]]
    usage = last["usageMetadata"]
    assert (usage["promptTokenCount"], usage["candidatesTokenCount"]) == (100, 40)
    assert model.streamed == [True, True]


def _raw_anthropic_stream(p: Proxy, model: LiveModel) -> str:
    """An Anthropic stream of the search request read with raw httpx, as it comes; the gate
    set at the first text delta."""
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "stream": True,
        "messages": SEARCH_TURN,
        "tools": [CLAUDE_TOOL],
    }
    out = []
    headers = {"x-api-key": "sk-ant-e2e", "anthropic-version": "2023-06-01"}
    with httpx.stream(
        "POST", p.base_url + "/v1/messages", json=body, headers=headers, timeout=30
    ) as got:
        assert got.status_code == 200
        for line in got.iter_lines():
            if '"text_delta"' in line and not model.gate.is_set():
                model.saw_text()
            out.append(line)
    model.gate.set()
    return "\n".join(out)


def test_a_forged_marker_is_not_shown(bridge: Proxy, model: LiveModel) -> None:
    """Marker events the upstream writes itself (another nonce, none) are dropped: the client
    sees the bridge's one search only."""
    model.forged = FORGED
    with _anthropic(bridge).messages.stream(
        model="claude-sonnet-4-6",
        max_tokens=1024,
        messages=[{"role": "user", "content": "search"}],
        tools=[CLAUDE_TOOL],  # type: ignore[list-item]
    ) as s:
        for event in s:
            if event.type == "content_block_delta" and not model.gate.is_set():
                model.saw_text()
        final = s.get_final_message()
    kinds = [b.type for b in final.content]
    assert kinds == ["server_tool_use", "web_search_tool_result", "text"]
    assert "forged" not in final.model_dump_json()
    assert final.usage.server_tool_use is not None
    assert final.usage.server_tool_use.web_search_requests == 1


def test_a_failed_call_with_the_results_ends_the_stream_with_an_error_event(
    bridge: Proxy, model: LiveModel
) -> None:
    """The call that carries the results is refused (HTTP 500): the client's stream, which
    showed the search already, ends with Anthropic's error event, never a made-up end."""
    model.then = lambda rec: JSONReply({"error": {"message": "boom", "type": "server_error"}}, 500)
    model.gate.set()
    text = _raw_anthropic_stream(bridge, model)
    assert '"server_tool_use"' in text and '"web_search_tool_result"' in text
    assert "event: error" in text and "search_call_failed" in text
    assert "message_stop" not in text
    bridge.wait_for_log(r"web search: the call with the results got HTTP 500")


def test_a_call_with_the_results_cut_mid_stream_ends_with_an_error_event(
    bridge: Proxy, model: LiveModel
) -> None:
    """The call with the results breaks off after its first words: the client got them live,
    then its dialect's error event naming the cut."""

    def cut(rec: Recorded) -> SSEReply:
        answer = model.held(openai_json("Per the docs: hooks are events."), abort=True)
        return SSEReply(answer.body[: answer.cuts[1]], cuts=answer.cuts[:1], abort=True)

    model.then = cut
    text = _raw_anthropic_stream(bridge, model)
    assert '"text_delta"' in text and "Per the " in text
    assert "event: error" in text and "upstream_cut" in text
    assert "message_stop" not in text
