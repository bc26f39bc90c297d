"""OpenAI's hosted ``web_search`` tool read, and the bridge's searches shown as the openai SDK's
``ResponseFunctionWebSearch`` items and stream events (``addon.dialects.openai_responses.web_search``)."""

from __future__ import annotations

from openai.types.responses import ResponseFunctionWebSearch, ResponseStreamEvent
from pydantic import TypeAdapter

from addon.dialects import DIALECTS
from addon.dialects.openai_responses.web_search import SEARCH, call_id
from addon.dialects.searches import Found, SearchAsk, Searched
from addon.model import Opaque, OpaqueTool, RawEvent, Response, Text
from addon.stream.whole import sse_from_response

FOUND = Searched("call_1", "py", (Found("https://docs.python.org/", "Python", "docs"),))
FAILED = Searched("call_2", "", error="invalid_tool_input")


def test_the_hosted_tool_and_its_preview_are_read_others_not() -> None:
    tool = {"type": "web_search", "filters": {"allowed_domains": ["python.org", 3]}}
    assert SEARCH.ask(OpaqueTool("openai_responses", None, "web_search", tool)) == SearchAsk(
        "web_search", "web_search", allowed_domains=("python.org",)
    )
    preview = OpaqueTool(
        "openai_responses", None, "web_search_preview", {"type": "web_search_preview"}
    )
    assert SEARCH.ask(preview) == SearchAsk("web_search", "web_search_preview")
    assert SEARCH.ask(OpaqueTool("openai_responses", None, "tool_search", {})) is None
    assert SEARCH.ask(OpaqueTool("anthropic", "web_search", "web_search", {})) is None


def test_searches_become_web_search_call_items_before_the_message() -> None:
    last = Response("openai_chat", "x", "m", (Text("Python."),), "stop")
    body = DIALECTS["openai_responses"].encode_response(SEARCH.answer(last, [FOUND, FAILED]))
    first, second, message = body["output"]
    ok = ResponseFunctionWebSearch.model_validate(first)
    assert ok.id == call_id("call_1") and ok.status == "completed"
    assert ok.action.type == "search" and ok.action.query == "py"
    assert [s.url for s in ok.action.sources or []] == ["https://docs.python.org/"]
    assert ResponseFunctionWebSearch.model_validate(second).status == "failed"
    assert message["type"] == "message" and message["content"][0]["text"] == "Python."


def test_the_streamed_items_are_the_sdks_events() -> None:
    last = Response("openai_chat", "x", "m", (Text("Python."),), "stop")
    answer = SEARCH.answer(last, [FOUND, FAILED])
    events = SEARCH.events(answer.parts[0], 0)
    assert all(isinstance(e, RawEvent) for e in events)
    assert SEARCH.events(Opaque("anthropic", {"type": "web_search_call"}), 0) == []
    encoder = DIALECTS["openai_responses"].stream_encoder()
    sse = sse_from_response(answer, encoder, "sse", SEARCH.events).decode()
    adapter: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
    parsed = [
        adapter.validate_json(line.removeprefix("data: "))
        for line in sse.splitlines()
        if line.startswith("data: ")
    ]
    kinds = [e.type for e in parsed]
    assert kinds[2:7] == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
    ]
    # The failed search: no ``completed`` event, its item done as ``failed``.
    assert kinds[7:11] == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.output_item.done",
    ]
    final = parsed[-1]
    assert final.type == "response.completed"
    assert [o.type for o in final.response.output] == ["web_search_call"] * 2 + ["message"]
    assert [getattr(o, "status", None) for o in final.response.output[:2]] == [
        "completed",
        "failed",
    ]
