"""Freed memory handed back to the system (``addon.shell.memory``)."""

from __future__ import annotations

from mitmproxy.test import tflow

from addon.shell.memory import (
    BIG_BODY,
    CHECK_AFTER_FLOWS,
    GROWTH,
    MIN_INTERVAL_S,
    MemoryTrim,
    libc_trim,
    resident_bytes,
)


class Process:
    """A clock and a resident size the test moves; ``trim`` brings the size back down."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.size = 80 << 20
        self.calls: list[int] = []

    def clock(self) -> float:
        return self.now

    def rss(self) -> int:
        return self.size

    def trim(self, pad: int) -> int:
        self.calls.append(pad)
        self.size = 80 << 20
        return 1


def addon(p: Process) -> MemoryTrim:
    return MemoryTrim(p.trim, p.clock, p.rss)


def test_memory_is_handed_back_when_the_process_grew() -> None:
    p = Process()
    trim = addon(p)
    flow = tflow.tflow(resp=True)
    for _ in range(CHECK_AFTER_FLOWS):
        trim.response(flow)
    assert p.calls == []  # it did not grow
    p.size += GROWTH
    for _ in range(CHECK_AFTER_FLOWS - 1):
        trim.response(flow)
    assert p.calls == []  # not looked at yet
    trim.error(flow)
    assert p.calls == [0] and trim.trims == 1


def test_never_more_often_than_the_interval() -> None:
    p = Process()
    trim = addon(p)
    flow = tflow.tflow(resp=True)
    p.size += GROWTH
    for _ in range(CHECK_AFTER_FLOWS):
        trim.response(flow)
    assert p.calls == [0]
    p.size += GROWTH
    for _ in range(3 * CHECK_AFTER_FLOWS):
        trim.response(flow)
    assert p.calls == [0], "at most one trim per MIN_INTERVAL_S"
    p.now += MIN_INTERVAL_S
    for _ in range(CHECK_AFTER_FLOWS):
        trim.response(flow)
    assert p.calls == [0, 0]


def test_a_large_body_is_reason_enough() -> None:
    p = Process()
    trim = addon(p)
    flow = tflow.tflow(resp=True)
    trim.response(flow)
    assert p.calls == []
    flow.request.content = b"x" * BIG_BODY
    trim.response(flow)
    assert p.calls == [0]


def test_a_failing_trim_is_given_up_without_breaking_flows() -> None:
    p = Process()

    def broken(pad: int) -> int:
        raise OSError("no")

    trim = MemoryTrim(broken, p.clock, p.rss)
    flow = tflow.tflow(resp=True)
    flow.request.content = b"x" * BIG_BODY
    trim.response(flow)
    p.now += MIN_INTERVAL_S
    trim.response(flow)  # given up: no second attempt, no exception
    assert trim.trims == 1


def test_glibc_and_proc_are_found_here() -> None:
    """This machine runs glibc on Linux: the real function and the real size are there."""
    trim = libc_trim()
    assert trim is not None
    assert trim(0) in (0, 1)
    assert resident_bytes() > 10 << 20


def test_what_the_start_loaded_is_frozen_once_the_proxy_runs() -> None:
    import gc

    p = Process()
    trim = addon(p)
    before = gc.get_freeze_count()
    try:
        trim.running()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
