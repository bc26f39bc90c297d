"""StreamProcessor: the whole pipeline over bytes, split anywhere."""

from __future__ import annotations

import gzip
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import TextDelta
from addon.stream.decompress import make_decompressor
from addon.stream.processor import TRANSITIONS, Input, State, StreamProcessor, StreamStateError
from tests.realdata import OPENAI_STREAMS, as_sse, needs_recordings
from tests.unit.helpers import feed_at


def processor(encoding: str | None = None) -> StreamProcessor:
    return StreamProcessor(
        OPENAI.stream_decoder(), OPENAI.stream_encoder(), decompressor=make_decompressor(encoding)
    )


def run(data: bytes, cuts: list[int], encoding: str | None = None) -> bytes:
    p = processor(encoding)
    out = feed_at(p, data, cuts)
    assert p.error is None, p.error
    return out


WHOLE = {name: run(as_sse(name), []) for name in OPENAI_STREAMS}


@pytest.mark.parametrize("name", OPENAI_STREAMS)
def test_byte_by_byte_equals_whole(name: str) -> None:
    data = as_sse(name)
    assert run(data, list(range(1, len(data)))) == WHOLE[name]


@needs_recordings
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    name=st.sampled_from(OPENAI_STREAMS or ["-"]),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 60),
)
def test_any_split_of_a_recorded_stream_gives_the_same_client_bytes(
    name: str, seed: int, n: int
) -> None:
    data = as_sse(name)
    cuts = random.Random(seed).sample(range(1, len(data)), min(n, len(data) - 1))
    assert run(data, cuts) == WHOLE[name]


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40))
def test_any_split_of_a_gzipped_stream_gives_the_same_client_bytes(seed: int, n: int) -> None:
    name = "openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse"
    data = gzip.compress(as_sse(name))
    cuts = random.Random(seed).sample(range(1, len(data)), min(n, len(data) - 1))
    assert run(data, cuts, "gzip") == WHOLE[name]


@pytest.mark.parametrize(
    ("sep", "name"),
    [pytest.param(b"\r\n", "crlf", id="crlf"), pytest.param(b"\r", "cr", id="cr")],
)
def test_line_endings_do_not_matter(sep: bytes, name: str) -> None:
    source = "openai-chat-stream-groq-tool_call.vercel-ai.chunks.txt"
    data = as_sse(source).replace(b"\n", sep)
    assert run(data, list(range(1, len(data), 3))) == WHOLE[source]


def test_comments_are_forwarded_to_keep_the_connection_alive() -> None:
    p = processor()
    assert p.feed(b": OPENROUTER PROCESSING\n\n") == [b": OPENROUTER PROCESSING\n\n"]


def test_a_failure_returns_the_unsent_raw_bytes_and_passes_the_rest() -> None:
    p = processor()
    good = b'data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
    bad = b"data: {broken\n\n"
    tail = b"data: [DONE"
    out = p.feed(good + bad + tail)
    assert p.passthrough and p.error and "not JSON" in p.error
    assert b"".join(out).endswith(bad + tail)
    assert p.feed(b"]\n\n") == [b"]\n\n"]
    assert p.finish() == []


def test_unterminated_last_event_is_still_delivered() -> None:
    p = processor()
    out = b"".join(
        p.feed(b'data: {"id":"a","choices":[{"index":0,"delta":{"content":"end"},'
               b'"finish_reason":"stop"}]}')
    )  # fmt: skip
    out += b"".join(p.finish())
    assert b'"content":"end"' in out and out.endswith(b"data: [DONE]\n\n")


def test_corrupt_gzip_falls_back_to_raw() -> None:
    p = processor("gzip")
    out = p.feed(b"definitely not gzip")
    assert p.passthrough and p.error and "decompress" in p.error
    assert out == [b"definitely not gzip"]


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(
        st.sampled_from(
            [
                b"data: ",
                b"[DONE]",
                b"\n",
                b"\r\n",
                b": c\n",
                b'{"choices":[{"index":0,"delta":{"content":"x"}}]}',
                b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{"}}]}}]}',
                b'{"choices":[{"index":0,"finish_reason":"stop","delta":{}}],"usage":{"total_tokens":1}}',
                b'{"choices":[{"index":1}]}',
                b'{"error":{"message":"e"}}',
                b"{nope",
                b"event: x\n",
                "é".encode(),
                b"\xff",
            ]
        ),
        max_size=30,
    ),
    cut=st.integers(0, 10_000),
)
def test_arbitrary_input_never_raises(data: list[bytes], cut: int) -> None:
    raw = b"".join(data)
    p = processor()
    point = cut % (len(raw) + 1)
    chunks = p.feed(raw[:point]) + p.feed(raw[point:]) + p.finish()
    assert all(chunks)
    assert p.passthrough == (p.error is not None)


