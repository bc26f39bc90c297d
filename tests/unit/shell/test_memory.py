"""Freed memory handed back to the system (``addon.shell.memory``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from mitmproxy.test import tflow

from addon.shell.memory import (
    BIG_BODY,
    CHECK_AFTER_FLOWS,
    GROWTH,
    MIN_INTERVAL_S,
    QUIET_S,
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
        self.scheduled: list[tuple[float, Callable[[], None]]] = []
        self.kept = 0

    def clock(self) -> float:
        return self.now

    def rss(self) -> int:
        return self.size

    def trim(self, pad: int) -> int:
        self.calls.append(pad)
        self.size = 80 << 20
        return 1

    def later(self, delay: float, fn: Callable[[], None]) -> None:
        self.scheduled.append((self.now + delay, fn))

    def run_due(self) -> None:
        """What the event loop would run by now (and what that schedules, once due)."""
        while due := [s for s in self.scheduled if s[0] <= self.now]:
            for item in due:
                self.scheduled.remove(item)
                item[1]()

    def keep(self) -> bool:
        self.kept += 1
        return True


def addon(p: Process) -> MemoryTrim:
    return MemoryTrim(p.trim, p.clock, p.rss, p.later, p.keep)


def big_flow() -> object:
    flow = tflow.tflow(resp=True)
    flow.request.content = b"x" * BIG_BODY
    return flow


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


def test_large_bodies_keep_their_memory_until_none_came_for_a_while() -> None:
    p = Process()
    trim = addon(p)
    small = tflow.tflow(resp=True)
    trim.response(small)
    assert p.scheduled == []
    trim.response(big_flow())  # type: ignore[arg-type]
    assert p.calls == [] and len(p.scheduled) == 1, "kept for the next large body"
    # More large bodies, and enough small flows that the process grew: nothing handed back
    # while large bodies keep coming.
    p.size += 10 * GROWTH
    for _ in range(3):
        p.now += QUIET_S - 1
        p.run_due()
        trim.response(big_flow())  # type: ignore[arg-type]
        for _ in range(CHECK_AFTER_FLOWS):
            trim.response(small)
        assert p.calls == []
    assert len(p.scheduled) == 1, "one look scheduled at a time"
    p.now += QUIET_S
    p.run_due()
    assert p.calls == [0] and trim.trims == 1 and p.scheduled == []
    # Quiet again: small flows are looked at as before.
    p.now += MIN_INTERVAL_S
    p.size += GROWTH
    for _ in range(CHECK_AFTER_FLOWS):
        trim.response(small)
    assert p.calls == [0, 0]


def test_without_an_event_loop_a_large_body_is_handed_back_at_once() -> None:
    """The hooks run on mitmproxy's event loop; called from anywhere else (a script, a test)
    nothing is kept and nothing raises."""
    p = Process()
    trim = MemoryTrim(p.trim, p.clock, p.rss, keep=p.keep)  # the real scheduler
    flow = big_flow()
    flow.response.content = b"y" * BIG_BODY  # type: ignore[attr-defined]
    trim.response(flow)  # type: ignore[arg-type]
    assert p.calls == [0] and trim.trims == 1, "once for the flow, both bodies large"


def test_a_failing_trim_is_given_up_without_breaking_flows() -> None:
    p = Process()

    def broken(pad: int) -> int:
        raise OSError("no")

    trim = MemoryTrim(broken, p.clock, p.rss, p.later, p.keep)
    trim.response(big_flow())  # type: ignore[arg-type]
    p.now += QUIET_S
    p.run_due()
    assert trim.trims == 1
    trim.response(big_flow())  # type: ignore[arg-type]
    p.now += 2 * QUIET_S
    p.run_due()  # given up: no second attempt, no exception
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
    assert p.kept == 1, "large blocks kept from the start"


def test_glibc_takes_the_large_block_settings() -> None:
    """Set in a process of its own (they change how this one allocates)."""
    code = (
        "from addon.shell.memory import keep_large_blocks\n"
        "assert keep_large_blocks() is True\n"
        "b = bytearray(20 << 20); del b\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


class Holder:
    """A finished flow as mitmproxy leaves it: in a reference cycle, holding a large body."""

    def __init__(self) -> None:
        self.body = bytearray(BIG_BODY)
        self.me = self


def test_a_flow_with_a_large_body_is_collected_once_its_hooks_are_done() -> None:
    """Left to the collector's own schedule, its body would hold heap that the next large
    body then takes fresh from the system."""
    import weakref

    p = Process()
    soon: list[Callable[[], None]] = []
    trim = MemoryTrim(p.trim, p.clock, p.rss, p.later, p.keep, soon=soon.append)
    held = Holder()
    gone = weakref.ref(held)
    del held
    trim.response(tflow.tflow(resp=True))
    assert soon == [] and trim.collections == 0, "a small flow: nothing to collect"
    trim.response(big_flow())  # type: ignore[arg-type]
    trim.error(big_flow())  # type: ignore[arg-type]
    assert len(soon) == 1, "one collection scheduled at a time"
    assert gone() is not None, "not inside the hook: after it"
    soon.pop()()
    assert gone() is None and trim.collections == 1
    trim.response(big_flow())  # type: ignore[arg-type]
    assert len(soon) == 1, "the next large body schedules the next one"


def test_the_collection_happens_without_glibc_and_without_an_event_loop() -> None:
    """musl or macOS (no ``malloc_trim``) still collect; called outside an event loop (a
    script, a test) the collection runs at once; a failing one breaks nothing."""
    runs: list[int] = []

    def collect() -> int:
        runs.append(1)
        raise RuntimeError("boom")

    p = Process()
    trim = MemoryTrim(None, p.clock, p.rss, p.later, p.keep, collect=collect)
    trim._trim = None  # as on a system without glibc
    trim.response(big_flow())  # type: ignore[arg-type]
    trim.response(big_flow())  # type: ignore[arg-type]
    assert runs == [1, 1] and trim.collections == 2
