"""StreamProcessor against broken upstreams (issue 8, streams): nothing eaten, nothing foreign.

Same dialect: what cannot be read passes through as the upstream sent it. Another dialect:
an unreadable event is skipped, a body that is not an event stream is read whole, a cut
stream or a failure ends the client's stream with an error in its own dialect, and nothing
held grows past ``max_event_bytes``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon.dialects import DIALECTS
from addon.model import Event, StreamError, TextDelta
from addon.stream.processor import StreamProcessor
from tests.realdata import OPENAI_STREAMS, as_sse, needs_recordings
from tests.unit.helpers import feed_pieces, pairs_of

CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chat(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({**CHUNK, "choices": [choice]}).encode() + b"\n\n"


GOOD = chat({"role": "assistant"}) + chat({"content": "Hel"}) + chat({"content": "lo"})
END = chat({}, "stop") + b"data: [DONE]\n\n"
PARALLEL_RECORDING = "openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse"


def proc(client: str, upstream: str = "openai_chat", **kw: Any) -> StreamProcessor:
    return StreamProcessor(
        DIALECTS[upstream].stream_decoder(),
        DIALECTS[client].stream_encoder(),
        same_dialect=client == upstream,
        **kw,
    )


def run(p: StreamProcessor, *pieces: bytes) -> bytes:
    return feed_pieces(p, pieces)


def sse_events(body: bytes) -> list[tuple[str | None, Any]]:
    """``(event name, data read as JSON)`` of the client's SSE (``[DONE]`` as it is)."""
    return [(n, d if d == "[DONE]" else json.loads(d)) for n, d in pairs_of(body)]


def anthropic_text(events: list[tuple[str | None, Any]]) -> str:
    return "".join(d["delta"].get("text", "") for n, d in events if n == "content_block_delta")


# --------------------------------------------------------------------------- not an event stream

NOT_STREAMS = [
    b'{"error": {"message": "quota exceeded for this key", "type": "insufficient_quota"}}',
    b"<html><body><h1>502 Bad Gateway</h1></body></html>\n",
    b"Internal Server Error",
]


@pytest.mark.parametrize("body", NOT_STREAMS)
def test_a_body_that_is_not_a_stream_passes_through_on_the_same_dialect(body: bytes) -> None:
    p = proc("openai_chat")
    assert run(p, body[:7], body[7:]) == body
    assert p.passthrough and p.error and "not an event stream" in p.error


@pytest.mark.parametrize("body", NOT_STREAMS)
def test_a_body_that_is_not_a_stream_is_an_error_event_for_another_dialect(body: bytes) -> None:
    p = proc("anthropic", whole=lambda raw: [StreamError(raw.decode()[:40], "upstream_error")])
    events = sse_events(run(p, body[:5], body[5:]))
    assert events[-1][0] == "error"
    assert events[-1][1]["error"]["message"] == body.decode()[:40]
    assert "message_stop" not in [n for n, _ in events]


def test_a_whole_answer_sent_as_a_stream_is_read_whole_for_another_dialect() -> None:
    def whole(raw: bytes) -> list[Event]:
        return [TextDelta(json.loads(raw)["text"])]

    p = proc("anthropic", whole=whole)
    events = sse_events(run(p, b'{"text": "fine"}'))
    assert anthropic_text(events) == "fine" and p.whole_body and p.error is None


def test_a_body_that_turns_into_something_else_midway_ends_with_an_error() -> None:
    p = proc("anthropic", whole=lambda raw: [TextDelta("never used")])
    events = sse_events(run(p, GOOD, b"<html>oops</html>\n"))
    assert anthropic_text(events) == "Hello"
    assert events[-1][0] == "error" and "<html>oops" in events[-1][1]["error"]["message"]


# --------------------------------------------------------------------------- cut streams


