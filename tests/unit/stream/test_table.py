"""The stream's one table (``processor.ROWS`` and ``TRANSITIONS``): it is total, raw passing
follows what the stages declare (``Stage.changes_bytes``), the upstream's endings are its rows
(``upstream_cut``: each client dialect's error), the second call's placeholder row, and one
reader per processor."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.model import Event, TextDelta
from addon.plan import Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, stream_processor
from addon.stream.fastpath import Reader
from addon.stream.processor import (
    CUT_CAUSES,
    ROWS,
    TRANSITIONS,
    Input,
    State,
    StreamProcessor,
    StreamStateError,
)
from addon.stream.stages import PASSES_TEXT, TextLane
from addon.stream.states import _INPUTS, _NEXT

CLIENTS = ("openai_chat", "anthropic", "openai_responses", "gemini")
ENDINGS = (Input.END, Input.ERROR, Input.CUT, Input.RESET, Input.IDLE)

_CHUNK = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}\n\n'
)


def _stream(texts: list[str]) -> list[bytes]:
    first = _CHUNK % b'""'
    return [first, *(_CHUNK % json.dumps(t).encode() for t in texts)]


def _from_openai(client: str, stages: list[Any] | None = None, **options: Any) -> StreamProcessor:
    same = client == "openai_chat"
    options.setdefault("coalesce", not same)
    return StreamProcessor(
        DIALECTS["openai_chat"].stream_decoder(),
        DIALECTS[client].stream_encoder(),
        stages or (),
        same_dialect=same,
        **options,
    )


# ---------------------------------------------------------------------- the table is total


def test_every_state_has_a_row_and_every_input_an_entry_or_a_refusal() -> None:
    """Each state's row names what it does with a read, at the end, on a cut, on an error
    event, and whether the upstream ended; each (state, input) is a move or an explicit
    refusal (None in the table), and a refusal raises, naming both."""
    assert set(ROWS) == set(State) == set(_NEXT) == set(TRANSITIONS)
    assert set(_INPUTS) == set(Input) and len(_INPUTS) == len(Input)
    for state, row in ROWS.items():
        assert all(callable(action) for action in row[1:]), state
        assert len(_NEXT[state]) == len(_INPUTS), state
    for state in State:
        for event, target in zip(_INPUTS, _NEXT[state], strict=True):
            p = _from_openai("anthropic")
            p.reader()  # (the route of every state)
            p.state = state
            if target is None:
                with pytest.raises(StreamStateError, match=f"state {state.name} cannot take"):
                    p._to(event)
                assert p.state is state
            else:
                p._to(event)
                assert p.state is target


@pytest.mark.parametrize("state", list(State))
def test_a_stream_can_end_in_every_state_every_way(state: State) -> None:
    """The endings (the body's end, an error event, a cut, a reset, silence) are taken in
    every state: a stream can always end, and never comes back to reading after it did."""
    for ending in ENDINGS:
        assert ending in TRANSITIONS[state], (state, ending)
    for end in (State.STOPPED, State.DONE, State.PASSED):
        for ending in ENDINGS:
            assert TRANSITIONS[end][ending] in (State.STOPPED, State.DONE, State.PASSED)


def test_only_the_between_row_takes_the_fast_route() -> None:
    """The fast routes are the table's rows: the ``BETWEEN`` row's read, no other's."""
    assert [s for s, row in ROWS.items() if row.fast] == [State.BETWEEN]


def _possible(client: str, state: State) -> bool:
    """A client of another dialect never gets raw bytes; one of the same dialect gets a body
    that is no stream raw (never collected)."""
    same = client == "openai_chat"
    if state in (State.PASSTHROUGH, State.PASSED):
        return same
    return not (state is State.COLLECTING and same)


def _at(state: State, client: str) -> StreamProcessor | None:
    """A processor (an OpenAI chat upstream to ``client``) brought to ``state`` by the bytes,
    calls and endings that lead there; None where that client cannot be there (a client of
    another dialect never gets raw bytes, one of the same dialect gets a body that is no
    stream raw)."""
    same = client == "openai_chat"
    if not _possible(client, state):
        return None
    p = _from_openai(client, raw_ok=same, whole=lambda raw: [TextDelta("whole")])
    chunks = _stream(["Hi ", "there "])
    if state is State.READING:
        p.feed(chunks[0][:20])
    elif state is State.BETWEEN:
        for chunk in chunks:
            p.feed(chunk)
    elif state is State.COLLECTING:
        p.feed(b'{"error": "not a stream",\n')
    elif state is State.PASSTHROUGH:
        p.feed(chunks[0])
        p.abort("test")
    elif state is State.SECOND_CALL:
        p.feed(chunks[0])
        p.second_call()
    elif state is State.STOPPED:
        p.feed(chunks[0])
        p.upstream_cut("upstream_cut")
    elif state is State.DONE:
        p.feed(chunks[0])
        p.finish()
    elif state is State.PASSED:
        p.feed(chunks[0])
        p.finish()
        p.abort("test")
    assert p.state is state, (state, client, p.state)
    return p


# ---------------------------------------------------------------------- raw passing


class _Changes:
    """A stage new to the bridge that says it changes the events a same-dialect stream could
    pass raw (nothing else was edited for it)."""

    text_lane: TextLane | None = PASSES_TEXT
    changes_bytes = True

    def __init__(self) -> None:
        self.seen: list[Event] = []

    def feed(self, event: Event) -> list[Event]:
        self.seen.append(event)
        if isinstance(event, TextDelta):
            return [TextDelta(event.text.upper())]
        return [event]

    def finish(self) -> list[Event]:
        return []


class _Keeps(_Changes):
    changes_bytes = False

    def feed(self, event: Event) -> list[Event]:
        self.seen.append(event)
        return [event]


def _same_dialect_text(stages: list[Any]) -> tuple[bytes, StreamProcessor]:
    p = StreamProcessor(
        DIALECTS["openai_chat"].stream_decoder(),
        DIALECTS["openai_chat"].stream_encoder(),
        stages,
        raw_ok=True,
    )
    out = b"".join(b for chunk in _stream(["hello ", "there ", "again"]) for b in p.feed(chunk))
    return out + b"".join(p.finish()), p


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
def test_a_stage_that_changes_events_turns_raw_passing_off_by_itself(fast: bool) -> None:
    """A same-dialect stream passes plain text chunks as the upstream's bytes only while no
    stage declares it changes them: a new stage that does is fed every text (and changes it),
    with nothing else edited; one that declares it keeps them does not stop it. (A stage
    must say: ``changes_bytes`` is a member of the ``Stage`` protocol, which mypy holds
    every stage to; no stage is probed for it.)"""
    plain, p = _same_dialect_text([])
    assert p.skipped_decoding > 0 and b"hello" in plain
    changes = _Changes()
    out, p = _same_dialect_text([changes])
    assert p.skipped_decoding == 0
    assert b"HELLO" in out and b"THERE" in out and b"AGAIN" in out and b"hello" not in out
    assert [e.text for e in changes.seen if isinstance(e, TextDelta)] == [
        "hello ",
        "there ",
        "again",
    ]
    keeps = _Keeps()
    out, p = _same_dialect_text([keeps])
    assert p.skipped_decoding > 0 and out == plain


def _plan(**changes: Any) -> Any:
    route = Route(name="r", path="/v1/chat/completions", client="openai_chat")
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    inc = Incoming("POST", "h", "/v1/chat/completions", {}, json.dumps(body).encode())
    d = decide(Settings(routes=(route,)), route, inc, {})
    assert isinstance(d, Rewrite), d
    return dataclasses.replace(d.plan, **changes)


def test_the_plans_raw_passing_is_what_its_stages_declare() -> None:
    """``stream_processor`` keeps no list of its own: a same-dialect plan's stream passes raw
    while its stages all keep the bytes, and a plan whose stage changes them (the model's
    name renamed, reasoning hidden) decodes every event."""
    chunks = _stream(["hello ", "there ", "again"])
    for changes, raw in (
        ({}, True),
        ({"hide_thinking": True}, False),
        ({"rename_answer": True}, False),
    ):
        plan = _plan(**changes)
        assert plan.same_dialect
        p = stream_processor(plan, AnswerState.of(plan), None)
        for chunk in chunks:
            p.feed(chunk)
        p.finish()
        assert (p.skipped_decoding > 0) is raw, changes


# ---------------------------------------------------------------------- upstream_cut


def _error_of(client: str, out: bytes) -> str:
    """The message of the client dialect's error event in ``out`` (asserting its shape)."""
    text = out.decode()
    events = [block for block in text.split("\n\n") if block.strip()]
    last = events[-1]
    data = json.loads(last.split("data: ", 1)[1])
    if client == "anthropic":
        assert last.startswith("event: error\n")
        assert data["type"] == "error" and data["error"]["type"] == "overloaded_error"
        return str(data["error"]["message"])
    if client == "openai_responses":
        assert last.startswith("event: response.failed\n")
        assert data["type"] == "response.failed"
        assert data["response"]["status"] == "failed"
        assert data["response"]["error"]["code"] == "server_error"
        return str(data["response"]["error"]["message"])
    if client == "openai_chat":
        assert data["error"]["type"] == "server_error"
        assert "[DONE]" not in text  # an error chunk ends it, as ``end_with`` writes today
        return str(data["error"]["message"])
    assert client == "gemini"
    assert data["error"]["code"] == 503 and data["error"]["status"] == "UNAVAILABLE"
    return str(data["error"]["message"])


READING_STATES = (State.READING, State.BETWEEN, State.COLLECTING, State.PASSTHROUGH)


@pytest.mark.parametrize("cause", sorted(CUT_CAUSES))
@pytest.mark.parametrize(
    ("client", "state"),
    [(c, s) for c in CLIENTS for s in (*READING_STATES, State.SECOND_CALL) if _possible(c, s)],
)
def test_a_cut_while_reading_ends_the_clients_stream_with_its_dialects_error(
    client: str, state: State, cause: str
) -> None:
    """A cut, a reset or silence while the body is read: the client's stream ends with its
    dialect's error event naming the cause (an OpenAI chat client of an OpenAI upstream too:
    never raw bytes); once, later bytes and the body's end add nothing."""
    p = _at(state, client)
    assert p is not None
    out = b"".join(p.upstream_cut(cause))
    assert cause in _error_of(client, out)
    assert p.state is State.STOPPED
    assert p.ended_with_error is not None and cause in p.ended_with_error
    assert p.upstream_cut(cause) == [] and p.upstream_cut("upstream_idle") == []
    assert p.feed(_CHUNK % b'"late"') == []
    assert p.finish() == [] and p.state is State.STOPPED
    assert not p.upstream_ended()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_same_dialect_cut_is_the_clients_error_for_every_dialect(client: str) -> None:
    """Each dialect's own upstream cut mid-stream: its client's error event, not raw bytes."""
    p = StreamProcessor(
        DIALECTS[client].stream_decoder(),
        DIALECTS[client].stream_encoder(),
        same_dialect=True,
        raw_ok=True,
    )
    out = b"".join(p.upstream_cut("upstream_cut"))
    assert "upstream_cut" in _error_of(client, out)
    assert p.state is State.STOPPED


@pytest.mark.parametrize(
    ("client", "state"),
    [(c, s) for c in CLIENTS for s in (State.DONE, State.PASSED, State.STOPPED) if _possible(c, s)],
)
def test_a_cut_after_the_stream_ended_writes_nothing(client: str, state: State) -> None:
    """After ``finish`` (or once the client's stream ended) a cut is nothing: no bytes, the
    state and the recorded error unchanged."""
    p = _at(state, client)
    assert p is not None
    before = (p.state, p.error, p.ended_with_error)
    for cause in CUT_CAUSES:
        assert p.upstream_cut(cause) == []
    assert (p.state, p.error, p.ended_with_error) == before


def test_a_cut_reaches_the_reader_the_shell_holds() -> None:
    """Through the shell's read function (``reader``): after the cut, reads are dropped."""
    p = _from_openai("anthropic")
    read = p.reader()
    for chunk in _stream(["Hi ", "there "]):
        assert read(chunk) is not None
    assert p.state is State.BETWEEN
    assert b"event: error" in b"".join(p.upstream_cut("upstream_idle"))
    assert read(_CHUNK % b'"late"') == []


# ---------------------------------------------------------------------- the error row


def test_an_error_event_of_the_upstream_is_noted_by_its_row() -> None:
    """ERROR: an error the upstream sent mid-stream reaches the client from its encoder and
    is noted (``error_event``); the bridge's own error (a cut) is not the upstream's."""
    p = _from_openai("anthropic")
    for chunk in _stream(["Hi "]):
        p.feed(chunk)
    error = b'data: {"error":{"message":"overloaded now","type":"server_error"}}\n\n'
    out = b"".join(p.feed(error))
    assert b"event: error" in out and b"overloaded now" in out
    assert p.error_event == "overloaded now"
    q = _from_openai("anthropic")
    q.feed(_stream(["Hi "])[0])
    q.upstream_cut("upstream_cut")
    assert q.error_event is None


def test_a_body_that_ends_before_its_stream_does_is_noted_at_the_end() -> None:
    """The decoder's word at the body's end (no ``[DONE]``): the END row, then ERROR."""
    p = _from_openai("anthropic")
    for chunk in _stream(["Hi "]):
        p.feed(chunk)
    out = b"".join(p.finish())
    assert b"event: error" in out
    assert p.state is State.DONE and p.error_event is not None


# ---------------------------------------------------------------------- the second call


def test_the_second_call_row_reads_on_and_its_moves_are_the_tables() -> None:
    """A live web search's second call (issue 44, ``addon.stream.second_call``): READING /
    BETWEEN → SECOND_CALL (the upstream's stream ended with a search call) → READING (the leg's
    marker); a read in SECOND_CALL goes to the body's reader the general way (the marker must
    reach the decoder), never a fast route; a move the state cannot take is ignored (a stream
    that failed stays so)."""
    p = _from_openai("anthropic")
    chunks = _stream(["Hi ", "there "])
    for chunk in chunks:
        p.feed(chunk)
    assert p.state is State.BETWEEN
    p.second_call()
    assert p.state is State.SECOND_CALL and not ROWS[State.SECOND_CALL].fast
    assert b"text_delta" in b"".join(p.feed(_CHUNK % b'"more"'))  # read, not held
    assert not p.upstream_ended()  # a next call may follow: not known to have ended
    p.second_call_ended()
    assert p.state is State.READING
    p.second_call_ended()  # not from READING: ignored
    assert p.state is State.READING
    with pytest.raises(StreamStateError):
        p._to(Input.CALLED)
    p.feed(b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    out = b"".join(p.feed(b"data: [DONE]\n\n")) + b"".join(p.finish())
    assert b"message_stop" in out
    stopped = _at(State.STOPPED, "anthropic")
    assert stopped is not None
    stopped.second_call()
    assert stopped.state is State.STOPPED


# ---------------------------------------------------------------------- one reader


@pytest.mark.parametrize("client", CLIENTS)
def test_one_reader_per_processor(client: str) -> None:
    """``reader`` configures the processor's one reader (it never makes a second): the
    counts are the same whichever function reads."""
    p = _from_openai(client, raw_ok=client == "openai_chat")
    first = p.reader()
    calls: list[bytes] = []

    def general(chunk: bytes) -> list[bytes]:
        calls.append(chunk)
        return p.feed_general(chunk)

    second = p.reader(general, clock=lambda: 0, spent=lambda ns: None)
    assert isinstance(getattr(second, "__self__", None), Reader)
    assert getattr(first, "__self__", None) in (None, second.__self__)  # type: ignore[attr-defined]
    chunks = _stream(["Hi ", "there ", "again "])
    slow = _from_openai(client, raw_ok=client == "openai_chat")
    got = b"".join(b for chunk in chunks for b in second(chunk))
    want = b"".join(b for chunk in chunks for b in slow.feed_general(chunk))
    assert got == want
    assert (p.events_in, p.bytes_in, p.bytes_out) == (slow.events_in, slow.bytes_in, slow.bytes_out)
    assert calls, "a read the fast route did not take went to the configured general way"
