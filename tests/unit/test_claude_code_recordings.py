"""Claude Code 2.1.197, recorded (``../shared/fixtures/real/clients/claude-code-2.1.197-*``).

Requests: every recorded ``/v1/messages`` body decodes with the anthropic dialect
(mid-conversation ``system`` messages, ``thinking: adaptive`` with
``output_config.effort``, ``cache_control`` on system, text and tool_result
blocks, an image inside a tool_result); becomes a valid chat-completions body
for an OpenAI-compatible upstream (system messages in order, every tool call
answered by its tool message, images as ``image_url``, no ``cache_control``
after ``strip_cache_control``, ``reasoning_effort`` from the effort); and
encodes back for an Anthropic upstream as it was.

Answers: every scripted Anthropic SSE answer, turned into the stream an OpenAI
upstream would send, and that stream through the bridge's processor back to
Anthropic SSE, gives the anthropic SDK's accumulator the same text, thinking
text, tool names, inputs and ids as the recording. Skipped when the recordings
are not there.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest

from addon.config.options import Settings
from addon.dialects.anthropic import DIALECT as ANTHROPIC
from addon.dialects.anthropic.stream import AnthropicStreamDecoder
from addon.dialects.anthropic.stream_encode import AnthropicStreamEncoder
from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.dialects.openai_chat.stream import OpenAIChatStreamDecoder
from addon.dialects.openai_chat.stream_encode import OpenAIChatStreamEncoder
from addon.model import Notes, Request, ThinkingConfig
from addon.plan import Incoming, Rewrite, decide, route_for
from addon.stream.processor import StreamProcessor
from addon.stream.sse import encode_pairs
from addon.transforms.cache import NOTE, strip_cache_control
from tests.realdata import FIXTURES
from tests.unit.helpers import pairs_of, sdk_message

CLIENTS = FIXTURES / "clients"
PREFIX = "claude-code-2.1.197-"


def _names(suffix: str) -> list[str]:
    if not CLIENTS.is_dir():
        return []
    return sorted(p.name for p in CLIENTS.glob(f"{PREFIX}*{suffix}"))


REQUESTS = [n for n in _names(".request.json") if "-aux-" not in n]
AUX = [n for n in _names(".request.json") if "-aux-" in n]
ANSWERS = _names(".response.sse")


def recording(name: str) -> Any:
    path = CLIENTS / name
    if not path.exists():
        pytest.skip(f"recording {name} not available ({CLIENTS})")
    if name.endswith(".json"):
        return json.loads(path.read_text(encoding="utf-8"))
    return path.read_bytes()


def body_of(name: str) -> dict[str, Any]:
    rec = recording(name)
    assert rec["method"] == "POST" and rec["path"].startswith("/v1/messages")
    body: dict[str, Any] = rec["body"]
    return body


def decoded(name: str, notes: Notes | None = None) -> Request:
    return ANTHROPIC.decode_request(body_of(name), Counter() if notes is None else notes)


def blocks(content: Any) -> list[dict[str, Any]]:
    return [] if isinstance(content, str) else list(content)


@pytest.mark.skipif(not CLIENTS.is_dir(), reason=f"recordings not available ({CLIENTS})")
def test_the_recordings_are_all_there() -> None:
    scenarios = ("default", "sonnet-4-6", "image-read")
    expected = [f"{PREFIX}{s}-turn{t}.request.json" for s in scenarios for t in (1, 2, 3)]
    assert sorted(expected) == REQUESTS
    assert len(AUX) == 3 and len(ANSWERS) == 9


@pytest.mark.parametrize("name", AUX)
def test_side_requests_are_not_the_bridges(name: str) -> None:
    rec = recording(name)
    assert not (rec["method"] == "POST" and "/messages" in rec["path"])
    assert route_for(Settings(), rec["method"], "api.anthropic.com", rec["path"]) is None


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize("name", REQUESTS)
def test_decodes_with_system_messages_in_place_and_the_reasoning_switch(name: str) -> None:
    body = body_of(name)
    req = decoded(name)
    top = "".join(b["text"] for b in body["system"])
    expected = [top] + [
        m["content"] if isinstance(m["content"], str) else "".join(b["text"] for b in m["content"])
        for m in body["messages"]
        if m["role"] == "system"
    ]
    systems = [
        "".join(getattr(p, "text", "") for p in m.parts) for m in req.messages if m.role == "system"
    ]
    assert systems == expected
    assert [m.role for m in req.messages][1:] == [m["role"] for m in body["messages"]]
    assert req.thinking == ThinkingConfig(True, None, effort="high", adaptive=True)
    assert req.extra["output_config"] == {"effort": "high"}


def _roles(body: dict[str, Any]) -> list[str]:
    """An Anthropic body's turns as the chat roles they become: a user turn of tool results
    gives tool messages (and a user message for images inside them)."""
    out = ["system"]
    for m in body["messages"]:
        content = blocks(m["content"])
        results = [b for b in content if b["type"] == "tool_result"]
        if m["role"] != "user" or not results:
            out.append(m["role"])
            continue
        out.extend("tool" for _ in results)
        inner = [b for r in results for b in blocks(r.get("content"))]
        if len(results) < len(content) or any(b["type"] == "image" for b in inner):
            out.append("user")
    return out


def _count_images(value: Any) -> int:
    if isinstance(value, dict):
        return (value.get("type") == "image") + sum(_count_images(v) for v in value.values())
    if isinstance(value, list):
        return sum(_count_images(v) for v in value)
    return 0


@pytest.mark.parametrize("name", REQUESTS)
def test_becomes_a_valid_chat_completions_body(name: str) -> None:
    body = body_of(name)
    notes: Notes = Counter()
    req = strip_cache_control(ANTHROPIC.decode_request(copy.deepcopy(body), notes), notes)
    out = OPENAI.encode_request(req, notes)
    text = json.dumps(out)

    assert "cache_control" not in text
    assert notes[NOTE] == json.dumps(body).count('"cache_control"')
    assert out["reasoning_effort"] == "high"
    assert "signature" not in text  # Anthropic's signatures never reach another upstream
    assert [m["role"] for m in out["messages"]] == _roles(body)
    assert [t["function"]["name"] for t in out["tools"]] == [t["name"] for t in body["tools"]]

    # every tool call is answered right after its assistant message, by id, in order
    messages = out["messages"]
    calls = [(i, m) for i, m in enumerate(messages) if m.get("tool_calls")]
    answered = 0
    for i, m in calls:
        ids = [c["id"] for c in m["tool_calls"]]
        following = messages[i + 1 : i + 1 + len(ids)]
        assert [(f["role"], f["tool_call_id"]) for f in following] == [("tool", x) for x in ids]
        answered += len(ids)
        for c in m["tool_calls"]:
            assert isinstance(json.loads(c["function"]["arguments"]), dict)
    assert answered == sum(m["role"] == "tool" for m in messages)
    original_ids = [
        b["id"] for m in body["messages"] for b in blocks(m["content"]) if b["type"] == "tool_use"
    ]
    assert [c["id"] for _, m in calls for c in m["tool_calls"]] == original_ids

    # images, including the one inside a tool_result, as image_url data URLs
    urls = [
        p["image_url"]["url"]
        for m in messages
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]
    assert len(urls) == _count_images(body["messages"])
    assert all(u.startswith("data:image/png;base64,") for u in urls)
    assert ("image-read" in name and "turn1" not in name) == bool(urls)


@pytest.mark.parametrize("name", REQUESTS)
def test_encodes_back_for_an_anthropic_upstream_as_it_was(name: str) -> None:
    body = body_of(name)
    notes: Notes = Counter()
    assert (
        ANTHROPIC.encode_request(ANTHROPIC.decode_request(copy.deepcopy(body), notes), notes)
        == body
    )
    assert not notes


@pytest.mark.parametrize("name", REQUESTS)
def test_the_plan_sends_it_to_a_chat_upstream(name: str) -> None:
    rec = recording(name)
    raw = json.dumps(rec["body"]).encode()
    inc = Incoming("POST", "api.example.com", rec["path"], {"x-api-key": "k"}, raw)
    route = route_for(Settings(), inc.method, inc.host, inc.path)
    assert route is not None
    decision = decide(Settings(), route, inc, {})
    assert isinstance(decision, Rewrite)
    assert decision.wire.path.endswith("/chat/completions")
    assert "cache_control" not in json.dumps(decision.wire.body)
    assert decision.wire.body["reasoning_effort"] == "high"


# --------------------------------------------------------------------------- answers


def _client_view(pairs: list[tuple[str | None, str]]) -> dict[str, Any]:
    message = sdk_message(pairs, strict=True)
    return {
        "text": "".join(b.text for b in message.content if b.type == "text"),
        "thinking": "".join(b.thinking for b in message.content if b.type == "thinking"),
        "tools": [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"],
        "stop_reason": message.stop_reason,
    }


@pytest.mark.parametrize("name", ANSWERS)
def test_answer_through_an_openai_upstream_reaches_the_client_unchanged(name: str) -> None:
    original = pairs_of(recording(name))
    expected = _client_view(original)
    assert expected["text"] or expected["tools"]

    # what an OpenAI-compatible upstream would send for this answer
    decoder, encoder = AnthropicStreamDecoder(), OpenAIChatStreamEncoder()
    chat: list[tuple[str | None, str]] = []
    for event_name, data in original:
        for event in decoder.feed(data, event_name):
            chat.extend(encoder.feed(event))
    for event in decoder.finish():
        chat.extend(encoder.feed(event))
    chat.extend(encoder.finish())
    upstream = b"".join(encode_pairs(chat))

    # through the bridge to the Anthropic client, in uneven chunks
    processor = StreamProcessor(OpenAIChatStreamDecoder(), AnthropicStreamEncoder())
    out: list[bytes] = []
    for i in range(0, len(upstream), 97):
        out.extend(processor.feed(upstream[i : i + 97]))
    out.extend(processor.finish())
    assert not processor.passthrough, processor.error
    got = _client_view(pairs_of(b"".join(out)))
    tool_use = "tool_use" if expected["tools"] else "end_turn"
    assert got == {**expected, "stop_reason": tool_use}