def test_a_cut_stream_shows_as_cut_to_every_client() -> None:
    # OpenAI: an error chunk and no [DONE].
    out = run(proc("openai_chat"), GOOD)
    assert not out.endswith(b"data: [DONE]\n\n")
    error = sse_events(out)[-1][1]["error"]
    assert error["type"] == "server_error" and "cut short" in error["message"]  # a 502's type
    # Anthropic: an error event and no message_stop.
    events = sse_events(run(proc("anthropic"), GOOD))
    assert events[-1][0] == "error" and "message_stop" not in [n for n, _ in events]
    assert anthropic_text(events) == "Hello"
    # Responses: response.failed.
    events = sse_events(run(proc("openai_responses"), GOOD))
    assert events[-1][0] == "response.failed"
    assert "response.completed" not in [n for n, _ in events]
    # Gemini: an error chunk last, no finishReason.
    events = sse_events(run(proc("gemini"), GOOD))
    assert "error" in events[-1][1]
    assert not any(
        c.get("finishReason")
        for _, d in events
        for c in d.get("candidates", [])
        if "candidates" in d
    )


def test_a_complete_stream_ends_cleanly() -> None:
    assert run(proc("openai_chat"), GOOD + END).endswith(b"data: [DONE]\n\n")
    events = sse_events(run(proc("anthropic"), GOOD + END))
    assert events[-1][0] == "message_stop"


def test_a_finish_without_done_is_not_a_cut() -> None:
    out = run(proc("openai_chat"), GOOD + chat({}, "stop"))
    assert out.endswith(b"data: [DONE]\n\n") and b"upstream_cut" not in out


# --------------------------------------------------------------------------- malformed events


def test_a_malformed_event_is_skipped_on_another_dialect() -> None:
    p = proc("anthropic")
    events = sse_events(run(p, GOOD[:-5], GOOD[-5:] + b"data: {broken\n\n" + END))
    assert anthropic_text(events) == "Hello"
    assert events[-1][0] == "message_stop"
    assert p.skipped == 1 and p.skip_reason and "not JSON" in p.skip_reason
    assert p.error is None and not p.passthrough


def test_a_malformed_event_passes_the_rest_through_on_the_same_dialect() -> None:
    p = proc("openai_chat")
    out = run(p, GOOD + b"data: {broken\n\n" + END)
    assert out.endswith(b"data: {broken\n\n" + END) and p.passthrough


class Boom:
    text_lane = None

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, TextDelta) and event.text.endswith("lo"):
            raise RuntimeError("a bug")
        return [event]

    def finish(self) -> list[Event]:
        return []


def test_a_failing_stage_ends_another_dialects_stream_with_an_error() -> None:
    p = StreamProcessor(
        DIALECTS["openai_chat"].stream_decoder(),
        DIALECTS["anthropic"].stream_encoder(),
        stages=[Boom()],
        same_dialect=False,
    )
    # Event by event: the text before the failing delta reached the client.
    pieces = [e + b"\n\n" for e in (GOOD + END).split(b"\n\n") if e]
    events = sse_events(run(p, *pieces))
    assert anthropic_text(events) == "Hel"
    assert events[-1][0] == "error" and "message_stop" not in [n for n, _ in events]
    assert not p.passthrough and p.error and "a bug" in p.error


def test_abort_closes_another_dialects_stream_and_passes_the_same_dialect_on() -> None:
    p = proc("anthropic")
    head = b"".join(p.feed(GOOD))
    events = sse_events(head + b"".join(p.abort("internal error RuntimeError")))
    assert events[-1][0] == "error"
    assert p.feed(END) == [] and p.finish() == []
    same = proc("openai_chat")
    same.feed(GOOD)
    assert same.abort("internal error") == [] and same.passthrough
    assert same.feed(END) == [END]


class _FailingFinish:
    """A stage whose ``finish`` raises: the processor's own failure at the end of a stream."""

    text_lane = None

    def feed(self, event: Event) -> list[Event]:
        return [event]

    def finish(self) -> list[Event]:
        raise RuntimeError("stage broke at the end")


def test_a_failure_at_the_end_still_ends_another_dialects_stream_with_an_error() -> None:
    p = proc("anthropic", stages=[_FailingFinish()])
    # The upstream's finish came, its [DONE] not yet: the client's stream is still open.
    body = b"".join(p.feed(GOOD + chat({}, "stop"))) + b"".join(p.finish())
    events = sse_events(body)
    assert events[-1][0] == "error" and "stage broke" in json.dumps(events[-1][1])
    assert "message_stop" not in [name for name, _ in events]
    assert p.abort("again") == []
    # The shell's abort after a finish that raised (its output lost): the error event.
    q = proc("anthropic")
    head = b"".join(q.feed(GOOD))
    q._finished = True  # as ``finish`` leaves it when it raises
    events = sse_events(head + b"".join(q.abort("internal error RuntimeError")))
    assert events[-1][0] == "error"


