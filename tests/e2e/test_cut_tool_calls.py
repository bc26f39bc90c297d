"""End to end, issue 26: a stream cut inside a tool call never hands a client a call it can run.

Through a real ``mitmdump -s addon/main.py`` in front of the scripted upstream (OpenAI chat, the
default routes), driven by the official ``openai`` (chat and Responses) and ``anthropic`` SDKs.
The upstream writes some text, then an ``edit`` call whose arguments stop in the middle, and
its body ends there (no finish reason, no ``[DONE]``):

- with argument repair on (the default: calls are held until complete), nothing of the call
  reaches the client: no ``tool_calls`` delta, no ``tool_use`` block, no ``function_call`` item;
- with repair off (the call streams as it comes), the client has the fragments it got, but the
  call is never finished (no finish reason, no ``content_block_stop``, no
  ``output_item.done``);
- on a text-protocol route (``invoke``), the unfinished ``<invoke>`` is text;

and every SDK raises (or gets no completed response): the text before the call is intact.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.harness import Proxy, ScriptedUpstream, SSEReply

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "new_string": {"type": "string"}},
    "required": ["path", "new_string"],
}
TEXT = "I'll fix it. "
ARGS = json.dumps({"path": "src/a.py", "new_string": "x = 2"})
CUT = ARGS[: len(ARGS) - 3]  # '..."x = ' : complete-looking once repaired
BASE = {"id": "chatcmpl-c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
BAD_LOG = ("Traceback", "Logging error", "Addon error")


def chunk(delta: dict[str, Any]) -> bytes:
    payload = {**BASE, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def cut_call_reply() -> SSEReply:
    """Text, then an ``edit`` call whose arguments stop three bytes short; the body ends."""
    head = {"index": 0, "id": "call_c1", "type": "function"}
    body = chunk({"role": "assistant", "content": ""}) + chunk({"content": TEXT})
    body += chunk({"tool_calls": [{**head, "function": {"name": "edit", "arguments": ""}}]})
    for i in range(0, len(CUT), 7):
        body += chunk({"tool_calls": [{"index": 0, "function": {"arguments": CUT[i : i + 7]}}]})
    return SSEReply(body, chunk_min=3, chunk_max=40, seed=26)


def cut_text_call_reply(trigger: str) -> SSEReply:
    markup = f'{trigger}\n<invoke name="edit">{ARGS}</invoke'  # the closing tag never whole
    body = chunk({"role": "assistant", "content": ""}) + chunk({"content": TEXT})
    for i in range(0, len(markup), 9):
        body += chunk({"content": markup[i : i + 9]})
    return SSEReply(body, chunk_min=3, chunk_max=40, seed=26)


def chat_tools() -> Any:
    return [{"type": "function", "function": {"name": "edit", "parameters": SCHEMA}}]


def openai_chat(proxy: Proxy) -> tuple[str, list[Any], list[str | None]]:
    """The text, tool-call deltas and finish reasons an OpenAI client read before the SDK
    raised (it must)."""
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=15)
    text, calls, finishes = "", [], []
    with pytest.raises(openai.APIError, match="cut"):
        for c in client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "fix"}],
            tools=chat_tools(),
            stream=True,
        ):
            for choice in c.choices:
                text += choice.delta.content or ""
                calls += choice.delta.tool_calls or []
                finishes.append(choice.finish_reason)
    return text, calls, [f for f in finishes if f]


def anthropic_stream(proxy: Proxy) -> tuple[anthropic.types.Message, list[str]]:
    """The SDK's accumulated message when it raised (it must), and the event types read."""
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=15)
    tools: Any = [{"name": "edit", "input_schema": SCHEMA}]
    names: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError, match="cut"),
        client.messages.stream(
            model="m", max_tokens=100, tools=tools, messages=[{"role": "user", "content": "fix"}]
        ) as stream,
    ):
        try:
            for event in stream:
                names.append(event.type)
        finally:
            snapshot = stream.current_message_snapshot
    return snapshot, names


