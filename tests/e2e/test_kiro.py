"""End to end: Cursor (openai SDK) and Claude Code (anthropic SDK) → mitmdump → Kiro.

The scripted upstream stands in for Kiro's ``generateAssistantResponse``: it refuses what Kiro
refuses with Kiro's own ``400 {"message": "Improperly formed request.", "reason": null}``
(``tests.kiro_rules``: blank contents in the current message and the history, roles that do
not alternate, results that do not answer the calls before them, blank results and
descriptions, schemas that are not objects, tools the history uses but the request does not
declare), checks its path and Bearer token, and answers in AWS event-stream frames
(``application/vnd.amazon.eventstream``), written in random pieces. It plays 3-turn tool loops
— two parallel native calls, one call written as ``[Calling tool: List]`` text (as some Kiro
models still do), a text answer; or turns of calls only — whose later turns hold only tool
results. Both clients must run them to the end, streamed and whole. Also: Claude Code's
session as the conversation, the asked model and time in answers, and a 200 that is not an
event stream, for every client dialect.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import anthropic
import httpx
import openai
import pytest

from tests import eventstream_frames as ef
from tests.e2e.clients import QUESTION, claude_code_loop, cursor_loop, read_and_list
from tests.e2e.harness import (
    JSONReply,
    Proxy,
    RawReply,
    Recorded,
    ScriptedUpstream,
    SSEReply,
)
from tests.kiro_rules import IMPROPER, kiro_refusal
from tests.realdata import FIXTURES, read

KEY = "kiro-e2e-SECRET-token"
FILE_TOKEN = "aoa-e2e-FILE-token-SECRET"
NEW_TOKEN = "aoa-e2e-REFRESHED-token-SECRET"
MODEL = "claude-sonnet-4-6"
KIRO_MODEL = "claude-sonnet-4.5"
"""What the routes map ``MODEL`` to (``model_map``)."""
ARN = "arn:aws:codewhisperer:us-east-1:123456789012:profile/E2E"
FINAL = "a says A, b says B; two text files."

READ_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"path": {"type": "string", "description": "File to read"}},
    "required": ["path"],
    "additionalProperties": False,
}
LIST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"pattern": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
}


# --------------------------------------------------------------------------- the Kiro upstream


def check_body(body: dict[str, Any]) -> dict[str, Any]:
    """What these tests expect of the bridge's body, beyond what Kiro refuses; the current
    message."""
    assert set(body) == {"conversationState", "profileArn"}, sorted(body)
    assert body["profileArn"] == ARN
    state = body["conversationState"]
    assert state["chatTriggerType"] == "MANUAL"
    assert isinstance(state["conversationId"], str) and len(state["conversationId"]) == 36
    current = state["currentMessage"]["userInputMessage"]
    for e in [*state["history"], state["currentMessage"]]:
        if "userInputMessage" in e:
            m = e["userInputMessage"]
            assert m["modelId"] == KIRO_MODEL and m["origin"] == "AI_EDITOR"
    tools = current["userInputMessageContext"]["tools"]
    for t in tools:
        spec = t["toolSpecification"]
        assert set(spec) == {"name", "description", "inputSchema"}
        schema = spec["inputSchema"]["json"]
        assert "$schema" not in schema and "additionalProperties" not in schema
    assert sorted(t["toolSpecification"]["name"] for t in tools) == ["List", "Read"]
    return cast(dict[str, Any], current)


def frames_for(turn: int) -> bytes:
    if turn == 1:
        events = [
            ("messageMetadataEvent", {"conversationId": "c", "utteranceId": "u1"}),
            ("reasoningContentEvent", {"text": "Two files to read.", "signature": "kiro-sig-1"}),
            *ef.text_events("Reading both files.", 3),
            *ef.tool_events("tooluse_read_a", "Read", json.dumps({"path": "a.txt"}), 4),
            *ef.tool_events("tooluse_read_b", "Read", json.dumps({"path": "b.txt"}), 2),
        ]
    elif turn == 2:
        text = 'Now the listing.\n[Calling tool: List]\nInput: {"pattern": "*.txt"}\n'
        events = ef.text_events(text, 5)
    else:
        events = ef.text_events(FINAL, 4)
    return ef.stream([*events, *ef.usage_events(2.0 * turn)])


def calls_only_frames_for(turn: int) -> bytes:
    """A model that calls without a word: turns 1 and 2 are tool calls only (the history then
    holds assistant turns of calls only and user turns of results only), one result empty."""
    if turn == 1:
        events = [
            *ef.tool_events("tooluse_read_a", "Read", json.dumps({"path": "a.txt"}), 3),
            *ef.tool_events("tooluse_read_e", "Read", json.dumps({"path": "empty.txt"}), 2),
        ]
    elif turn == 2:
        events = ef.tool_events("tooluse_list", "List", json.dumps({"pattern": "*.txt"}), 2)
    else:
        events = ef.text_events(FINAL, 4)
    return ef.stream([*events, *ef.usage_events(2.0 * turn)])


class Kiro:
    """The scripted upstream's ``script``: validates like Kiro, answers the loop's turn."""

    def __init__(self, token: str = KEY, frames: Callable[[int], bytes] = frames_for) -> None:
        self.token = token
        self.frames = frames
        self.bodies: list[dict[str, Any]] = []
        self.refreshes: list[dict[str, Any]] = []
        self.refusals: list[str] = []
        """Why bodies were refused (``kiro_refusal``): a test that expects none asserts it."""

    def __call__(self, rec: Recorded) -> JSONReply | SSEReply:
        if rec.path == "/refreshToken":
            self.refreshes.append(rec.json())
            return JSONReply({"accessToken": NEW_TOKEN, "expiresIn": 3600})
        assert rec.method == "POST" and rec.path == "/generateAssistantResponse", rec.path
        assert rec.headers.get("authorization") == f"Bearer {self.token}"
        assert "x-api-key" not in rec.headers
        assert not any(h.startswith("anthropic-") for h in rec.headers)
        body = rec.json()
        self.bodies.append(body)
        refusal = kiro_refusal(body)
        if refusal is not None:
            self.refusals.append(refusal)
            return JSONReply(IMPROPER, status=400)
        current = check_body(body)
        results = (current.get("userInputMessageContext") or {}).get("toolResults") or []
        turn = {0: 1, 2: 2, 1: 3}[len(results)]
        return SSEReply(
            self.frames(turn),
            chunk_min=1,
            chunk_max=23,
            seed=turn,
            headers={"content-type": ef.CONTENT_TYPE},
        )


def routes_file(tmp: Path, extra: str = "") -> Path:
    path = tmp / "routes-kiro.toml"
    path.write_text(
        f"""
