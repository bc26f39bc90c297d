"""The reasoning store: scoping, bounds (entries, bytes, TTL with a fake clock, LRU order), the
SQLite backend (persistence across instances, WAL) and a concurrency smoke test. Every bound
is checked on both backends."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from addon.stores.reasoning import (
    DEFAULT_MAX_BYTES,
    DEFAULT_SIZE,
    DEFAULT_TTL,
    ENTRY_OVERHEAD,
    ReasoningStore,
    Scope,
    StoreError,
)

A = Scope("route@upstream.example", "model-a")
B = Scope("route@upstream.example", "model-b")
C = Scope("other@upstream.example", "model-a")


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


type Make = Callable[..., ReasoningStore]


@pytest.fixture(params=["memory", "sqlite"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    """A factory of stores of the backend under test (SQLite: one file per test)."""
    made: list[ReasoningStore] = []
    path = str(tmp_path / "store.db") if request.param == "sqlite" else ""

    def factory(**kwargs: Any) -> ReasoningStore:
        store = ReasoningStore(path, **kwargs)
        made.append(store)
        return store

    yield factory
    for store in made:
        store.close()


def size_of(store: ReasoningStore, scope: Scope, kind: str, key: str, value: dict[str, Any]) -> int:
    """The size the store counts for one value (measured on an empty memory store)."""
    probe = ReasoningStore(max_bytes=10**9)
    probe.put(scope, kind, key, value)
    return probe.bytes


def test_round_trip_and_scoping(make: Make) -> None:
    store = make()
    store.put(A, "call", "call_1", {"signature": "a"})
    store.put(B, "call", "call_1", {"signature": "b"})
    store.put(C, "call", "call_1", {"signature": "c"})
    assert store.get(A, "call", "call_1") == {"signature": "a"}
    assert store.get(B, "call", "call_1") == {"signature": "b"}
    assert store.get(C, "call", "call_1") == {"signature": "c"}
    assert store.get(A, "text", "call_1") is None  # another kind
    assert store.get(A, "call", "call_2") is None
    assert store.get(Scope("route@other.example", "model-a"), "call", "call_1") is None
    assert len(store) == 3


def test_many_at_once_is_one_by_one(make: Make) -> None:
    store = make()
    store.put(A, "call", "call_1", {"signature": "a"})
    store.put(B, "call", "call_2", {"signature": "b"})
    keys = [("call", "call_1"), ("call", "call_2"), ("text", "call_1")]
    assert store.get_many(A, keys) == [{"signature": "a"}, None, None]
    assert store.scoped(B).get_many(keys) == [None, {"signature": "b"}, None]


def test_scope_fields_cannot_run_into_each_other(make: Make) -> None:
    store = make()
    store.put(Scope("a\x1fb", "c"), "k", "x", {"v": 1})
    assert store.get(Scope("a", "b\x1fc"), "k", "x") is None
    assert store.get(Scope("a\x1fb", "c"), "k", "x") == {"v": 1}


def test_values_come_back_as_fresh_copies(make: Make) -> None:
    store = make()
    value: dict[str, Any] = {"thinking": [{"text": "t"}]}
    store.put(A, "call", "1", value)
    value["thinking"].append({"text": "changed after put"})
    got = store.get(A, "call", "1")
    assert got == {"thinking": [{"text": "t"}]}
    assert got is not None
    got["thinking"].clear()
    assert store.get(A, "call", "1") == {"thinking": [{"text": "t"}]}


def test_replacing_a_key_keeps_one_entry_and_its_new_size(make: Make) -> None:
    store = make()
    store.put(A, "call", "1", {"signature": "x" * 10})
    small = store.bytes
    store.put(A, "call", "1", {"signature": "x" * 110})
    assert len(store) == 1
    assert store.bytes == small + 100
    assert store.get(A, "call", "1") == {"signature": "x" * 110}


def test_entries_bound_drops_the_least_recently_used(make: Make) -> None:
    store = make(max_entries=3)
    for key in "abc":
        store.put(A, "call", key, {"k": key})
    assert store.get(A, "call", "a") == {"k": "a"}  # a is now the most recent use
    store.put(A, "call", "d", {"k": "d"})
    assert store.get(A, "call", "b") is None  # the least recently used went
    for k in "dca":  # uses, oldest first: d, c, a
        assert store.get(A, "call", k) == {"k": k}
    store.put(A, "call", "e", {"k": "e"})
    assert store.get(A, "call", "d") is None
    assert [store.get(A, "call", k) for k in "cae"] == [{"k": "c"}, {"k": "a"}, {"k": "e"}]
    assert len(store) == 3


def test_bytes_bound(make: Make) -> None:
    value = {"signature": "s" * 100}
    one = size_of(ReasoningStore(), A, "call", "k0", value)
    assert one > 100 + ENTRY_OVERHEAD
    store = make(max_bytes=3 * one)
    for i in range(3):
        store.put(A, "call", f"k{i}", value)
    assert len(store) == 3 and store.bytes == 3 * one
    store.put(A, "call", "k3", value)
    assert len(store) == 3 and store.bytes == 3 * one
    assert store.get(A, "call", "k0") is None
    # A bigger value pushes out as many old ones as it needs.
    store.put(A, "call", "big", {"signature": "s" * (2 * one)})
    assert store.bytes <= 3 * one
    assert store.get(A, "call", "big") is not None
    assert len(store) == 1


def test_a_value_bigger_than_the_bound_is_not_kept(make: Make) -> None:
    store = make(max_bytes=500)
    store.put(A, "call", "small", {"v": 1})
    store.put(A, "call", "huge", {"v": "x" * 1000})
    assert store.get(A, "call", "huge") is None
    assert store.get(A, "call", "small") == {"v": 1}


def test_non_ascii_values_are_counted_in_utf8_bytes(make: Make) -> None:
    store = make()
    store.put(A, "call", "ascii", {"t": "aaaa"})
    ascii_size = store.bytes
    store.clear()
    store.put(A, "call", "ascii", {"t": "éééé"})  # 2 bytes each in UTF-8
    assert store.bytes == ascii_size + 4


def test_ttl_slides_with_use(make: Make) -> None:
    clock = Clock()
    store = make(ttl=100, clock=clock)
    store.put(A, "call", "1", {"v": 1})
    store.put(A, "call", "2", {"v": 2})
    clock.now += 60
    assert store.get(A, "call", "1") == {"v": 1}  # used: lives another 100 s
    clock.now += 60  # 120 s after the put, 60 after the use
    assert store.get(A, "call", "2") is None
    assert store.get(A, "call", "1") == {"v": 1}
    clock.now += 100  # exactly the ttl since the last use
    assert store.get(A, "call", "1") is None
    assert len(store) == 0


def test_expired_values_are_dropped_on_put_and_expire(make: Make) -> None:
    clock = Clock()
    store = make(ttl=10, clock=clock)
    for k in range(5):
        store.put(A, "call", str(k), {"v": k})
    clock.now += 11
    store.put(A, "call", "new", {"v": "new"})
    assert len(store) == 1
    clock.now += 11
    store.expire()
    assert len(store) == 0 and store.bytes == 0


def test_ttl_zero_never_expires_and_size_zero_keeps_nothing(make: Make) -> None:
    clock = Clock()
    store = make(ttl=0, clock=clock)
    store.put(A, "call", "1", {"v": 1})
    clock.now += 10**9
    assert store.get(A, "call", "1") == {"v": 1}
    off = ReasoningStore(max_entries=0)
    off.put(A, "call", "1", {"v": 1})
    assert len(off) == 0 and off.get(A, "call", "1") is None


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        ReasoningStore(max_entries=-1)
    with pytest.raises(ValueError):
        ReasoningStore(max_bytes=-1)
    with pytest.raises(ValueError):
        ReasoningStore(ttl=-1)


def test_bounds_and_defaults(tmp_path: Path) -> None:
    mem = ReasoningStore("", max_entries=10, ttl=60)
    assert (mem.path, mem.max_entries, mem.ttl, mem.max_bytes) == ("", 10, 60.0, DEFAULT_MAX_BYTES)
    path = tmp_path / "s.db"
    disk = ReasoningStore(str(path), max_entries=5, ttl=0, max_bytes=1000)
    assert (disk.path, disk.max_entries, disk.ttl, disk.max_bytes) == (str(path), 5, 0.0, 1000)
    assert path.exists()
    disk.close()
    default = ReasoningStore()
    assert (default.max_entries, default.ttl) == (DEFAULT_SIZE, DEFAULT_TTL)
    assert "memory" in default.describe() and "0 of 20000 entries" in default.describe()


def test_values_that_are_not_strict_json_are_refused() -> None:
    store = ReasoningStore()
    with pytest.raises(ValueError):
        store.put(A, "call", "1", {"v": float("nan")})
    with pytest.raises(TypeError):
        store.put(A, "call", "1", {"v": object()})
    assert len(store) == 0


def test_lone_surrogates_survive_both_backends(make: Make) -> None:
    store = make()
    scope = Scope("r@h", "model-\ud83d")
    store.put(scope, "text", "k\udc00", {"thinking": [{"text": "half an emoji \ud83d"}]})
    assert store.get(scope, "text", "k\udc00") == {"thinking": [{"text": "half an emoji \ud83d"}]}


def test_scoped_view() -> None:
    store = ReasoningStore()
    view = store.scoped(A)
    view.put("call", "1", {"v": 1})
    assert view.get("call", "1") == {"v": 1}
    assert store.get(A, "call", "1") == {"v": 1}
    assert store.scoped(B).get("call", "1") is None
    assert Scope.of("gemini", "Generativelanguage.GOOGLEAPIS.com", "gemini-3-pro") == Scope(
        "gemini@generativelanguage.googleapis.com", "gemini-3-pro"
    )


def test_closed_store_says_so(make: Make) -> None:
    store = make()
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        store.get(A, "call", "1")
    with pytest.raises(StoreError, match="closed"):
        store.put(A, "call", "1", {"v": 1})


# --------------------------------------------------------------------------- SQLite


def test_sqlite_keeps_everything_across_instances(tmp_path: Path) -> None:
    path = str(tmp_path / "reasoning.db")
    clock = Clock()
    first = ReasoningStore(path, ttl=100, clock=clock)
    first.put(A, "call", "call_1", {"signature": "s1", "thinking": [{"text": "t"}]})
    first.put(B, "text", "abc", {"signature": "s2"})
    size = first.bytes
    first.close()  # the proxy stops mid-conversation …
    clock.now += 50
    second = ReasoningStore(path, ttl=100, clock=clock)  # … and starts again
    assert len(second) == 2 and second.bytes == size
    assert second.get(A, "call", "call_1") == {"signature": "s1", "thinking": [{"text": "t"}]}
    assert second.get(B, "text", "abc") == {"signature": "s2"}
    assert second.get(B, "call", "call_1") is None  # still scoped
    second.close()
    # The TTL spans restarts (wall-clock times are stored): what was not used expires.
    clock.now += 120
    third = ReasoningStore(path, ttl=100, clock=clock)
    assert len(third) == 0
    third.close()


def test_sqlite_without_close_loses_nothing(tmp_path: Path) -> None:
    """Every put is committed: a process that dies without ``done`` keeps what it stored."""
    path = str(tmp_path / "reasoning.db")
    first = ReasoningStore(path)
    first.put(A, "call", "1", {"v": 1})
    second = ReasoningStore(path)  # another connection, the first still open
    assert second.get(A, "call", "1") == {"v": 1}
    first.close()
    second.close()


def test_sqlite_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "reasoning.db"
    ReasoningStore(str(path)).close()
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()


def test_sqlite_reopened_with_smaller_bounds_shrinks(tmp_path: Path) -> None:
    path = str(tmp_path / "reasoning.db")
    big = ReasoningStore(path, max_entries=100)
    for i in range(50):
        big.put(A, "call", str(i), {"v": i})
    assert big.get(A, "call", "0") is not None  # the oldest put, now the most recent use
    big.close()
    small = ReasoningStore(path, max_entries=10)
    assert len(small) == 10
    assert small.get(A, "call", "0") == {"v": 0}
    assert small.get(A, "call", "1") is None
    small.close()


def test_sqlite_errors_are_store_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open the reasoning store"):
        ReasoningStore(str(tmp_path / "missing-dir" / "reasoning.db"))
    not_a_db = tmp_path / "junk.db"
    not_a_db.write_bytes(b"this is not an SQLite database, not at all" * 100)
    with pytest.raises(StoreError):
        ReasoningStore(str(not_a_db))


def test_sqlite_path_with_user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    store = ReasoningStore("~/r.db")
    store.put(A, "call", "1", {"v": 1})
    store.close()
    assert (tmp_path / "r.db").exists()


# --------------------------------------------------------------------------- concurrency


def test_concurrent_use_keeps_the_bounds(make: Make) -> None:
    store = make(max_entries=50, max_bytes=20_000)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(200):
                store.put(Scope(f"r{n % 3}@h", "m"), "call", f"{n}-{i}", {"v": "x" * (i % 40)})
                store.get(Scope(f"r{n % 3}@h", "m"), "call", f"{n}-{i - 1}")
                if i % 50 == 0:
                    store.expire()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert len(store) <= 50
    assert 0 < store.bytes <= 20_000
    # The counts kept for the bounds match what is there.
    probe = 0
    for n in range(8):
        for i in range(200):
            if store.get(Scope(f"r{n % 3}@h", "m"), "call", f"{n}-{i}") is not None:
                probe += 1
    assert probe == len(store)


def test_a_value_too_big_to_keep_also_drops_the_old_one(make: Make) -> None:
    store = make(max_bytes=2000)
    store.put(A, "call", "call_1", {"signature": "old"})
    store.put(A, "call", "call_1", {"signature": "x" * 5000})  # over the bound: not kept
    assert store.get(A, "call", "call_1") is None  # never the stale value
    assert len(store) == 0 and store.bytes == 0


def test_a_clock_that_goes_back_does_not_keep_expired_values(make: Make) -> None:
    clock = Clock()
    store = make(ttl=100, clock=clock)
    store.put(A, "call", "old", {"v": 1})
    clock.now -= 50  # the wall clock is set back
    store.put(A, "call", "new", {"v": 2})
    clock.now += 50 + 100  # the first is 100 s old, the second too (time never went back)
    store.expire()
    assert store.get(A, "call", "old") is None and store.get(A, "call", "new") is None
    assert len(store) == 0


def test_new_bounds_keep_what_is_remembered(make: Make) -> None:
    store = make(max_entries=10)
    for i in range(5):
        store.put(A, "call", f"call_{i}", {"v": i})
    store.rebound(3, 60)
    assert len(store) == 3 and store.max_entries == 3 and store.ttl == 60
    assert store.get(A, "call", "call_4") == {"v": 4}
    with pytest.raises(ValueError):
        store.rebound(-1, 60)
