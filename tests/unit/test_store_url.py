"""``bridge_store`` read by one parser (``addon.config.options.parse_store_url``): a path, ``redis://``,
``rediss://``, ``valkey://`` / ``valkeys://``, ``unix://`` or nothing; anything else refused
naming the value and what is accepted, the db number checked. Then each form against what it
names: a real ``redis-server`` for ``valkey://``, ``unix://`` (a socket in a temp dir) and
``rediss://`` to a Redis without TLS (the handshake's failure said, in bounded time), and the
SQLite file (with its ``-wal`` and ``-shm``) its owner's only, 0600."""

from __future__ import annotations

import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from addon.config.options import ConfigError, StoreLocation, parse_store, parse_store_url
from addon.stores.ledger import LedgerKey, Tokens, open_ledger
from addon.stores.reasoning import Notice, ReasoningStore, Scope, StoreError
from tests.redis_server import HOST, RedisServer, redis_server_or_skip

A = Scope.of("cursor", "generativelanguage.googleapis.com", "gemini-3-pro-preview")
HOME = str(Path("~").expanduser())


# --------------------------------------------------------------------------- the parser


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", StoreLocation("memory")),
        ("   ", StoreLocation("memory")),
        ("/var/lib/cb/store", StoreLocation("sqlite", "/var/lib/cb/store", "/var/lib/cb/store")),
        ("~/cb/store", StoreLocation("sqlite", f"{HOME}/cb/store", "~/cb/store")),
        ("./store", StoreLocation("sqlite", "store", "./store")),
        ("../cb/store", StoreLocation("sqlite", "../cb/store", "../cb/store")),
        ("store.db", StoreLocation("sqlite", "store.db", "store.db")),
        ("data/store.sqlite", StoreLocation("sqlite", "data/store.sqlite", "data/store.sqlite")),
        ("store.SQLITE3", StoreLocation("sqlite", "store.SQLITE3", "store.SQLITE3")),
        (
            "redis://127.0.0.1:6379/0",
            StoreLocation("redis", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ),
        ("redis://r.example", StoreLocation("redis", "redis://r.example", "redis://r.example")),
        (
            "REDIS://:pw@r.example:6380/15",
            StoreLocation("redis", "redis://:pw@r.example:6380/15", "redis://:***@r.example:6380/15"),
        ),
        (
            "rediss://user:pw@r.example:6380/1",
            StoreLocation("redis", "rediss://user:pw@r.example:6380/1", "rediss://user:***@r.example:6380/1"),
        ),
        (
            "valkey://v.example:6379/2",
            StoreLocation("redis", "redis://v.example:6379/2", "valkey://v.example:6379/2"),
        ),
        (
            "valkeys://:pw@v.example/3",
            StoreLocation("redis", "rediss://:pw@v.example/3", "valkeys://:***@v.example/3"),
        ),
        (
            "unix:///run/redis/redis.sock",
            StoreLocation("redis", "unix:///run/redis/redis.sock", "unix:///run/redis/redis.sock"),
        ),
        (
            "unix://:pw@/run/redis/redis.sock?db=4",
            StoreLocation("redis", "unix://:pw@/run/redis/redis.sock?db=4", "unix://:***@/run/redis/redis.sock"),
        ),
        (
            "redis://r.example/0?db=5",
            StoreLocation("redis", "redis://r.example/0?db=5", "redis://r.example/0"),
        ),
    ],
)  # fmt: skip
def test_every_accepted_form_is_read_as_what_it_names(value: str, expected: StoreLocation) -> None:
    assert parse_store_url(value) == expected
    assert parse_store_url(value).shared == (expected.kind == "redis")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("127.0.0.1:6379", "a Redis address is written redis://127.0.0.1:6379/0"),
        ("localhost:6379/2", "a Redis address is written redis://localhost:6379/2"),
        ("localhost:6379/", "a Redis address is written redis://localhost:6379/0"),
        ("store", "is neither a path nor a store URL"),
        ("redis+bogus://127.0.0.1:6379/0", "redis+bogus:// is not a store this bridge opens"),
        ("http://127.0.0.1:6379/0", "http:// is not a store this bridge opens"),
        ("memcached://127.0.0.1:11211", "memcached:// is not a store this bridge opens"),
        ("redis://127.0.0.1:6379/notanumber", "must be a whole number >= 0, not 'notanumber'"),
        ("redis://127.0.0.1:6379/-1", "must be a whole number >= 0, not '-1'"),
        ("valkey://127.0.0.1:6379/1.5", "must be a whole number >= 0, not '1.5'"),
        ("redis://127.0.0.1:6379/0?db=x", "must be a whole number >= 0, not 'x'"),
        ("unix:///run/redis.sock?db=two", "must be a whole number >= 0, not 'two'"),
        ("unix://", "unix:// takes the socket's path"),
        ("redis://127.0.0.1:port/0", "is not a URL a store reads"),
    ],
)
def test_anything_else_is_refused_naming_the_value_and_what_is_accepted(
    value: str, says: str
) -> None:
    with pytest.raises(ConfigError) as e:
        parse_store_url(value)
    text = str(e.value)
    assert says in text
    assert text.startswith("bridge_store ")
    assert value.split("?")[0].split("/")[0] in text  # the value is named
    if "neither" in text or "not a store this bridge opens" in text:
        for form in ("absolute, ~/…, ./…", ".db, .sqlite or .sqlite3", "redis://", "rediss://"):
            assert form in text
        assert "valkey://" in text and "unix://" in text


