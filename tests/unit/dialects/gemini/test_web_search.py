"""Gemini's ``googleSearch`` tool read, and the bridge's searches shown as the candidate's
``groundingMetadata``, whole and on the last streamed chunk (``addon.dialects.gemini.web_search``)."""

from __future__ import annotations

import json

from addon.dialects import DIALECTS
from addon.dialects.gemini.web_search import SEARCH
from addon.dialects.searches import Found, SearchAsk, Searched
from addon.model import OpaqueTool, Response, Text
from addon.stream.whole import sse_from_response

A = Found("https://docs.python.org/", "Python", "docs")
B = Found("https://peps.python.org/", "PEPs")
SEARCHED = [Searched("c1", "py", (A, B)), Searched("c2", "pep", (B,)), Searched("c3", "", error="invalid_tool_input")]  # fmt: skip
LAST = Response("openai_chat", "x", "m", (Text("Python."),), "stop")


def test_google_search_in_either_spelling_is_read_others_not() -> None:
    tool = OpaqueTool("gemini", "googleSearch", "googleSearch", {"googleSearch": {"excludeDomains": ["x.com", 1]}})  # fmt: skip
    assert SEARCH.ask(tool) == SearchAsk("web_search", "googleSearch", blocked_domains=("x.com",))
    snake = OpaqueTool("gemini", "google_search", "google_search", {"google_search": {}})
    assert SEARCH.ask(snake) == SearchAsk("web_search", "google_search")
    assert SEARCH.ask(OpaqueTool("gemini", "codeExecution", "codeExecution", {})) is None


def test_the_grounding_is_the_candidates_not_a_part() -> None:
    for name in ("gemini", "gemini_code_assist"):
        body = DIALECTS[name].encode_response(SEARCH.answer(LAST, SEARCHED))
        (candidate,) = body.get("response", body)["candidates"]
        assert candidate["content"]["parts"] == [{"text": "Python."}]
        assert candidate["groundingMetadata"] == {
            "webSearchQueries": ["py", "pep"],  # the search that never ran is no query
            "groundingChunks": [
                {"web": {"uri": "https://docs.python.org/", "title": "Python"}},
                {"web": {"uri": "https://peps.python.org/", "title": "PEPs"}},  # once
            ],
        }


def test_streamed_it_rides_on_the_last_chunk() -> None:
    answer = SEARCH.answer(LAST, SEARCHED)
    sse = sse_from_response(answer, DIALECTS["gemini"].stream_encoder(), "sse", SEARCH.events)
    chunks = [json.loads(x.removeprefix(b"data: ")) for x in sse.split(b"\n\n") if x.strip()]
    assert "groundingMetadata" not in chunks[0]["candidates"][0]
    last = chunks[-1]["candidates"][0]
    assert last["finishReason"] == "STOP" and len(last["groundingMetadata"]["groundingChunks"]) == 2