def responses_events(proxy: Proxy) -> list[Any]:
    """Every event a Responses client read; ``responses.stream`` must never complete."""
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=15)
    tools: Any = [{"type": "function", "name": "edit", "parameters": SCHEMA, "strict": False}]
    with client.responses.stream(model="m", input="fix", tools=tools) as s:
        events = list(s)
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            s.get_final_response()
    assert events[-1].type == "response.failed"
    assert "cut" in events[-1].response.error.message
    return events


def responses_calls_done(events: list[Any]) -> list[Any]:
    done = [
        e
        for e in events
        if (e.type == "response.output_item.done" and e.item.type == "function_call")
        or e.type == "response.function_call_arguments.done"
    ]
    final = [o for o in events[-1].response.output if o.type == "function_call"]
    return done + final


def text_of(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def clean(proxy: Proxy) -> None:
    log = proxy.log_text()
    for bad in BAD_LOG:
        assert bad not in log, log


# --------------------------------------------------------------------------- held calls (repair on)


def test_openai_client_never_gets_a_held_call_of_a_cut_stream(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(cut_call_reply())
    text, calls, finishes = openai_chat(proxy)
    assert text == TEXT and calls == [] and finishes == []
    clean(proxy)


def test_anthropic_client_never_gets_a_held_call_of_a_cut_stream(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(cut_call_reply())
    message, names = anthropic_stream(proxy)
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == TEXT  # type: ignore[union-attr]
    assert "content_block_start" in names and "message_stop" not in names
    clean(proxy)


def test_responses_client_never_gets_a_held_call_of_a_cut_stream(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(cut_call_reply())
    events = responses_events(proxy)
    assert text_of(events) == TEXT
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [e.item.type for e in added] == ["message"]
    assert responses_calls_done(events) == []
    clean(proxy)


# --------------------------------------------------------------------------- streamed calls (repair off)


@pytest.fixture
def unheld(start_proxy: Callable[..., Proxy]) -> Proxy:
    return start_proxy(bridge_tool_repair="off")


def test_a_streamed_call_of_a_cut_stream_is_never_finished(
    unheld: Proxy, upstream: ScriptedUpstream
) -> None:
    # OpenAI: the fragments it got, then the error; never a finish reason.
    upstream.enqueue(cut_call_reply())
    text, calls, finishes = openai_chat(unheld)
    assert text == TEXT and finishes == []
    assert "".join(c.function.arguments or "" for c in calls if c.function) == CUT
    # Anthropic: the block was opened as the call streamed, but never closed; the SDK raises.
    upstream.enqueue(cut_call_reply())
    message, names = anthropic_stream(unheld)
    assert "content_block_stop" in names  # the text block's
    assert names.count("content_block_stop") == 1
    assert [b.type for b in message.content] == ["text", "tool_use"]
    # Responses: the item was added and its arguments streamed; it is never done.
    upstream.enqueue(cut_call_reply())
    events = responses_events(unheld)
    assert text_of(events) == TEXT
    assert [e.item.type for e in events if e.type == "response.output_item.added"] == [
        "message",
        "function_call",
    ]
    assert responses_calls_done(events) == []
    clean(unheld)


# --------------------------------------------------------------------------- text protocol


@pytest.fixture
def invoke(start_proxy: Callable[..., Proxy]) -> Proxy:
    return start_proxy(bridge_tool_mode="invoke")


def test_an_unfinished_text_protocol_call_of_a_cut_stream_is_text(
    invoke: Proxy, upstream: ScriptedUpstream
) -> None:
    # The trigger is per request: the reply is scripted once the request has arrived.
    def reply(rec: Any) -> SSEReply:
        text = json.dumps(rec.json())
        start = text.index("<<CALL_")
        return cut_text_call_reply(text[start : text.index(">>", start) + 2])

    upstream.script = reply  # type: ignore[assignment]
    text, calls, finishes = openai_chat(invoke)
    assert calls == [] and finishes == []
    assert text.startswith(TEXT) and '<invoke name="edit">' in text
    message, _ = anthropic_stream(invoke)
    assert [b.type for b in message.content] == ["text"]
    events = responses_events(invoke)
    assert responses_calls_done(events) == []
    assert [e.item.type for e in events if e.type == "response.output_item.added"] == ["message"]
    clean(invoke)
