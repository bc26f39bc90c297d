"""The bridge's web search decided with plain values (``addon.plan.web_search``) and shown in
Anthropic's shape (``addon.dialects.anthropic.server_search``)."""

from __future__ import annotations

import dataclasses
from collections import Counter

from addon.config.search_backend import SearchBackend
from addon.dialects import DIALECTS
from addon.dialects.anthropic.server_search import SEARCH, server_tool_id
from addon.dialects.searches import Found, Searched
from addon.model import (
    Message,
    Notes,
    Opaque,
    OpaqueTool,
    Request,
    Response,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    Usage,
)
from addon.plan.web_search import Round, WebSearch, after, fed_back, offer_search, to_run

BACKEND = SearchBackend("http://127.0.0.1:8888")
READ = Tool("Read", "Read a file", {"type": "object", "properties": {}})
WEB = Tool("web_search", "Search the web", {"type": "object", "properties": {}})
SERVER = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2,
          "allowed_domains": ["docs.python.org"]}  # fmt: skip


def _request() -> Request:
    tools = (READ, OpaqueTool("anthropic", "web_search", "web_search_20250305", SERVER))
    return Request("anthropic", "m", (Message("user", (Text("q"),)),), tools, stream=True)


def test_the_server_tool_becomes_a_function_tool_in_its_place() -> None:
    notes: Notes = Counter()
    req, search = offer_search(
        _request(), DIALECTS["anthropic"], DIALECTS["openai_chat"], BACKEND, notes
    )
    assert search is not None and search.max_uses == 2
    assert search.ask.allowed_domains == ("docs.python.org",)
    assert req.tools is not None and [t.name for t in req.tools] == ["Read", "web_search"]
    assert isinstance(req.tools[1], Tool) and req.tools[1].parameters["required"] == ["query"]
    # A streaming client's upstream streams: the searches run live (``live``, the nonce).
    assert req.stream is True and req.stream_explicit
    assert search.live and search.nonce
    whole, searched = offer_search(
        dataclasses.replace(_request(), stream=False),
        DIALECTS["anthropic"],
        DIALECTS["openai_chat"],
        BACKEND,
        Counter(),
    )
    assert whole.stream is False and searched is not None and not searched.live
    assert not searched.nonce
    assert list(notes) == [
        "web search: web_search (web_search_20250305) run by the bridge (searxng)"
    ]


def test_an_anthropic_upstream_runs_it_itself_and_no_backend_is_said() -> None:
    notes: Notes = Counter()
    req = _request()
    same = offer_search(req, DIALECTS["anthropic"], DIALECTS["anthropic"], BACKEND, notes)
    assert same == (req, None) and not notes
    none = offer_search(req, DIALECTS["anthropic"], DIALECTS["openai_chat"], None, notes)
    assert none == (req, None)
    assert list(notes) == ["web search: no search backend on this route (search = {url = …})"]


def test_max_uses_and_bad_input_are_told_to_the_model() -> None:
    search = WebSearch(SEARCH.ask(OpaqueTool("anthropic", "web_search", "web_search_20250305", SERVER)) or SEARCH.ask(OpaqueTool("anthropic", "web_search", "web_search_x", {})), BACKEND)  # type: ignore[arg-type]  # fmt: skip
    calls = [ToolCall("a", "web_search", '{"query": "x"}'), ToolCall("b", "web_search", "{}"),
             ToolCall("c", "web_search", '{"query": "y"}')]  # fmt: skip
    assert to_run(search, calls, 1) == [
        "x",
        Searched("b", "", error="invalid_tool_input"),
        Searched("c", "y", error="max_uses_exceeded"),
    ]


def test_results_go_back_as_tool_results_and_the_client_sees_anthropics_blocks() -> None:
    search = WebSearch(SEARCH.ask(OpaqueTool("anthropic", "web_search", "web_search_20250305", {})), BACKEND)  # type: ignore[arg-type]  # fmt: skip
    call = ToolCall("call_1", "web_search", '{"query": "py"}')
    first = Response("openai_chat", "x", "m", (Text("Let me look."), call), "tool_calls",
                     usage=Usage(10, 2, origin="openai_chat"))  # fmt: skip
    found = Searched("call_1", "py", (Found("https://docs.python.org/", "Python", "docs"),))
    rounds = [Round(first, (found,))]
    fed = fed_back(_request(), rounds)
    assert [m.role for m in fed.messages] == ["user", "assistant", "tool"]
    assert fed.messages[1].parts == (Text("Let me look."), call)
    (result,) = fed.messages[2].parts
    assert isinstance(result, ToolResult) and result.tool_call_id == "call_1"
    assert result.name == "web_search"  # the function's (Gemini's functionResponse.name)
    # The last answer still asks to search when the rounds ran out: that call is left out.
    last = Response("openai_chat", "y", "m", (Text("Python."), ToolCall("z", "web_search", "{}")),
                    "tool_calls", usage=Usage(20, 3, origin="openai_chat"))  # fmt: skip
    rounds_out = rounds * 5
    answer = after(SEARCH, search, last, rounds_out)
    assert answer is not None and answer.finish == "stop"
    body = DIALECTS["anthropic"].encode_response(answer)
    kinds = [b["type"] for b in body["content"]]
    assert kinds == ["server_tool_use", "web_search_tool_result"] * 5 + ["text"]
    assert body["content"][0]["id"] == server_tool_id("call_1")
    assert body["content"][1]["content"][0]["url"] == "https://docs.python.org/"
    assert body["content"][-1]["text"] == "Let me look." * 5 + "Python."
    assert body["usage"]["server_tool_use"] == {"web_search_requests": 5, "web_fetch_requests": 0}
    assert (body["usage"]["input_tokens"], body["usage"]["output_tokens"]) == (70, 13)
    assert after(SEARCH, search, last, rounds) is None  # searches again