# --------------------------------------------------------------------------- bounds

LIMIT = 4096


@pytest.mark.parametrize(
    "flood",
    [
        pytest.param(b"data: " + b"x" * 3000, id="a line that never ends"),
        pytest.param(b"data: x\n" * 2000, id="an event that never ends"),
    ],
)
def test_bounded_on_the_same_dialect_passes_through_and_lets_go(flood: bytes) -> None:
    p = proc("openai_chat", max_event_bytes=LIMIT)
    out = b"".join(p.feed(GOOD))
    for _ in range(5):
        out += b"".join(p.feed(flood))
    out += b"".join(p.finish())
    assert p.passthrough and p.error and str(LIMIT) in p.error
    assert out.endswith(flood * 3)  # everything after the bound came through as sent
    assert (
        p._body_reader.lines.held == 0
        and p._body_reader.events.size == 0
        and not p._body_reader.pending_raw
    )


@pytest.mark.parametrize(
    "flood", [b"data: " + b"x" * 3000, b"data: x\n" * 2000, b"<html>" + b"y" * 3000]
)
def test_bounded_on_another_dialect_ends_with_an_error_and_lets_go(flood: bytes) -> None:
    p = proc("anthropic", max_event_bytes=LIMIT, whole=lambda raw: [TextDelta("?")])
    out = b"".join(p.feed(GOOD))
    for _ in range(5):
        out += b"".join(p.feed(flood))
    out += b"".join(p.finish())
    events = sse_events(out)
    assert anthropic_text(events) == "Hello"
    assert events[-1][0] == "error"
    assert (
        p._body_reader.lines.held == 0
        and p._body_reader.events.size == 0
        and (p._collected is None or p._collected.held == 0)
    )


def test_the_original_bytes_are_kept_up_to_their_bound() -> None:
    p = proc("anthropic", keep_original=100)
    run(p, GOOD + END)
    assert bytes(p.original) == (GOOD + END)[:100]


# --------------------------------------------------------------------------- mutated recordings


