"""The reasoning store on a real ``redis-server`` (``addon.stores.redis_backend``): the same rules as in
memory (scope, LRU count, bytes, sliding TTL — Redis's own expiry), one secret and one cooldown
table for every worker on it, and Redis lost and back: every call answered, one warning, sharing
resumed by itself. Each test starts its own server on a free loopback port; without
``redis-server`` they skip, saying so."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from addon.stores import redis_backend as store_redis
from addon.stores.reasoning import Notice, ReasoningStore, Scope, StoreError
from tests.redis_server import HOST, RedisServer, redis_server_or_skip

A = Scope.of("cursor", "generativelanguage.googleapis.com", "gemini-3-pro-preview")
B = Scope.of("cursor", "generativelanguage.googleapis.com", "gemini-3-flash-preview")


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer(redis_server_or_skip()) as s:
        yield s


@pytest.fixture
def fast_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Probe a lost Redis every 50-200 ms, not 1-30 s."""
    monkeypatch.setattr(store_redis, "RETRY_FIRST", 0.05)
    monkeypatch.setattr(store_redis, "RETRY_MOST", 0.2)


type Open = Callable[..., ReasoningStore]


@pytest.fixture
def open_store() -> Iterator[Open]:
    """``open_store(url, notices=None, **bounds)``: a store, closed after the test."""
    stores: list[ReasoningStore] = []

    def make(url: str, notices: list[Notice] | None = None, **kw: object) -> ReasoningStore:
        s = ReasoningStore(url, notify=(notices.append if notices is not None else None), **kw)
        stores.append(s)
        return s

    yield make
    for s in stores:
        s.close()


def raw(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url)