[[routes]]
name = "cursor-kiro"
path = "*/chat/completions"
client = "openai_chat"
upstream = "kiro"
profile_arn = "{ARN}"
model_map = {{"{MODEL}" = "{KIRO_MODEL}"}}
{extra}

[[routes]]
name = "claude-kiro"
path = "*/v1/messages"
client = "anthropic"
upstream = "kiro"
profile_arn = "{ARN}"
model_map = {{"{MODEL}" = "{KIRO_MODEL}"}}
{extra}
"""
    )
    return path


@pytest.fixture
def kiro_proxy(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> Iterator[tuple[Proxy, Kiro]]:
    script = Kiro()
    upstream.script = script
    proxy = start_proxy(bridge_routes=str(routes_file(tmp_path)))
    yield proxy, script
    assert script.refusals == []
    log = proxy.log_text()
    assert KEY not in log and "Traceback" not in log


# --------------------------------------------------------------------------- the loops

CURSOR_TOOLS: list[Any] = [
    {"name": "Read", "description": "Read a file", "input_schema": READ_SCHEMA},
    {
        "type": "function",
        "function": {"name": "List", "description": "List files", "parameters": LIST_SCHEMA},
    },
]


CLAUDE_TOOLS: list[Any] = [
    {"name": "Read", "description": "Read a file", "input_schema": READ_SCHEMA},
    {"name": "List", "description": "List files", "input_schema": LIST_SCHEMA},
]
RUN_TOOL = read_and_list({"a.txt": "A", "b.txt": "B", "empty.txt": ""})
AGENT: dict[str, Any] = {"key": KEY, "model": MODEL, "run_tool": RUN_TOOL}
"""What every loop here runs with besides its tools."""


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_cursor_tool_loop_on_kiro(kiro_proxy: tuple[Proxy, Kiro], stream: bool) -> None:
    proxy, kiro = kiro_proxy
    loop = cursor_loop(proxy.base_url, stream, tools=CURSOR_TOOLS, **AGENT)
    assert loop.calls == [["Read", "Read"], ["List"], []]
    assert loop.text == FINAL
    assert len(kiro.bodies) == 3
    state = kiro.bodies[-1]["conversationState"]
    history = state["history"]
    assert history[0]["userInputMessage"]["content"] == "You are Cursor's agent."
    assert history[1]["assistantResponseMessage"]["content"] == "I will follow these instructions."
    # turn 1's calls and their results, in order
    uses = history[3]["assistantResponseMessage"]["toolUses"]
    assert [u["toolUseId"] for u in uses] == ["tooluse_read_a", "tooluse_read_b"]
    results = history[4]["userInputMessage"]["userInputMessageContext"]["toolResults"]
    assert [r["content"] for r in results] == [[{"text": "A"}], [{"text": "B"}]]
    # turn 2's text call came back as a native toolUse
    (listing,) = history[5]["assistantResponseMessage"]["toolUses"]
    assert listing["name"] == "List" and listing["input"] == {"pattern": "*.txt"}
    conversation = {b["conversationState"]["conversationId"] for b in kiro.bodies}
    assert len(conversation) == 1


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_claude_code_tool_loop_on_kiro(kiro_proxy: tuple[Proxy, Kiro], stream: bool) -> None:
    proxy, kiro = kiro_proxy
    thinking = {"type": "enabled", "budget_tokens": 1024}
    loop = claude_code_loop(proxy.base_url, stream, tools=CLAUDE_TOOLS, thinking=thinking, **AGENT)
    assert loop.calls == [["Read", "Read"], ["List"], []]
    assert all(m.usage.input_tokens > 0 for m in loop.answers[:-1])  # the turns that call
    assert loop.text == FINAL
    thinking_blocks = [b for b in loop.first.content if b.type == "thinking"]
    assert [(b.thinking, b.signature) for b in thinking_blocks] == [
        ("Two files to read.", "kiro-sig-1")
    ]
    body = kiro.bodies[0]["conversationState"]
    assert body["history"][0]["userInputMessage"]["content"].startswith("You are Claude Code.")
    # Claude Code's thinking switch is Kiro's thinking prompt (Kiro has no switch).
    assert "<thinking>" in json.dumps(body)


def test_an_exception_from_kiro_is_the_clients_error(
    kiro_proxy: tuple[Proxy, Kiro], upstream: ScriptedUpstream
) -> None:
    proxy, _ = kiro_proxy
    throttled = ef.stream(ef.text_events("partial", 1)) + ef.exception(
        "ThrottlingException", "Too many requests, please wait"
    )
    reply = SSEReply(throttled, seed=1, headers={"content-type": ef.CONTENT_TYPE})
    upstream.enqueue(reply, reply)
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=15)
    with pytest.raises(anthropic.RateLimitError, match="Too many requests"):
        client.messages.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        )
    cursor = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key=KEY, max_retries=0, timeout=15)
    with pytest.raises(openai.APIError, match="ThrottlingException"):
        for _ in cursor.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            pass


def test_a_token_file_is_read_and_refreshed(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    token = tmp_path / "kiro-auth-token.json"
    expired = (datetime.now(UTC) - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    token.write_text(
        json.dumps({"accessToken": FILE_TOKEN, "refreshToken": "aor-e2e", "expiresAt": expired})
    )
    script = Kiro(token=NEW_TOKEN)
    upstream.script = script
    extra = f'token_file = "{token}"\nrefresh_url = "{upstream.base_url}/refreshToken"'
    proxy = start_proxy(bridge_routes=str(routes_file(tmp_path, extra)))
    loop = cursor_loop(proxy.base_url, True, tools=CURSOR_TOOLS, **AGENT)
    assert loop.calls == [["Read", "Read"], ["List"], []] and loop.text == FINAL
    assert script.refreshes == [{"refreshToken": "aor-e2e"}]  # once, then the file is fresh
    assert json.loads(token.read_text())["accessToken"] == NEW_TOKEN
    log = proxy.log_text()
    for secret in (FILE_TOKEN, NEW_TOKEN, "aor-e2e", KEY):
        assert secret not in log


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("client", ["cursor", "claude_code"])
def test_a_loop_of_calls_only_passes_what_kiro_refuses(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    client: str,
    stream: bool,
) -> None:
    """Turns of calls only, turns of results only, an empty result, a tool without a
    description or a schema: every blank field Kiro refuses is filled, the loop runs."""
    kiro = Kiro(frames=calls_only_frames_for)
    upstream.script = kiro
    proxy = start_proxy(bridge_routes=str(routes_file(tmp_path)))
    if client == "cursor":
        bare_list = {"type": "function", "function": {"name": "List", "parameters": {}}}
        loop = cursor_loop(proxy.base_url, stream, tools=[CURSOR_TOOLS[0], bare_list], **AGENT)
    else:
        bare = {"name": "List", "description": "", "input_schema": {"type": "object"}}
        loop = claude_code_loop(proxy.base_url, stream, tools=[CLAUDE_TOOLS[0], bare], **AGENT)
        assert loop.last.stop_reason == "end_turn"
    assert kiro.refusals == []
    assert loop.calls == [["Read", "Read"], ["List"], []]
    assert loop.text == FINAL
    history = kiro.bodies[-1]["conversationState"]["history"]
    # [system, ack, question, calls, results, call, results(current) …]
    assert history[3]["assistantResponseMessage"]["content"] == ""
    assert [u["name"] for u in history[3]["assistantResponseMessage"]["toolUses"]] == [
        "Read",
        "Read",
    ]
    results = history[4]["userInputMessage"]
    assert results["content"] == "(tool results)"
    texts = [r["content"] for r in results["userInputMessageContext"]["toolResults"]]
    assert texts == [[{"text": "A"}], [{"text": "(empty result)"}]]
    current = kiro.bodies[-1]["conversationState"]["currentMessage"]["userInputMessage"]
    assert current["content"] == "(tool results)"
    specs = {t["toolSpecification"]["name"]: t for t in current["userInputMessageContext"]["tools"]}
    assert specs["List"]["toolSpecification"]["description"] == "List"
    assert specs["List"]["toolSpecification"]["inputSchema"]["json"]["type"] == "object"
    log = proxy.log_text()
    assert "Traceback" not in log and KEY not in log


def test_the_fake_refuses_what_kiro_refuses() -> None:
    """The fake's rules, each on a body the bridge once sent (blank content beside results)."""
    body: dict[str, Any] = {
        "conversationState": {
            "conversationId": "c",
            "chatTriggerType": "MANUAL",
            "history": [
                {"userInputMessage": {"content": "hi", "modelId": "m", "origin": "AI_EDITOR"}},
                {
                    "assistantResponseMessage": {
                        "content": "",
                        "toolUses": [{"toolUseId": "t1", "name": "Read", "input": {}}],
                    }
                },
            ],
            "currentMessage": {
                "userInputMessage": {
                    "content": "",
                    "modelId": "m",
                    "origin": "AI_EDITOR",
                    "userInputMessageContext": {
                        "toolResults": [
                            {"toolUseId": "t1", "status": "success", "content": [{"text": "x"}]}
                        ],
                        "tools": [
                            {
                                "toolSpecification": {
                                    "name": "Read",
                                    "description": "Read a file",
                                    "inputSchema": {"json": {"type": "object"}},
                                }
                            }
                        ],
                    },
                }
            },
        }
    }
    state = body["conversationState"]
    current = state["currentMessage"]["userInputMessage"]
    assert kiro_refusal(body) == "currentMessage.userInputMessage.content is blank"
    current["content"] = "(tool results)"
    assert kiro_refusal(body) is None  # an assistant turn of calls only may be blank
    history = state["history"]
    history[0]["userInputMessage"]["content"] = " \n"
    assert kiro_refusal(body) == "history[0].userInputMessage.content is blank"
    history[0]["userInputMessage"]["content"] = "hi"
    current["userInputMessageContext"]["toolResults"][0]["content"] = [{"text": ""}]
    assert kiro_refusal(body) == "tool result t1 has blank content"
    current["userInputMessageContext"]["toolResults"][0]["content"] = [{"text": "x"}]
    spec = current["userInputMessageContext"]["tools"][0]["toolSpecification"]
    spec["description"] = ""
    assert kiro_refusal(body) == "tool Read has a blank description"
    spec["description"] = "Read a file"
    spec["inputSchema"]["json"] = {}
    assert kiro_refusal(body) == "tool Read has no object input schema"
    spec["inputSchema"]["json"] = {"type": "object"}
    spec["name"] = "Other"
    assert kiro_refusal(body) == "tools used in the history are not declared: ['read']"