@needs_recordings
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(OPENAI_STREAMS or ["-"]),
    data=st.data(),
    client=st.sampled_from(["anthropic", "openai_responses", "gemini"]),
)
def test_a_mutated_real_stream_stays_well_formed_in_the_clients_dialect(
    name: str, data: st.DataObject, client: str
) -> None:
    """Bytes flipped, dropped or cut anywhere in a recorded OpenAI stream: a client of another
    dialect still gets an event stream of its own dialect (every data JSON, none of them an
    OpenAI chunk) that ends either complete or with an error, never both."""
    raw = bytearray(as_sse(name))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        match data.draw(st.sampled_from(["flip", "drop", "cut", "junk"])):
            case "flip":
                raw[at] = data.draw(st.integers(0, 255))
            case "drop":
                del raw[at : at + data.draw(st.integers(1, 40))]
            case "cut":
                del raw[at:]
            case "junk":
                raw[at:at] = data.draw(
                    st.sampled_from([b"{", b"\n\n", b"data: {\n\n", b"<html>\n"])
                )
        if not raw:
            raw += b"\n"
    p = proc(client, max_event_bytes=4096)
    out = run(p, bytes(raw[: len(raw) // 2]), bytes(raw[len(raw) // 2 :]))
    evs = sse_events(out)  # raises if any data is not JSON
    assert evs, out
    assert not any(isinstance(d, dict) and "choices" in d for _, d in evs)
    names = [n for n, _ in evs]
    last_name, last = evs[-1]
    if client == "anthropic":
        assert last_name in ("message_stop", "error") and names.count("message_stop") <= 1
        assert not ("error" in names and "message_stop" in names)
    elif client == "openai_responses":
        assert last_name in ("response.completed", "response.incomplete", "response.failed")
    else:
        assert "error" in last or any(c.get("finishReason") for c in last.get("candidates") or [])


def test_text_that_arrives_in_one_chunk_goes_out_as_one_delta_with_nothing_lost() -> None:
    """Events read together (a burst, a proxy that fell behind) are encoded as one run of
    text for another dialect; fed one event at a time, each is its own delta. The client's
    text is the same either way, and a failure gives back what was not emitted."""
    pieces = [f"piece {i} é " for i in range(40)]
    first = chat({"role": "assistant"})
    body = first + b"".join(chat({"content": p}) for p in pieces) + END
    together = proc("anthropic")
    head = b"".join(together.feed(first))  # the stream's first read: its start
    burst = sse_events(
        head + b"".join(together.feed(body[len(first) :])) + b"".join(together.finish())
    )
    apart = proc("anthropic")
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e]
    slow = sse_events(b"".join(b for e in events for b in apart.feed(e)) + b"".join(apart.finish()))

    def text(evs: list[tuple[str | None, Any]]) -> str:
        return "".join(d["delta"]["text"] for name, d in evs if name == "content_block_delta")

    assert text(burst) == text(slow) == "".join(pieces)
    deltas = [name for name, _ in burst if name == "content_block_delta"]
    assert len(deltas) == 1 and len([n for n, _ in slow if n == "content_block_delta"]) == 40
    assert burst[-1][0] == slow[-1][0] == "message_stop"
    assert together.events_in == apart.events_in == 43


# --------------------------------------------------------------------------- whose error ends it


@pytest.mark.parametrize("client", ["openai_chat", "anthropic", "openai_responses", "gemini"])
def test_a_stream_the_bridge_ends_with_an_error_says_so(client: str) -> None:
    """A cut stream, a body that is not an event stream: the client's stream ends with an
    error the bridge wrote (``ended_with_error``: the shell's ⚠); a whole stream does not."""
    cut = proc(client)
    run(cut, GOOD)
    assert cut.ended_with_error and "cut" in cut.ended_with_error

    page = b"<html><body>sign in</body></html>\n"
    quoted = [StreamError(f"not an event stream: {page[:20]!r}", "upstream_error")]
    html = proc(client, whole=lambda raw: quoted)
    run(html, page)
    if client == "openai_chat":  # same dialect: passed through as it came (also the shell's ⚠)
        assert html.passthrough and html.error and html.ended_with_error is None
    else:
        assert html.ended_with_error and "not an event stream" in html.ended_with_error

    clean = proc(client)
    run(clean, GOOD, END)
    assert clean.ended_with_error is None and clean.error is None

    whole = proc(client, whole=lambda raw: [TextDelta("fine")])
    run(whole, b'{"text": "fine"}')
    assert whole.ended_with_error is None


def test_an_upstream_error_event_in_its_stream_is_not_the_bridges() -> None:
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    p = proc("anthropic")
    assert "overloaded" in run(p, GOOD, error).decode()
    assert p.ended_with_error is None


@pytest.mark.parametrize("client", ["openai_chat", "anthropic"])
def test_upstream_ended_tells_a_finished_stream_from_a_cut_one(client: str) -> None:
    """For a client that hung up before the upstream closed: was the answer whole?"""
    done = proc(client)
    done.feed(GOOD + END)
    assert done.upstream_ended()
    cut = proc(client)
    cut.feed(GOOD)
    assert not cut.upstream_ended()
    finished = proc(client)
    run(finished, GOOD, END)
    assert finished.upstream_ended()


@pytest.mark.parametrize(
    ("upstream", "recording"),
    [
        (
            "anthropic",
            "anthropic-messages-sse-text-then-tool_use-input_json_delta.anthropic-sdk-python.sse",
        ),
        ("gemini", "gemini-api-stream-reasoning.vercel-ai.chunks.txt"),
        ("openai_chat", PARALLEL_RECORDING),
    ],
)
@needs_recordings
def test_upstream_ended_on_recordings_of_every_upstream(upstream: str, recording: str) -> None:
    body = as_sse(recording)
    for client in ("openai_chat", "anthropic"):
        whole = proc(client, upstream)
        whole.feed(body)
        assert whole.upstream_ended(), (upstream, client)
        half = proc(client, upstream)
        half.feed(body[: len(body) // 2])
        assert not half.upstream_ended(), (upstream, client)
