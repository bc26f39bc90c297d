"""The model the client asked for and the time, where the upstream's answer says neither (Kiro).

Every client dialect, streamed (its encoder built with the defaults) and whole (the plan's
``encode_answer``): the client sees its own model name and a real time, never ``""`` / ``0``;
an upstream's own model and time win.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.model import (
    AnswerDefaults,
    Finish,
    MessageStart,
    Response,
    StreamEnd,
    Text,
    TextDelta,
)
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import encode_answer
from tests.unit.conftest import PINNED

CLIENTS = ["openai_chat", "anthropic", "openai_responses", "gemini", "gemini_code_assist"]
ASKED = AnswerDefaults("claude-sonnet-4-6", 1_764_000_000)


def payloads(client: str, events: list[Any], defaults: AnswerDefaults) -> list[dict[str, Any]]:
    encoder = DIALECTS[client].stream_encoder(defaults)
    pairs = [p for e in events for p in encoder.feed(e)] + encoder.finish()
    return [json.loads(data) for _, data in pairs if data != "[DONE]"]


def stamped(client: str, first: dict[str, Any]) -> tuple[str | None, int | None]:
    """The model and time a client reads from its first stream event."""
    match client:
        case "openai_chat":
            return first["model"], first["created"]
        case "anthropic":
            return first["message"]["model"], None
        case "openai_responses":
            return first["response"]["model"], first["response"]["created_at"]
        case "gemini":
            return first.get("modelVersion"), None
        case "gemini_code_assist":
            return first["response"].get("modelVersion"), None
    raise AssertionError(client)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_stream_without_model_or_time_gets_the_asked_ones(client: str) -> None:
    events = [MessageStart("kiro"), TextDelta("hi"), Finish("stop"), StreamEnd()]
    model, created = stamped(client, payloads(client, events, ASKED)[0])
    assert model == ASKED.model
    assert created in (None, ASKED.created)


@pytest.mark.parametrize("client", CLIENTS)
def test_the_upstreams_own_model_and_time_win(client: str) -> None:
    start = MessageStart("kiro", model="upstream-model", created=1_700_000_000)
    events = [start, TextDelta("hi"), Finish("stop"), StreamEnd()]
    model, created = stamped(client, payloads(client, events, ASKED)[0])
    assert model == "upstream-model"
    assert created in (None, 1_700_000_000)


def kiro_plan(client: str) -> FlowPlan:
    paths = {
        "openai_chat": "/v1/chat/completions",
        "anthropic": "/v1/messages",
        "openai_responses": "/v1/responses",
        "gemini": "/v1beta/models/claude-sonnet-4-6:generateContent",
        "gemini_code_assist": "/v1internal:generateContent",
    }
    bodies: dict[str, Any] = {
        "openai_chat": {"model": ASKED.model, "messages": [{"role": "user", "content": "hi"}]},
        "anthropic": {
            "model": ASKED.model,
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
        },
        "openai_responses": {"model": ASKED.model, "input": "hi"},
        "gemini": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        "gemini_code_assist": {
            "model": ASKED.model,
            "project": "p",
            "request": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        },
    }
    route = Route(name="k", client=client, upstream="kiro")
    inc = Incoming("POST", "h", paths[client], {}, json.dumps(bodies[client]).encode())
    d = decide(Settings(), route, inc, {"X": "k"})
    assert isinstance(d, Rewrite), d
    return d.plan


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("client", CLIENTS)
def test_a_whole_answer_without_model_or_time_gets_the_asked_ones(
    client: str, stream: bool
) -> None:
    plan = kiro_plan(client)
    assert (plan.defaults.model, plan.defaults.created) == (ASKED.model, PINNED)  # pinned here
    assert len(plan.defaults.nonce) == 32  # the answer's id is made from it
    plan = dataclasses.replace(plan, stream=stream)
    answer = Response("kiro", None, None, (Text("hi"),), "stop")
    raw = encode_answer(plan, answer)
    if stream:
        if plan.client_framing == "json_array":
            first = json.loads(raw)[0]
        else:
            datas = [ln[6:] for ln in raw.decode().splitlines() if ln.startswith("data: ")]
            first = json.loads(datas[0])
        model, created = stamped(client, first)
    else:
        body = json.loads(raw)
        model, created = {
            "openai_chat": lambda b: (b["model"], b["created"]),
            "anthropic": lambda b: (b["model"], None),
            "openai_responses": lambda b: (b["model"], b["created_at"]),
            "gemini": lambda b: (b.get("modelVersion"), None),
            "gemini_code_assist": lambda b: (b["response"].get("modelVersion"), None),
        }[client](body)
    assert model == ASKED.model
    assert created in (None, PINNED)
