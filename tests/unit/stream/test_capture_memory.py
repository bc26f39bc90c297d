"""Issue 26: the reasoning store's capture keeps a stream's visible text in bounded memory.

``addon.stream.capture.TextKey`` keys a turn's visible text as ``text_key`` does, whatever the
pieces and however they came (decoded texts, plain texts as their JSON strings through the
text lane's sink, folds in between); a capture fed 8,000 text deltas keeps a bounded amount of
memory; and the records a stream leaves are those of the whole text's ``text_key``, through
the text lane and the long way alike.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects import DIALECTS
from addon.model import Finish, MessageStart, StreamEnd, TextDelta, ThinkingDelta
from addon.stream import capture
from addon.stream.capture import CaptureStage, TextKey
from addon.stream.processor import StreamProcessor
from addon.transforms.reasoning_record import KIND_TEXT, text_key

WHITESPACE = " \t\n\r\x0b\x0c\x1c\x85\xa0\u2003\u3000"
"""ASCII and Unicode whitespace (``str.split`` splits on all of them)."""


def is_plain(text: str) -> bool:
    """What the text lane gives a sink as its JSON string: printable ASCII, no quote or
    backslash."""
    return all(" " <= c <= "~" and c not in '"\\' for c in text)


class Records:
    def __init__(self) -> None:
        self.puts: list[tuple[str, str, Any]] = []

    def put(self, kind: str, key: str, value: Any) -> None:
        self.puts.append((kind, key, value))

    def get(self, kind: str, key: str) -> None:
        return None


texts = st.text(
    alphabet=st.sampled_from([*WHITESPACE, "a", "b", "\ud83d", "é", "-", '"']), max_size=12
)


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(texts, max_size=40), fold=st.integers(1, 40), held=st.integers(1, 60))
def test_the_key_is_text_keys_whatever_the_pieces_and_folds(
    pieces: list[str], fold: int, held: int
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(capture, "FOLD_PIECES", fold)
        mp.setattr(capture, "FOLD_BYTES", held)
        key = TextKey()
        for piece in pieces:
            if piece and is_plain(piece):
                key.plain.extend(b'"' + piece.encode() + b'"')  # as the text lane's sink
            elif piece:
                key.add(piece)
        whole = "".join(pieces)
        assert key.key() == (text_key(whole) if whole.strip() else None)


def drive(stage: CaptureStage, n: int, mixed: bool) -> None:
    """``n`` text deltas as the text lane gives them: plain ones to the sink (a fresh bytes
    object each, as the reader slices them), every fourth one (``mixed``) a decoded text."""
    stage.feed(MessageStart("openai_chat"))
    stage.feed(ThinkingDelta("Let me see.", extra={"field": "reasoning_content"}))
    stage.take_text("Hi ")
    for i in range(n):
        word = f"w{i % 97} "
        if mixed and i % 4 == 3:
            stage.take_text(word + "\n")
        elif (sink := stage.text_sink) is not None:
            sink(b'"' + word.encode() + b'"')
        else:
            stage.take_text(word)


def expected_text(n: int, mixed: bool) -> str:
    return "Hi " + "".join(f"w{i % 97} " + ("\n" if mixed and i % 4 == 3 else "") for i in range(n))


@pytest.mark.parametrize("mixed", [False, True], ids=["plain", "mixed"])
def test_a_capture_keeps_bounded_memory_over_8000_text_events(mixed: bool) -> None:
    records = Records()
    stage = CaptureStage(records, DIALECTS["openai_chat"].reasoning)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        drive(stage, 8000, mixed)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    text = expected_text(8000, mixed)
    # One bytes object per event kept ~390 KiB here. Now: a plain run is one bytearray (about
    # a byte a character); other texts are compacted every FOLD_PIECES and hashed past
    # FOLD_BYTES characters.
    bound = 2 * len(text) + 16 * 1024 if not mixed else capture.FOLD_BYTES + 48 * 1024
    assert kept < bound, f"{kept / 1024:.0f} KiB kept for {len(text) / 1024:.0f} KiB of text"
    stage.feed(Finish("stop"))
    assert stage.error is None
    # The record is keyed by the whole text's text_key, as before.
    (put,) = [p for p in records.puts if p[0] == KIND_TEXT]
    assert put[1] == text_key(text)


def _chunk(delta: dict[str, Any]) -> bytes:
    payload = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}  # fmt: skip
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@pytest.mark.parametrize("client", ["openai_chat", "anthropic", "openai_responses", "gemini"])
def test_a_streams_records_are_the_whole_texts_through_the_lane_and_the_long_way(
    client: str,
) -> None:
    words = [f"word{i} " if i % 5 else f"line {i}\n" for i in range(3000)]
    chunks = [_chunk({"role": "assistant", "content": ""}), _chunk({"reasoning_content": "Hm."})]
    chunks += [_chunk({"content": w}) for w in words]
    chunks += [
        b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    got = []
    for lane in (True, False):
        records = Records()
        p = StreamProcessor(
            DIALECTS["openai_chat"].stream_decoder(),
            DIALECTS[client].stream_encoder(),
            [CaptureStage(records, DIALECTS["openai_chat"].reasoning)],
            same_dialect=client == "openai_chat",
            coalesce=client != "openai_chat",
        )
        feed = p.feed if lane else p.feed_general
        for c in chunks:
            feed(c)
        p.finish()
        got.append(records.puts)
    assert got[0] == got[1]
    texts = [put for put in got[0] if put[0] == KIND_TEXT]
    assert [key for _, key, _ in texts] == [text_key("".join(words))]
    assert texts[0][2]["thinking"][0]["text"] == "Hm."


def test_a_thinking_block_of_many_deltas_is_compacted_and_whole() -> None:
    records = Records()
    stage = CaptureStage(records, DIALECTS["anthropic"].reasoning)
    stage.feed(MessageStart("anthropic"))
    parts = [f"step {i}. " for i in range(3 * capture.FOLD_PIECES + 7)]
    for part in parts:
        stage.feed(ThinkingDelta(part))
    block = stage.turn.open
    assert block is not None and len(block.texts) <= 3 + capture.FOLD_PIECES
    stage.feed(ThinkingDelta("", signature="S" * 80))
    stage.feed(TextDelta("Done."))
    stage.feed(StreamEnd())
    (put,) = [p for p in records.puts if p[0] == KIND_TEXT]
    assert put[2]["thinking"][0]["text"] == "".join(parts)
