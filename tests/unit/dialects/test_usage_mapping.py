"""Token counts from every upstream dialect to every client dialect, whole and streamed, read
the way each client's SDK reads them: cache reads and writes (counted apart from
``input_tokens`` by Anthropic, inside the prompt count by the others), reasoning tokens (inside
the output count; apart from ``candidatesTokenCount`` by Gemini), usage spread over a stream
(Anthropic's ``message_start`` / ``message_delta``, LiteLLM's zeros first), and a count the
upstream never gave (a Gemini client gets none rather than a wrong 0). Then the same with what
llama-server and LiteLLM really sent (``tests/fixtures/``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from addon.dialects import DIALECTS
from addon.model import Finish, TextDelta, Usage, UsageEvent
from addon.stream.processor import StreamProcessor
from addon.stream.whole import response_from_events
from tests.unit.helpers import accumulate, pairs_of, payloads, sdk_final, sdk_message

PROMPT, CACHE_READ, CACHE_WRITE, OUTPUT, REASONING = 100, 60, 10, 30, 10
"""What every upstream body below says, each in its own words."""
TOTAL = PROMPT + OUTPUT
CLIENTS = ["openai_chat", "anthropic", "openai_responses", "gemini"]
UPSTREAMS = ["openai_chat", "anthropic", "openai_responses", "gemini"]


def _sse(events: list[tuple[str | None, Any]]) -> bytes:
    return b"".join(
        ((f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n").encode()
        for name, data in events
    )


CHAT_USAGE = {
    "prompt_tokens": PROMPT,
    "completion_tokens": OUTPUT,
    "total_tokens": TOTAL,
    "prompt_tokens_details": {"cached_tokens": CACHE_READ, "cache_write_tokens": CACHE_WRITE},
    "completion_tokens_details": {"reasoning_tokens": REASONING},
}
ANTHROPIC_USAGE = {
    "input_tokens": PROMPT - CACHE_READ - CACHE_WRITE,
    "cache_read_input_tokens": CACHE_READ,
    "cache_creation_input_tokens": CACHE_WRITE,
    "output_tokens": OUTPUT,
    "output_tokens_details": {"thinking_tokens": REASONING},
}
RESPONSES_USAGE = {
    "input_tokens": PROMPT,
    "input_tokens_details": {"cached_tokens": CACHE_READ, "cache_write_tokens": CACHE_WRITE},
    "output_tokens": OUTPUT,
    "output_tokens_details": {"reasoning_tokens": REASONING},
    "total_tokens": TOTAL,
}
GEMINI_USAGE = {  # Gemini has no cache writes: the prompt holds none
    "promptTokenCount": PROMPT,
    "cachedContentTokenCount": CACHE_READ,
    "candidatesTokenCount": OUTPUT - REASONING,
    "thoughtsTokenCount": REASONING,
    "totalTokenCount": TOTAL,
}
WRITES = {"openai_chat": CACHE_WRITE, "anthropic": CACHE_WRITE, "openai_responses": CACHE_WRITE}

WHOLE: dict[str, dict[str, Any]] = {
    "openai_chat": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi"},
                "finish_reason": "stop",
            }
        ],
        "usage": CHAT_USAGE,
    },
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "Hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": ANTHROPIC_USAGE,
    },
    "openai_responses": {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
            }
        ],
        "usage": RESPONSES_USAGE,
    },
    "gemini": {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "Hi"}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": GEMINI_USAGE,
        "modelVersion": "m",
    },
}

_START = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": []}
_BLOCK = [
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
]


def _anthropic_stream(start: dict[str, Any] | None, end: dict[str, Any]) -> bytes:
    message = {**_START, "stop_reason": None, "stop_sequence": None}
    if start is not None:
        message["usage"] = start
    delta = {"stop_reason": "end_turn", "stop_sequence": None}
    return _sse(
        [
            ("message_start", {"type": "message_start", "message": message}),
            *_BLOCK,
            ("message_delta", {"type": "message_delta", "delta": delta, "usage": end}),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


_OUT = {"output_tokens": OUTPUT, "output_tokens_details": {"thinking_tokens": REASONING}}
_IN = {k: v for k, v in ANTHROPIC_USAGE.items() if k.startswith(("input", "cache"))}
ZEROS = {
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
STREAMS: dict[str, bytes] = {
    "openai_chat": _sse(
        [
            (
                None,
                {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": "Hi"},
                            "finish_reason": None,
                        }
                    ],
                },
            ),
            (
                None,
                {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": "m",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                },
            ),
            (
                None,
                {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": "m",
                    "choices": [],
                    "usage": CHAT_USAGE,
                },
            ),
        ]
    )
    + b"data: [DONE]\n\n",
    # Anthropic: input at message_start, output at message_delta (as Anthropic and llama-server)
    "anthropic": _anthropic_stream({**_IN, "output_tokens": 1}, _OUT),
    "openai_responses": _sse(
        [
            (
                "response.created",
                {
                    "type": "response.created",
                    "sequence_number": 0,
                    "response": {
                        **WHOLE["openai_responses"],
                        "status": "in_progress",
                        "output": [],
                        "usage": None,
                    },
                },
            ),
            (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "sequence_number": 1,
                    "output_index": 0,
                    "item": {
                        **WHOLE["openai_responses"]["output"][0],
                        "status": "in_progress",
                        "content": [],
                    },
                },
            ),
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "sequence_number": 2,
                    "item_id": "msg_1",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": "Hi",
                },
            ),
            (
                "response.output_item.done",
                {
                    "type": "response.output_item.done",
                    "sequence_number": 3,
                    "output_index": 0,
                    "item": WHOLE["openai_responses"]["output"][0],
                },
            ),
            (
                "response.completed",
                {
                    "type": "response.completed",
                    "sequence_number": 4,
                    "response": WHOLE["openai_responses"],
                },
            ),
        ]
    ),
    "gemini": _sse(
        [
            (
                None,
                {
                    "candidates": [
                        {"content": {"role": "model", "parts": [{"text": "Hi"}]}, "index": 0}
                    ],
                    "modelVersion": "m",
                },
            ),
            (None, WHOLE["gemini"]),
        ]
    ),
}
ANTHROPIC_VARIANTS = {
    "litellm: zeros first, every count at the end": _anthropic_stream(ZEROS, {**_IN, **_OUT}),
    "no usage at the start, every count at the end": _anthropic_stream(None, {**_IN, **_OUT}),
    "every count at the start, output again at the end": _anthropic_stream(
        {**_IN, **_OUT}, {"output_tokens": OUTPUT}
    ),
}


def expected(client: str, writes: int) -> dict[str, Any]:
    """What the client's SDK reads for the counts above (``writes``: cache writes the
    upstream's dialect can tell)."""
    uncached = PROMPT - CACHE_READ - writes
    if client == "openai_chat":
        details = {
            "cached_tokens": CACHE_READ,
            **({"cache_write_tokens": writes} if writes else {}),
        }
        return {**CHAT_USAGE, "prompt_tokens_details": details}
    if client == "anthropic":
        usage = {**ANTHROPIC_USAGE, "input_tokens": uncached}
        return usage if writes else {**usage, "cache_creation_input_tokens": None}
    if client == "openai_responses":
        details = {"cached_tokens": CACHE_READ, "cache_write_tokens": writes}
        return {**RESPONSES_USAGE, "input_tokens_details": details}
    return GEMINI_USAGE


