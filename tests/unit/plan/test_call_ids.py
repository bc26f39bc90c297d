"""Call ids the client already holds (issue 28): an upstream that reuses ids across turns
(Gemini's made ids under one ``responseId``, ``call_0`` every answer, a gateway's repeats) or
inside one answer gives the client fresh ones, ``<id>_<k>``, the same whole and streamed, fast
path on and off, cut anywhere; a same-dialect client never sees the old id."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.config.options import Settings
from addon.config.routes import Route
from addon.model import Message, Response, Text, ToolCall, ToolResult
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, decode_answer, encode_answer, stream_processor
from addon.stores.reasoning import ReasoningStore
from addon.transforms.call_ids import (
    RENAMED_NOTE,
    CallIds,
    fresh_call_ids,
    history_call_ids,
)
from addon.transforms.reasoning_record import KIND_CALL
from tests import eventstream_frames as frames
from tests.real.clients.loop import (
    GEMINI_SIGNATURE,
    Call,
    anthropic_message,
    anthropic_sse,
    chat_message,
    chat_sse,
    gemini_chunk,
    responses_body,
    responses_sse,
)
from tests.unit.helpers import accumulate, bytewise, feed_pieces, payloads, whole
from tests.upstream_rules import dialect_of, refusal_for

CLIENTS: dict[str, tuple[str, str]] = {
    "openai_chat": ("*/chat/completions", "/v1/chat/completions"),
    "anthropic": ("*/v1/messages", "/v1/messages"),
    "openai_responses": ("*/responses", "/v1/responses"),
    "gemini": ("*/models/*:*enerateContent", "/v1beta/models/m:generateContent"),
}
UPSTREAMS = ("openai_chat", "anthropic", "openai_responses", "gemini", "kiro")
RESPONSE_ID = "same-every-time"
ARGS = {"path": "a.txt"}


def upstream_id(upstream: str) -> str:
    """The id the scripted upstream gives its one call (Gemini: none; the bridge makes one
    from the answer's ``responseId``)."""
    return {
        "anthropic": "toolu_call_0",
        "gemini": f"call_{RESPONSE_ID}_0",
    }.get(upstream, "call_0")


def upstream_answer(upstream: str, stream: bool, calls: int = 1) -> bytes:
    """The scripted answer: ``calls`` calls of Read, all under the one id ``call_0`` (the
    Anthropic builder prefixes ``toolu_``; Gemini gives none and a fixed ``responseId``; Kiro
    tells its calls apart by ``toolUseId`` only: one call a time there)."""
    cs = [Call("Read", ARGS, id="call_0")] * calls
    if upstream == "kiro":  # AWS event-stream frames, streamed or whole
        return frames.stream(frames.tool_events("call_0", "Read", json.dumps(ARGS)) * calls)
    if upstream == "gemini":
        chunk = gemini_chunk(None, cs)
        chunk["responseId"] = RESPONSE_ID
        return b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n" if stream else _dump(chunk)
    if upstream == "anthropic":
        return anthropic_sse(None, cs) if stream else _dump(anthropic_message(None, cs))
    if upstream == "openai_chat":
        return chat_sse(None, cs) if stream else _dump(chat_message(None, cs))
    return responses_sse(None, cs) if stream else _dump(responses_body(None, cs))


def _dump(body: Any) -> bytes:
    return json.dumps(body).encode()


def history_body(client: str, held: str, stream: bool) -> dict[str, Any]:
    """A conversation whose earlier turn called Read under ``held`` and got its result."""
    if client == "gemini":
        call = {"functionCall": {"id": held, "name": "Read", "args": ARGS}}
        result = {"functionResponse": {"id": held, "name": "Read", "response": {"r": "A"}}}
        tool = {"name": "Read", "parameters": {"type": "object"}}
        return {
            "contents": [
                {"role": "user", "parts": [{"text": "read a"}]},
                {"role": "model", "parts": [call]},
                {"role": "user", "parts": [result]},
            ],
            "tools": [{"functionDeclarations": [tool]}],
        }
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    args = json.dumps(ARGS)
    if client == "openai_responses":
        return {
            "model": "m",
            "stream": stream,
            "input": [
                {"role": "user", "content": "read a"},
                {"type": "function_call", "call_id": held, "name": "Read", "arguments": args},
                {"type": "function_call_output", "call_id": held, "output": "A"},
            ],
            "tools": [{"type": "function", "name": "Read", "parameters": schema}],
        }
    if client == "anthropic":
        return {
            "model": "m",
            "max_tokens": 100,
            "stream": stream,
            "messages": [
                {"role": "user", "content": "read a"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": held, "name": "Read", "input": ARGS}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": held, "content": "A"}],
                },
            ],
            "tools": [{"name": "Read", "input_schema": schema}],
        }
    call = {"id": held, "type": "function", "function": {"name": "Read", "arguments": args}}
    return {
        "model": "m",
        "stream": stream,
        "messages": [
            {"role": "user", "content": "read a"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": held, "content": "A"},
        ],
        "tools": [{"type": "function", "function": {"name": "Read", "parameters": schema}}],
    }


def plan_for(
    client: str,
    upstream: str,
    stream: bool,
    held: str,
    fast: bool = True,
    store: ReasoningStore | None = None,
) -> FlowPlan:
    route = Route(
        name="r",
        path=CLIENTS[client][0],
        client=client,  # type: ignore[arg-type]
        upstream=upstream,  # type: ignore[arg-type]
    )
    path = CLIENTS[client][1]
    if stream and client == "gemini":
        path = path.replace(":generate", ":streamGenerate") + "?alt=sse"
    body = json.dumps(history_body(client, held, stream)).encode()
    settings = Settings(routes=(route,), fast_path=fast)
    d = decide(settings, route, Incoming("POST", "h", path, {}, body), {}, store=store)
    assert isinstance(d, Rewrite), d
    return d.plan


def streamed(plan: FlowPlan, pieces: list[bytes]) -> tuple[bytes, AnswerState]:
    state = AnswerState.of(plan)
    return feed_pieces(stream_processor(plan, state, None), pieces), state


def whole_answer(plan: FlowPlan, raw: bytes) -> tuple[bytes, AnswerState]:
    state = AnswerState.of(plan)
    return encode_answer(plan, decode_answer(plan, state, raw)), state


ID = re.compile(rb'"(?:id|call_id|tool_call_id)"\s*:\s*"((?:call|toolu)_[^"]*)"')


def call_ids(out: bytes) -> set[str]:
    """The call ids the client's bytes name (``id`` / ``call_id`` fields of calls)."""
    return {m.decode() for m in ID.findall(out)}


# --------------------------------------------------------------------------- the rule


def test_the_first_free_suffix_is_taken_in_order() -> None:
    ids = CallIds(frozenset({"call_0", "call_0_2"}))
    assert [ids.fresh(i) for i in ("call_0", "call_0", "call_1", "call_1", "")] == [
        "call_0_3",
        "call_0_4",
        "call_1",
        "call_1_2",
        "",
    ]


def test_history_ids_are_the_calls_and_the_results() -> None:
    messages = (
        Message("assistant", (Text("x"), ToolCall("a", "Read", "{}"))),
        Message("user", (ToolResult("b", "r"), ToolResult("", "r"))),
    )
    assert history_call_ids(messages) == {"a", "b"}


def test_a_whole_answer_without_repeats_is_the_same_object() -> None:
    answer = Response("x", None, None, (ToolCall("new", "Read", "{}"),), "tool_calls")
    assert fresh_call_ids(answer, frozenset({"old"})) == (answer, 0)


# --------------------------------------------------------------------------- through the plan


@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_a_held_id_reaches_the_client_renamed_whole_and_streamed(
    client: str, upstream: str
) -> None:
    held = upstream_id(upstream)
    fresh = f"{held}_2"
    outs: dict[str, bytes] = {}
    first = plan_for(client, upstream, True, held)
    for fast in (True, False):
        plan = dataclasses.replace(first, fast_path=fast)  # one answer: one id (issue 35)
        assert held in plan.history_ids
        raw = upstream_answer(upstream, True)
        for how, pieces in (("whole", whole(raw)), ("bytes", bytewise(raw))):
            out, state = streamed(plan, pieces)
            assert state.notes[RENAMED_NOTE] == 1
            outs[f"{fast}-{how}"] = out
    assert len(set(outs.values())) == 1, "fast path on/off and the reads give the same bytes"
    out = outs["True-whole"]
    body, state = whole_answer(
        plan_for(client, upstream, False, held), upstream_answer(upstream, False)
    )
    assert state.notes[RENAMED_NOTE] == 1
    if client == "gemini" and upstream == "gemini":
        # Same dialect, made id: a Gemini client is given no id at all.
        assert call_ids(out) == call_ids(body) == set()
        return
    assert call_ids(out) == call_ids(body) == {fresh}, (out, body)


@pytest.mark.parametrize("upstream", [u for u in UPSTREAMS if u != "kiro"])
@pytest.mark.parametrize("client", ["openai_chat", "anthropic", "openai_responses"])
def test_repeats_inside_one_answer_are_told_apart(client: str, upstream: str) -> None:
    held = upstream_id(upstream)
    plan = plan_for(client, upstream, True, "call_other")
    out, _ = streamed(plan, whole(upstream_answer(upstream, True, calls=2)))
    plan = plan_for(client, upstream, False, "call_other")
    body, _ = whole_answer(plan, upstream_answer(upstream, False, calls=2))
    # The Gemini decoder numbers its made ids: already apart.
    second = f"call_{RESPONSE_ID}_1" if upstream == "gemini" else f"{held}_2"
    expected = {held, second}
    assert expected <= call_ids(out)
    assert expected <= call_ids(body)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_every_cut_of_the_stream_gives_the_same_bytes(upstream: str, fast: bool) -> None:
    """Cut anywhere, on a same-dialect route (the raw paths) and across."""
    raw = upstream_answer(upstream, True)
    held = upstream_id(upstream)
    other = "anthropic" if upstream == "openai_chat" else "openai_chat"
    for client in [other] if upstream == "kiro" else [other, upstream]:
        plan = plan_for(client, upstream, True, held, fast)
        expected, _ = streamed(plan, [raw])
        if not client == upstream == "gemini":  # (a Gemini client gets no made id)
            assert f'"{held}_2"'.encode() in expected
        for cut in range(1, len(raw)):
            out, _ = streamed(plan, [raw[:cut], raw[cut:]])
            assert out == expected, (client, cut)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("client", ["anthropic", "openai_chat"])
def test_the_store_records_the_signature_under_the_new_id(client: str, stream: bool) -> None:
    """Gemini 3's ``thoughtSignature`` on a call whose made id the history holds: kept under
    the id the client gets (and sends back next turn), the held id's record untouched."""
    store = ReasoningStore()
    held = upstream_id("gemini")
    plan = plan_for(client, "gemini", stream, held, store=store)
    assert plan.sink is not None
    plan.sink.put(KIND_CALL, held, {"earlier": True})
    raw = upstream_answer("gemini", stream)
    out = streamed(plan, whole(raw))[0] if stream else whole_answer(plan, raw)[0]
    assert call_ids(out) == {f"{held}_2"}
    assert plan.sink.get(KIND_CALL, held) == {"earlier": True}
    record = plan.sink.get(KIND_CALL, f"{held}_2")
    assert record is not None and GEMINI_SIGNATURE in json.dumps(record)


# --------------------------------------------------------------------------- many turns


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(
            st.sampled_from(["call_0", "call_1", "0", "call_0_2", "x"]), min_size=1, max_size=4
        ),
        min_size=1,
        max_size=6,
    )
)
def test_ids_stay_unique_over_a_conversation_of_repeated_answers(turns: list[list[str]]) -> None:
    """Each turn's answer goes through the rename against the history the client built from
    the answers before it (calls and results under the ids the client got)."""
    messages: tuple[Message, ...] = (Message("user", (Text("go"),)),)
    seen: list[str] = []
    for ids in turns:
        answer = Response(
            "openai_chat",
            None,
            None,
            tuple(ToolCall(i, "Read", "{}") for i in ids),
            "tool_calls",
        )
        renamed, _ = fresh_call_ids(answer, history_call_ids(messages))
        again, _ = fresh_call_ids(answer, history_call_ids(messages))
        assert renamed == again  # deterministic
        got = [p.id for p in renamed.parts if isinstance(p, ToolCall)]
        seen += got
        messages += (
            Message("assistant", renamed.parts),
            Message("user", tuple(ToolResult(i, "ok") for i in got)),
        )
    assert len(seen) == len(set(seen))


