"""The calibrated estimate's ratios in the store (issue 44 point 2, ``addon.plan.calibration``):
kept per route and model in SQLite (across restarts) and in Redis (shared by every worker on
it: a worker that starts after others have calibrated reads their ratios in its first count's
prefetch, in the same pipeline), the last ``RATIOS_KEPT`` each; a store in memory keeps none
(the process's ``Calibration`` is all). Written by the store thread from the write queue, never
by a hook. Redis tests run a real ``redis-server`` (skipped, saying why, without one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from addon.plan.calibration import Calibration, store_key
from addon.shell.store_worker import StoreWorker
from addon.stores.base import RATIOS_KEPT
from addon.stores.prefetch import Fetched, PrefetchedStore
from addon.stores.reasoning import ReasoningStore
from addon.stores.write_behind import WriteQueue
from tests.redis_server import RedisServer, redis_server_or_skip
from tests.unit.test_store_redis import count_pipelines

KEY = store_key("local", "local-model")
OTHER = store_key("local", "other-model")


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer(redis_server_or_skip()) as s:
        yield s


def ratios(store: ReasoningStore, *keys: str) -> dict[str, list[float]]:
    return store.fetch_with([], [], None, list(keys))[3]


def test_a_store_in_memory_keeps_no_ratios_the_process_does() -> None:
    store = ReasoningStore()
    store.add_ratios({KEY: [1.5]})
    assert ratios(store, KEY) == {}  # not read: the process's ``Calibration`` counts


def test_sqlite_keeps_the_last_ratios_across_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "store.sqlite")
    first = ReasoningStore(path)
    assert ratios(first, KEY) == {KEY: []}  # read: none yet
    first.add_ratios({KEY: [1.0, 1.5]})
    first.add_ratios({KEY: [float(k) for k in range(2, 2 + RATIOS_KEPT)], OTHER: [0.5]})
    first.close()
    again = ReasoningStore(path)
    got = ratios(again, KEY, OTHER)
    assert got[KEY] == [float(k) for k in range(2, 2 + RATIOS_KEPT)] and got[OTHER] == [0.5]
    again.close()


def test_two_workers_on_one_redis_share_the_ratios_in_the_prefetch_pipeline(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = ReasoningStore(server.url), ReasoningStore(server.url)
    try:
        first.add_ratios({KEY: [1.25] * (RATIOS_KEPT + 3)})
        first.add_ratios({KEY: [2.0]})
        sent = count_pipelines(monkeypatch)
        values, lefts, _, read = second.fetch_with([], ["r"], None, [KEY, OTHER])
        assert values == []
        assert read == {KEY: [1.25] * (RATIOS_KEPT - 1) + [2.0], OTHER: []}
        assert lefts == [0] and sent == [3]  # one pipeline: two LRANGE and the cooldown's PTTL
        ttl = redis.Redis.from_url(server.url).pttl("cursor-bridge:calib:" + KEY)
        assert ttl > 0  # a route and model no longer answered goes by itself
    finally:
        first.close()
        second.close()


def test_redis_away_reads_nothing_and_the_process_counts(server: RedisServer) -> None:
    store = ReasoningStore(server.url)
    try:
        server.stop()
        store.add_ratios({KEY: [1.5]})  # dropped, no error: the process's ``Calibration`` has it
        assert ratios(store, KEY) == {}
    finally:
        store.close()


def test_the_queue_holds_lessons_until_the_store_thread_writes_them(tmp_path: Path) -> None:
    queue = WriteQueue()
    assert queue.learn(KEY, 1.5) is True and queue.learn(KEY, 1.6) is False
    for _ in range(RATIOS_KEPT):
        queue.learn(OTHER, 0.5)
    assert queue.pending_ratios(KEY) == [1.5, 1.6]
    assert len(queue.pending_ratios(OTHER)) == RATIOS_KEPT
    batch = queue.take()
    assert batch.ratios[KEY] == [1.5, 1.6] and not queue.pending_ratios(KEY) and not len(queue)
    worker = StoreWorker()
    store = ReasoningStore(str(tmp_path / "store.sqlite"))
    worker.store = store
    worker.queue.learn(KEY, 1.5)
    worker.close()  # the end: what waits is written
    assert ratios(store, KEY) == {KEY: [1.5]}
    store.close()


def test_a_count_reads_the_stores_ratios_then_this_processs_unwritten_ones() -> None:
    local = Calibration()
    local.learn("local", "local-model", 100, 300)  # this process's: not what the store says
    queue = WriteQueue()
    store = ReasoningStore()
    view = PrefetchedStore(store, Fetched(ratios={KEY: [2.0, 2.0]}), queue, b"s", lambda: None)
    got = view.calibration(local).scale("local", "local-model", 100)
    assert got is not None and got.tokens == 200 and got.answers == 2
    queue.learn(KEY, 2.5)
    got = view.calibration(local).scale("local", "local-model", 100)
    assert got is not None and got.tokens == 200 and got.answers == 3  # median of 2, 2, 2.5
    unread = PrefetchedStore(store, Fetched(), queue, b"s", lambda: None)
    got = unread.calibration(local).scale("local", "local-model", 100)
    assert got is not None and got.tokens == 300  # the store did not answer: the process's
    failed = PrefetchedStore(store, Fetched(ratios={KEY: [9.0]}), queue, b"s", lambda: None, "x")
    got = failed.calibration(local).scale("local", "local-model", 100)
    assert got is not None and got.tokens == 300