def test_text_held_by_a_stage_is_not_lost_when_the_stream_breaks() -> None:
    from addon.stream.stages import TextToolStage
    from addon.textproto.parser import TextProtocolParser

    parser = TextProtocolParser("invoke", trigger="<<CALL_abcdefgh>>", tools=("Read",))
    p = StreamProcessor(
        OPENAI.stream_decoder(), OPENAI.stream_encoder(), stages=[TextToolStage(parser)]
    )
    held = b'data: {"id":"a","choices":[{"index":0,"delta":{"content":"see <<CALL_ab"}}]}\n\n'
    out = b"".join(p.feed(held))
    assert b"<<CALL_ab" not in out  # could still be the trigger: held back
    out += b"".join(p.feed(b"data: {broken\n\n"))
    assert p.passthrough
    assert b'"content":"<<CALL_ab"' in out and out.endswith(b"data: {broken\n\n")


def test_a_named_event_without_data_is_skipped_not_a_failure() -> None:
    p = processor()
    out = p.feed(
        b"event: ping\n\n" + as_sse("openai-chat-stream-groq-tool_call.vercel-ai.chunks.txt")
    )
    out += p.finish()
    assert p.error is None and b"".join(out).endswith(b"data: [DONE]\n\n")


def _payloads(body: bytes) -> list[object]:
    import json

    out: list[object] = []
    for block in body.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                data = line[6:]
                out.append(data.decode() if data == b"[DONE]" else json.loads(data))
    return out