def count_pipelines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, how many commands each Redis pipeline sent held (a list that grows)."""
    sent: list[int] = []
    execute = redis.client.Pipeline.execute

    def counted(pipe: redis.client.Pipeline, raise_on_error: bool = True) -> list[object]:
        sent.append(len(pipe.command_stack))
        return execute(pipe, raise_on_error)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counted)
    return sent


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# --------------------------------------------------------------------------- values


def test_a_value_comes_back_only_under_its_scope_kind_and_key(
    server: RedisServer, open_store: Open
) -> None:
    store = open_store(server.url)
    store.put(A, "call", "c1", {"signature": "s1"})
    assert store.get(A, "call", "c1") == {"signature": "s1"}
    assert store.get(B, "call", "c1") is None
    assert store.get(A, "text", "c1") is None
    assert store.get(A, "call", "c2") is None
    store.put(A, "call", "c1", {"signature": "s2"})
    assert store.get(A, "call", "c1") == {"signature": "s2"}
    assert len(store) == 1
    keys = {k.decode() for k in raw(server).keys("*")}
    assert all(k.startswith("cursor-bridge:") for k in keys), keys


def test_two_stores_on_one_redis_share_values_and_the_secret(
    server: RedisServer, open_store: Open
) -> None:
    a, b = open_store(server.url), open_store(server.url)
    a.put(A, "call", "c1", {"signature": "s1"})
    assert b.get(A, "call", "c1") == {"signature": "s1"}
    assert len(a.secret) == 32 and a.secret == b.secret
    assert raw(server).get("cursor-bridge:secret") == a.secret


def test_a_redis_restarted_empty_gets_back_the_secret_the_workers_use(
    server: RedisServer, open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_redis, "SECRET_RECHECK", 0.0)
    a = open_store(server.url)
    before = a.secret
    raw(server).flushdb()
    assert a.secret == before
    assert open_store(server.url).secret == before


def test_least_recently_used_go_first_and_the_counts_hold(
    server: RedisServer, open_store: Open
) -> None:
    store = open_store(server.url, max_entries=2)
    store.put(A, "call", "c1", {"n": 1})
    store.put(A, "call", "c2", {"n": 2})
    assert store.get(A, "call", "c1") == {"n": 1}  # c2 is now the least recently used
    store.put(A, "call", "c3", {"n": 3})
    assert store.get(A, "call", "c2") is None
    assert store.get(A, "call", "c1") == {"n": 1} and store.get(A, "call", "c3") == {"n": 3}
    assert len(store) == 2
    assert raw(server).zcard("cursor-bridge:lru") == 2
    assert raw(server).hlen("cursor-bridge:sizes") == 2


def test_the_bytes_bound_evicts_the_oldest_and_a_value_too_big_is_not_kept(
    server: RedisServer, open_store: Open
) -> None:
    probe = open_store(server.url)
    probe.put(A, "call", "x0", {"t": "a" * 100})
    one = probe.bytes
    probe.clear()
    assert len(probe) == 0 and probe.bytes == 0
    store = open_store(server.url, max_bytes=2 * one + 10)
    for n in range(3):
        store.put(A, "call", f"c{n}", {"t": "a" * 100})
    assert store.get(A, "call", "c0") is None
    assert len(store) == 2 and store.bytes == 2 * one
    store.put(A, "call", "big", {"t": "a" * 1000})
    assert store.get(A, "call", "big") is None
    assert len(store) == 2


def test_the_ttl_is_redis_expiry_renewed_by_every_use(
    server: RedisServer, open_store: Open
) -> None:
    store = open_store(server.url, ttl=60)
    store.put(A, "call", "c1", {"n": 1})
    r = raw(server)
    (key,) = r.keys("cursor-bridge:r:*")
    assert 59_000 < r.pttl(key) <= 60_000
    r.pexpire(key, 1000)  # as if it had not been used for 59 s
    assert store.get(A, "call", "c1") == {"n": 1}
    assert r.pttl(key) > 59_000  # the read renewed it: the TTL slides


def test_a_value_unused_for_the_ttl_is_gone_and_so_is_its_bookkeeping(
    server: RedisServer, open_store: Open
) -> None:
    store = open_store(server.url, ttl=0.2)
    store.put(A, "call", "c1", {"n": 1})
    time.sleep(0.4)
    store.expire()
    assert len(store) == 0 and store.bytes == 0
    assert store.get(A, "call", "c1") is None
    assert raw(server).keys("cursor-bridge:r:*") == []


def test_no_ttl_means_no_expiry(server: RedisServer, open_store: Open) -> None:
    store = open_store(server.url, ttl=0)
    store.put(A, "call", "c1", {"n": 1})
    assert store.get(A, "call", "c1") == {"n": 1}
    r = raw(server)
    (key,) = r.keys("cursor-bridge:r:*")
    assert r.pttl(key) == -1


def test_rebound_drops_what_the_new_bounds_do_not_keep(
    server: RedisServer, open_store: Open
) -> None:
    store = open_store(server.url)
    for n in range(5):
        store.put(A, "call", f"c{n}", {"n": n})
    store.rebound(2, 3600)
    assert len(store) == 2
    assert [store.get(A, "call", f"c{n}") for n in range(5)][-2:] == [{"n": 3}, {"n": 4}]


# --------------------------------------------------------------------------- cooldowns


def test_a_cooldown_one_worker_sets_is_seen_by_another(
    server: RedisServer, open_store: Open
) -> None:
    a, b = open_store(server.url), open_store(server.url)
    assert a.redis is not None and b.redis is not None
    a.redis.cool_many([("primary", 30)])  # what the store thread shares, in one pipeline
    _, (left,) = b.fetch([], ["primary"])  # what another worker's prefetch reads
    assert left is not None and 29 < left <= 30
    b.redis.cool_many([("primary", 5)])  # a later end already set is kept
    _, (left,) = a.fetch([], ["primary"])
    assert left is not None and left > 29
    _, (none,) = a.fetch([], ["second"])
    assert none == 0
    a.redis.cool_many([("primary", None)])  # cleared, for every worker
    assert b.fetch([], ["primary"])[1] == [0]


def test_a_prefetch_reads_values_and_cooldowns_in_one_round_trip(
    server: RedisServer, open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = open_store(server.url)
    a.put(A, "call", "c1", {"n": 1})
    assert a.redis is not None
    a.redis.cool_many([("r", 10)])
    keys = [a.encode(A, "call", k, {}).key for k in ("c1", "c2")]
    a.fetch(keys, ["r"])  # the first sends Redis the scripts it does not know yet
    raw = redis.Redis.from_url(server.url)
    raw.config_resetstat()
    sent = count_pipelines(monkeypatch)
    values, lefts = a.fetch(keys, ["r", "s"])
    assert values[0] is not None and '"n":1' in values[0] and values[1] is None
    assert lefts[0] is not None and lefts[0] > 9 and lefts[1] == 0
    assert sent == [3]  # one pipeline: the values' script and two PTTL
    stats = raw.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 1 and stats["cmdstat_pttl"]["calls"] == 2


def test_memory_and_sqlite_stores_share_no_cooldowns(tmp_path: Path) -> None:
    assert ReasoningStore().redis is None
    sqlite = ReasoningStore(str(tmp_path / "store.sqlite"))
    assert sqlite.redis is None and sqlite.fetch([], ["r"]) == ([], [None])


# --------------------------------------------------------------------------- Redis away


def test_redis_lost_and_back_every_call_answered_one_warning_sharing_resumed(
    server: RedisServer, open_store: Open, fast_probe: None
) -> None:
    notices: list[Notice] = []
    a, b = open_store(server.url, notices), open_store(server.url)
    a.put(A, "call", "before", {"n": 0})
    server.stop()
    # Every call still answers, from this process's memory: what was shared is not there.
    assert a.get(A, "call", "before") is None
    a.put(A, "call", "during", {"n": 1})
    assert a.get(A, "call", "during") == {"n": 1}
    secret_while_away = a.secret
    assert a.redis is not None
    a.redis.cool_many([("primary", 30)])  # no error: each worker's own table holds it
    assert a.fetch([], ["primary"]) == ([], [None])  # unknown here: the worker's table says
    for n in range(20):
        a.put(A, "call", f"more{n}", {"n": n})
        a.get(A, "call", f"more{n}")
    assert "unreachable" in a.describe()
    assert [n.warning for n in notices] == [True]
    assert "lost" in notices[0].text and "memory" in notices[0].text
    server.start()
    wait_until(lambda: a.get(A, "call", "x") is None and len(notices) == 2)
    assert notices[1].warning is False and "back" in notices[1].text
    # Shared again, both ways; what this worker kept while Redis was away it still finds.
    a.put(A, "call", "after", {"n": 2})
    assert b.get(A, "call", "after") == {"n": 2}
    b.put(A, "call", "from-b", {"n": 3})
    assert a.get(A, "call", "from-b") == {"n": 3}
    assert a.get(A, "call", "during") == {"n": 1}
    # The restarted Redis was empty: the secret this worker used comes back to it.
    assert a.secret == secret_while_away == b.secret
    assert len(notices) == 2


def test_redis_unreachable_at_start_starts_in_memory_then_shares(
    open_store: Open, fast_probe: None
) -> None:
    program = redis_server_or_skip()
    server = RedisServer(program)
    notices: list[Notice] = []
    try:
        started = time.monotonic()
        store = open_store(server.url, notices)
        assert time.monotonic() - started < 1.0
        assert [n.warning for n in notices] == [True]
        assert "unreachable" in notices[0].text and "Connection refused" in notices[0].text
        store.put(A, "call", "c1", {"n": 1})
        assert store.get(A, "call", "c1") == {"n": 1}
        server.start()
        wait_until(lambda: store.get(A, "call", "c2") is None and len(notices) == 2)
        store.put(A, "call", "c2", {"n": 2})
        assert raw(server).zcard("cursor-bridge:lru") == 1
    finally:
        server.close()


def test_a_redis_that_never_answers_holds_a_call_only_for_the_timeout(
    open_store: Open, fast_probe: None
) -> None:
    """A server that accepts and says nothing (a hung Redis): the store opens in memory
    within the timeout, and no later call waits for it."""
    listener = socket.socket()
    listener.bind((HOST, 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        notices: list[Notice] = []
        started = time.monotonic()
        store = open_store(f"redis://{HOST}:{listener.getsockname()[1]}/0", notices)
        assert time.monotonic() - started < 3 * store_redis.TIMEOUT
        assert [n.warning for n in notices] == [True] and "Timeout" in notices[0].text
        started = time.monotonic()
        for n in range(50):
            store.put(A, "call", f"c{n}", {"n": n})
            assert store.get(A, "call", f"c{n}") == {"n": n}
        assert time.monotonic() - started < 0.2
    finally:
        stop.set()
        thread.join(timeout=5)
        for s in held:
            s.close()
        listener.close()


# --------------------------------------------------------------------------- secrets, URLs


def test_a_password_in_the_url_works_and_is_never_shown(open_store: Open) -> None:
    program = redis_server_or_skip()
    password = "s3cret-redis-pw"
    with RedisServer(program, extra=("--requirepass", password)) as server:
        url = f"redis://:{password}@{HOST}:{server.port}/0"
        store = open_store(url)
        store.put(A, "call", "c1", {"n": 1})
        assert store.get(A, "call", "c1") == {"n": 1}
        assert password not in store.describe() and ":***@" in store.describe()
        notices: list[Notice] = []
        wrong = open_store(f"redis://:wrong-{password}@{HOST}:{server.port}/0", notices)
        assert [n.warning for n in notices] == [True]
        assert password not in notices[0].text and password not in wrong.describe()


def test_a_url_redis_cannot_read_is_refused_without_its_password() -> None:
    with pytest.raises(StoreError) as e:
        ReasoningStore("redis://:hunter22@127.0.0.1:notaport/0")
    assert "hunter22" not in str(e.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:pw@h:6379/1", "redis://:***@h:6379/1"),
        ("rediss://user:pw@h/2?password=pw", "rediss://user:***@h/2"),
        ("redis://user@h", "redis://user@h"),
    ],
)
def test_display_url_leaves_the_password_out(url: str, shown: str) -> None:
    assert store_redis.display_url(url) == shown


def test_many_values_at_once_are_what_one_by_one_gives(
    server: RedisServer, open_store: Open
) -> None:
    store = open_store(server.url)
    for n in range(3):
        store.put(A, "call", f"c{n}", {"n": n})
    keys = [("call", "c0"), ("call", "none"), ("text", "c1"), ("call", "c2"), ("call", "c0")]
    assert store.get_many(A, keys) == [{"n": 0}, None, None, {"n": 2}, {"n": 0}]
    assert store.get_many(A, keys) == [store.get(A, kind, key) for kind, key in keys]
    assert store.get_many(B, keys) == [None] * 5
    assert store.get_many(A, []) == []
