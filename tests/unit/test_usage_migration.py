"""A usage ledger written before the ``user`` column — by main's own code at e587497
(``tests/fixtures/usage_ledger_main``: its SQLite file as written, the Redis keys it wrote,
the rows it read back) — opened by today's: every old row kept, counted on and shown by
``scripts/usage``; new rows carry the user column. ``scripts/usage`` only reads: the file it
is pointed at is not migrated by it."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from addon.model import Usage
from addon.stores.ledger import LedgerKey, Rows, Tokens, open_ledger
from addon.stores.reasoning import ReasoningStore
from tests.redis_server import RedisServer, redis_server_or_skip

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "usage_ledger_main"
NEW = Tokens.of(Usage(input_tokens=11, output_tokens=5))


def main_rows() -> Rows:
    """What main's code read from its ledger (``rows.json``), as today's rows (no user)."""
    out: Rows = {}
    for row in json.loads((FIXTURE / "rows.json").read_text()):
        assert len(row) == 5 + 6  # five labels (no user), six metrics
        out[LedgerKey(*row[:5])] = Tokens(*row[5:])
    return out


def columns(path: Path) -> list[str]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [row[1] for row in db.execute("PRAGMA table_info(usage)")]
    finally:
        db.close()


def usage_script(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "usage.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout.splitlines()


def csv_rows(out: list[str]) -> dict[tuple[str, ...], list[str]]:
    """CSV lines by their six labels (day, route, model, key, client, user)."""
    assert out[0].startswith("day,route,model,key,client,user,requests,")
    return {tuple(line.split(",")[:6]): line.split(",")[6:13] for line in out[1:]}


def test_an_sqlite_ledger_of_before_the_user_column_keeps_counting(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(FIXTURE / "store.db", path)
    old = main_rows()
    assert "user" not in columns(path)
    secret = ReasoningStore(str(path)).secret

    # Read by scripts/usage as it is: every old row shown, the file not migrated by it.
    shown = csv_rows(usage_script("--store", str(path), "--csv"))
    assert shown == {(*k.labels(),): [str(n) for n in t.values()] for k, t in old.items()}
    assert "user" not in columns(path)

    # Opened by a proxy: migrated once, every row kept; counting goes on into the same rows.
    ledger = open_ledger(str(path))
    assert columns(path)[:6] == ["day", "route", "model", "key_name", "client", "user"]
    assert ledger.rows() == old
    alice = LedgerKey("2026-01-02", "keyed", "gpt-4o", "OPENAI_API_KEY", "alice")
    assert alice in old
    ledger.count(alice, NEW)  # a flow of before the upgrade's kind: its old row goes on
    with_user = LedgerKey(*alice.labels()[:5], "bob")
    ledger.count(with_user, NEW)
    ledger.close()

    again = open_ledger(str(path))  # a second open: nothing migrated again, nothing lost
    rows = again.rows()
    again.close()
    assert rows == {**old, alice: old[alice] + NEW, with_user: NEW}
    assert ReasoningStore(str(path)).secret == secret  # the store's own tables untouched
    with sqlite3.connect(path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"usage", "reasoning", "bridge_secret", "calibration"}

    shown = csv_rows(usage_script("--store", str(path), "--csv"))
    assert shown[(*alice.labels(),)][0] == str(old[alice].requests + 1)
    assert shown[(*with_user.labels(),)][:2] == ["1", "11"]
    by_user = usage_script("--store", str(path), "--by", "client,user")
    assert any(line.split()[:3] == ["alice", "bob", "1"] for line in by_user), by_user


def test_a_redis_ledger_of_before_the_user_column_keeps_counting() -> None:
    import redis

    dump = json.loads((FIXTURE / "redis.json").read_text())
    old = main_rows()
    with RedisServer(redis_server_or_skip()) as server:
        raw = redis.Redis.from_url(server.url, decode_responses=True)
        for name, value in dump.items():  # the keys as main's code left them
            if isinstance(value, list):
                raw.sadd(name, *value)
            else:
                raw.hset(name, mapping=value)
        ledger = open_ledger(server.url)
        assert ledger.rows() == old
        alice = LedgerKey("2026-01-02", "keyed", "gpt-4o", "OPENAI_API_KEY", "alice")
        with_user = LedgerKey(*alice.labels()[:5], "bob")
        ledger.count(alice, NEW)
        ledger.count(with_user, NEW)
        rows = ledger.rows()
        ledger.close()
        assert rows == {**old, alice: old[alice] + NEW, with_user: NEW}
        day = raw.hgetall("cursor-bridge:usage:2026-01-02")
        for field, n in dump["cursor-bridge:usage:2026-01-02"].items():  # old fields kept
            assert day[field] == n
        assert day['["keyed","gpt-4o","OPENAI_API_KEY","alice","bob","requests"]'] == "1"
        assert day['["keyed","gpt-4o","OPENAI_API_KEY","alice","","requests"]'] == "1"
        raw.close()
        shown = csv_rows(usage_script("--store", server.url, "--csv"))
    assert shown[(*alice.labels(),)][0] == str(old[alice].requests + 1)
    assert shown[(*with_user.labels(),)][:2] == ["1", "11"]
    hashed = [k for k in old if k.client.startswith("user:")]
    assert hashed and all((*k.labels(),) in shown for k in hashed)


@pytest.mark.parametrize("fields", [5, 6])
def test_a_redis_field_of_either_layout_is_read(fields: int) -> None:
    """``[route, model, key, client, metric]`` (before) and ``[…, client, user, metric]``."""
    import redis

    labels = ["r", "m", "K", "alice", *(["bob"] if fields == 6 else [])]
    with RedisServer(redis_server_or_skip()) as server:
        raw = redis.Redis.from_url(server.url)
        raw.sadd("cursor-bridge:usage:days", "2026-02-01")
        raw.hset("cursor-bridge:usage:2026-02-01", json.dumps([*labels, "output"]), 7)
        raw.close()
        ledger = open_ledger(server.url)
        rows = ledger.rows()
        ledger.close()
    assert rows == {LedgerKey("2026-02-01", *labels): Tokens(output=7)}


USER_FIXTURE = ROOT / "tests" / "fixtures" / "usage_ledger_user"


def test_an_sqlite_ledger_of_before_the_searches_column_keeps_counting(tmp_path: Path) -> None:
    """Written by main's code at 6992146 (``tests/fixtures/usage_ledger_user``): read as it is
    by ``scripts/usage`` (0 searches), given the column at the first open that writes, every
    row kept; a flow with searches counts them."""
    path = tmp_path / "store.db"
    shutil.copyfile(USER_FIXTURE / "store.db", path)
    old: Rows = {
        LedgerKey(*row[:6]): Tokens(*row[6:])
        for row in json.loads((USER_FIXTURE / "rows.json").read_text())
    }
    assert all(t.searches == 0 for t in old.values()) and "searches" not in columns(path)

    shown = csv_rows(usage_script("--store", str(path), "--csv"))
    assert shown == {(*k.labels(),): [str(n) for n in t.values()] for k, t in old.items()}
    assert "searches" not in columns(path)  # the reader changed nothing

    ledger = open_ledger(str(path))
    assert columns(path)[-1] == "searches"
    assert ledger.rows() == old
    key = next(k for k in old if k.route == "search")
    searched = Tokens.of(Usage(input_tokens=11, output_tokens=5), searches=2)
    ledger.count(key, searched)
    ledger.close()
    again = open_ledger(str(path))
    rows = again.rows()
    again.close()
    assert rows == {**old, key: old[key] + searched}
    assert rows[key].searches == 2
    header = usage_script("--store", str(path), "--csv")[0].split(",")
    assert header[6:13] == ["requests", "input", "cache_read", "cache_write", "output",
                            "reasoning", "searches"]  # fmt: skip
    assert csv_rows(usage_script("--store", str(path), "--csv"))[(*key.labels(),)][6] == "2"
