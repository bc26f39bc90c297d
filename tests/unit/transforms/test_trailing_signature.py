"""Gemini 3's trailing signature part reaches no client of another dialect as reasoning after
the answer, and still comes back to Gemini on the next turn (``transforms.signatures``).

The recording ``gemini-api-stream-text-trailing-thoughtSignature-gemini3.vercel-ai.chunks.txt``
(a real Gemini 3 stream: two text chunks, then an empty text part with a ``thoughtSignature``)
goes through the flow's own pipeline (``decide`` → ``addon.plan.answer.stream_processor``, the store
on), streamed and whole, for an Anthropic, an OpenAI chat and a Responses client; the
Anthropic stream is accumulated by the anthropic SDK's own ``accumulate_event``. A variant
with thought parts before the text (thinking, text, signature) checks the order Anthropic
writes blocks in. Turn 2 (the client's answer sent back without the signature) must carry
the signature to Gemini on the trailing empty part again.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.model import (
    Finish,
    Response,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallStart,
)
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, decode_answer, encode_answer, stream_processor
from addon.stores.reasoning import ReasoningStore
from addon.stream.stages import TrailingSignatureStage
from addon.transforms.signatures import drop_trailing_signatures
from tests.realdata import FIXTURES, read
from tests.unit.helpers import content_of, sdk_message

RECORDING = (
    FIXTURES / "gemini-api-stream-text-trailing-thoughtSignature-gemini3.vercel-ai.chunks.txt"
)
MODEL = "gemini-3-pro-preview"
PATHS = {
    "anthropic": "/v1/messages",
    "openai_chat": "/v1/chat/completions",
    "openai_responses": "/v1/responses",
}


def chunks(thoughts: bool = False) -> list[dict[str, Any]]:
    out = [json.loads(line) for line in read(RECORDING.name).decode().splitlines() if line.strip()]
    if thoughts:  # Gemini 3 with includeThoughts: a thought summary part first
        first = json.loads(json.dumps(out[0]))
        first["candidates"][0]["content"]["parts"] = [{"text": "Counting r's.", "thought": True}]
        out.insert(0, first)
    return out


def signature() -> str:
    (sig,) = [
        p["thoughtSignature"]
        for c in chunks()
        for p in c["candidates"][0]["content"]["parts"]
        if "thoughtSignature" in p
    ]
    return str(sig)


def text() -> str:
    return "".join(
        p.get("text", "")
        for c in chunks()
        for p in c["candidates"][0]["content"]["parts"]
        if not p.get("thought")
    )


def request(client: str, history: str | None = None, stream: bool = True) -> dict[str, Any]:
    messages: list[Any] = [{"role": "user", "content": "How many r's in strawberry?"}]
    if history is not None:
        messages += [
            {"role": "assistant", "content": history},
            {"role": "user", "content": "And in raspberry?"},
        ]
    if client == "openai_responses":
        return {"model": MODEL, "input": messages, "stream": stream}
    return {"model": MODEL, "messages": messages, "max_tokens": 100, "stream": stream}


def plan_for(
    client: str, store: ReasoningStore, history: str | None = None, stream: bool = True
) -> Rewrite:
    route = Route(name="g", path="*", client=client, upstream="gemini")  # type: ignore[arg-type]
    raw = json.dumps(request(client, history, stream)).encode()
    incoming = Incoming("POST", "h", PATHS[client], {}, raw)
    d = decide(Settings(routes=(route,)), route, incoming, {}, store=store)
    assert isinstance(d, Rewrite), d
    return d


def streamed(plan: FlowPlan, payloads: list[dict[str, Any]]) -> bytes:
    """The client's bytes, split anywhere on the general way; the same bytes one event a read
    on the proxy's own reader (the fast path's common reads)."""
    events = [b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in payloads]
    raw = b"".join(events)
    proc = stream_processor(plan, AnswerState.of(plan), None)
    out = b"".join(b for i in range(0, len(raw), 97) for b in proc.feed(raw[i : i + 97]))
    out += b"".join(proc.finish())
    assert proc.error is None, proc.error
    fast = stream_processor(plan, AnswerState.of(plan), None)
    read = fast.reader()
    again = b"".join(b for e in events for b in read(e)) + b"".join(fast.finish())
    assert _without_ids(again) == _without_ids(out)
    return out


def _without_ids(raw: bytes) -> bytes:
    """Ids and times the encoders make anew for each stream."""
    text = re.sub(rb'"(id|created|created_at|item_id|sequence_number)":("[^"]*"|\d+)', b"", raw)
    return re.sub(rb'"(msg|resp|rs|chatcmpl)_[A-Za-z0-9_-]+"', b"", text)


def sse_pairs(raw: bytes) -> list[tuple[str, str]]:
    pairs, name = [], ""
    for line in raw.decode().splitlines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: ") and line != "data: [DONE]":
            data = line[len("data: ") :]
            pairs.append((name or json.loads(data).get("type", ""), data))
            name = ""
    return pairs


def whole(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """The stream's chunks as one generateContent answer (parts joined in order)."""
    parts = [p for c in payloads for p in c["candidates"][0]["content"]["parts"]]
    body = json.loads(json.dumps(payloads[-1]))
    body["candidates"][0]["content"]["parts"] = parts
    return body