def test_a_refused_value_never_shows_its_password() -> None:
    for value in ("redis+tls://:hunter22@h:6379/0", "redis://:hunter22@h:6379/db0"):
        with pytest.raises(ConfigError) as e:
            parse_store_url(value)
        assert "hunter22" not in str(e.value) and ":***@" in str(e.value)


def test_the_options_are_read_through_the_same_parser() -> None:
    options = {"bridge_store": "127.0.0.1:6379", "bridge_store_size": 10, "bridge_store_ttl": 5}
    with pytest.raises(ConfigError, match="neither a path nor a store URL"):
        parse_store(options.get)
    options["bridge_store"] = "valkey://127.0.0.1:6379/3"
    assert parse_store(options.get).location == StoreLocation(
        "redis", "redis://127.0.0.1:6379/3", "valkey://127.0.0.1:6379/3"
    )


def test_the_store_and_the_ledger_refuse_what_the_parser_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for value in ("127.0.0.1:6379", "redis+bogus://127.0.0.1:6379/0", "redis://h/notanumber"):
        with pytest.raises(StoreError, match="bridge_store"):
            ReasoningStore(value)
        with pytest.raises(StoreError, match="bridge_store"):
            open_ledger(value)
    assert list(tmp_path.iterdir()) == []  # no SQLite file named "127.0.0.1:6379"


