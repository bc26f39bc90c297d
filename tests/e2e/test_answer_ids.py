"""End to end, issue 35 ("Ids and reporting"): each answer gets a message id of its own.

The anthropic SDK (as Claude Code uses it) → mitmdump → an OpenAI-compatible upstream whose
answers name no ``id`` (or the same one every time). Claude Code merges consecutive assistant
messages that share an id, so two turns must come back under two ids: streamed and whole,
each in Anthropic's own shape (``msg_01…``)."""

from __future__ import annotations

import re
from typing import Any

import anthropic
import pytest

from tests.e2e.harness import JSONReply, Proxy, ScriptedUpstream, SSEReply, sse_from_payloads

MESSAGE_ID = re.compile(r"msg_01[0-9A-Za-z]{22}")


def chat_stream(text: str, upstream_id: str | None) -> bytes:
    base: dict[str, Any] = {"object": "chat.completion.chunk", "created": 1, "model": "m"}
    if upstream_id is not None:
        base["id"] = upstream_id
    deltas = [{"role": "assistant", "content": ""}, {"content": text}, {}]
    payloads: list[Any] = [
        {
            **base,
            "choices": [{"index": 0, "delta": d, "finish_reason": None if d else "stop"}],
        }
        for d in deltas
    ]
    return sse_from_payloads([*payloads, "[DONE]"])


def chat_json(text: str, upstream_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    if upstream_id is not None:
        body["id"] = upstream_id
    return body


def ask(proxy: Proxy, stream: bool, messages: list[Any]) -> anthropic.types.Message:
    client = anthropic.Anthropic(
        base_url=proxy.base_url, api_key="sk-ant-e2e-secret", max_retries=0, timeout=15
    )
    params: dict[str, Any] = {"model": "claude-sonnet-4-6", "max_tokens": 256}
    if stream:
        with client.messages.stream(messages=messages, **params) as s:
            return s.get_final_message()
    message = client.messages.create(messages=messages, **params)
    assert isinstance(message, anthropic.types.Message)
    return message


@pytest.mark.parametrize("upstream_id", [None, "chatcmpl-same"], ids=["no-id", "same-id"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_two_turns_get_two_message_ids(
    proxy: Proxy, upstream: ScriptedUpstream, stream: bool, upstream_id: str | None
) -> None:
    for text in ("first answer", "second answer"):
        upstream.enqueue(
            SSEReply(chat_stream(text, upstream_id), chunk_min=1, chunk_max=9, seed=3)
            if stream
            else JSONReply(chat_json(text, upstream_id))
        )
    history: list[Any] = [{"role": "user", "content": "hi"}]
    first = ask(proxy, stream, history)
    history += [
        {"role": "assistant", "content": [{"type": "text", "text": "first answer"}]},
        {"role": "user", "content": "and again"},
    ]
    second = ask(proxy, stream, history)
    assert [b.text for b in first.content + second.content if b.type == "text"] == [
        "first answer",
        "second answer",
    ]
    assert MESSAGE_ID.fullmatch(first.id) and MESSAGE_ID.fullmatch(second.id)
    assert first.id != second.id