def client_usage(client: str, body: bytes, stream: bool) -> dict[str, Any]:
    """The usage a client's SDK ends with: the whole answer's; the last usage chunk (chat);
    the SDK's accumulated message (Anthropic); the final response (Responses); the last
    chunk's ``usageMetadata`` (Gemini)."""
    if not stream:
        answer = json.loads(body)
        usage: dict[str, Any] = answer.get("usageMetadata" if client == "gemini" else "usage")
        return usage or {}
    if client == "openai_chat":
        last: dict[str, Any] = accumulate(payloads(body))["usage"]
        return last
    if client == "anthropic":
        message = sdk_message(pairs_of(body))
        return {
            k: v
            for k, v in message.usage.model_dump().items()
            if k in ANTHROPIC_USAGE and (v is not None or k == "cache_creation_input_tokens")
        }
    if client == "openai_responses":
        final: dict[str, Any] = sdk_final(pairs_of(body)).usage.model_dump(exclude_none=True)
        return final
    chunks = [json.loads(d) for d in payloads(body)]
    meta: dict[str, Any] = chunks[-1].get("usageMetadata", {})
    return meta


def _anthropic_view(usage: dict[str, Any]) -> dict[str, Any]:
    """A whole Anthropic answer's usage as the stream view above reads it."""
    return {"cache_creation_input_tokens": None, **usage}


def replay(upstream: str, client: str, body: bytes) -> bytes:
    same = upstream == client
    p = StreamProcessor(
        DIALECTS[upstream].stream_decoder(),
        DIALECTS[client].stream_encoder(),
        same_dialect=same,
        coalesce=not same,
    )
    return b"".join(p.feed(body)) + b"".join(p.finish())


def whole(upstream: str, client: str, body: dict[str, Any]) -> bytes:
    return json.dumps(
        DIALECTS[client].encode_response(DIALECTS[upstream].decode_response(body))
    ).encode()


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_every_count_reaches_a_whole_answer(upstream: str, client: str) -> None:
    got = client_usage(client, whole(upstream, client, WHOLE[upstream]), stream=False)
    want = expected(client, WRITES.get(upstream, 0))
    if client == "anthropic":
        got = _anthropic_view(got)
    assert got == want


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_every_count_reaches_a_streamed_answer(upstream: str, client: str) -> None:
    out = replay(upstream, client, STREAMS[upstream])
    assert client_usage(client, out, stream=True) == expected(client, WRITES.get(upstream, 0))


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("variant", sorted(ANTHROPIC_VARIANTS))
def test_anthropic_usage_wherever_it_comes_in_the_stream(variant: str, client: str) -> None:
    """Counts merged over the stream: none is lost or reported as 0 because another event
    (before or after) left it out or said 0 first."""
    out = replay("anthropic", client, ANTHROPIC_VARIANTS[variant])
    want = expected(client, CACHE_WRITE)
    if client == "anthropic":  # same dialect: each usage as it came, read by the SDK
        want = {k: v for k, v in want.items() if k != "output_tokens_details"} | {
            "output_tokens_details": _OUT["output_tokens_details"]
        }
    assert client_usage(client, out, stream=True) == want


