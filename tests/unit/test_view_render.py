"""The content view's text (addon.report.view): request diffs and answer timelines on real recordings."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects import DIALECTS
from addon.model import TextDelta, ToolCallStart
from addon.report.view import (
    MAX_DIFF_LINES,
    MAX_ROWS,
    events_of,
    note_view,
    request_view,
    response_view,
)
from addon.stream.processor import StreamProcessor
from tests import eventstream_frames as ef
from tests.realdata import as_sse, read

OPENAI, ANTHROPIC, GEMINI, KIRO = (
    DIALECTS[n] for n in ("openai_chat", "anthropic", "gemini", "kiro")
)
PARALLEL = "openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse"
GEMINI_CALL = "gemini-api-stream-functionCall-thoughtSignature-gemini3.vercel-ai.chunks.txt"
KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"


def reencode(up: Any, client: Any, body: bytes, framing_in: Any = "sse") -> bytes:
    p = StreamProcessor(
        up.stream_decoder(), client.stream_encoder(), framing_in=framing_in, same_dialect=False
    )
    return b"".join([*p.feed(body), *p.finish()])


def view(up: Any, client: Any, up_body: bytes, client_body: bytes | None, **kw: Any) -> str:
    return response_view(
        summary="stream",
        facts=[("route", "default"), ("client", client.name)],
        upstream=up,
        upstream_framing=kw.pop("framing", "sse"),
        upstream_body=up_body,
        client=client,
        client_framing="sse",
        client_body=client_body,
        stream=kw.pop("stream", True),
        **kw,
    )


def rows_with(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


def test_a_tool_call_stream_and_its_anthropic_rewrite_line_up() -> None:
    up = as_sse(PARALLEL)
    text = view(OPENAI, ANTHROPIC, up, reencode(OPENAI, ANTHROPIC, up))
    assert "upstream sent (openai_chat)" in text and "client got (anthropic)" in text
    for name in ("GetWeatherArgs", "get_stock_price"):
        (row,) = rows_with(text, name)
        assert row.count(name) == 2, row  # one row, both sides
    (weather,) = rows_with(text, "GetWeatherArgs")
    right = weather.split("│")[1]
    assert '{"city": "Edinburgh", "country": "GB", "units": "c"}' in right  # arguments joined
    (finish,) = rows_with(text, "finish")
    assert "(tool_calls)" in finish and "(tool_use)" in finish
    assert any("usage in=149 out=60" in line for line in text.splitlines())


def test_text_runs_are_joined_into_one_row() -> None:
    up = as_sse(
        "openai-chat-stream-deepseek-reasoning_content-then-tool_calls.vercel-ai.chunks.txt"
    )
    events, error = events_of(OPENAI, "sse", up, stream=True)
    assert error is None and sum(isinstance(e, ToolCallStart) for e in events) >= 1
    text = view(OPENAI, ANTHROPIC, up, reencode(OPENAI, ANTHROPIC, up))
    reasoning = rows_with(text, "reasoning ")
    assert len(reasoning) == 1 and "chunks" in reasoning[0]


def test_whole_answers() -> None:
    answer = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Dreich."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    up = json.dumps(answer).encode()
    client = json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [{"type": "text", "text": "Dreich."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 5, "output_tokens": 2},
        }
    ).encode()
    text = view(
        OPENAI, ANTHROPIC, up, client, stream=False, decisions=["1 required tool call asked"]
    )
    assert "- 1 required tool call asked" in text.splitlines()
    (row,) = rows_with(text, "Dreich")
    assert row.count('"Dreich."') == 2
    assert rows_with(text, "finish stop")


def test_gemini_json_array_and_kiro_event_stream_upstreams() -> None:
    chunks = [line for line in read(GEMINI_CALL).decode().splitlines() if line.strip()]
    array = ("[" + ",\n".join(chunks) + "]").encode()
    events, error = events_of(GEMINI, "json_array", array, stream=True)
    assert error is None
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["weather"]
    text = view(
        GEMINI, OPENAI, array, reencode(GEMINI, OPENAI, array, "json_array"), framing="json_array"
    )
    (row,) = rows_with(text, "weather")
    assert row.count("weather") == 2 and "San Francisco" in row

    kiro = ef.stream(
        [*ef.text_events("Hello from Kiro"), *ef.tool_events("t1", "Read", '{"path": "a"}')]
    )
    events, error = events_of(KIRO, "aws_eventstream", kiro, stream=True)
    assert error is None
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello from Kiro"
    whole, error = events_of(KIRO, "aws_eventstream", kiro, stream=False)  # Kiro answers whole
    assert error is None and whole == events
    sse = reencode(OPENAI, ANTHROPIC, as_sse(PARALLEL))
    streamed, error = events_of(ANTHROPIC, "sse", sse, stream=False)  # sent as a stream
    assert error is None and sum(isinstance(e, ToolCallStart) for e in streamed) == 2
    text = view(KIRO, ANTHROPIC, kiro, None, framing="aws_eventstream")
    assert rows_with(text, "Hello from Kiro") and rows_with(text, "tool call #0 Read")
    assert "# the client's side: no body" in text  # an empty body: nothing to read


def test_garbage_is_shown_with_a_reason_never_raised() -> None:
    for body in (b"\x00\xff garbage", b"data: {not json}\n\n", b"[1, 2", b"{" * 20_000):
        _, error = events_of(OPENAI, "sse", body, stream=True)
        assert error, body[:20]
        text = view(OPENAI, ANTHROPIC, body, b"\xff\xfe", cut=True)
        assert "not all read" in text and "only the first" in text


def test_request_diff_shows_what_changed_and_cuts_long_strings() -> None:
    system = "You are Cursor. " * 70_000  # ~1 MB
    client = {
        "model": "claude-sonnet-4.6",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
        "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
        "api_key": KEY,
    }
    upstream = {
        "model": "claude-sonnet-4.6",
        "messages": [
            {"role": "system", "content": "# " + system},
            {"role": "user", "content": "hi"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}
        ],
    }
    text = request_view(
        summary="1 flat tools → OpenAI",
        facts=[("route", "default"), ("client", "openai_chat"), ("upstream", "openai_chat")],
        decisions=["1 flat tools → OpenAI"],
        client_body=json.dumps(client).encode(),
        upstream_body=json.dumps(upstream).encode(),
    )
    lines = text.splitlines()
    assert "- 1 flat tools → OpenAI" in lines
    assert "--- client sent" in lines and "+++ upstream got" in lines
    assert any(line.startswith("-") and '"input_schema"' in line for line in lines)
    assert any(line.startswith("+") and '"parameters"' in line for line in lines)
    assert len(text) < 20_000 and "chars)" in text  # the system prompt was cut
    assert KEY not in text and "[REDACTED]" in text
    same = request_view(summary="s", facts=[], decisions=[], client_body=b"{}", upstream_body=b"{}")
    assert "no change" in same


def test_surrogates_and_deep_nesting_do_not_raise() -> None:
    text = request_view(
        summary="s",
        facts=[],
        decisions=[],
        client_body=b'{"a": "\\ud83d"}',
        upstream_body=b"[" * 100_000,
    )
    text.encode("utf-8")  # lone surrogates came out escaped
    assert "\\ud83d" in text


def test_bounds_hold() -> None:
    many = {"items": list(range(MAX_DIFF_LINES * 2))}
    text = request_view(
        summary="s",
        facts=[],
        decisions=[],
        client_body=json.dumps(many).encode(),
        upstream_body=b"{}",
    )
    assert "more diff lines not shown" in text and len(text.splitlines()) < MAX_DIFF_LINES + 20
    events = "".join(
        f'data: {{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":{i},"id":"call_{i}","type":"function","function":{{"name":"t{i}","arguments":"{{}}"}}}}]}}}}]}}\n\n'
        for i in range(MAX_ROWS + 10)
    ).encode()
    text = view(OPENAI, ANTHROPIC, events, None)
    assert "more rows not shown" in text and len(text.splitlines()) < MAX_ROWS + 20


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(["sse", "json_array", "aws_eventstream"]))
def test_any_bytes_give_a_view(body: bytes, framing: Any) -> None:
    for dialect in (OPENAI, ANTHROPIC, GEMINI, KIRO):
        view(dialect, OPENAI, body, body, framing=framing)


def test_the_diff_is_of_sorted_keys_no_key_order_noise() -> None:
    client = b'{"stream": true, "model": "m", "messages": []}'
    upstream = b'{"model": "m", "messages": [], "stream": true}'
    text = request_view(
        summary="request", facts=[], decisions=[], client_body=client, upstream_body=upstream
    )
    assert "# the upstream got the body the client sent (no change)" in text
    assert not [line for line in text.splitlines() if line.startswith(("+", "-"))]
    # A key added after the last one: the old last line's new comma is no change.
    text = request_view(
        summary="request",
        facts=[],
        decisions=[],
        client_body=b'{"model": "m", "stream": true}',
        upstream_body=b'{"model": "m", "stream": true, "zz": 1}',
    )
    changed = [line for line in text.splitlines() if line.startswith(("+", "-"))]
    assert changed == ["--- client sent", "+++ upstream got", '+  "zz": 1'], text


def test_each_retry_is_shown_as_what_it_sent() -> None:
    first = b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "thinking": 1}'
    staged = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
    text = request_view(
        summary="request",
        facts=[],
        decisions=["1 request anthropic → openai_chat"],
        client_body=first,
        upstream_body=first,
        attempts=[("staged retry 1", staged), ("retry for a required tool call", staged)],
    )
    part = text[text.index("# staged retry 1: sent this body") :]
    assert "--- upstream got" in part and "+++ staged retry 1 sent" in part
    assert '-  "thinking": 1' in part
    assert "# retry for a required tool call: sent the same body again" in part
    assert text.count("1 request anthropic → openai_chat") == 1  # the decision, once


def test_a_long_upstream_row_goes_on_below_it_whole() -> None:
    words = "word " * 36  # 180 characters: within the quote limit (200)
    answer = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": words},
                "finish_reason": "stop",
            }
        ],
    }
    body = json.dumps(answer).encode()
    text = view(OPENAI, OPENAI, body, body, stream=False)
    rows = [line for line in text.splitlines() if "│" in line]
    start = next(i for i, line in enumerate(rows) if '"word' in line)
    left = " ".join(line.partition(" │")[0].strip() for line in rows[start : start + 4])
    assert json.dumps(words).strip('" ') in left  # never cut at the column
    assert rows[start + 1].startswith("  word")  # the rest below, indented, between words
    assert json.dumps(words) in rows[start].partition("│")[2]


def test_a_note_is_one_line() -> None:
    assert note_view(f"passed through: key {KEY}") == (
        "# cursor-bridge: passed through: key [REDACTED]\n"
    )


# --------------------------------------------------------------------------- cache (issue 35)

CACHED_USAGE = {
    "input_tokens": 12,
    "cache_creation_input_tokens": 188,
    "cache_read_input_tokens": 1800,
}
CACHE_TEXT = "cache_read=1800 cache_write=188 cache_share=90%"


def anthropic_stream(usage: dict[str, int]) -> bytes:
    """An Anthropic text stream: ``usage`` at ``message_start``, the output at its delta."""
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
        "stop_reason": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": message}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hi."},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 7},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(f"event: {e}\ndata: {json.dumps(d)}\n\n".encode() for e, d in events)


def test_a_streams_usage_rows_show_the_cache_on_both_sides() -> None:
    up = anthropic_stream(CACHED_USAGE)
    text = view(ANTHROPIC, OPENAI, up, reencode(ANTHROPIC, OPENAI, up))
    (start,) = rows_with(text, "usage in=2000 out=1")
    assert start.count(CACHE_TEXT) == 2, text  # message_start's, and the client's first
    (end,) = rows_with(text, "usage out=7")  # the delta says no input count: none shown
    assert end.split("│")[1].strip() == f"usage in=2000 out=7 {CACHE_TEXT}"  # merged


def test_a_whole_answers_usage_row_shows_the_cache_on_both_sides() -> None:
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": "Hi."}],
        "stop_reason": "end_turn",
        "usage": {**CACHED_USAGE, "output_tokens": 7},
    }
    up = json.dumps(answer).encode()
    client = OPENAI.encode_response(ANTHROPIC.decode_response(answer))
    text = view(ANTHROPIC, OPENAI, up, json.dumps(client).encode(), stream=False)
    (row,) = rows_with(text, "usage")
    assert row.count(f"usage in=2000 out=7 {CACHE_TEXT}") == 2, text


def test_usage_rows_without_cache_counts_have_no_cache_fields() -> None:
    up = anthropic_stream({"input_tokens": 20})
    text = view(ANTHROPIC, OPENAI, up, reencode(ANTHROPIC, OPENAI, up))
    assert rows_with(text, "usage in=20 out=1")
    assert "cache_" not in text
