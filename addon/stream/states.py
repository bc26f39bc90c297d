"""The stream's states and what moves it between them (``TRANSITIONS``): the table
``addon.stream.processor`` reads (its ``ROWS``: what each state does with the next bytes)."""

from __future__ import annotations

from enum import Enum


class State(Enum):
    """Where one stream is; its row of ``ROWS`` says what the stream does there."""

    READING = "reading"
    """The body is read as a stream (its framing's reader), the bytes so far ending inside an
    event (or no read route to track)."""
    BETWEEN = "between"
    """The same, the bytes so far ending where an event does: the stream's fast route may take
    the next read (``addon.stream.fastpath``)."""
    COLLECTING = "collecting"
    """Another dialect's body that is not a stream: a read is kept (bounded) to be read whole
    at the end (``whole``)."""
    PASSTHROUGH = "passthrough"
    """A client of the upstream's dialect after a failure: a read goes out as it came."""
    SECOND_CALL = "second_call"
    """The model called the bridge's web search tool and the upstream's stream ended (its
    ending held by the decoder, ``addon.stream.second_call``): the relay's leg runs the
    searches, writes its marker and relays its next upstream call on the same body. A read
    goes the general way (the marker must reach the decoder); the body's end here is the
    answer's (no second call came: the rounds ran out)."""
    STOPPED = "stopped"
    """The client's stream was ended with an error event: a read is dropped."""
    DONE = "done"
    """The body ended (``finish``): a read fed after it goes out as it came."""
    PASSED = "passed"
    """The body ended while passing through: a read goes out as it came."""


class Input(Enum):
    """What moves a stream from one ``State`` to another."""

    BOUNDARY = "a read that ends where an event does"
    INSIDE = "a read that ends inside an event"
    FOREIGN = "a body that is not a stream, on another dialect"
    RAW = "a failure a client of the upstream's dialect gets the rest raw after"
    STOP = "a failure on another dialect or on binary frames: the client's stream ends"
    END = "the body's end (finish)"
    ERROR = "an error event the client got from the upstream's stream (written by its encoder)"
    CUT = "the upstream's body broke off: the connection closed mid-body (upstream_cut)"
    RESET = "the upstream reset the connection or its HTTP/2 stream (upstream_reset)"
    IDLE = "the upstream sent nothing for the idle timeout (upstream_idle)"
    CALL = "the upstream's stream ended with a call of the bridge's search tool (second_call)"
    CALLED = "the leg's marker came: the next upstream call's body is read (second_call_ended)"


READING, BETWEEN, COLLECTING = State.READING, State.BETWEEN, State.COLLECTING
PASSTHROUGH, SECOND_CALL = State.PASSTHROUGH, State.SECOND_CALL
STOPPED, DONE, PASSED = State.STOPPED, State.DONE, State.PASSED
BOUNDARY, INSIDE, FOREIGN = Input.BOUNDARY, Input.INSIDE, Input.FOREIGN
RAW, STOP, END, ERROR = Input.RAW, Input.STOP, Input.END, Input.ERROR
CUT, RESET, IDLE, CALL, CALLED = Input.CUT, Input.RESET, Input.IDLE, Input.CALL, Input.CALLED

# The transitions: the state an input leads to from each state (None: refused, it cannot happen
# there: ``StreamStateError``). The endings (END, ERROR, CUT, RESET, IDLE): from any state, once.
# fmt: off
_INPUTS =       (BOUNDARY, INSIDE,  FOREIGN,    RAW,         STOP,    END,    ERROR,       CUT,     RESET,   IDLE,    CALL,        CALLED)
_NEXT = {
    READING:     (BETWEEN, READING, COLLECTING, PASSTHROUGH, STOPPED, DONE,   READING,     STOPPED, STOPPED, STOPPED, SECOND_CALL, None),
    BETWEEN:     (BETWEEN, READING, COLLECTING, PASSTHROUGH, STOPPED, DONE,   BETWEEN,     STOPPED, STOPPED, STOPPED, SECOND_CALL, None),
    COLLECTING:  (None,    None,    None,       None,        STOPPED, DONE,   COLLECTING,  STOPPED, STOPPED, STOPPED, None,        None),
    PASSTHROUGH: (None,    None,    None,       PASSTHROUGH, None,    PASSED, PASSTHROUGH, STOPPED, STOPPED, STOPPED, None,        None),
    SECOND_CALL: (None,    None,    None,       PASSTHROUGH, STOPPED, DONE,   SECOND_CALL, STOPPED, STOPPED, STOPPED, None,        READING),
    STOPPED:     (None,    None,    None,       None,        STOPPED, STOPPED, STOPPED,    STOPPED, STOPPED, STOPPED, None,        None),
    DONE:        (None,    None,    None,       PASSED,      STOPPED, DONE,   DONE,        DONE,    DONE,    DONE,    None,        None),
    PASSED:      (None,    None,    None,       PASSED,      None,    PASSED, PASSED,      PASSED,  PASSED,  PASSED,  None,        None),
}
# fmt: on
TRANSITIONS: dict[State, dict[Input, State]] = {
    state: {i: s for i, s in zip(_INPUTS, row, strict=True) if s is not None}
    for state, row in _NEXT.items()
}

CUT_CAUSES = {"upstream_cut": CUT, "upstream_reset": RESET, "upstream_idle": IDLE}
"""The causes the shell names (``upstream_cut``) and the input each is; any other is a cut."""


class StreamStateError(RuntimeError):
    """An input the stream's state cannot take: a bug of ours (the shell's failure policy)."""