def test_claude_codes_session_is_the_conversation_in_both_user_id_forms(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """``metadata.user_id`` as Claude Code 2.1 writes it (a JSON object's ``session_id``), as
    older versions did (``…_session_<uuid>``), and a real recorded Claude Code 2.1.197 body."""
    seen: list[dict[str, Any]] = []

    def script(rec: Recorded) -> JSONReply | SSEReply:
        body = rec.json()
        seen.append(body)
        if kiro_refusal(body) is not None:
            return JSONReply(IMPROPER, status=400)
        frames = ef.stream([*ef.text_events("hi", 1), *ef.usage_events(1.0)])
        return SSEReply(frames, headers={"content-type": ef.CONTENT_TYPE})

    upstream.script = script
    proxy = start_proxy(bridge_routes=str(routes_file(tmp_path)))
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=15)
    session = "89772e65-a5f6-45d5-b37c-e27ca2ea17d4"
    forms = [
        json.dumps({"device_id": "42108bcc", "account_uuid": "", "session_id": session}),
        f"user_42108bcc_account__session_{session}",
    ]
    for user_id in forms:
        message = client.messages.create(
            model=MODEL,
            max_tokens=100,
            messages=[{"role": "user", "content": f"hi from {user_id[:5]}"}],
            metadata={"user_id": user_id},
        )
        assert message.content[0].type == "text" and message.content[0].text == "hi"
    recorded = FIXTURES / "clients" / "claude-code-2.1.197-default-turn2.request.json"
    rec = json.loads(read(f"clients/{recorded.name}"))
    body = rec["body"]
    assert json.loads(body["metadata"]["user_id"])["session_id"] == session
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    got = httpx.post(f"{proxy.base_url}{rec['path']}", json=body, headers=headers, timeout=15)
    assert got.status_code == 200 and "message_stop" in got.text, got.text[:300]
    assert [b["conversationState"]["conversationId"] for b in seen] == [session] * 3


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_answers_name_the_asked_model_and_the_time(
    kiro_proxy: tuple[Proxy, Kiro], stream: bool
) -> None:
    """Kiro's answer names no model and no time: the client sees the model it asked for and
    the current time (never ``""`` / ``0``), streamed and whole, OpenAI and Anthropic."""
    proxy, _ = kiro_proxy
    cursor = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key=KEY, max_retries=0, timeout=15)
    messages: Any = [{"role": "user", "content": QUESTION}]
    now = time.time()
    if stream:
        chunks = list(
            cursor.chat.completions.create(
                model=MODEL, messages=messages, tools=CURSOR_TOOLS, stream=True
            )
        )
        assert len(chunks) > 2
        assert {c.model for c in chunks} == {MODEL}
        assert all(abs(c.created - now) < 10 for c in chunks)
    else:
        done = cursor.chat.completions.create(model=MODEL, messages=messages, tools=CURSOR_TOOLS)
        assert done.model == MODEL and abs(done.created - now) < 10
    claude = anthropic.Anthropic(base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=15)
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 100,
        "messages": messages,
        "tools": CLAUDE_TOOLS,
    }
    if stream:
        events = list(claude.messages.create(stream=True, **params))
        assert events[0].type == "message_start" and events[0].message.model == MODEL
    else:
        assert claude.messages.create(**params).model == MODEL


