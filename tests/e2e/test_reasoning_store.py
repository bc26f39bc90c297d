"""End to end, issue 10: what clients drop, the bridge remembers — and the staged retry.

Scripted upstreams enforce the rules the real services enforce, in their words, and issue a
distinct signature / reasoning per turn:

- Gemini (public API and Code Assist): the first ``functionCall`` of each replayed step must
  carry exactly the ``thoughtSignature`` Gemini put on it (parallel siblings none);
- Anthropic with thinking on: an assistant message with ``tool_use`` must start with the
  thinking block Anthropic sent, its ``signature`` intact;
- DeepSeek in thinking mode: an assistant message with ``tool_calls`` must carry the
  ``reasoning_content`` DeepSeek sent with them.

Cursor-shaped (openai SDK) and Claude Code-shaped (anthropic SDK) clients run 3-turn tool loops
with parallel calls and drop all of it from their history. Every turn must be accepted: the
bridge put back exactly what the upstream sent. Then the same with the proxy restarted between
turns (``bridge_store`` a file), and the staged retry against upstreams that accept only
stage 1 or only stage 2.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from mitmproxy import io as mitmio

from tests.e2e import clients
from tests.e2e.clients import BaseURL, assistant_calls, chat_turn, read_and_list
from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream, SSEReply

MODEL_GEMINI = "gemini-3-pro-preview"
MODEL_CLAUDE = "claude-opus-4-5"
"""Thinks by default (the thinking policy): a Cursor-shaped client gets thinking on too."""

# The anthropic SDK warns that this model retires in 2027; it is here for its thinking default.
pytestmark = pytest.mark.filterwarnings("ignore:The model 'claude-opus-4-5' is deprecated")
MODEL_DEEPSEEK = "deepseek-reasoner"
PROJECT = "proj-e2e-store"
KEY = "e2e-store-key"


def sig(tag: str) -> str:
    """A signature as long as real ones (the seed's rule: at least 50 characters)."""
    return f"{tag}-" + "Zm9vYmFy" * 10


READ = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}
LIST = {"type": "object", "properties": {"pattern": {"type": "string"}}}

# What each turn of the loop answers: (thinking text, [(tool, args)], final text).
TURNS: list[tuple[str, list[tuple[str, dict[str, Any]]], str]] = [
    ("Two files to read.", [("Read", {"path": "a.txt"}), ("Read", {"path": "b.txt"})], ""),
    ("Now list them.", [("List", {"pattern": "*.txt"})], ""),
    ("Done.", [], "a says A, b says B."),
]


RUN_TOOL = read_and_list({"a.txt": "A", "b.txt": "B"})


def error(status: int, body: dict[str, Any]) -> JSONReply:
    return JSONReply(body, status=status)


# --------------------------------------------------------------------------- upstreams


