"""Every answer a client gets carries an id of its own (issue 35, "Ids and reporting"): an
upstream that names no message (Kiro, a chat server without ``id``) or names the same one every
time gives each answer a fresh id in the client's dialect, streamed and whole; every event of
one streamed answer says the same id; a same-dialect upstream's own id is kept."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from addon.dialects import DIALECTS
from addon.model import (
    AnswerDefaults,
    Event,
    Finish,
    MessageStart,
    Response,
    StreamEnd,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallEnd,
    ToolCallStart,
    new_nonce,
)
from addon.plan.answer import AnswerState, decode_answer, encode_answer
from tests.unit.dialects.ids_shapes import COMPLETION_ID, MESSAGE_ID, RESPONSE_ID
from tests.unit.dialects.kiro.conftest import TEXT_ANSWER, plan_for, run

SHAPES = {"anthropic": MESSAGE_ID, "openai_responses": RESPONSE_ID, "openai_chat": COMPLETION_ID}
CLIENTS = list(SHAPES)
OTHER = {"anthropic": "openai_chat", "openai_responses": "anthropic", "openai_chat": "gemini"}
"""An upstream dialect other than the client's."""


def events(origin: str, upstream_id: str | None) -> list[Event]:
    return [
        MessageStart(origin, id=upstream_id, model="m"),
        ThinkingDelta("hm"),
        TextDelta("Hi"),
        ToolCallStart(0, "call_1", "Read", '{"p": 1}'),
        ToolCallEnd(0),
        Finish("tool_calls"),
        StreamEnd(),
    ]


def streamed(client: str, evs: list[Event], defaults: AnswerDefaults) -> list[dict[str, Any]]:
    """The data of each event the client gets (``[DONE]`` left out)."""
    encoder = DIALECTS[client].stream_encoder(defaults)
    pairs = [p for e in evs for p in encoder.feed(e)] + encoder.finish()
    return [json.loads(data) for _, data in pairs if data != "[DONE]"]


def answer_ids(client: str, datas: list[dict[str, Any]]) -> set[str]:
    """The message / response / completion ids the events of one answer say."""
    if client == "anthropic":
        return {d["message"]["id"] for d in datas if d["type"] == "message_start"}
    if client == "openai_responses":
        return {d["response"]["id"] for d in datas if "response" in d}
    return {d["id"] for d in datas}


def item_ids(datas: list[dict[str, Any]]) -> set[str]:
    """The item ids a streamed Responses answer names, wherever it names one."""
    ids = {d["item_id"] for d in datas if "item_id" in d}
    ids |= {d["item"]["id"] for d in datas if "item" in d}
    ids |= {o["id"] for d in datas if "response" in d for o in d["response"]["output"]}
    return ids


def one_id(client: str, datas: list[dict[str, Any]]) -> str:
    ids = answer_ids(client, datas)
    assert len(ids) == 1, ids  # every event of one answer says the same id
    (got,) = ids
    assert SHAPES[client].fullmatch(got), got
    return got


# --------------------------------------------------------------------------- streamed


@pytest.mark.parametrize("upstream_id", [None, "same-every-time"], ids=["none", "repeated"])
@pytest.mark.parametrize("client", CLIENTS)
def test_two_streamed_answers_get_two_ids(client: str, upstream_id: str | None) -> None:
    first = streamed(
        client, events(OTHER[client], upstream_id), AnswerDefaults("m", 1, new_nonce())
    )
    second = streamed(
        client, events(OTHER[client], upstream_id), AnswerDefaults("m", 1, new_nonce())
    )
    assert one_id(client, first) != one_id(client, second)
    if client == "openai_responses":
        assert not item_ids(first) & item_ids(second)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_streamed_answer_from_an_upstream_without_ids_at_all(client: str) -> None:
    """Kiro's events: no id, no model."""
    evs: list[Event] = [MessageStart("kiro"), TextDelta("Hi"), Finish("stop"), StreamEnd()]
    one_id(client, streamed(client, evs, AnswerDefaults("m", 1, new_nonce())))


def test_a_responses_answers_item_ids_agree_across_its_events() -> None:
    datas = streamed(
        "openai_responses", events("openai_chat", None), AnswerDefaults("m", 1, new_nonce())
    )
    added = [d["item"]["id"] for d in datas if d["type"] == "response.output_item.added"]
    done = [d["item"]["id"] for d in datas if d["type"] == "response.output_item.done"]
    final = [o["id"] for o in datas[-1]["response"]["output"]]
    assert added == done == final and len(set(added)) == 3
    assert item_ids(datas) == set(added)