# --------------------------------------------------------------------------- the next turn

NEXT_UPSTREAMS = ["anthropic", "openai_chat", "openai_responses", "gemini", "kiro"]


def next_turn(client: str, held: str) -> dict[str, Any]:
    """The client's next request: its history holds the held call and the renamed one, each
    with its result (what a client sends after a renamed answer)."""
    body = history_body(client, held, False)
    again = history_body(client, f"{held}_2", False)
    key = "input" if client == "openai_responses" else "messages"
    body[key] = [*body[key], *again[key][1:], {"role": "user", "content": "and again?"}]
    return body


@pytest.mark.parametrize("upstream", NEXT_UPSTREAMS)
@pytest.mark.parametrize("client", ["openai_chat", "anthropic", "openai_responses"])
def test_the_next_turn_with_the_renamed_id_is_what_the_upstream_takes(
    client: str, upstream: str
) -> None:
    """Call and result pair up under the renamed id: every upstream's rules take the turn
    (``tests.upstream_rules``), whatever id it gave the call itself."""
    route = Route(name="r", path="*", client=client, upstream=upstream)  # type: ignore[arg-type]
    body = json.dumps(next_turn(client, "call_0")).encode()
    d = decide(
        Settings(routes=(route,)), route, Incoming("POST", "h", CLIENTS[client][1], {}, body), {}
    )
    assert isinstance(d, Rewrite), d
    assert d.plan.history_ids == {"call_0", "call_0_2"}
    sent = d.body or json.dumps(d.wire.body).encode()
    assert b"call_0_2" in sent or upstream == "gemini"
    assert dialect_of(d.wire.path) == upstream  # the rules that apply are the upstream's
    refused = refusal_for("POST", d.wire.path, sent)
    assert refused is None, refused.message


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["openai_chat", "anthropic"]),
    st.lists(
        st.lists(st.sampled_from(["call_0", "call_1", "0", "call_0_2"]), min_size=1, max_size=3),
        min_size=1,
        max_size=4,
    ),
)
def test_a_replayed_conversation_keeps_its_ids_unique_through_the_bridge(
    upstream: str, turns: list[list[str]]
) -> None:
    """An OpenAI chat client's loop: each turn its request (the history so far) through
    ``decide``, the upstream's streamed answer with the ids drawn, the calls the client read
    (``accumulate``) and their results appended; every id it ever got is new."""
    schema = {"type": "object"}
    messages: list[Any] = [{"role": "user", "content": "go"}]
    route = Route(name="r", path="*", client="openai_chat", upstream=upstream)  # type: ignore[arg-type]
    seen: list[str] = []
    for ids in turns:
        body = {
            "model": "m",
            "stream": True,
            "messages": messages,
            "tools": [{"type": "function", "function": {"name": "Read", "parameters": schema}}],
        }
        raw = json.dumps(body).encode()
        d = decide(
            Settings(routes=(route,)),
            route,
            Incoming("POST", "h", "/v1/chat/completions", {}, raw),
            {},
        )
        assert isinstance(d, Rewrite), d
        sent = json.loads(d.body or json.dumps(d.wire.body))
        assert refusal_for("POST", d.wire.path, json.dumps(sent).encode()) is None
        calls = [Call("Read", {"n": i}, id=cid) for i, cid in enumerate(ids)]
        answer = chat_sse(None, calls) if upstream == "openai_chat" else anthropic_sse(None, calls)
        out, _ = streamed(d.plan, whole(answer))
        got = accumulate(payloads(out.decode().replace("\r\n", "\n").encode()))["calls"]
        got_ids = [got[i]["id"] for i in sorted(got)]
        assert len(got_ids) == len(ids)
        seen += got_ids
        tool_calls = [
            {
                "id": cid,
                "type": "function",
                "function": {"name": "Read", "arguments": "".join(got[i]["fragments"])},
            }
            for i, cid in zip(sorted(got), got_ids, strict=True)
        ]
        messages = [
            *messages,
            {"role": "assistant", "content": None, "tool_calls": tool_calls},
            *({"role": "tool", "tool_call_id": cid, "content": "ok"} for cid in got_ids),
        ]
    assert len(seen) == len(set(seen)), seen