class Strict:
    """The common part of the scripted upstreams: which turn a request is, its bodies, and how
    many requests it refused."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refused: list[str] = []

    def refuse(self, status: int, body: dict[str, Any], message: str) -> JSONReply:
        self.refused.append(message)
        return error(status, body)


class Gemini(Strict):
    """Gemini 3: signatures on the first call of each step, exactly as it sent them."""

    def __init__(self, code_assist: bool) -> None:
        super().__init__()
        self.code_assist = code_assist

    def __call__(self, rec: Recorded) -> JSONReply | SSEReply:
        path, _, query = rec.path.partition("?")
        stream = "streamGenerateContent" in path
        body = rec.json()
        if self.code_assist:
            assert path.startswith("/v1internal:") and body["project"] == PROJECT
            body = body["request"]
        else:
            assert path.startswith(f"/v1beta/models/{MODEL_GEMINI}:")
        self.bodies.append(body)
        steps = [c for c in body["contents"] if c["role"] == "model"]
        for n, step in enumerate(steps, 1):
            calls = [p for p in step["parts"] if "functionCall" in p]
            if not calls:
                continue
            name = calls[0]["functionCall"]["name"]
            given = calls[0].get("thoughtSignature")
            if given is None:
                message = (
                    "Function call is missing a thought_signature in functionCall parts. This "
                    "is required for tools to work correctly, and missing thought_signature "
                    "may lead to degraded model performance. Additional data, function call "
                    f"`default_api:{name}` , position {2 * n}. Please refer to "
                    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
                )
            elif given != sig(f"gemini-{n}") or any("thoughtSignature" in c for c in calls[1:]):
                message = "Corrupted thought signature."
            else:
                continue
            err = {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}
            return self.refuse(400, {"error": err}, message)
        turn = len(steps)
        thinking, calls, text = TURNS[turn]
        parts: list[dict[str, Any]] = [{"text": thinking, "thought": True}]
        for i, (name, args) in enumerate(calls):
            part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
            if i == 0:
                part["thoughtSignature"] = sig(f"gemini-{turn + 1}")
            parts.append(part)
        if text:
            parts.append({"text": text})
        chunks = [
            {"candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}]}
            for p in parts
        ]
        chunks[-1]["candidates"][0]["finishReason"] = "STOP"
        wrap = (lambda c: {"response": c}) if self.code_assist else (lambda c: c)
        if not stream:
            whole = {
                "candidates": [
                    {**chunks[-1]["candidates"][0], "content": {"role": "model", "parts": parts}}
                ]
            }
            return JSONReply(wrap(whole))
        assert query == "alt=sse"
        data = b"".join(b"data: " + json.dumps(wrap(c)).encode() + b"\r\n\r\n" for c in chunks)
        return SSEReply(data, chunk_min=3, chunk_max=40)


class Claude(Strict):
    """Anthropic with thinking on: a tool turn starts with its own signed thinking block."""

    def __call__(self, rec: Recorded) -> JSONReply | SSEReply:
        body = rec.json()
        self.bodies.append(body)
        assert body.get("thinking", {}).get("type") == "enabled", body.get("thinking")
        assistants = [(i, m) for i, m in enumerate(body["messages"]) if m["role"] == "assistant"]
        for n, (i, m) in enumerate(assistants, 1):
            blocks = m["content"] if isinstance(m["content"], list) else []
            if not any(b["type"] == "tool_use" for b in blocks):
                continue
            first = blocks[0]
            if first["type"] != "thinking":
                message = (
                    f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                    f"but found `{first['type']}`. When `thinking` is enabled, a final "
                    "`assistant` message must start with a thinking block (preceeding the "
                    "lastmost set of `tool_use` and `tool_result` blocks). We recommend you "
                    "include thinking blocks from previous turns. To avoid this requirement, "
                    "disable `thinking`. Please consult our documentation at "
                    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
                )
            elif (
                first.get("signature") != sig(f"claude-{n}") or first["thinking"] != TURNS[n - 1][0]
            ):
                message = f"messages.{i}.content.0: Invalid `signature` in `thinking` block"
            else:
                continue
            err = {"type": "invalid_request_error", "message": message}
            return self.refuse(400, {"type": "error", "error": err}, message)
        turn = len(assistants)
        thinking, calls, text = TURNS[turn]
        content: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": thinking, "signature": sig(f"claude-{turn + 1}")}
        ]
        content += [
            {"type": "tool_use", "id": f"toolu_{turn}{i}", "name": name, "input": args}
            for i, (name, args) in enumerate(calls)
        ]
        if text:
            content.append({"type": "text", "text": text})
        stop = "tool_use" if calls else "end_turn"
        message = {
            "id": f"msg_{turn}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        if not body.get("stream"):
            return JSONReply(message)
        events: list[tuple[str, dict[str, Any]]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {**message, "content": [], "stop_reason": None},
                },
            )
        ]
        for idx, block in enumerate(content):
            if block["type"] == "thinking":
                start = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": block["thinking"]},
                    {"type": "signature_delta", "signature": block["signature"]},
                ]
            elif block["type"] == "tool_use":
                start = {**block, "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
            else:
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": block["text"]}]
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": idx, "content_block": start},
                )
            )
            events += [
                ("content_block_delta", {"type": "content_block_delta", "index": idx, "delta": d})
                for d in deltas
            ]
            events.append(("content_block_stop", {"type": "content_block_stop", "index": idx}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        data = b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in events)
        return SSEReply(data, chunk_min=5, chunk_max=60)


class DeepSeek(Strict):
    """DeepSeek in thinking mode: tool-call turns carry their ``reasoning_content`` back."""

    def __init__(self) -> None:
        super().__init__()

    def __call__(self, rec: Recorded) -> JSONReply | SSEReply:
        body = rec.json()
        self.bodies.append(body)
        assistants = [(i, m) for i, m in enumerate(body["messages"]) if m["role"] == "assistant"]
        for n, (i, m) in enumerate(assistants, 1):
            if not m.get("tool_calls"):
                continue
            if "reasoning_content" not in m:
                message = (
                    f"Missing `reasoning_content` field in the assistant message at message "
                    f"index {i}. For more information, please refer to "
                    "https://api-docs.deepseek.com/guides/thinking_mode#tool-calls"
                )
            elif m["reasoning_content"] != TURNS[n - 1][0]:
                message = f"Invalid `reasoning_content` in the assistant message at index {i}"
            else:
                continue
            err = {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
            return self.refuse(400, {"error": err}, message)
        turn = len(assistants)
        return chat_answer(turn, body.get("stream", False), reasoning=True)


def chat_answer(turn: int, stream: bool, reasoning: bool) -> JSONReply | SSEReply:
    thinking, calls, text = TURNS[turn]
    tool_calls = [
        {
            "id": f"call_{turn}{i}",
            "type": "function",
            "function": {"name": n, "arguments": json.dumps(a)},
        }
        for i, (n, a) in enumerate(calls)
    ]
    finish = "tool_calls" if calls else "stop"
    head = {
        "id": f"chatcmpl-{turn}",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL_DEEPSEEK,
    }
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if reasoning:
            message["reasoning_content"] = thinking
        if tool_calls:
            message["tool_calls"] = tool_calls
        return JSONReply(
            {**head, "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
        )
    deltas: list[dict[str, Any]] = [{"role": "assistant"}]
    if reasoning:
        deltas.append({"reasoning_content": thinking})
    deltas += [{"tool_calls": [{"index": i, **c}]} for i, c in enumerate(tool_calls)]
    if text:
        deltas.append({"content": text})
    chunks = [
        {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": d, "finish_reason": None}],
        }
        for d in deltas
    ]
    chunks.append(
        {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
        }
    )
    data = (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )
    return SSEReply(data, chunk_min=4, chunk_max=50)


# --------------------------------------------------------------------------- clients


CALLS = [[name for name, _ in calls] for _, calls, _ in TURNS]
"""The tools each answer of the loop calls."""


def cursor_loop(base_url: BaseURL, model: str, stream: bool, **extra: Any) -> str:
    """A Cursor-shaped loop whose history keeps only ids, names and arguments: its last
    answer's text, once each answer called what ``TURNS`` says."""
    tools = [
        {"type": "function", "function": {"name": "Read", "parameters": READ}},
        {"type": "function", "function": {"name": "List", "parameters": LIST}},
    ]
    loop = clients.cursor_loop(
        base_url,
        stream,
        key=KEY,
        model=model,
        tools=tools,
        run_tool=RUN_TOOL,
        system=None,
        history="calls",
        **extra,
    )
    assert loop.calls == CALLS, loop.calls
    return loop.text