@pytest.mark.parametrize("client", CLIENTS)
def test_one_answer_read_twice_says_one_id(client: str) -> None:
    """Two encoders of one answer (the fast path and the general way: the same defaults)."""
    defaults = AnswerDefaults("m", 1, new_nonce())
    first = streamed(client, events(OTHER[client], None), defaults)
    assert first == streamed(client, events(OTHER[client], None), defaults)


@pytest.mark.parametrize(
    ("client", "upstream_id"),
    [
        ("anthropic", "msg_01UpstreamOwnIdXXXXXXXX"),
        ("openai_responses", "resp_upstream"),
        ("openai_chat", "chatcmpl-upstream"),
    ],
)
def test_a_same_dialect_upstreams_own_id_is_kept(client: str, upstream_id: str) -> None:
    evs = events(client, upstream_id)  # its message / response object (envelope) as it came
    evs[0] = MessageStart(client, id=upstream_id, model="m", envelope={"id": upstream_id})
    for defaults in (AnswerDefaults("m", 1, new_nonce()), AnswerDefaults("m", 1, new_nonce())):
        assert answer_ids(client, streamed(client, evs, defaults)) == {upstream_id}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_same_dialect_upstream_that_names_none_gets_one(client: str) -> None:
    first = streamed(client, events(client, None), AnswerDefaults("m", 1, new_nonce()))
    second = streamed(client, events(client, None), AnswerDefaults("m", 1, new_nonce()))
    assert one_id(client, first) != one_id(client, second)


# --------------------------------------------------------------------------- whole


def whole(origin: str, upstream_id: str | None) -> Response:
    parts = (Thinking("hm"), Text("Hi"), ToolCall("call_1", "Read", "{}"))
    return Response(origin, upstream_id, "m", parts, "tool_calls")


@pytest.mark.parametrize("upstream_id", [None, "same-every-time"], ids=["none", "repeated"])
@pytest.mark.parametrize("client", CLIENTS)
def test_two_whole_answers_get_two_ids(client: str, upstream_id: str | None) -> None:
    encode = DIALECTS[client].encode_response
    first = encode(whole(OTHER[client], upstream_id))
    second = encode(whole(OTHER[client], upstream_id))
    assert SHAPES[client].fullmatch(first["id"]) and SHAPES[client].fullmatch(second["id"])
    assert first["id"] != second["id"]
    if client == "openai_responses":
        ids = [{o["id"] for o in body["output"]} for body in (first, second)]
        assert len(ids[0]) == 3 and not ids[0] & ids[1]


@pytest.mark.parametrize(
    ("client", "upstream_id"),
    [
        ("anthropic", "msg_01UpstreamOwnIdXXXXXXXX"),
        ("openai_responses", "resp_upstream"),
        ("openai_chat", "chatcmpl-upstream"),
    ],
)
def test_a_same_dialect_whole_answers_own_id_is_kept(client: str, upstream_id: str) -> None:
    assert DIALECTS[client].encode_response(whole(client, upstream_id))["id"] == upstream_id


@pytest.mark.parametrize("client", CLIENTS)
def test_a_same_dialect_whole_answer_without_an_id_gets_one(client: str) -> None:
    encode = DIALECTS[client].encode_response
    first, second = encode(whole(client, None)), encode(whole(client, None))
    assert SHAPES[client].fullmatch(first["id"]) and first["id"] != second["id"]


# --------------------------------------------------------------------------- through the plan


_ID = re.compile(rb'"id":\s*"((?:msg_|resp_|chatcmpl-)[^"]*)"')


@pytest.mark.parametrize("client", CLIENTS)
def test_two_kiro_answers_get_two_ids_streamed_and_whole(client: str) -> None:
    """Kiro names no message: each flow's answer, streamed or whole, gets its own."""
    assert not _ID.search(TEXT_ANSWER)
    streams = [run(client, [TEXT_ANSWER]) for _ in range(2)]
    wholes = []
    for _ in range(2):
        plan = plan_for(client, stream=False)
        state = AnswerState.of(plan)
        wholes.append(encode_answer(plan, decode_answer(plan, state, TEXT_ANSWER)))
    for a, b in (streams, wholes):
        ids_a, ids_b = set(_ID.findall(a)), set(_ID.findall(b))
        assert ids_a and ids_b and not ids_a & ids_b
        top = {i.decode() for i in ids_a if SHAPES[client].fullmatch(i.decode())}
        assert len(top) == 1, ids_a
