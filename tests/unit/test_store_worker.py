"""The store thread (issue 43 point 1): the write queue's bounds, what one flush writes, the
flush at the end, the prefetch's wait bound and circuit, the views the plan reads (no store
call), and the prefetch's keys against what the restore really asks."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from addon.model import Message, Request, Text, Thinking, ThinkingConfig, ToolCall
from addon.shell.store_worker import StoreWorker
from addon.stores.base import Put, StoreError
from addon.stores.ledger import LedgerKey, Tokens, open_ledger
from addon.stores.prefetch import CooldownView, Fetched, PrefetchedStore, restore_keys
from addon.stores.reasoning import ReasoningStore, Scope
from addon.stores.write_behind import WriteQueue
from addon.transforms.restore import restore_request

SCOPE = Scope.of("r", "api.example.com", "m")
ROW = LedgerKey("2026-01-02", "r", "m", "KEY", "alice")


def test_the_queue_is_bounded_and_keeps_the_newest() -> None:
    q = WriteQueue(max_puts=3, max_bytes=1000)
    for i in range(5):
        q.put(Put(f"k{i}", "v", 10))
    assert q.dropped == 2
    assert q.pending("k0") is None and q.pending("k4") is not None
    q.put(Put("k4", "newer", 10))  # a newer value replaces the older, not added
    assert len(q) == 3 and q.pending("k4") == Put("k4", "newer", 10)
    big = WriteQueue(max_puts=100, max_bytes=25)
    for i in range(3):
        big.put(Put(f"k{i}", "v", 10))
    assert big.dropped == 1 and big.pending("k0") is None


def test_the_queue_adds_up_rows_and_says_when_to_wake() -> None:
    q = WriteQueue()
    assert q.count(ROW, Tokens.of(None)) is True  # nothing waited: wake the thread
    assert q.count(ROW, Tokens.of(None)) is False
    assert q.put(Put("k", "v", 1)) is True  # rows waited, but no value: write at once
    assert q.put(Put("k2", "v", 1)) is False
    batch = q.take()
    assert batch.rows == {ROW: Tokens(requests=2)} and len(batch.puts) == 2
    assert len(q) == 0 and not q.take()


def test_one_flush_writes_what_waited_together(tmp_path: Path) -> None:
    store = ReasoningStore(str(tmp_path / "s.db"))
    ledger = open_ledger(str(tmp_path / "s.db"))
    calls: list[int] = []
    real = store.put_many

    def put_many(items: list[Put]) -> None:
        calls.append(len(items))
        real(items)

    store.put_many = put_many  # type: ignore[method-assign]
    worker = StoreWorker(flush_every=30.0)  # no flush by the clock in this test
    worker.store, worker.ledger = store, ledger
    for i in range(50):
        worker.queue.put(store.encode(SCOPE, "call", f"c{i}", {"signature": f"s{i}"}))
    worker.queue.count(ROW, Tokens.of(None))
    worker.wake_now()
    deadline = time.monotonic() + 10
    while store.get(SCOPE, "call", "c49") is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert calls == [50]  # one write of all of them (one SQLite transaction)
    assert ledger.rows() == {ROW: Tokens(requests=1)}
    worker.close()


def test_rows_wait_for_the_clock_and_the_end_writes_them(tmp_path: Path) -> None:
    ledger = open_ledger(str(tmp_path / "l.db"))
    worker = StoreWorker(flush_every=30.0)
    worker.ledger = ledger
    worker.queue.count(ROW, Tokens.of(None))
    worker.wake()  # rows: within flush_every, not at once
    time.sleep(0.2)
    assert ledger.rows() == {}
    worker.close()  # mitmproxy's done: what waits is written
    assert ledger.rows() == {ROW: Tokens(requests=1)}
    assert not worker.queue.take()


def test_rows_are_written_within_the_flush_interval(tmp_path: Path) -> None:
    ledger = open_ledger(str(tmp_path / "l.db"))
    worker = StoreWorker(flush_every=0.1)
    worker.ledger = ledger
    worker.queue.count(ROW, Tokens.of(None))
    worker.wake()
    deadline = time.monotonic() + 10
    while not ledger.rows():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    worker.close()


def test_rows_the_ledger_refused_wait_for_the_next_write(tmp_path: Path) -> None:
    ledger = open_ledger(str(tmp_path / "l.db"))
    fails = [True]
    real = ledger.count_many

    def count_many(rows: dict[LedgerKey, Tokens]) -> None:
        if fails.pop(0) if fails else False:
            raise StoreError("database is locked")
        real(rows)

    ledger.count_many = count_many  # type: ignore[method-assign]
    worker = StoreWorker()
    worker.ledger = ledger
    worker.queue.count(ROW, Tokens.of(None))
    worker.drain()
    assert ledger.rows() == {} and len(worker.queue) == 1  # kept: money is not dropped
    worker.close()
    assert ledger.rows() == {ROW: Tokens(requests=1)}


def test_a_prefetch_waits_at_most_its_bound_then_the_circuit_opens() -> None:
    worker = StoreWorker(wait_most=0.1, probe_every=0.5)
    held = threading.Event()

    async def run() -> None:
        started = time.monotonic()
        got = await worker.fetch(lambda: held.wait(5))
        assert isinstance(got, StoreError) and time.monotonic() - started < 1.0
        started = time.monotonic()
        asked = []
        again = await worker.fetch(lambda: asked.append(1))
        assert isinstance(again, StoreError) and "not asked" in str(again)
        assert time.monotonic() - started < 0.05 and not asked  # failed fast, never queued
        held.set()
        await asyncio.sleep(0.6)  # the probe interval passed: asked again
        assert await worker.fetch(lambda: 42) == 42

    asyncio.run(run())
    worker.close()


def test_a_store_error_of_a_prefetch_is_returned_not_raised() -> None:
    worker = StoreWorker()

    def fails() -> None:
        raise StoreError("reasoning store (Redis): WRONGTYPE")

    got = asyncio.run(worker.fetch(fails))
    assert isinstance(got, StoreError) and "WRONGTYPE" in str(got)
    assert asyncio.run(worker.fetch(lambda: 1)) == 1  # no circuit for an answer
    worker.close()


def test_call_runs_a_step_on_the_store_thread() -> None:
    worker = StoreWorker()

    async def run() -> str:
        return await worker.call(lambda a, b: f"{a}{b}{threading.current_thread().name}", 1, 2)

    assert asyncio.run(run()) == "12cursor-bridge-store"
    worker.close()


def test_a_step_handed_after_the_end_runs_and_is_not_left_waiting() -> None:
    """A flow's last step (a limits settle) may come after mitmproxy's ``done`` closed the
    thread: it runs where it is handed, it never waits forever."""
    for started in (False, True):
        worker = StoreWorker()
        if started:
            assert worker.submit(lambda: 1).result(5) == 1
        worker.close()

        async def late(w: StoreWorker) -> int:
            return await asyncio.wait_for(w.call(lambda x: x + 1, 41), 5)

        assert asyncio.run(late(worker)) == 42


def test_the_prefetched_view_reads_no_store_and_queues_its_writes(tmp_path: Path) -> None:
    store = ReasoningStore(str(tmp_path / "s.db"))
    store.put(SCOPE, "call", "c1", {"signature": "stored"})
    q = WriteQueue()
    woken: list[int] = []
    k1 = store.encode(SCOPE, "call", "c1", {}).key
    view = PrefetchedStore(
        store, Fetched({k1: store_text(store, k1)}), q, b"s", lambda: woken.append(1)
    )
    store.close()  # any store call now raises: the view must not make one
    scoped = view.scoped(SCOPE)
    assert scoped.get("call", "c1") == {"signature": "stored"}
    assert scoped.get("call", "c2") is None  # not prefetched: nothing known
    scoped.put("call", "c2", {"signature": "new"})
    assert woken == [1] and scoped.get("call", "c2") == {"signature": "new"}  # ours, waiting
    down = PrefetchedStore(store, Fetched(), q, b"s", lambda: None, error="Redis did not answer")
    with pytest.raises(StoreError):
        down.scoped(SCOPE).get("call", "c1")


def store_text(store: ReasoningStore, key: str) -> str | None:
    values, _ = store.fetch([key], [])
    return values[0]


def test_the_cooldown_view_keeps_its_own_until_written() -> None:
    q = WriteQueue()
    now = [1000.0]
    view = CooldownView(q, lambda: None, clock=lambda: now[0])
    view.cool("a", 30)
    view.learn({"a": 0.0, "b": 12.0})  # Redis does not know "a" yet: ours is kept
    assert view.left("a") == 30 and view.left("b") == 12
    q.take()  # written
    view.learn({"a": 5.0, "b": 0.0})
    assert view.left("a") == 5 and not view.cooling("b")
    view.clear("a")
    assert not view.cooling("a") and q.take().cools == {"a": None}
    now[0] += 10
    assert view.left("a") == 0


def test_the_prefetch_keys_hold_every_key_the_restore_asks() -> None:
    req = Request(
        model="claude-x",
        messages=(
            Message("user", (Text("hi"),)),
            Message("assistant", (Thinking("let me see", signature=None), Text("Reading."))),
            Message("assistant", (ToolCall("toolu_1", "Read", "{}"),)),
            Message("user", (Text("ok"),)),
            Message("assistant", (Text("Done, it says A."),)),
            Message("user", (Text("and b?"),)),
        ),
        origin="anthropic",
        thinking=ThinkingConfig(),
    )
    prefetched = set(restore_keys(req))
    for style in ("signed_blocks", "signed_parts", "reasoning_items", "reasoning_fields"):
        asked = Recording()
        restore_request(req, asked, style, notes=_notes(), default_thinking=False)
        assert asked.keys <= prefetched, (style, asked.keys - prefetched)
        assert asked.keys, style


class Recording:
    def __init__(self) -> None:
        self.keys: set[tuple[str, str]] = set()

    def get(self, kind: str, key: str) -> None:
        self.keys.add((kind, key))

    def get_many(self, keys: list[tuple[str, str]]) -> list[None]:
        self.keys.update(keys)
        return [None] * len(keys)


def _notes():  # type: ignore[no-untyped-def]
    from collections import Counter

    return Counter()
