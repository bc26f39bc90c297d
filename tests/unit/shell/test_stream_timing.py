"""The stream callable's account of its own time (``bridge_ms`` in the flow's log line): every
read of a stream's start and its end timed, then one read in ``SAMPLE_EVERY`` standing for the
ones since the last (the clock costs as much as a read of one event on a busy proxy)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects import DIALECTS
from addon.report.outcome import FlowReport, Outcome
from addon.shell.stream_attach import stream_callable
from addon.stream.fastpath import SAMPLE_EVERY, TIMED_READS
from addon.stream.processor import StreamProcessor

_CHUNK = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"t%d "},"finish_reason":null}]}\n\n'
)


class Clock:
    """Each read takes ``step`` ns: the clock moves by that much between two looks."""

    def __init__(self, step: int) -> None:
        self.now, self.step, self.looks = 0, step, 0

    def __call__(self) -> int:
        self.looks += 1
        if self.looks % 2 == 0:
            self.now += self.step
        return self.now


def processor(way: str) -> StreamProcessor:
    """A stream whose reads of one event take the text lane (another dialect), the skip lane
    (the same dialect, nothing to change) or the general way (the same dialect otherwise)."""
    client = "anthropic" if way == "text" else "openai_chat"
    return StreamProcessor(
        DIALECTS["openai_chat"].stream_decoder(),
        DIALECTS[client].stream_encoder(),
        same_dialect=client == "openai_chat",
        raw_ok=way == "skip",
    )


@settings(max_examples=60, deadline=None)
@given(
    reads=st.integers(0, 600),
    step=st.integers(1, 10_000),
    way=st.sampled_from(["text", "skip", "general"]),
)
def test_the_time_of_a_stream_is_its_reads_time_within_one_sample(
    reads: int, step: int, way: str
) -> None:
    report = FlowReport("r", Outcome.REWRITTEN)
    clock = Clock(step)
    stream = stream_callable(processor(way), "test", report, clock=clock)
    for i in range(reads):
        assert stream(_CHUNK % i)
    stream(b"")
    exact = (reads + 1) * step
    assert exact - SAMPLE_EVERY * step < report.spent_ns <= exact
    if reads <= TIMED_READS:
        assert report.spent_ns == exact
    # The clock was looked at twice per timed read only.
    timed = min(reads, TIMED_READS) + max(0, reads // SAMPLE_EVERY - TIMED_READS // SAMPLE_EVERY)
    assert clock.looks == 2 * (timed + 1)