def claude_code_loop(base_url: BaseURL, model: str, stream: bool) -> str:
    """A Claude Code-shaped loop with thinking on, whose history drops the thinking blocks:
    its last answer's text, once each answer called what ``TURNS`` says."""
    loop = clients.claude_code_loop(
        base_url,
        stream,
        key=KEY,
        model=model,
        tools=[{"name": "Read", "input_schema": READ}, {"name": "List", "input_schema": LIST}],
        run_tool=RUN_TOOL,
        system=None,
        max_tokens=4096,
        history="calls",
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    assert loop.calls == CALLS, loop.calls
    return loop.text


# --------------------------------------------------------------------------- the loops


def routes(tmp: Path, upstream: str, extra: str = "") -> str:
    project = f'project = "{PROJECT}"\n' if upstream == "gemini_code_assist" else ""
    path = tmp / f"routes-{upstream}.toml"
    path.write_text(
        f"""
[[routes]]
name = "cursor"
path = "*/chat/completions"
client = "openai_chat"
upstream = "{upstream}"
{project}{extra}
[[routes]]
name = "claude-code"
path = "*/v1/messages"
client = "anthropic"
upstream = "{upstream}"
{project}{extra}"""
    )
    return str(path)


@pytest.fixture
def store_proxy(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> Iterator[Callable[..., Proxy]]:
    def make(dialect: str, script: Strict, **options: Any) -> Proxy:
        upstream.script = script
        return start_proxy(bridge_routes=routes(tmp_path, dialect), **options)

    yield make


CASES = {
    "gemini": (lambda: Gemini(code_assist=False), MODEL_GEMINI),
    "gemini_code_assist": (lambda: Gemini(code_assist=True), MODEL_GEMINI),
    "anthropic": (Claude, MODEL_CLAUDE),
    "openai_chat": (DeepSeek, MODEL_DEEPSEEK),
}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("client", ["cursor", "claude-code"])
@pytest.mark.parametrize("dialect", list(CASES))
def test_a_loop_whose_client_drops_everything_is_accepted_every_turn(
    store_proxy: Callable[..., Proxy], dialect: str, client: str, stream: bool
) -> None:
    make, model = CASES[dialect]
    script = make()
    proxy = store_proxy(dialect, script)
    if client == "cursor":
        text = cursor_loop(lambda: proxy.base_url, model, stream)
    else:
        text = claude_code_loop(lambda: proxy.base_url, model, stream)
    assert text == TURNS[2][2]
    assert script.refused == [] and len(script.bodies) == 3
    log = proxy.log_text()
    assert "Traceback" not in log and KEY not in log


@pytest.mark.parametrize(
    ("dialect", "client"),
    [("gemini", "cursor"), ("anthropic", "claude-code"), ("openai_chat", "cursor")],
)
def test_the_store_survives_a_restart_between_turns(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
    dialect: str,
    client: str,
) -> None:
    make, model = CASES[dialect]
    script = make()
    upstream.script = script
    extra = 'signature_fallback = "none"\n' if dialect == "gemini" else ""
    options = {
        "bridge_routes": routes(tmp_path, dialect, extra),
        "bridge_store": str(tmp_path / "store.sqlite"),
    }
    current = [start_proxy(**options)]

    def base_url() -> str:
        # Every turn goes to a new mitmdump: the one before is stopped first.
        if len(script.bodies) > 0:
            current[0].close()
            current.append(start_proxy(**options))
            current.pop(0)
        return current[0].base_url

    loop = cursor_loop if client == "cursor" else claude_code_loop
    assert loop(base_url, model, True) == TURNS[2][2]
    assert script.refused == [] and len(script.bodies) == 3


def test_without_the_store_gemini_refuses_and_the_staged_retry_answers(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """The control: with the store off and no fallback, Gemini refuses the replayed steps in
    its own words; the staged retry's stage 2 (calls as text) is what gets the loop through."""
    script = Gemini(code_assist=False)
    upstream.script = script
    p = start_proxy(
        bridge_routes=routes(tmp_path, "gemini", 'signature_fallback = "none"\n'),
        bridge_store_size=0,
    )
    assert cursor_loop(lambda: p.base_url, MODEL_GEMINI, False) == TURNS[2][2]
    # the strict upstream (tests.upstream_rules) refuses it before the script, in Gemini's words
    assert any("missing a thought_signature" in m for m in upstream.violations)
    upstream.violations.clear()  # refused on purpose: this is the control
    p.wait_for_log("staged retry 2")


# --------------------------------------------------------------------------- staged retry


class Staged(Strict):
    """An OpenAI-compatible upstream with a history it did not make (no store can help):
    stage 0 is refused over ``reasoning_content``; ``accept`` says which stage it takes."""

    def __init__(self, accept: int) -> None:
        super().__init__()
        self.accept = accept
        self.stages: list[int] = []

    def __call__(self, rec: Recorded) -> JSONReply | SSEReply:
        body = rec.json()
        self.bodies.append(body)
        thinking = "reasoning_effort" in body
        calls = [m for m in body["messages"] if m.get("tool_calls")]
        texts = json.dumps(body["messages"])
        stage = 0 if thinking else 2 if not calls and "[Calling tool: Read]" in texts else 1
        self.stages.append(stage)
        if stage < self.accept:
            if stage == 0:
                message = (
                    "thinking is enabled but reasoning_content is missing in assistant tool "
                    "call message at index 1"
                )
            else:
                message = (
                    "Invalid `signature` in the function call `Read` of message 1: the "
                    "function call was not made by this model"
                )
            err = {"message": message, "type": "invalid_request_error"}
            return self.refuse(400, {"error": err}, message)
        return chat_answer(2, body.get("stream", False), reasoning=False)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("accept", [1, 2])
def test_staged_retry_answers_with_the_stage_that_worked(
    upstream: ScriptedUpstream, accept: int, stream: bool, tmp_path: Path
) -> None:
    script = Staged(accept)
    upstream.script = script
    saved = tmp_path / "flows"
    with Proxy(upstream.port, {"save_stream_file": str(saved)}, check_options=False) as p:
        _staged_turn(p, script, accept, stream)
    with saved.open("rb") as f:
        (flow,) = list(mitmio.FlowReader(f).stream())
    # The flow's comment names the stage that answered, on a line of its own.
    stage = "thinking off, thinking as text" if accept == 1 else "tool calls as text too"
    lines = flow.comment.splitlines()
    assert f"upstream refused the reasoning: staged retry {accept} answered ({stage})" in lines
    assert flow.metadata["cursor_bridge"]["staged_retry"] == accept


def _staged_turn(p: Proxy, script: Staged, accept: int, stream: bool) -> None:
    client = openai.OpenAI(base_url=f"{p.base_url}/v1", api_key=KEY, max_retries=0, timeout=15)
    messages: list[Any] = [
        {"role": "user", "content": "What does a.txt say?"},
        assistant_calls([{"id": "call_x", "name": "Read", "arguments": '{"path": "a.txt"}'}]),
        {"role": "tool", "tool_call_id": "call_x", "content": "A"},
    ]
    tools = [{"type": "function", "function": {"name": "Read", "parameters": READ}}]
    content, finish, calls = chat_turn(
        client,
        stream,
        model=MODEL_DEEPSEEK,
        messages=messages,
        tools=tools,
        reasoning_effort="high",
    )
    assert content == TURNS[2][2] and finish == "stop" and calls == []
    assert script.stages == [0, 1, 2][: accept + 1]
    p.wait_for_log(re.compile(rf"staged retry {accept}"))
    # The flow's line counts the stages asked (its mark in mitmweb: retried).
    p.wait_for_log(re.compile(rf"cursor-bridge flow .*outcome=retried .*retries={accept}\b"))
    assert "Traceback" not in p.log_text()