@pytest.mark.parametrize("name", OPENAI_STREAMS)
def test_undecoded_plain_chunks_say_what_decoded_ones_say(name: str) -> None:
    """``raw_ok``: plain text chunks go out as the upstream's bytes, undecoded; the client
    reads the same chunks as when every chunk is decoded and encoded again."""
    data = as_sse(name)

    def run_with(raw_ok: bool) -> tuple[bytes, StreamProcessor]:
        p = StreamProcessor(OPENAI.stream_decoder(), OPENAI.stream_encoder(), raw_ok=raw_ok)
        out = b"".join(p.feed(data[: len(data) // 3]) + p.feed(data[len(data) // 3 :]))
        return out + b"".join(p.finish()), p

    fast, p = run_with(True)
    slow, _ = run_with(False)
    assert _payloads(fast) == _payloads(slow)
    assert p.error is None


def test_only_plain_text_chunks_are_skippable() -> None:
    dec = OPENAI.stream_decoder()
    first = '{"id":"a","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
    text = '{"id":"a","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}'
    assert not dec.skippable(text)  # nothing read yet: the first chunk starts the message
    dec.feed(first, None)
    assert not dec.skippable(text)  # the first text chunk is read: its frame is learnt
    dec.feed(text, None)
    assert dec.skippable(text)
    assert dec.skippable(text.replace('"finish_reason":null', '"finish_reason": null'))
    for other in (
        text.replace('"finish_reason":null', '"finish_reason":"stop"'),
        text.replace('"content":"hi"', '"reasoning_content":"hm","content":""'),
        '{"id":"a","choices":[{"index":0,"delta":{"content":null,"tool_calls":[]}}]}',
        '{"error":{"message":"content filter"}}',
        "[DONE]",
    ):
        assert not dec.skippable(other), other
    dec.feed('{"id":"a","choices":[{"index":0,"delta":{"reasoning_content":"x"}}]}', None)
    assert not dec.skippable(text)  # reasoning was seen: every chunk is read from here on


_ENVELOPE = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'


def _text_event(text: str) -> bytes:
    body = _ENVELOPE + '{"content":' + json.dumps(text) + '},"finish_reason":null}]}'
    return b"data: " + body.encode("utf-8", "surrogatepass") + b"\n\n"


def _learnt_decoder() -> Any:
    dec = OPENAI.stream_decoder()
    dec.feed(_ENVELOPE + '{"role":"assistant","content":""},"finish_reason":null}]}', None)
    dec.feed(_ENVELOPE + '{"content":"learn"},"finish_reason":null}]}', None)
    return dec


_ODD_EVENTS = [
    # Same frame, something else in the body: each must make the whole chunk None / 0.
    b"data: " + (_ENVELOPE + '{"content":"a","x":"b"},"finish_reason":null}]}').encode() + b"\n\n",
    b"data: " + (_ENVELOPE + '{"content":"a\\"},"finish_reason":null}]}').encode() + b"\n\n",
    b"data: " + (_ENVELOPE + '{"content":"a\nb"},"finish_reason":null}]}').encode() + b"\n\n",
    b"data: "
    + (_ENVELOPE + '{"content":"","tool_calls":[],"r":"x"},"finish_reason":null}]}').encode()
    + b"\n\n",
    # A bare quote pair (two strings where one was). (An escape JSON has not, "\x", is not
    # here: ``skippable_run`` leaves escapes unchecked, as the per-event look does; such an
    # event reaches a same-dialect client as the upstream's bytes either way.)
    b"data: " + (_ENVELOPE + '{"content":"a","b"},"finish_reason":null}]}').encode() + b"\n\n",
    b"data: [DONE]\n\n",
    b": keep-alive\n\n",
    b"data: " + (_ENVELOPE + '{"content":"a"},"finish_reason":"stop"}]}').encode() + b"\n\n",
]


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(st.text(), min_size=0, max_size=12),
    odd=st.lists(st.tuples(st.integers(0, 12), st.sampled_from(_ODD_EVENTS)), max_size=2),
)
def test_a_whole_chunk_of_text_is_read_at_once_exactly_or_not_at_all(
    texts: list[str], odd: list[tuple[int, bytes]]
) -> None:
    """``text_run`` / ``skippable_run`` never say anything event-by-event decoding would not:
    the same text, the same count, or no answer (None / 0) at all — one event (the common
    read) or many."""
    assume(texts or odd)
    events = [_text_event(t) for t in texts]
    for at, event in odd:
        events.insert(min(at, len(events)), event)
    chunk = b"".join(events)
    run = _learnt_decoder().text_run(chunk)
    skip = _learnt_decoder().skippable_run(chunk)
    judge = _learnt_decoder()
    datas = [ev[6:-2].decode("utf-8", "surrogatepass") for ev in events]
    each = all(
        ev.startswith(b"data: ") and judge.skippable(d) for ev, d in zip(events, datas, strict=True)
    )
    assert skip in (0, len(events))
    if odd:
        # Whatever is odd in it, the chunk is passed undecoded only where each of its events
        # would be too (the per-event look may refuse plain text that merely mentions a
        # marker, such as "reasoning": the whole-chunk look is the more exact one).
        assert run is None and (skip == 0 or each)
        return
    one_by_one = _learnt_decoder()
    decoded = [
        e for ev in events for e in one_by_one.feed(ev[6:-2].decode("utf-8", "surrogatepass"), None)
    ]
    expected = "".join(e.text for e in decoded if isinstance(e, TextDelta))
    if run is not None:
        assert run == (expected, len(events))
    assert skip in (0, len(events))
    if "\\" not in chunk.decode("utf-8", "surrogatepass") and all(t.isprintable() for t in texts):
        assert run == (expected, len(events)) and skip == len(events)


@settings(max_examples=500, deadline=None)
@given(bodies=st.lists(st.text(alphabet='ab "\\,:{}[]\nu0x', max_size=8), min_size=1, max_size=6))
def test_a_chunk_of_raw_frame_bodies_is_read_only_as_each_event_decodes(bodies: list[str]) -> None:
    """Bodies written into the learned frame as they are, not as JSON escapes them (quotes,
    backslashes, line breaks, brackets): ``text_run`` gives the text each event decodes to,
    or nothing — never text from an event that is not a plain text chunk of the frame."""
    frame = json.loads(_ENVELOPE + '{"content":""},"finish_reason":null}]}')
    expected: list[str] | None = []
    for body in bodies:
        data = _ENVELOPE + '{"content":"' + body + '"},"finish_reason":null}]}'
        try:
            event = None if "\n" in body else json.loads(data)
        except ValueError:
            event = None
        delta = event["choices"][0]["delta"] if isinstance(event, dict) else None
        text = delta.get("content") if isinstance(delta, dict) and len(delta) == 1 else None
        if not isinstance(text, str) or event != {
            **frame,
            "choices": [{**frame["choices"][0], "delta": {"content": text}}],
        }:
            expected = None
            break
        assert expected is not None
        expected.append(text)
    chunk = b"".join(
        b"data: "
        + (_ENVELOPE + '{"content":"' + b + '"},"finish_reason":null}]}').encode()
        + b"\n\n"
        for b in bodies
    )
    run = _learnt_decoder().text_run(chunk)
    if expected is None:
        assert run is None
    else:
        assert run is None or run == ("".join(expected), len(bodies))
        if all(set(b) <= set("ab u0x,:{}[]") for b in bodies):
            assert run == ("".join(expected), len(bodies))


@pytest.mark.parametrize("body", ["a\nb", "a\rb", "a\tb", "a\x00b", "a\\"])
def test_an_event_whose_body_is_no_json_string_is_not_passed_undecoded(body: str) -> None:
    """A raw line break, carriage return, tab or NUL in a text body (no JSON string holds
    one; the first two also end an SSE line), or a backslash escaping the closing quote: the
    event is not a plain text chunk, alone or after one that is (hypothesis found the pair,
    with "reasoning", which the per-event look refuses, as the plain one)."""
    odd = b"data: " + (_ENVELOPE + '{"content":"' + body + '"},"finish_reason":null}]}').encode()
    odd += b"\n\n"
    assert _learnt_decoder().skippable_run(odd) == 0
    for chunk in (_text_event("reasoning") + odd, odd + _text_event("plain")):
        assert _learnt_decoder().skippable_run(chunk) == 0
        assert _learnt_decoder().text_run(chunk) is None
    assert _learnt_decoder().skippable_run(_text_event("plain") * 2) == 2


def test_every_state_has_its_row_and_takes_the_end() -> None:
    """The table names every state, and ``finish`` (END) is legal in each: it is idempotent."""
    assert set(TRANSITIONS) == set(State)
    assert all(Input.END in row for row in TRANSITIONS.values())


def test_an_input_a_state_cannot_take_names_both() -> None:
    """As h11's: an illegal transition raises, naming the state and the input."""
    p = processor()
    p.finish()
    assert p.state is State.DONE
    with pytest.raises(StreamStateError, match=r"state DONE cannot take BOUNDARY"):
        p._to(Input.BOUNDARY)
    assert p.state is State.DONE


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(
        st.sampled_from(
            [b'data: {"x":1}\n\n', b"<html>", b"data: [DONE]\n\n", b"\n", b"data: ", b"\xff"]
        ),
        max_size=12,
    ),
    same=st.booleans(),
    ends=st.lists(st.sampled_from(["finish", "abort"]), max_size=3),
)
def test_whatever_comes_every_state_change_is_in_the_table(
    pieces: list[bytes], same: bool, ends: list[str]
) -> None:
    """Any bytes, then any order of ``finish`` and ``abort``: every move the processor makes
    is one of the table's (none raises), and the last state is one where the body ended."""
    from addon.dialects.anthropic import DIALECT as ANTHROPIC

    p = StreamProcessor(
        OPENAI.stream_decoder(),
        (OPENAI if same else ANTHROPIC).stream_encoder(),
        same_dialect=same,
        whole=lambda raw: [TextDelta("?")],
    )
    moves: list[tuple[State, Input]] = []
    take = p._to

    def to(event: Input) -> None:
        moves.append((p.state, event))
        take(event)

    p._to = to  # type: ignore[method-assign]
    for piece in pieces:
        p.feed(piece)
    for end in ends:
        p.finish() if end == "finish" else p.abort("test")
    p.finish()
    assert all(event in TRANSITIONS[state] for state, event in moves)
    assert p.state in (State.DONE, State.PASSED, State.STOPPED)
