"""End to end, issue 40 point 7: what ``bridge_store`` says is what a real mitmdump opens.

A value that is no path and no store URL (``127.0.0.1:6379``, ``redis+bogus://``, a db that is
no number, a bare ``unix://``) stops mitmdump at start with one line naming the value and what
is accepted, and leaves no SQLite file of that name behind. ``valkey://`` and ``unix://`` (a
real ``redis-server`` on a socket in a temp dir) open Redis; ``rediss://`` to a Redis without TLS
says the handshake failed. An SQLite store others could read is made 0600 with one log line.
"""

from __future__ import annotations

import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from addon.stores.reasoning import ReasoningStore
from tests.e2e.harness import REPO, Proxy, ProxyStartError
from tests.redis_server import HOST, RedisServer, redis_server_or_skip


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("127.0.0.1:6379", "is neither a path nor a store URL (a Redis address is written "
         "redis://127.0.0.1:6379/0)"),
        ("redis+bogus://127.0.0.1:6379/0", "redis+bogus:// is not a store this bridge opens"),
        ("redis://127.0.0.1:6379/notanumber", "the db number must be a whole number >= 0, "
         "not 'notanumber'"),
        ("unix://", "unix:// takes the socket's path"),
    ],
)  # fmt: skip
def test_a_value_no_store_reads_stops_mitmdump_at_start_naming_it(
    start_proxy: Callable[..., Proxy], value: str, says: str
) -> None:
    # What today's main made of "127.0.0.1:6379" (and "unix://"): an SQLite file in the
    # working directory, with its -wal and -shm.
    name = str(Path(value))
    strays = [REPO / f"{name}{end}" for end in ("", "-wal", "-shm")]
    existed = {f for f in strays if f.exists()}
    try:
        with pytest.raises(ProxyStartError) as e:
            start_proxy(bridge_store=value)
        log = e.value.log
        assert f"cursor-bridge: bridge_store {value!r}" in log
        assert says in log
        assert "unable to open database file" not in log
        assert "Traceback" not in log
        if "neither" in says or "not a store" in says:
            assert "redis://HOST:PORT/DB, rediss:// (TLS), valkey://" in log
        assert {f for f in strays if f.exists()} == existed
    finally:
        for f in strays:
            if f not in existed and f.is_file():
                f.unlink()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="cb-sock-") as d:
        yield Path(d)


def test_valkey_and_unix_socket_stores_open_redis(
    start_proxy: Callable[..., Proxy], socket_dir: Path
) -> None:
    sock = socket_dir / "redis.sock"
    extra = ("--unixsocket", str(sock), "--unixsocketperm", "700")
    with RedisServer(redis_server_or_skip(), extra=extra) as server:
        valkey = start_proxy(bridge_store=f"valkey://{HOST}:{server.port}/1")
        unix = start_proxy(bridge_store=f"unix://{sock}?db=2")
        valkey.wait_for_log(f"reasoning store in Redis valkey://{HOST}:{server.port}/1")
        unix.wait_for_log(f"reasoning store in Redis unix://{sock}")
        for p in (valkey, unix):
            assert "unreachable" not in p.log_text()
            assert "unable to open database file" not in p.log_text()


def test_rediss_to_a_redis_without_tls_says_the_tls_handshake_failed(
    start_proxy: Callable[..., Proxy],
) -> None:
    with RedisServer(redis_server_or_skip()) as server:
        p = start_proxy(bridge_store=f"rediss://{HOST}:{server.port}/0")
        p.wait_for_log(
            f"TLS handshake with {HOST}:{server.port} failed: the server may not speak TLS",
            timeout=30,
        )
        assert "Timeout connecting to server" not in p.log_text()


def test_an_sqlite_store_others_could_read_is_made_0600_with_one_line(
    start_proxy: Callable[..., Proxy], tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    ReasoningStore(str(path)).close()
    path.chmod(0o644)
    p = start_proxy(bridge_store=str(path))
    p.wait_for_log(f"reasoning store: {path} (0644) could be read by others: made 0600")
    p.wait_for_log(f"usage ledger in SQLite file {path}")
    assert p.log_text().count("could be read by others") == 1
    for f in tmp_path.iterdir():  # the store, its -wal and -shm
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
