"""The scripted Kiro and Gemini Code Assist of the loops refuse what the real ones refuse and
answer in their framing: Kiro's AWS event-stream (read back with botocore), Code Assist's
``{"response": …, "traceId": …}`` wrapper (as in the recorded Code Assist stream)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer

from tests.e2e.harness import Headers, JSONReply, Recorded, SSEReply
from tests.kiro_rules import IMPROPER
from tests.real.clients.loop import Call
from tests.real.clients.wrapped import KIRO_ARN, PROJECT, CodeAssistLoop, KiroLoop
from tests.realdata import FIXTURES

READ_A = Call("Read", {"path": "a.txt"}, id="tooluse_a")
READ_B = Call("Read", {"path": "b.txt"}, id="tooluse_b")
TOOL = {
    "toolSpecification": {
        "name": "Read",
        "description": "Read a file",
        "inputSchema": {"json": {"type": "object", "properties": {}}},
    }
}


def request(path: str, body: Any, auth: str = "Bearer k") -> Recorded:
    return Recorded("POST", path, Headers({"authorization": auth}), json.dumps(body).encode())


def kiro_body(content: str) -> dict[str, Any]:
    message = {
        "content": content,
        "modelId": "claude-sonnet-4.5",
        "origin": "AI_EDITOR",
        "userInputMessageContext": {"tools": [TOOL]},
    }
    return {
        "profileArn": KIRO_ARN,
        "conversationState": {
            "chatTriggerType": "MANUAL",
            "conversationId": "c",
            "currentMessage": {"userInputMessage": message},
            "history": [],
        },
    }


def test_the_kiro_of_the_loops_refuses_a_blank_message() -> None:
    loop = KiroLoop("kiro", [[(READ_A, "T1")]])
    reply = loop(request("/generateAssistantResponse", kiro_body("  ")))
    assert reply == JSONReply(IMPROPER, status=400)
    assert loop.refusals == ["currentMessage.userInputMessage.content is blank"]
    assert [t.kind for t in loop.turns] == ["refused"]


def test_the_kiro_of_the_loops_answers_calls_in_event_stream_frames() -> None:
    loop = KiroLoop("kiro", [[(READ_A, "T1"), (READ_B, "T2")]])
    reply = loop(request("/generateAssistantResponse", kiro_body("read both")))
    assert isinstance(reply, SSEReply)
    assert reply.headers["content-type"] == "application/vnd.amazon.eventstream"
    buffer = EventStreamBuffer()
    buffer.add_data(reply.body)
    inputs: dict[str, str] = {}
    for message in buffer:
        assert message.headers[":message-type"] == "event"
        if message.headers[":event-type"] == "toolUseEvent":
            event = json.loads(message.payload)
            inputs[event["toolUseId"]] = inputs.get(event["toolUseId"], "") + event.get("input", "")
    assert {k: json.loads(v) for k, v in inputs.items()} == {
        "tooluse_a": READ_A.arguments,
        "tooluse_b": READ_B.arguments,
    }


def test_the_kiro_of_the_loops_wants_a_bearer_token() -> None:
    loop = KiroLoop("kiro", [[(READ_A, "T1")]])
    with pytest.raises(AssertionError, match="Bearer"):
        loop(request("/generateAssistantResponse", kiro_body("x"), auth=""))


def code_assist_body(project: str) -> dict[str, Any]:
    tools = [{"functionDeclarations": [{"name": "Read", "parameters": {"type": "object"}}]}]
    inner = {"contents": [{"role": "user", "parts": [{"text": "read a"}]}], "tools": tools}
    return {"model": "gemini-2.5-flash", "project": project, "request": inner}


def test_the_code_assist_of_the_loops_wraps_its_answers_as_recorded() -> None:
    recorded = FIXTURES / "gemini-codeassist-v1internal-stream-log-response-wrapper.gcli2api.txt"
    if not recorded.exists():
        pytest.skip(f"{recorded} is not here (../shared)")
    assert '"traceId"' in recorded.read_text() and 'data: {"response": {' in recorded.read_text()
    loop = CodeAssistLoop("gemini_code_assist", [[(READ_A, "T1")]])
    path = "/v1internal:streamGenerateContent?alt=sse"
    reply = loop(request(path, code_assist_body(PROJECT)))
    assert isinstance(reply, SSEReply)
    (data,) = [line for line in reply.body.decode().splitlines() if line.startswith("data: ")]
    wrapped = json.loads(data.removeprefix("data: "))
    assert set(wrapped) == {"response", "traceId"}
    (part,) = wrapped["response"]["candidates"][0]["content"]["parts"]
    assert part["functionCall"] == {"name": "Read", "args": READ_A.arguments}
    whole = loop(request("/v1internal:generateContent", code_assist_body(PROJECT)))
    assert isinstance(whole, JSONReply) and set(whole.body) == {"response", "traceId"}


def test_the_code_assist_of_the_loops_wants_the_routes_project() -> None:
    loop = CodeAssistLoop("gemini_code_assist", [[(READ_A, "T1")]])
    with pytest.raises(AssertionError, match="project"):
        loop(request("/v1internal:generateContent", code_assist_body("another")))
