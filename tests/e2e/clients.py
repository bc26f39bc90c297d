"""What the official SDK clients got, in one shape, and the agents' tool loops on them.

``chat_turn`` and ``messages_turn`` are one request each, streamed or whole. ``cursor_loop``
(the openai SDK) and ``claude_code_loop`` (the anthropic SDK) are the 3-turn tool loops the
end-to-end tests run against every upstream (``test_gemini``, ``test_kiro``,
``test_reasoning_store``, ``test_shared_store``): each returns a ``Loop`` — the calls of
every answer, the last answer's text, Claude Code's answers — for the test's own checks of
what its upstream got.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, cast

import anthropic
import openai
from anthropic.types import Message


def chat_turn(
    client: openai.OpenAI, stream: bool, **params: Any
) -> tuple[str, str | None, list[dict[str, str]]]:
    """One chat-completions request, streamed (deltas assembled as the SDK's users do) or
    whole: ``(content, finish_reason, [{"id", "name", "arguments"}, …])``."""
    if not stream:
        done = client.chat.completions.create(**params)
        choice = done.choices[0]
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in choice.message.tool_calls or ()
            if c.type == "function"
        ]
        return choice.message.content or "", choice.finish_reason, calls
    slots: dict[int, dict[str, str]] = {}
    content, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **params):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or ():
            slot = slots.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = tc.id or slot["id"]
            if tc.function:
                slot["name"] = tc.function.name or slot["name"]
                slot["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return content, finish, [slots[i] for i in sorted(slots)]


def messages_turn(client: anthropic.Anthropic, stream: bool, **params: Any) -> Message:
    """One Messages request, streamed (the SDK's ``get_final_message``, what Claude Code
    prints from) or whole: the answer."""
    if not stream:
        return cast(Message, client.messages.create(**params))
    with client.messages.stream(**params) as events:
        return events.get_final_message()


# --------------------------------------------------------------------------- the agents' loops

QUESTION = "What do the text files say?"
"""The user's question that starts every loop."""
TURNS = 3
"""The most answers a loop asks for."""

BaseURL = str | Callable[[], str]
"""Where the proxy is: its base URL, or a callable asked before every turn (a client of its
own per turn: the turns go to other workers, or to a proxy restarted in between)."""

Tool = Callable[[str, dict[str, Any]], str]
"""Runs a call on the client's side: ``(name, arguments) → result``."""


def read_and_list(files: Mapping[str, str]) -> Tool:
    """The loops' two tools: ``Read`` one of ``files`` (by ``path``) and ``List`` them (by
    ``pattern`` ``*.txt``, checked)."""

    def run(name: str, args: dict[str, Any]) -> str:
        if name == "Read":
            return files[args["path"]]
        assert name == "List" and args == {"pattern": "*.txt"}, (name, args)
        return "a.txt\nb.txt"

    return run


@dataclass
class Loop:
    """What an agent's tool loop got, an entry per answer, first to last."""

    calls: list[list[str]] = field(default_factory=list)
    """The names of the tools each answer called (the last: none)."""
    text: str = ""
    """The last answer's text."""
    answers: list[Message] = field(default_factory=list)
    """Claude Code's answers (``claude_code_loop``; empty for Cursor's)."""

    @property
    def first(self) -> Message:
        return self.answers[0]

    @property
    def last(self) -> Message:
        return self.answers[-1]


def _turns[T](base_url: BaseURL, make: Callable[[str], T]) -> Iterator[T]:
    """A client for each of ``TURNS`` turns: one for them all at a fixed URL, else a new one
    at the URL of each turn."""
    if isinstance(base_url, str):
        client = make(base_url)
        for _ in range(TURNS):
            yield client
    else:
        for _ in range(TURNS):
            yield make(base_url())


def cursor_loop(
    base_url: BaseURL,
    stream: bool,
    *,
    key: str,
    model: str,
    tools: Any,
    run_tool: Tool,
    system: str | None = "You are Cursor's agent.",
    history: Literal["whole", "calls"] = "whole",
    **extra: Any,
) -> Loop:
    """Cursor's agent loop on the openai SDK (chat completions, ``extra`` sent with each
    request): it runs each answer's calls with ``run_tool`` and sends their results as
    ``role: "tool"`` messages, until an answer calls nothing (AssertionError after
    ``TURNS`` answers that all call). Each answer is checked as the agent relies on it: finish
    ``tool_calls`` with calls and ``stop`` without, no call id twice. ``history="calls"``:
    the assistant turns it sends back keep only the calls (ids, names, arguments), not the
    answer's text."""
    messages: list[Any] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": QUESTION})
    loop = Loop()
    make = partial(openai.OpenAI, api_key=key, max_retries=0, timeout=15)
    for client in _turns(base_url, lambda url: make(base_url=f"{url}/v1")):
        content, finish, got = chat_turn(
            client, stream, model=model, messages=messages, tools=tools, **extra
        )
        loop.calls.append([c["name"] for c in got])
        if not got:
            assert finish == "stop", (loop.calls, finish)
            loop.text = content
            return loop
        assert finish == "tool_calls", (loop.calls, finish)
        assert len({c["id"] for c in got}) == len(got), got  # ids unique within the answer
        text = (content or None) if history == "whole" else None
        messages.append(assistant_calls(got, text))
        for c in got:
            result = run_tool(c["name"], json.loads(c["arguments"]))
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
    raise AssertionError(f"no final answer after {TURNS} turns: {loop.calls}")


def assistant_calls(calls: list[dict[str, str]], content: str | None = None) -> dict[str, Any]:
    """The chat-completions assistant message of ``calls`` (``chat_turn``'s), as a client
    sends it back in its history."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ],
    }


def claude_code_loop(
    base_url: BaseURL,
    stream: bool,
    *,
    key: str,
    model: str,
    tools: Any,
    run_tool: Tool,
    system: str | None = "You are Claude Code.",
    max_tokens: int = 2048,
    history: Literal["whole", "calls"] = "whole",
    **extra: Any,
) -> Loop:
    """Claude Code's agent loop on the anthropic SDK (``extra`` sent with each request, e.g.
    ``thinking``): it runs each answer's ``tool_use`` blocks with ``run_tool`` and sends
    their results as ``tool_result`` blocks, until an answer calls nothing (AssertionError
    after ``TURNS`` answers that all call). Each answer is checked as the agent relies on
    it: stop reason ``tool_use`` with calls and ``end_turn`` without. ``history="calls"``:
    the assistant turns it sends back keep only the ``tool_use`` blocks (thinking and text
    dropped)."""
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    params: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "tools": tools}
    if system:
        params["system"] = system
    loop = Loop()
    make = partial(anthropic.Anthropic, api_key=key, max_retries=0, timeout=15)
    for client in _turns(base_url, lambda url: make(base_url=url)):
        message = messages_turn(client, stream, messages=messages, **params, **extra)
        loop.answers.append(message)
        uses = [b for b in message.content if b.type == "tool_use"]
        loop.calls.append([u.name for u in uses])
        if not uses:
            assert message.stop_reason == "end_turn", (loop.calls, message)
            loop.text = "".join(b.text for b in message.content if b.type == "text")
            return loop
        assert message.stop_reason == "tool_use", (loop.calls, message)
        sent: list[Any] = (
            [b.model_dump() for b in message.content]
            if history == "whole"
            else [{"type": "tool_use", "id": u.id, "name": u.name, "input": u.input} for u in uses]
        )
        messages.append({"role": "assistant", "content": sent})
        results = [
            {
                "type": "tool_result",
                "tool_use_id": u.id,
                "content": run_tool(u.name, cast(dict[str, Any], u.input)),
            }
            for u in uses
        ]
        messages.append({"role": "user", "content": results})
    raise AssertionError(f"no final answer after {TURNS} turns: {loop.calls}")
