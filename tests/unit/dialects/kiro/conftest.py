"""The Kiro tests' shared pieces: a plan for each client dialect routed to a Kiro upstream
(``plan_for``), its stream processor fed frames (``run``), and a text answer in frames."""

from __future__ import annotations

import json
from typing import Any

from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, stream_processor
from tests import eventstream_frames as ef
from tests.unit.helpers import feed_pieces

TOOLS = [
    {"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}},
    {"name": "List", "description": "List files", "input_schema": {"type": "object"}},
]
CLIENTS = {
    "openai_chat": ("*/chat/completions", "/v1/chat/completions"),
    "anthropic": ("*/v1/messages", "/v1/messages"),
    "openai_responses": ("*/responses", "/v1/responses"),
}


def request_body(client: str, stream: bool) -> dict[str, Any]:
    if client == "anthropic":
        return {
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "stream": stream,
            "tools": TOOLS,
            "messages": [{"role": "user", "content": "read a"}],
        }
    if client == "openai_responses":
        return {
            "model": "claude-sonnet-4-5",
            "stream": stream,
            "input": "read a",
            "tools": [
                {
                    "type": "function",
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                }
                for t in TOOLS
            ],
        }
    return {
        "model": "claude-sonnet-4-5",
        "stream": stream,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "read a"}],
    }


def plan_for(client: str, stream: bool = True) -> FlowPlan:
    glob, path = CLIENTS[client]
    route = Route(name="k", client=client, path=glob, upstream="kiro")  # type: ignore[arg-type]
    inc = Incoming(
        "POST",
        "h",
        path,
        {"authorization": "Bearer t"},
        json.dumps(request_body(client, stream)).encode(),
    )
    d = decide(Settings(), route, inc, {})
    assert isinstance(d, Rewrite), d
    assert d.plan.upstream_framing == "aws_eventstream"
    return d.plan


def run(client: str, pieces: list[bytes], plan: FlowPlan | None = None) -> bytes:
    """What a client of ``client``'s dialect gets for a Kiro stream fed in ``pieces`` (the
    answer of ``plan``'s flow, a new flow's by default)."""
    plan = plan or plan_for(client)
    return feed_pieces(stream_processor(plan, AnswerState.of(plan), None), pieces)


TEXT_ANSWER = ef.stream(
    [
        ("messageMetadataEvent", {"conversationId": "c", "utteranceId": "u"}),
        *ef.text_events("a says A, b says B — ünïcödé 🎉.", 7),
        *ef.usage_events(6.0),
    ]
)
