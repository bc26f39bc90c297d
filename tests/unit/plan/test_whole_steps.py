"""A whole answer step by step (``addon.plan.whole_steps``), with plain values: the state of
the answer picks its row of ``STEPS``; a row asks to send again (``Send``) or says what the
shell applies (``Told``), and the answer to what it sent is read by the row its ``then``
names. (The shell's side, through a real mitmdump: tests/e2e/test_repair_loop.py,
test_reasoning_store.py, test_usage_and_200_errors.py, test_stream_endings.py.)"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import AnswerState
from addon.plan.whole_steps import (
    STEPS,
    Answer,
    At,
    Body,
    Reply,
    Seen,
    Send,
    Told,
    broken,
    whole_step,
)
from addon.report.outcome import Count

CHAT = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]}
RETRIED = "no tool call although one was required: retried once →"
TOOL = {"name": "read", "input_schema": {"type": "object"}}


def plan_for(client: str = "anthropic", upstream: str = "openai_chat", **body: Any) -> FlowPlan:
    """An Anthropic client's plan on an OpenAI chat upstream (or ``client``'s own)."""
    path = "/v1/messages" if client == "anthropic" else "/v1/chat/completions"
    route = Route(name="r", client=client, path="*" + path, upstream=upstream)  # type: ignore[arg-type]
    raw = json.dumps({**CHAT, **body}).encode()
    d = decide(Settings(), route, Incoming("POST", "h", path, {}, raw), {})
    assert isinstance(d, Rewrite), d
    return d.plan


def chat_answer(*, call: bool = False) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": "hi"}
    if call:
        function = {"name": "read", "arguments": "{}"}
        message["tool_calls"] = [{"id": "c1", "type": "function", "function": function}]
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m"}
    return json.dumps({**body, "choices": [choice]}).encode()


def ok(body: bytes) -> Seen:
    return Seen(200, "application/json", body)


def test_every_state_of_a_whole_answer_has_its_row() -> None:
    assert set(STEPS) == set(At)


def test_a_whole_answer_is_encoded_for_the_client_with_what_the_shell_notes() -> None:
    plan = plan_for()
    raw = chat_answer()
    told = whole_step(AnswerState.of(plan), Answer(plan, ok(raw), can_retry=True))
    assert isinstance(told, Told) and isinstance(told.reply, Body)
    assert told.reply.content_type == "application/json"
    assert json.loads(told.reply.body)["content"] == [{"type": "text", "text": "hi"}]
    assert told.counts == [Count.ANSWERS_REWRITTEN] and told.notes
    assert told.kept is not None and told.kept.raw == raw and not told.kept.stream
    assert told.sizes == {"bytes_in": len(raw), "bytes_out": len(told.reply.body), "tool_calls": 0}


def test_a_body_the_relay_cut_is_a_502_in_the_clients_dialect() -> None:
    plan = plan_for()
    first = Seen(200, "application/json", b'{"id": "x", "cho', cut="upstream_reset")
    told = whole_step(AnswerState.of(plan), Answer(plan, first, can_retry=True))
    assert isinstance(told, Told) and isinstance(told.reply, Reply)
    assert told.reply.status == 502 and json.loads(told.reply.body)["type"] == "error"
    assert told.lines == ["upstream answer cut (upstream_reset) → 502"]
    # Counted as a cut, and said, by the flow's one line (``Report.close``: cut=), not here.
    assert told.counts == [] and told.logs == []


@pytest.mark.parametrize(
    ("again", "line", "calls"),
    [
        (
            ok(chat_answer(call=True)),
            f"{RETRIED} got one",
            1,
        ),
        (ok(chat_answer()), f"{RETRIED} still none", 0),
        (Seen(500, "application/json", b'{"error": {"message": "m"}}'), "retry got HTTP 500", 0),
        (None, None, 0),  # not sent: the first answer stands
    ],
)
def test_a_missing_required_call_is_asked_for_once_and_the_better_answer_is_the_clients(
    again: Seen | None, line: str | None, calls: int
) -> None:
    plan = dataclasses.replace(plan_for(tools=[TOOL]), tool_required=True)
    state = AnswerState.of(plan)
    step = whole_step(state, Answer(plan, ok(chat_answer()), can_retry=True))
    assert isinstance(step, Send) and step.body is None  # the first request's body again
    assert step.attempt == "retry for a required tool call" and step.then.at is At.REQUIRED
    told = whole_step(state, dataclasses.replace(step.then, seen=again))
    assert isinstance(told, Told) and isinstance(told.reply, Body)
    assert told.lines == ([line] if line else [])
    assert told.retried == (["required tool call"] if again is not None and again.ok else [])
    assert told.sizes["tool_calls"] == calls


def test_without_the_retry_addon_a_missing_required_call_is_not_asked_for() -> None:
    plan = dataclasses.replace(plan_for(tools=[TOOL]), tool_required=True)
    told = whole_step(AnswerState.of(plan), Answer(plan, ok(chat_answer()), can_retry=False))
    assert isinstance(told, Told) and told.counts == [Count.ANSWERS_REWRITTEN]


def test_an_error_that_calls_for_no_stage_is_re_shaped_for_another_dialect() -> None:
    plan = plan_for()
    error = b'{"error": {"message": "slow down", "type": "requests", "code": "rate_limit"}}'
    told = whole_step(
        AnswerState.of(plan), Answer(plan, Seen(429, "application/json", error), can_retry=True)
    )
    assert isinstance(told, Told) and isinstance(told.reply, Body)  # its status kept
    assert json.loads(told.reply.body)["error"]["type"] == "rate_limit_error"
    assert told.lines == ["upstream error 429 → anthropic shape"] and told.retried == []


def test_an_error_on_the_same_dialect_in_its_own_shape_goes_on_as_it_came() -> None:
    plan = plan_for("openai_chat", "openai_chat")
    error = b'{"error": {"message": "m", "type": "invalid_request_error", "code": null}}'
    first = Seen(400, "application/json", error)
    told = whole_step(AnswerState.of(plan), Answer(plan, first, can_retry=True))
    assert isinstance(told, Told) and told.reply is None and told.lines == []


def test_a_2xx_error_body_is_answered_with_the_status_its_type_names() -> None:
    plan = plan_for()
    error = b'{"error": {"message": "m", "type": "requests", "code": "rate_limit_exceeded"}}'
    told = whole_step(AnswerState.of(plan), Answer(plan, ok(error), can_retry=True))
    assert isinstance(told, Told) and isinstance(told.reply, Reply) and told.reply.status == 429
    assert told.counts == [Count.UPSTREAM_ERRORS_RESHAPED]


def test_an_answer_another_dialect_cannot_read_is_a_502_the_same_dialect_gets_it_as_it_came() -> (
    None
):
    plan = plan_for()
    told = whole_step(AnswerState.of(plan), Answer(plan, ok(b"[1, 2]"), can_retry=True))
    assert isinstance(told, Told) and isinstance(told.reply, Reply) and told.reply.status == 502
    same = plan_for("openai_chat", "openai_chat")
    told = whole_step(AnswerState.of(same), Answer(same, ok(b"[1, 2]"), can_retry=True))
    assert isinstance(told, Told) and told.reply is None
    assert told.not_rewritten == ["answer not rewritten (the answer is JSON but not an object)"]


def test_not_json_on_the_same_dialect_is_the_clients_to_read() -> None:
    plan = plan_for("openai_chat", "openai_chat")
    first = Seen(200, "text/html", b"<html></html>")
    told = whole_step(AnswerState.of(plan), Answer(plan, first, can_retry=True))
    assert isinstance(told, Told) and told == Told(plan)


def test_a_bug_on_the_way_is_a_502_for_another_dialect_only() -> None:
    plan = plan_for()
    told = broken(AnswerState.of(plan), plan, 200, "KeyError")
    assert isinstance(told.reply, Reply) and told.reply.status == 502
    assert told.not_rewritten[0] == "internal error (KeyError)"
    same = plan_for("openai_chat", "openai_chat")
    told = broken(AnswerState.of(same), same, 200, "KeyError")
    assert told.reply is None and told.not_rewritten == ["internal error (KeyError)"]


NO_THINKING = (
    "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)."
)


def test_a_400_over_reasoning_is_asked_again_in_stages_and_the_stage_answering_is_delivered() -> (
    None
):
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    tool = {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
    plan = plan_for("openai_chat", "anthropic", messages=messages, tools=[tool], stream=False)
    state = AnswerState.of(plan)
    error = json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": NO_THINKING}})  # fmt: skip
    first = Seen(400, "application/json", error.encode())
    step = whole_step(state, Answer(plan, first, can_retry=True))
    assert isinstance(step, Send) and step.attempt == "staged retry 1" and step.body
    assert step.then.at is At.STAGED and step.told.retried == ["staged retry 1"]
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m"}
    answer = {**message, "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}
    answer["usage"] = {"input_tokens": 1, "output_tokens": 1}
    told = whole_step(state, dataclasses.replace(step.then, seen=ok(json.dumps(answer).encode())))
    assert isinstance(told, Told) and isinstance(told.reply, Reply) and told.reply.status == 200
    assert json.loads(told.reply.body)["choices"][0]["message"]["content"] == "ok"
    assert told.meta == {"staged_retry": 1} and told.counts == [Count.STAGED_RETRIES_ANSWERED]
    # refused again (the error names a tool): stage 2; refused too: the first error stands
    step = whole_step(state, dataclasses.replace(step.then, seen=first))
    assert isinstance(step, Send) and step.attempt == "staged retry 2"
    assert step.told.lines == ["staged retry 1 got HTTP 400"]
    told = whole_step(state, dataclasses.replace(step.then, seen=first))
    assert isinstance(told, Told) and told.lines[0] == "staged retry 2 got HTTP 400"
    assert isinstance(told.reply, Body) and "invalid_request_error" in told.reply.body.decode()


def test_a_held_stream_that_repeats_a_failing_call_is_asked_again_with_the_invoke_protocol() -> (
    None
):
    same = '{"path": "a.py"}'
    call = {"id": "c0", "type": "function", "function": {"name": "edit", "arguments": same}}
    messages: list[Any] = [{"role": "user", "content": "fix a.py"}]
    for i in range(3):
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{**call, "id": f"c{i}"}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "Error: file not found"},
        ]
    tool = {"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}
    route = Route(name="r", client="openai_chat", path="*/chat/completions", upstream="openai_chat")  # fmt: skip
    body = {"model": "m", "stream": True, "messages": messages, "tools": [tool]}
    incoming = Incoming("POST", "h", "/v1/chat/completions", {}, json.dumps(body).encode())
    d = decide(Settings(loop_fallback=True), route, incoming, {})
    assert isinstance(d, Rewrite) and d.plan.loop_held
    plan, state = d.plan, AnswerState.of(d.plan)
    chunk = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    delta = {"role": "assistant", "tool_calls": [{"index": 0, **call, "id": "c9"}]}
    chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": "tool_calls"}]
    sse = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
    step = whole_step(state, Answer(plan, Seen(200, "text/event-stream", sse), can_retry=True))
    assert isinstance(step, Send) and step.attempt is None and step.then.at is At.ASKED
    assert step.then.plan.protocol == "invoke" and b"<invoke" in (step.body or b"")
    told = whole_step(state, dataclasses.replace(step.then, seen=Seen(502, "text/plain", b"")))
    assert isinstance(told, Told) and told.retried == ["loop guard"]
    assert told.lines == ["loop guard: asked again, got HTTP 502"]
    assert isinstance(told.reply, Body) and b"loop guard" in told.reply.body  # the first stands
    assert told.reply.drop == ("content-length", "content-encoding", "transfer-encoding")