def test_a_gemini_client_is_told_no_count_the_upstream_never_gave() -> None:
    """An Anthropic upstream that says only its output: no ``promptTokenCount`` and no
    ``totalTokenCount`` (the SDK would read a written 0 as a count), the output as it said."""
    body = _anthropic_stream(None, {"output_tokens": 7})
    meta = client_usage("gemini", replay("anthropic", "gemini", body), stream=True)
    assert meta == {"candidatesTokenCount": 7}
    assert DIALECTS["gemini"].encode_response(
        DIALECTS["anthropic"].decode_response({**WHOLE["anthropic"], "usage": {"output_tokens": 7}})
    )["usageMetadata"] == {"candidatesTokenCount": 7}


def test_a_whole_answer_from_a_stream_keeps_every_count() -> None:
    """A stream read into one answer (Kiro's, a loop-held stream) merges its usage reports."""
    events = [
        UsageEvent(Usage(30, 1, origin="anthropic", cache_read_tokens=60)),
        TextDelta("Hi"),
        Finish("stop"),
        UsageEvent(Usage(None, 7, origin="anthropic")),
    ]
    usage = response_from_events(events, "anthropic").usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.cache_read_tokens, usage.output_tokens) == (90, 60, 7)


# ------------------------------------------------------------------ what real servers sent

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SERVERS = ("llama_cpp", "litellm")


def _recorded(server: str, name: str) -> bytes:
    return (FIXTURES / server / name).read_bytes()


def _anthropic_counts(body: bytes) -> dict[str, int]:
    """The counts of a recorded ``/v1/messages`` answer, later events' over earlier ones'."""
    if not body.lstrip().startswith(b"event:"):
        counts: dict[str, int] = json.loads(body)["usage"]
        return counts
    counts = {}
    for _, data in pairs_of(body):
        event = json.loads(data)
        counts.update((event.get("message") or event).get("usage") or {})
    return counts


@pytest.mark.parametrize(
    "name",
    [
        "messages_text.json",
        "messages_text_stream.sse",
        "messages_tools.json",
        "messages_tools_stream.sse",
    ],
)
@pytest.mark.parametrize("server", SERVERS)
def test_a_gemini_client_gets_the_real_servers_counts(server: str, name: str) -> None:
    """llama-server puts the input in ``message_start`` and the output in ``message_delta``;
    LiteLLM sends zeros first and every count at the end; both count cache reads apart."""
    body = _recorded(server, name)
    counts = _anthropic_counts(body)
    stream = name.endswith(".sse")
    if stream:
        out = replay("anthropic", "gemini", body)
    else:
        out = whole("anthropic", "gemini", json.loads(body))
    meta = client_usage("gemini", out, stream)
    read = counts.get("cache_read_input_tokens", 0)
    prompt = counts["input_tokens"] + read + counts.get("cache_creation_input_tokens", 0)
    assert counts["output_tokens"] > 0 and prompt > 1
    assert meta["promptTokenCount"] == prompt
    assert meta["candidatesTokenCount"] == counts["output_tokens"]
    assert meta["totalTokenCount"] == prompt + counts["output_tokens"]
    assert meta.get("cachedContentTokenCount", 0) == read


@pytest.mark.parametrize(
    "name", ["chat_text.json", "chat_text_stream.sse", "chat_tools.json", "chat_tools_stream.sse"]
)
@pytest.mark.parametrize("server", SERVERS)
def test_an_anthropic_client_gets_cache_reads_apart(server: str, name: str) -> None:
    """A chat upstream's ``prompt_tokens`` holds its cache reads: an Anthropic client gets
    them as ``cache_read_input_tokens`` and only the rest as ``input_tokens``."""
    body = _recorded(server, name)
    stream = name.endswith(".sse")
    if stream:
        usage = accumulate(payloads(body))["usage"]
        out = replay("openai_chat", "anthropic", body)
    else:
        usage = json.loads(body)["usage"]
        out = whole("openai_chat", "anthropic", json.loads(body))
    got = client_usage("anthropic", out, stream)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    assert got["input_tokens"] == usage["prompt_tokens"] - (cached or 0)
    assert got.get("cache_read_input_tokens") == cached
    assert got["output_tokens"] == usage["completion_tokens"]
    assert cached is not None  # what the test is about: both report their cache reads