def test_a_choice_that_forced_the_search_is_auto_once_it_ran() -> None:
    """Claude Code's WebSearch request names the server tool in ``tool_choice``: it held for
    the first call; a choice of a client tool, or of any tool beside others, stays."""
    call = ToolCall("call_1", "web_search", '{"query": "py"}')
    first = Response("openai_chat", "x", "m", (call,), "tool_calls")
    rounds = [Round(first, (Searched("call_1", "py"),))]
    search_only = dataclasses.replace(
        _request(), tools=(WEB,), tool_choice=ToolChoice("tool", "web_search")
    )
    assert fed_back(search_only, rounds).tool_choice == ToolChoice("auto")
    required = dataclasses.replace(search_only, tool_choice=ToolChoice("required"))
    assert fed_back(required, rounds).tool_choice == ToolChoice("auto")
    both = dataclasses.replace(required, tools=(READ, WEB))
    assert fed_back(both, rounds).tool_choice == ToolChoice("required")
    read = dataclasses.replace(both, tool_choice=ToolChoice("tool", "Read"))
    assert fed_back(read, rounds).tool_choice == ToolChoice("tool", "Read")


def test_search_blocks_sent_back_are_left_out_for_the_upstream() -> None:
    """An earlier answer's ``server_tool_use`` / ``web_search_tool_result`` blocks come back in
    the history: another upstream cannot read them (OpenAI chat would refuse the parts)."""
    use = Opaque("anthropic", {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"})
    result = Opaque("anthropic", {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1"})
    history = (
        Message("user", (Text("q"),)),
        Message("assistant", (use, result, Text("Found it."))),
        Message("user", (Text("more"),)),
    )
    notes: Notes = Counter()
    req, search = offer_search(
        dataclasses.replace(_request(), messages=history),
        DIALECTS["anthropic"],
        DIALECTS["openai_chat"],
        BACKEND,
        notes,
    )
    assert search is not None
    assert [m.parts for m in req.messages] == [(Text("q"),), (Text("Found it."),), (Text("more"),)]
    assert notes["web search: 2 earlier search item(s) left out"] == 1


def test_the_results_reach_gemini_as_the_functions_response() -> None:
    """Gemini pairs a ``functionResponse`` with its call by the function's name (and keeps
    the call's ``thoughtSignature``, which Gemini 3 wants back)."""
    part = {
        "functionCall": {"name": "web_search", "args": {"query": "py"}},
        "thoughtSignature": "sig",
    }
    first = DIALECTS["gemini"].decode_response(
        {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP"}]}
    )
    (call,) = [p for p in first.parts if isinstance(p, ToolCall)]
    asked = dataclasses.replace(_request(), tools=(READ, WEB))  # as ``offer_search`` left it
    fed = fed_back(asked, [Round(first, (Searched(call.id, "py"),))])
    body = DIALECTS["gemini"].encode_request(fed, Counter())
    model, response = body["contents"][-2:]
    assert model["parts"][0]["functionCall"]["name"] == "web_search"
    assert model["parts"][0]["thoughtSignature"] == "sig"
    assert response["parts"][0]["functionResponse"]["name"] == "web_search"


def test_a_choice_naming_the_only_tool_is_sent_as_required() -> None:
    """llama-server reads ``tool_choice`` only as a string (a named choice object is ``auto``
    there): a choice of the search tool, the request's only tool, is ``required``; beside
    other tools the name stays."""
    search_tool = OpaqueTool("anthropic", "web_search", "web_search_20250305", SERVER)
    alone = dataclasses.replace(
        _request(), tools=(search_tool,), tool_choice=ToolChoice("tool", "web_search")
    )
    chat = DIALECTS["openai_chat"]
    req, _ = offer_search(alone, DIALECTS["anthropic"], chat, BACKEND, Counter())
    assert req.tool_choice == ToolChoice("required")
    assert chat.encode_request(req, Counter())["tool_choice"] == "required"
    beside = dataclasses.replace(alone, tools=(READ, search_tool))
    req, _ = offer_search(beside, DIALECTS["anthropic"], chat, BACKEND, Counter())
    assert req.tool_choice == ToolChoice("tool", "web_search")