# --------------------------------------------------------------------------- not a stream

SIGN_IN = (
    b"<!DOCTYPE html><html><head><title>Sign in to AWS Builder ID</title></head><body>"
    b"<form>token sk-ant-api03-" + b"Q" * 40 + b"</form></body></html>"
)
"""A 200 answer a login wall sends instead of Kiro's frames; a key-shaped string in it."""
ALL_CLIENTS = """
[[routes]]
name = "responses-kiro"
path = "*/v1/responses"
client = "openai_responses"
upstream = "kiro"
profile_arn = "{arn}"

[[routes]]
name = "gemini-kiro"
path = "*/v1beta/models/*"
client = "gemini"
upstream = "kiro"
profile_arn = "{arn}"
"""


def ask_every_client(proxy: Proxy, stream: bool) -> dict[str, tuple[int, str]]:
    """One question from each client dialect: ``{client: (status, what it was told)}`` —
    the SDK's error message (openai, anthropic) or the raw body (Responses, Gemini)."""
    told: dict[str, tuple[int, str]] = {}
    cursor = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key=KEY, max_retries=0, timeout=15)
    with pytest.raises(openai.APIError) as oe:
        got = cursor.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=stream
        )
        if stream:
            list(cast(Any, got))
    told["openai_chat"] = (getattr(oe.value, "status_code", 200), str(oe.value))
    claude = anthropic.Anthropic(base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=15)
    with pytest.raises(anthropic.APIError) as ae:
        params: Any = {
            "model": MODEL,
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
        }
        if stream:
            list(claude.messages.create(stream=True, **params))
        else:
            claude.messages.create(**params)
    told["anthropic"] = (getattr(ae.value, "status_code", 200), str(ae.value))
    base = proxy.base_url
    r = httpx.post(
        f"{base}/v1/responses",
        json={"model": MODEL, "input": "hi", "stream": stream},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=15,
    )
    told["openai_responses"] = (r.status_code, r.text)
    action = "streamGenerateContent?alt=sse" if stream else "generateContent"
    r = httpx.post(
        f"{base}/v1beta/models/{MODEL}:{action}",
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        headers={"x-goog-api-key": KEY},
        timeout=15,
    )
    told["gemini"] = (r.status_code, r.text)
    return told