# --------------------------------------------------------------------------- Redis forms


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short temp dir (a unix socket's path must stay under 108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="cb-sock-") as d:
        yield Path(d)


def test_valkey_url_is_redis(tmp_path: Path) -> None:
    with RedisServer(redis_server_or_skip()) as server:
        notices: list[Notice] = []
        store = ReasoningStore(f"valkey://{HOST}:{server.port}/2", notify=notices.append)
        try:
            assert store.redis is not None and store.redis.shared
            assert notices == []
            store.put(A, "call", "c1", {"n": 1})
            assert "valkey://" in store.describe()
            raw = redis.Redis(host=HOST, port=server.port, db=2)
            assert raw.zcard("cursor-bridge:lru") == 1  # in db 2, as the URL says
            assert redis.Redis(host=HOST, port=server.port, db=0).dbsize() == 0
        finally:
            store.close()


def test_unix_socket_url_with_a_db(socket_dir: Path) -> None:
    sock = socket_dir / "redis.sock"
    extra = ("--unixsocket", str(sock), "--unixsocketperm", "700")
    with RedisServer(redis_server_or_skip(), extra=extra) as server:
        notices: list[Notice] = []
        store = ReasoningStore(f"unix://{sock}?db=3", notify=notices.append)
        ledger = open_ledger(f"unix://{sock}?db=3", shared=store.redis)
        try:
            assert store.redis is not None and store.redis.shared, notices
            store.put(A, "call", "c1", {"n": 1})
            assert store.get(A, "call", "c1") == {"n": 1}
            ledger.count(LedgerKey("2026-12-06", "r", "m", "", ""), Tokens(input=5))
            assert f"unix://{sock}" in store.describe()
            over_socket = redis.Redis(unix_socket_path=str(sock), db=3)
            assert over_socket.zcard("cursor-bridge:lru") == 1
            assert over_socket.exists("cursor-bridge:usage:2026-12-06")
            assert redis.Redis(host=HOST, port=server.port, db=0).dbsize() == 0
        finally:
            ledger.close()
            store.close()


def test_unix_socket_that_is_not_there_is_redis_unreachable(socket_dir: Path) -> None:
    notices: list[Notice] = []
    store = ReasoningStore(f"unix://{socket_dir}/none.sock", notify=notices.append)
    try:
        assert store.redis is not None and not store.redis.shared
        assert [n.warning for n in notices] == [True]
        assert "unable to open database file" not in notices[0].text
        assert f"Redis at unix://{socket_dir}/none.sock unreachable" in notices[0].text
    finally:
        store.close()


def test_rediss_to_a_redis_without_tls_says_the_handshake_failed() -> None:
    with RedisServer(redis_server_or_skip()) as server:
        notices: list[Notice] = []
        started = time.monotonic()
        store = ReasoningStore(f"rediss://{HOST}:{server.port}/0", notify=notices.append)
        try:
            assert time.monotonic() - started < 30  # bounded: the connect timeout, twice
            assert store.redis is not None and not store.redis.shared
            (notice,) = notices
            assert notice.warning
            assert (
                f"TLS handshake with {HOST}:{server.port} failed: the server may not speak TLS"
                in notice.text
            )
            assert "values stay in this process's memory" in notice.text
            store.put(A, "call", "c1", {"n": 1})  # it goes on in memory
            assert store.get(A, "call", "c1") == {"n": 1}
        finally:
            store.close()


# --------------------------------------------------------------------------- SQLite 0600


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_sqlite_store_and_its_wal_and_shm_are_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask: files made 0644 unless asked otherwise
    try:
        path = tmp_path / "store.db"
        notices: list[Notice] = []
        store = ReasoningStore(str(path), notify=notices.append)
        store.put(A, "call", "c1", {"n": 1})
        _ = store.secret
        ledger = open_ledger(str(path))
        ledger.count(LedgerKey("2026-12-06", "r", "m", "", ""), Tokens(input=5))
        files = sorted(p.name for p in tmp_path.iterdir())
        assert files == ["store.db", "store.db-shm", "store.db-wal"]
        assert {name: mode(tmp_path / name) for name in files} == dict.fromkeys(files, 0o600)
        assert notices == []  # a new file: nothing to say
        ledger.close()
        store.close()
    finally:
        os.umask(old)


def test_an_existing_0644_store_is_made_0600_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    ReasoningStore(str(path)).close()
    for name in ("store.db", "store.db-wal"):
        (tmp_path / name).touch()
        (tmp_path / name).chmod(0o644)
    notices: list[Notice] = []
    store = ReasoningStore(str(path), notify=notices.append)
    store.put(A, "call", "c1", {"n": 1})
    (notice,) = notices
    assert notice.text == (
        f"reasoning store: {path} (0644), {path}-wal (0644) could be read by others: made 0600"
    )
    assert not notice.warning
    assert mode(path) == 0o600 and mode(tmp_path / "store.db-wal") == 0o600
    said: list[Notice] = []
    ledger = open_ledger(str(path), notify=said.append)  # already 0600: nothing more to say
    assert said == []
    ledger.close()
    store.close()


def test_an_existing_0644_ledger_file_is_made_0600_by_the_ledger_too(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite"
    open_ledger(str(path)).close()
    path.chmod(0o644)
    said: list[Notice] = []
    ledger = open_ledger(str(path), notify=said.append)
    assert [n.text for n in said] == [f"{path} (0644) could be read by others: made 0600"]
    assert mode(path) == 0o600
    ledger.close()


# --------------------------------------------------------------------------- the scripts


ROOT = Path(__file__).resolve().parents[2]


def test_scripts_usage_reads_store_as_the_proxy_does(tmp_path: Path) -> None:
    """``scripts/usage --store`` goes through the same parser: a value the proxy refuses is
    refused with the proxy's words, and no file of that name is made."""
    import subprocess
    import sys

    for value, says in (
        ("127.0.0.1:6379", "a Redis address is written redis://127.0.0.1:6379/0"),
        ("redis://127.0.0.1:6379/notanumber", "must be a whole number >= 0"),
        ("valkey+x://127.0.0.1:6379/0", "valkey+x:// is not a store this bridge opens"),
    ):
        done = subprocess.run(
            [sys.executable, str(ROOT / "scripts/usage.py"), "--store", value],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert f"scripts/usage: bridge_store {value!r}" in done.stderr
        assert says in done.stderr
        assert list(tmp_path.iterdir()) == []


def test_scripts_gateway_calls_every_redis_form_shared() -> None:
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gateway
    finally:
        sys.path.remove(str(ROOT / "scripts"))

    def warning(store: str) -> str | None:
        argv = ["--workers", "2", "--mode", "reverse:https://api.example.com"]
        return gateway.store_warning(gateway.parse_args([*argv, "--set", f"bridge_store={store}"]))

    for shared in ("valkey://10.0.0.5:6379/0", "unix:///run/redis.sock?db=1", "REDIS://h/0"):
        assert warning(shared) is None, shared
    assert "a file of each machine" in (warning("./cb.sqlite") or "")
    refused = warning("10.0.0.5:6379") or ""
    assert "a Redis address is written redis://10.0.0.5:6379/0" in refused
    assert "every worker will refuse to start" in refused
