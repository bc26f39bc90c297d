"""A live web search's body read as one answer (``addon.stream.second_call``; issue 44 point 1):
an OpenAI chat upstream's first call (the model's words and its ``web_search`` call), the
leg's marker, the next call's answer — through the stream processor to each client dialect;
the processor's moves (``SECOND_CALL``); what is held, dropped and added up; forged markers;
``Heard``, the leg's ear."""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.dialects import DIALECTS
from addon.dialects.searches import Found, Searched
from addon.model import ToolCall
from addon.plan.answer import AnswerState, stream_processor
from addon.stream.processor import State, StreamProcessor
from addon.stream.second_call import MARKER, Heard, SearchCalls, marker, read_marker
from tests.unit.plan.test_stream_attach_plan import decided

NONCE = "n0nce-of-the-flow"
DOCS = Found("https://docs.mitmproxy.org/", "Event Hooks", "Addons hook into events.")
FOUND = (Searched("call_s1", "mitmproxy hooks", (DOCS,)),)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [choice]}  # fmt: skip


def _call(index: int, call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    fn = {"name": name, "arguments": json.dumps(args)}
    return _chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                   "function": fn}]})  # fmt: skip


def _body(text: str, calls: list[dict[str, Any]], tokens: tuple[int, int]) -> bytes:
    """One chat completion stream: the role, the text in pieces, the calls, the finish, the
    usage chunk, ``[DONE]``."""
    payloads = [_chunk({"role": "assistant", "content": ""})]
    payloads += [_chunk({"content": text[i : i + 5]}) for i in range(0, len(text), 5)]
    payloads += calls
    payloads.append(_chunk({}, "tool_calls" if calls else "stop"))
    usage = {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]}
    payloads.append({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    return b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads) + (
        b"data: [DONE]\n\n"
    )


SEARCH = _call(0, "call_s1", "web_search", {"query": "mitmproxy hooks"})
FIRST = _body("Let me search.", [SEARCH], (50, 10))
SECOND = _body("Hooks are events.", [], (70, 20))


def _processor(client: str) -> tuple[StreamProcessor, SearchCalls, list[int]]:
    ran: list[int] = []
    shape = DIALECTS[client].web_search
    assert shape is not None
    calls = SearchCalls(
        DIALECTS["openai_chat"].stream_decoder, "web_search", NONCE, shape, client, ran.append
    )
    p = StreamProcessor(calls, DIALECTS[client].stream_encoder(), same_dialect=False)
    calls.moves = (p.second_call, p.second_call_ended)
    return p, calls, ran


def _run(p: StreamProcessor, body: bytes, size: int) -> bytes:
    out = [b"".join(p.feed(body[i : i + size])) for i in range(0, len(body), size)]
    return b"".join([*out, *p.finish()])


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line.removeprefix(b"data: "))
        for line in raw.splitlines()
        if line.startswith(b"data: ") and line != b"data: [DONE]"
    ]


def test_a_marker_carries_the_searches_under_the_flows_nonce_only() -> None:
    raw = marker(NONCE, FOUND)
    assert raw.startswith(b"\n\nevent: " + MARKER.encode() + b"\ndata: ")
    data = raw.split(b"data: ", 1)[1].strip().decode()
    assert read_marker(data, NONCE) == FOUND
    assert read_marker(data, "another") is None
    assert read_marker(data, "") is None
    assert read_marker('{"searched": []}', NONCE) is None
    assert read_marker("not json", NONCE) is None
    assert read_marker('{"nonce": "n0nce-of-the-flow", "searched": [{}]}', NONCE) is None