@pytest.mark.parametrize(
    ("body", "content_type", "said"),
    [
        pytest.param(SIGN_IN, "text/html; charset=utf-8", "HTTP 200 with text/html", id="html"),
        pytest.param(
            b'{"message": "Session expired, sign in again"}',
            "application/json",
            "HTTP 200 with application/json",
            id="json",
        ),
        pytest.param(
            SIGN_IN,
            ef.CONTENT_TYPE,
            "not an AWS event stream, although sent as application/vnd.amazon.eventstream",
            id="html-sent-as-frames",
        ),
    ],
)
def test_a_200_that_is_not_an_event_stream_says_what_came(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    body: bytes,
    content_type: str,
    said: str,
) -> None:
    """Every client dialect, streamed and whole, is told the status, the content type and
    the first bytes (cleaned) of what came instead of Kiro's frames, in its own dialect; the
    flow is ⚠ not_rewritten, not a rewrite."""
    upstream.script = lambda rec: RawReply(body, headers={"content-type": content_type})
    routes = routes_file(tmp_path, "")
    routes.write_text(routes.read_text() + ALL_CLIENTS.format(arn=ARN))
    proxy = start_proxy(bridge_routes=str(routes))
    for stream in (True, False):
        told = ask_every_client(proxy, stream)
        for client, (status, text) in told.items():
            where = f"{client} {'stream' if stream else 'whole'}"
            assert said in text, (where, text)
            first = "Sign in to AWS Builder ID" if body is SIGN_IN else "Session expired"
            assert first in text, (where, text)
            assert "sk-ant-api03-" + "Q" * 40 not in text, where
            assert "prelude" not in text, where
            # streamed frames were already under way (200, an error event); else a 502
            assert status == (200 if stream and content_type == ef.CONTENT_TYPE else 502), where
        assert "error" in told["gemini"][1] and "error" in told["openai_responses"][1]
    log = proxy.log_text()
    flows = [line for line in log.splitlines() if "cursor-bridge flow" in line]
    assert len(flows) == 8, flows
    assert all("outcome=not_rewritten" in line for line in flows), flows
    assert "Traceback" not in log and KEY not in log
