"""Staged retry (``addon.transforms.staged_retry``): which upstream errors start it (the real
services' own words), and what the stage 1 / stage 2 requests hold once encoded for each
upstream dialect."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from addon.dialects import DIALECTS
from addon.model import (
    Image,
    Message,
    Request,
    Text,
    Thinking,
    ThinkingConfig,
    Tool,
    ToolCall,
    ToolResult,
)
from addon.transforms.staged_retry import (
    STAGE_NOTES,
    is_signature_error,
    names_tool,
    next_stage,
    stage_request,
)
from tests.realdata import FIXTURES

# The upstreams' own words (from their answers as users reported them).
GEMINI_MISSING = (
    "Function call is missing a thought_signature in functionCall parts. This is required for "
    "tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:read_file` , position 2. Please "
    "refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)
VERTEX_MISSING = (
    "Unable to submit request because function call `read_file` in the 2. content block is "
    "missing a `thought_signature`. Learn more: "
    "https://cloud.google.com/vertex-ai/generative-ai/docs/thought-signatures"
)
GEMINI_CORRUPTED = "Corrupted thought signature."
GEMINI_INVALID = "Unable to submit request because Thought signature is not valid.. Learn more: https://cloud.google.com/vertex-ai/generative-ai/docs/thought-signatures"
DEEPSEEK = (
    "Missing `reasoning_content` field in the assistant message at message index 2. For more "
    "information, please refer to https://api-docs.deepseek.com/guides/thinking_mode#tool-calls"
)
DEEPSEEK_SHORT = "Missing `reasoning_content` field in the assistant message at message index 2"
KIMI = (
    "thinking is enabled but reasoning_content is missing in assistant tool call message at index 2"
)
ANTHROPIC_SIGNATURE = "messages.1.content.0: Invalid `signature` in `thinking` block"
ANTHROPIC_NO_THINKING = (
    "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)

SIGNATURE_ERRORS = [
    (GEMINI_MISSING, True),
    (VERTEX_MISSING, True),
    (GEMINI_CORRUPTED, False),
    (GEMINI_INVALID, False),
    (DEEPSEEK, True),
    (DEEPSEEK_SHORT, False),
    (KIMI, True),
    (ANTHROPIC_SIGNATURE, False),
    (ANTHROPIC_NO_THINKING, True),
]


@pytest.mark.parametrize(("message", "tool"), SIGNATURE_ERRORS)
def test_the_real_wordings_are_signature_errors(message: str, tool: bool) -> None:
    assert is_signature_error(400, message)
    assert is_signature_error(400, message.encode())
    body = json.dumps({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}})
    assert is_signature_error(400, body)  # a whole error body works too
    for status in (401, 429, 500, 503):
        assert not is_signature_error(status, message)
    assert names_tool(message) is tool
    assert next_stage(0, 400, message) == 1
    assert next_stage(1, 400, message) == (2 if tool else None)
    assert next_stage(2, 400, message) is None
    assert next_stage(0, 500, message) is None


@pytest.mark.parametrize(
    "message",
    [
        None,
        "",
        "max_tokens: 100000 > 64000, which is the maximum allowed",
        "Invalid value for 'tool_choice': no function named 'x'",  # a tool, but no signature
        "The model `gpt-9` does not exist",
    ],
)
def test_other_errors_are_not(message: str | None) -> None:
    assert not is_signature_error(400, message)
    assert next_stage(0, 400, message) is None
    assert next_stage(1, 400, message) is None


def test_tool_words() -> None:
    for text in ("functionCall parts", "function call", "tool_use", "Tool call", "#tool-calls"):
        assert names_tool(text), text
    for other in ("dysfunction", "a stool", "no such thing", None):
        assert not names_tool(other), other
    assert names_tool(b"a tool call")


# --------------------------------------------------------------------------- requests


SIG = "S" * 120


def conversation(origin: str = "openai_chat", model: str = "gemini-3-pro-preview") -> Request:
    return Request(
        origin,
        model,
        (
            Message("system", (Text("Be brief."),)),
            Message("user", (Text("Read a.txt and list files."),)),
            Message(
                "assistant",
                (
                    Thinking("I should read the file first.", SIG),
                    Thinking("REDACTED", redacted=True),
                    Thinking("", "trailing-signature"),
                    Text("Reading.", extra={"thoughtSignature": "text-sig"}),
                    ToolCall(
                        "call_1", "read", '{"path": "a.txt"}', extra={"thoughtSignature": SIG}
                    ),
                    ToolCall(
                        "call_2",
                        "glob",
                        '{"pattern": "*"}',
                        extra={"extra_content": {"google": {"thought_signature": SIG}}, "k": 1},
                    ),
                ),
                extra={"reasoning_content": "x", "reasoning_details": [{"type": "t"}], "name": "n"},
            ),
            Message("tool", (ToolResult("call_1", "hello", name="read"),)),
            Message(
                "tool",
                (
                    ToolResult(
                        "call_2", (Text("a.txt"), Image("data:image/png;base64,AAAA")), name="glob"
                    ),
                ),
            ),
            Message("user", (Text("Thanks, go on."),)),
        ),
        tools=(
            Tool("read", "Read a file", {"type": "object"}),
            Tool("glob", None, {"type": "object"}),
        ),
        thinking=ThinkingConfig(True, 2048),
        extra={"__gemini__": {"parts": {"c": [{"part": {"thoughtSignature": SIG}}]}}, "user": "u"},
    )


def wire(req: Request, upstream: str) -> str:
    return json.dumps(DIALECTS[upstream].encode_request(req, Counter()), ensure_ascii=False)


def test_stage_1() -> None:
    req = conversation()
    notes: Counter[str] = Counter()
    out = stage_request(req, 1, notes)
    assert out.thinking is None
    assistant = out.messages[2]
    assert assistant.parts[:2] == (Text("I should read the file first."), Text("Reading."))
    calls = [p for p in assistant.parts if isinstance(p, ToolCall)]
    assert [c.extra for c in calls] == [{}, {"extra_content": {"google": {}}, "k": 1}]
    assert assistant.extra == {"name": "n"}
    assert out.extra == {"__gemini__": {"parts": {"c": [{"part": {}}]}}, "user": "u"}
    assert out.tools == req.tools and out.messages[3:] == req.messages[3:]
    assert notes == {
        "thinking blocks sent as text (staged retry)": 1,
        "thinking blocks without text dropped (staged retry)": 2,
        "thinking off (staged retry)": 1,
    }
    assert STAGE_NOTES[1].startswith("staged retry, stage 1")
    # The request given is not changed.
    assert isinstance(req.messages[2].parts[0], Thinking)


@pytest.mark.parametrize("upstream", ["gemini", "anthropic", "openai_chat", "openai_responses"])
def test_stage_1_on_the_wire_has_no_thinking_and_no_signature(upstream: str) -> None:
    body = wire(stage_request(conversation(), 1), upstream)
    assert SIG not in body and "text-sig" not in body and "trailing-signature" not in body
    assert "REDACTED" not in body and "reasoning_content" not in body
    assert "I should read the file first." in body  # as text
    assert '"thinking"' not in body and "thinkingConfig" not in body


@pytest.mark.parametrize("upstream", ["gemini", "anthropic", "openai_chat", "openai_responses"])
def test_stage_2_on_the_wire_has_no_calls_and_no_results(upstream: str) -> None:
    notes: Counter[str] = Counter()
    out = stage_request(conversation(), 2, notes)
    assert not any(isinstance(p, ToolCall | ToolResult) for m in out.messages for p in m.parts)
    roles = [m.role for m in out.messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert out.tools is not None and len(out.tools) == 2  # still declared
    assistant = "".join(p.text for p in out.messages[2].parts if isinstance(p, Text))
    assert '[Calling tool: read]\nInput: {"path": "a.txt"}' in assistant
    assert "[Calling tool: glob]" in assistant
    user = out.messages[3]
    text = "".join(p.text for p in user.parts if isinstance(p, Text))
    assert (
        "[Tool Result]\nhello" in text
        and "[Tool Result]\na.txt" in text
        and "Thanks, go on." in text
    )
    assert any(isinstance(p, Image) for p in user.parts)
    assert notes["tool calls sent as text (staged retry)"] == 2
    assert notes["tool results sent as text (staged retry)"] == 2
    body = wire(out, upstream)
    for word in (
        "functionCall",
        "functionResponse",
        "tool_use",
        "tool_result",
        "tool_calls",
        '"function_call"',
        "function_call_output",
        SIG,
    ):
        assert word not in body, word


def test_error_results_say_so_in_stage_2() -> None:
    req = Request(
        "anthropic",
        "claude-sonnet-4-5",
        (
            Message("user", (Text("go"),)),
            Message("assistant", (ToolCall("t1", "run", "{}"),)),
            Message("user", (ToolResult("t1", "boom", is_error=True), ToolResult("t2", ""))),
        ),
    )
    out = stage_request(req, 2)
    text = "".join(p.text for p in out.messages[2].parts if isinstance(p, Text))
    assert "[Tool Result]\n[error] boom" in text and "[Tool Result]\n(empty result)" in text


def test_a_gemini_clients_own_request_loses_its_signatures_in_stage_1() -> None:
    path = FIXTURES / "clients" / "gemini-cli-0.61.0-default-turn3.request.json"
    if not path.exists():
        pytest.skip("recording not available")
    body: Any = json.loads(path.read_text())["body"]
    req = DIALECTS["gemini"].decode_request(body, Counter())
    before = wire(req, "gemini")
    assert "thoughtSignature" in before
    after = wire(stage_request(req, 1), "gemini")
    assert "thoughtSignature" not in after
    assert after.count("functionCall") == before.count("functionCall")
    stage2 = DIALECTS["gemini"].encode_request(stage_request(req, 2), Counter())
    contents = json.dumps(stage2["contents"])
    assert "functionCall" not in contents and "functionResponse" not in contents
    assert [c["role"] for c in stage2["contents"]] == ["user", "model", "user", "model", "user"]


def test_unknown_stage() -> None:
    with pytest.raises(ValueError):
        stage_request(conversation(), 3)  # type: ignore[arg-type]


def test_stage_1_drops_the_reasoning_switches_a_client_kept_as_extras() -> None:
    body = {
        "model": "deepseek-reasoner",
        "messages": [{"role": "user", "content": "hi"}],
        "reasoning_effort": "high",
        "thinking": {"type": "enabled"},
        "temperature": 0.2,
    }
    notes: Counter[str] = Counter()
    req = DIALECTS["openai_chat"].decode_request(body, notes)
    staged = stage_request(req, 1, notes)
    wire = DIALECTS["openai_chat"].encode_request(staged, Counter())
    assert "reasoning_effort" not in wire and "thinking" not in wire
    assert wire["temperature"] == 0.2
    assert notes["thinking off (staged retry)"] == 1


# --------------------------------------------------------------------------- the decision


def _plan() -> Any:
    from addon.config.options import Settings
    from addon.config.routes import Route
    from addon.plan import Incoming, Rewrite, decide

    route = Route(name="r", path="*/v1/messages", client="anthropic", upstream="openai_chat")
    body = {
        "model": "m",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "x"}],
    }
    inc = Incoming("POST", "h", "/v1/messages", {}, json.dumps(body).encode())
    d = decide(Settings(routes=(route,)), route, inc, {})
    assert isinstance(d, Rewrite)
    return d.plan


SIGNATURE_400 = b'{"error": {"message": "Invalid `signature` in `thinking` block"}}'
TOOL_400 = b'{"error": {"message": "function call is missing a thought_signature"}}'


def test_the_staged_retry_is_decided_with_plain_values() -> None:
    from addon.plan import AnswerState
    from addon.plan.staged import NextStage, Stop, staged_step

    plan = _plan()
    state = AnswerState.of(plan)
    first = staged_step(plan, state, 0, 400, SIGNATURE_400)
    assert isinstance(first, NextStage) and first.stage == 1
    assert "signature" in first.message and "thinking" not in json.loads(first.body)
    # Stage 1 refused again without naming a tool: stop; naming one: stage 2.
    assert staged_step(plan, state, 1, 400, SIGNATURE_400) == Stop("after stage 1")
    second = staged_step(plan, state, 1, 400, TOOL_400)
    assert isinstance(second, NextStage) and second.stage == 2
    assert staged_step(plan, state, 2, 400, TOOL_400) == Stop("after stage 2")
    assert staged_step(plan, state, 0, 401, SIGNATURE_400) == Stop("not a signature error")
    assert staged_step(plan, state, 0, 400, b"<html>") == Stop("not a signature error")