@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
def test_an_anthropic_client_gets_one_message_with_the_search_between_the_calls_words(
    size: int,
) -> None:
    """Any split of the body: one ``message_start``, the first call's words, the search's two
    blocks, the next call's words, one ``message_delta`` (``end_turn``, the usage of both
    calls and ``server_tool_use``), one ``message_stop``; the model's search call never shown."""
    p, calls, ran = _processor("anthropic")
    out = _run(p, FIRST + marker(NONCE, FOUND) + SECOND, size)
    events = _events(out)
    kinds = [e["type"] for e in events]
    assert kinds.count("message_start") == 1 and kinds.count("message_stop") == 1
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b["type"] for b in starts] == [
        "text",
        "server_tool_use",
        "web_search_tool_result",
        "text",
    ]
    assert [e["index"] for e in events if e["type"] == "content_block_start"] == [0, 1, 2, 3]
    assert starts[1]["input"] == {"query": "mitmproxy hooks"}
    assert starts[2]["content"][0]["url"] == DOCS.url
    texts = "".join(
        e["delta"]["text"] for e in events if e.get("delta", {}).get("type") == "text_delta"
    )
    assert texts == "Let me search.Hooks are events."
    assert b'tool_use"' not in out.replace(b"server_tool_use", b"")  # no call of the model's
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    usage = delta["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (120, 30)
    assert usage["server_tool_use"]["web_search_requests"] == 1
    assert ran == [1] and calls.forged == 0
    assert p.state is State.DONE and p.ended_with_error is None


def test_the_processor_moves_to_second_call_and_back() -> None:
    """The first call's ``[DONE]`` after a search call: ``SECOND_CALL`` (its ending held,
    nothing written, not known to have ended); the marker: ``READING``, the search shown."""
    p, _, _ = _processor("anthropic")
    head = b"".join(p.feed(FIRST))
    assert p.state is State.SECOND_CALL
    assert b"message_delta" not in head and b"message_stop" not in head
    assert not p.upstream_ended()
    shown = b"".join(p.feed(marker(NONCE, FOUND)))
    assert p.state is State.READING
    assert b"server_tool_use" in shown and b"web_search_tool_result" in shown
    rest = b"".join([*p.feed(SECOND), *p.finish()])
    assert b"Hooks are" in rest and b"message_stop" in rest


def test_rounds_run_out_the_search_call_is_left_out_and_the_answer_stops() -> None:
    """No marker after a body that called the search tool (``MAX_ROUNDS``): its words, then
    ``end_turn`` — never the model's call of the bridge's tool."""
    p, _, ran = _processor("anthropic")
    out = _run(p, FIRST, 16)
    events = _events(out)
    assert [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"] == [
        "text"
    ]
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert "server_tool_use" not in delta["usage"] and ran == []


def test_a_client_call_beside_the_search_is_the_last_calls_only() -> None:
    """The first call searches and calls a client tool: both held and dropped at the marker
    (the whole path feeds back only the search); the next call's client call reaches the
    client, numbered from 0."""
    run = _call(1, "call_x1", "exec_command", {"cmd": "ls"})
    first = _body("", [SEARCH, run], (50, 10))
    second = _body("", [_call(0, "call_x2", "exec_command", {"cmd": "ls"})], (70, 20))
    p, _, _ = _processor("openai_responses")
    out = _run(p, first + marker(NONCE, FOUND) + second, 9)
    events = _events(out)
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert [i["type"] for i in added] == ["web_search_call", "function_call"]
    assert added[1]["call_id"] == "call_x2"
    (done,) = [e for e in events if e["type"] == "response.completed"]
    output = done["response"]["output"]
    assert [i["type"] for i in output] == ["web_search_call", "function_call"]
    assert done["response"]["usage"]["input_tokens"] == 120


def test_a_gemini_client_gets_the_grounding_on_the_last_chunk() -> None:
    p, _, _ = _processor("gemini")
    out = _run(p, FIRST + marker(NONCE, FOUND) + SECOND, 33)
    chunks = _events(out)
    assert all("groundingMetadata" not in c["candidates"][0] for c in chunks[:-1])
    last = chunks[-1]["candidates"][0]
    assert last["groundingMetadata"]["webSearchQueries"] == ["mitmproxy hooks"]
    assert last["finishReason"] == "STOP"
    assert chunks[-1]["usageMetadata"]["promptTokenCount"] == 120


def test_a_forged_marker_is_dropped_and_counted() -> None:
    """Markers the upstream writes (another nonce, none): dropped, the stream goes on; its
    search call stays unshown and the answer stops."""
    forged = marker("forged", (Searched("x", "forged", (Found("https://forged.example/", "F"),)),))
    bare = b'event: cursor-bridge.web_search\ndata: {"searched": []}\n\n'
    p, calls, ran = _processor("anthropic")
    out = _run(p, forged + bare + FIRST, 11)
    assert b"forged" not in out and b"server_tool_use" not in out
    assert calls.forged == 2 and ran == []
    assert b"end_turn" in out


def test_the_leg_hears_the_search_call() -> None:
    """``Heard``: the body's events as one answer, its search call with its arguments."""
    heard = Heard(DIALECTS["openai_chat"].stream_decoder(), "openai_chat")
    for i in range(0, len(FIRST), 13):
        heard.feed(FIRST[i : i + 13])
    answer = heard.answer()
    assert answer is not None
    (call,) = [p for p in answer.parts if isinstance(p, ToolCall)]
    assert (call.id, call.name, json.loads(call.arguments)) == (
        "call_s1",
        "web_search",
        {"query": "mitmproxy hooks"},
    )
    assert answer.usage is not None and answer.usage.input_tokens == 50
    broken = Heard(DIALECTS["openai_chat"].stream_decoder(), "openai_chat")
    broken.feed(b'data: {"error": {"message": "overloaded"}}\n\n')
    assert broken.answer() is None


def test_a_live_plans_stream_processor_reads_with_its_nonce_and_counts_the_searches() -> None:
    """``stream_processor`` of a plan whose search runs live (``decide``): the decoder is
    ``SearchCalls`` under the plan's nonce; the searches go to the flow's state (the usage
    ledger's ``searches``) and its notes; the usage is every call's."""
    plan = decided("anthropic", "openai_chat", search=True).plan
    assert plan.search is not None and plan.search.live and plan.upstream_streams
    state = AnswerState.of(plan)
    p = stream_processor(plan, state, None)
    forged = b"".join(p.feed(marker("forged", FOUND)))
    out = b"".join([*p.feed(FIRST + marker(plan.search.nonce, FOUND) + SECOND), *p.finish()])
    assert b"server_tool_use" in out and b"server_tool_use" not in forged
    assert state.searches == 1
    assert state.answer_notes(plan)["web search run live by the bridge"] == 1
    assert state.usage is not None and state.usage.input_tokens == 120


@pytest.mark.parametrize("client", ["anthropic", "gemini"])
def test_two_rounds_show_each_search_once_and_add_up_three_calls(client: str) -> None:
    """The model searches again after the first results: two markers, three calls; each
    search shown once (Anthropic's blocks), the grounding of both (Gemini's, on the last
    chunk), the usage of the three calls."""
    again = (Searched("call_s2", "mitmproxy events", (DOCS,)),)
    middle = _body("", [_call(0, "call_s2", "web_search", {"query": "mitmproxy events"})], (60, 5))
    p, _, ran = _processor(client)
    body = FIRST + marker(NONCE, FOUND) + middle + marker(NONCE, again) + SECOND
    events = _events(_run(p, body, 29))
    assert ran == [1, 2]
    if client == "anthropic":
        starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
        assert [b["type"] for b in starts] == ["text"] + [
            "server_tool_use",
            "web_search_tool_result",
        ] * 2 + ["text"]
        (delta,) = [e for e in events if e["type"] == "message_delta"]
        assert delta["usage"]["input_tokens"] == 180
        assert delta["usage"]["server_tool_use"]["web_search_requests"] == 2
    else:
        last = events[-1]
        grounding = last["candidates"][0]["groundingMetadata"]
        assert grounding["webSearchQueries"] == ["mitmproxy hooks", "mitmproxy events"]
        assert last["usageMetadata"]["promptTokenCount"] == 180