def turn2_trailing_part(client: str, store: ReasoningStore) -> Any:
    d = plan_for(client, store, history=text())
    (model,) = [c for c in d.wire.body["contents"] if c["role"] == "model"]
    assert d.plan.request_notes["reasoning restored from the store by text hash"] == 1
    return model["parts"][-1]


@pytest.mark.parametrize("thoughts", [False, True], ids=["recording", "with-thoughts"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_an_anthropic_client_gets_no_thinking_block_after_its_text(
    stream: bool, thoughts: bool
) -> None:
    store = ReasoningStore()
    d = plan_for("anthropic", store, stream=stream)
    payloads = chunks(thoughts)
    if stream:
        message = sdk_message(sse_pairs(streamed(d.plan, payloads)))
        blocks = content_of(message)
    else:
        answer = decode_answer(d.plan, AnswerState.of(d.plan), json.dumps(whole(payloads)).encode())
        blocks = json.loads(encode_answer(d.plan, answer))["content"]
    kinds = [b["type"] for b in blocks]
    assert kinds == (["thinking", "text"] if thoughts else ["text"])
    assert blocks[-1]["text"] == text()
    assert turn2_trailing_part("anthropic", store) == {"text": "", "thoughtSignature": signature()}


@pytest.mark.parametrize("client", ["openai_chat", "openai_responses"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_openai_clients_get_no_reasoning_after_the_message(client: str, stream: bool) -> None:
    store = ReasoningStore()
    d = plan_for(client, store, stream=stream)
    if stream:
        raw = streamed(d.plan, chunks())
        events = [json.loads(data) for _, data in sse_pairs(raw)]
        if client == "openai_responses":
            (done,) = [e for e in events if e["type"] == "response.completed"]
            output = done["response"]["output"]
        else:
            deltas = [c["choices"][0]["delta"] for c in events if c.get("choices")]
            assert not any("reasoning_content" in x or "reasoning" in x for x in deltas)
            assert "".join(x.get("content") or "" for x in deltas) == text()
    else:
        answer = decode_answer(d.plan, AnswerState.of(d.plan), json.dumps(whole(chunks())).encode())
        body = json.loads(encode_answer(d.plan, answer))
        if client == "openai_responses":
            output = body["output"]
        else:
            message = body["choices"][0]["message"]
            assert message["content"] == text() and not message.get("reasoning_content")
    if client == "openai_responses":
        assert [o["type"] for o in output] == ["message"]
        assert "".join(c["text"] for c in output[0]["content"]) == text()
    assert turn2_trailing_part(client, store) == {"text": "", "thoughtSignature": signature()}


# --------------------------------------------------------------------------- the rule alone

SIG, CALL = "S" * 40, "C" * 40


@pytest.mark.parametrize(
    ("events", "kept"),
    [
        pytest.param(
            [TextDelta("a"), ThinkingDelta("", SIG), Finish("stop")],
            [TextDelta("a"), Finish("stop")],
            id="trailing",
        ),
        pytest.param(
            [ThinkingDelta("", SIG), TextDelta("a"), Finish("stop")],
            [ThinkingDelta("", SIG), TextDelta("a"), Finish("stop")],
            id="before-the-text",
        ),
        pytest.param(
            [TextDelta("a"), ThinkingDelta("", CALL), ToolCallStart(0, "c", "f")],
            [TextDelta("a"), ThinkingDelta("", CALL), ToolCallStart(0, "c", "f")],
            id="before-a-call",
        ),
        pytest.param(
            [TextDelta("a"), ThinkingDelta("why"), ThinkingDelta("", SIG), TextDelta("b")],
            [TextDelta("a"), ThinkingDelta("why"), ThinkingDelta("", SIG), TextDelta("b")],
            id="ends-interleaved-thinking",
        ),
        pytest.param(
            [TextDelta("a"), ThinkingDelta("", SIG), TextDelta("b")],
            [TextDelta("a"), TextDelta("b")],
            id="between-texts",
        ),
    ],
)
def test_the_rule_on_events_and_parts(events: list[Any], kept: list[Any]) -> None:
    stage = TrailingSignatureStage()
    assert [e for ev in events for e in stage.feed(ev)] + stage.finish() == kept
    as_part = {
        TextDelta: lambda e: Text(e.text),
        ThinkingDelta: lambda e: Thinking(e.text, e.signature),
    }
    to_part = {**as_part, ToolCallStart: lambda e: ToolCall(e.id, e.name, "{}")}
    parts = tuple(to_part[type(e)](e) for e in events if type(e) in to_part)
    answer = Response("gemini", None, None, parts, "stop")
    want = tuple(to_part[type(e)](e) for e in kept if type(e) in to_part)
    assert drop_trailing_signatures(answer).parts == want
    assert Counter(type(p) for p in want)  # never empty


def test_the_text_lane_tells_the_stage_about_text() -> None:
    stage = TrailingSignatureStage()
    assert stage.take_text("a")
    assert stage.feed(ThinkingDelta("", SIG)) == []
    assert not stage.take_text("b")  # something held: the event must be fed
    assert stage.feed(TextDelta("b")) == [TextDelta("b")]
