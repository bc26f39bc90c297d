"""End to end: Codex CLI's hosted ``web_search`` tool (beside its function tools in the main
turn) on an OpenAI chat upstream that cannot run it, the route naming a SearXNG backend (issue
44 point 1; docs/tools.md#web-search). The recorded Codex 0.169 request
(``tests/fixtures/codex_web_search``, recorded with ``web_search = "live"``: it carries
``{"type": "web_search", …}`` beside Codex's function tools) goes through a real mitmdump to a scripted chat upstream
(its model calls the ``web_search`` function tool, then answers from the results) and the
scripted SearXNG Search API; the openai SDK reads the answer's ``web_search_call`` items
(``ResponseFunctionWebSearch``), whole, as ``responses.create(stream=True)``'s events and as
``responses.stream``'s final response."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseFunctionToolCall, ResponseFunctionWebSearch

from tests.e2e.harness import JSONReply, Proxy, Recorded, Reply, ScriptedUpstream
from tests.e2e.searching import (
    ANSWER,
    CODEX,
    DOCS,
    QUERY,
    chat_model,
    chat_reply,
    codex_params,
    recorded,
    results,
    search_bridge,
    web_search_call,
)
from tests.e2e.test_text_tools import openai_json
from tests.searxng_server import ScriptedSearxng

RESULTS = results(
    DOCS, {"url": "https://elsewhere.example/x", "title": "Elsewhere", "content": "not allowed"}
)


@pytest.fixture
def searxng() -> Iterator[ScriptedSearxng]:
    with ScriptedSearxng(RESULTS) as server:
        yield server


@pytest.fixture
def bridge(start_proxy: Callable[..., Proxy], tmp_path: Path, searxng: ScriptedSearxng) -> Proxy:
    """A mitmdump whose Codex route runs its searches on ``searxng``."""
    codex = [("codex-search", "*/v1/responses", "openai_responses")]
    return search_bridge(start_proxy, tmp_path, searxng, codex)


def _params(allowed: list[str] | None = None) -> dict[str, Any]:
    """The recorded Codex request as the openai SDK's arguments (``stream`` set by the test);
    the web_search tool as recorded, with ``filters.allowed_domains`` where given."""
    body = recorded(CODEX)[2]
    assert {"type": "web_search", "external_web_access": True,
            "search_content_types": ["text", "image"]} in body["tools"]  # fmt: skip
    if allowed is not None:
        for t in body["tools"]:
            if t["type"] == "web_search":
                t["filters"] = {"allowed_domains": allowed}
    return codex_params(body)


def _call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip


def _calls(*calls: dict[str, Any], stream: bool = False) -> Reply:
    """A chat completion calling ``calls``, whole or streamed (as the request asked)."""
    return chat_reply({"content": None, "tool_calls": list(calls)}, stream)


def _client(p: Proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=p.base_url + "/v1", api_key="sk-e2e", max_retries=0, timeout=20)


def test_codexs_web_search_whole(
    bridge: Proxy, upstream: ScriptedUpstream, searxng: ScriptedSearxng
) -> None:
    upstream.script = chat_model
    got = _client(bridge).responses.create(**_params(allowed=["mitmproxy.org"]), stream=False)

    search, message = got.output
    assert isinstance(search, ResponseFunctionWebSearch)
    assert search.type == "web_search_call" and search.id.startswith("ws_")
    assert search.status == "completed"
    assert search.action.type == "search" and search.action.query == QUERY
    assert [s.url for s in search.action.sources or []] == [
        "https://docs.mitmproxy.org/stable/api/events.html"
    ]  # filters.allowed_domains kept the other out
    assert message.type == "message" and got.output_text == ANSWER
    assert got.status == "completed"
    assert (got.usage.input_tokens, got.usage.output_tokens) == (100, 40)  # both calls

    (searched,) = searxng.requests
    assert searched.params == {"q": QUERY, "format": "json"}
    first, second = upstream.requests
    sent = first.json()
    assert sent["stream"] is False
    names = [t["function"]["name"] for t in sent["tools"]]
    assert "web_search" in names and "exec_command" in names and "apply_patch" in names
    assert names.index("web_search") == len(names) - 1  # in its place: last in Codex's list
    fed = second.json()["messages"]
    assert fed[-1]["role"] == "tool" and fed[-1]["tool_call_id"] == "call_s1"
    bridge.wait_for_log(rf"web search on {searxng.base_url}: {QUERY}")


def test_codexs_web_search_streamed(
    bridge: Proxy, upstream: ScriptedUpstream, searxng: ScriptedSearxng
) -> None:
    upstream.script = chat_model
    events = list(_client(bridge).responses.create(**_params(), stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:7] == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
    ]
    assert kinds[7] == "response.output_item.added" and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added, done = events[2], events[6]
    assert added.type == "response.output_item.added" and done.type == "response.output_item.done"
    assert added.output_index == done.output_index == 0
    assert isinstance(done.item, ResponseFunctionWebSearch)
    assert done.item.action.type == "search" and done.item.action.query == QUERY
    assert all(getattr(e, "item_id", done.item.id) == done.item.id for e in events[3:6])
    final = events[-1]
    assert final.type == "response.completed"
    assert [o.type for o in final.response.output] == ["web_search_call", "message"]
    assert final.response.output_text == ANSWER

    # The SDK's stream helper reads the same answer.
    upstream.requests.clear()
    with _client(bridge).responses.stream(**_params()) as s:
        response = s.get_final_response()
    assert [o.type for o in response.output] == ["web_search_call", "message"]
    assert response.output_text == ANSWER
    assert len(searxng.requests) == 2


def test_a_turn_that_also_calls_codexs_tools(
    bridge: Proxy, upstream: ScriptedUpstream, searxng: ScriptedSearxng
) -> None:
    """The model searches and calls a client tool at once: the search runs first (its results
    fed back), then the client's call reaches Codex as its ``function_call`` item."""
    run = _call("exec_command", {"cmd": "cat hello.txt"}, "call_x1")

    def searching_and_running(rec: Recorded) -> Reply:
        last = rec.json()["messages"][-1]
        if last["role"] != "tool":
            return _calls(web_search_call(), run, stream=bool(rec.json().get("stream")))
        return _calls(run, stream=bool(rec.json().get("stream")))

    upstream.script = searching_and_running
    for stream in (False, True):
        if stream:
            with _client(bridge).responses.stream(**_params()) as s:
                got = s.get_final_response()
        else:
            got = _client(bridge).responses.create(**_params(), stream=False)
        search, call = got.output
        assert isinstance(search, ResponseFunctionWebSearch) and search.status == "completed"
        assert isinstance(call, ResponseFunctionToolCall)
        assert (call.name, call.call_id) == ("exec_command", "call_x1")
        assert json.loads(call.arguments) == {"cmd": "cat hello.txt"}
    second = upstream.requests[1]
    fed = second.json()["messages"]
    # Only the search call and its result are fed back: the model calls its tool again.
    assert [c["id"] for c in fed[-2]["tool_calls"]] == ["call_s1"]
    assert fed[-1]["role"] == "tool" and fed[-1]["tool_call_id"] == "call_s1"
    assert len(upstream.requests) == 4 and len(searxng.requests) == 2


def test_the_next_turn_carries_the_search_items_back(
    bridge: Proxy, upstream: ScriptedUpstream
) -> None:
    """Codex sends the answer's items back in its next turn (``store: false``): the
    ``web_search_call`` item is left out for the chat upstream, the model's message kept."""
    upstream.script = chat_model
    params = _params()
    got = _client(bridge).responses.create(**params, stream=False)
    upstream.requests.clear()
    back = [item.model_dump(exclude_none=True) for item in got.output]
    params["input"] = [
        *params["input"],
        *back,
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks."}]},
    ]
    upstream.script = lambda rec: JSONReply(openai_json("You are welcome."))
    again = _client(bridge).responses.create(**params, stream=False)
    assert again.output_text == "You are welcome."
    (sent,) = upstream.requests
    messages = sent.json()["messages"]
    assert messages[-2]["role"] == "assistant"
    assert messages[-2]["content"] == [{"type": "text", "text": ANSWER}]
    assert messages[-1]["role"] == "user"
    assert "web_search_call" not in sent.body.decode()
