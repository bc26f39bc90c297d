"""``scripts/usage`` run as it is run (a subprocess): names clients chose — in every text
column — written so that they cannot act on what shows them (a CSV cell a spreadsheet would
run as a formula starts with ``'``; control and bidi characters escaped; a long name cut in
the table, whole in CSV; numbers stay numbers); without ``--store`` it reads the gateway's
Redis and says so; a Redis it cannot read is said to the person running it, never a
traceback (issue 40 points 5 and 10)."""

from __future__ import annotations

import csv
import io
import re
import socket
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from addon.stores.ledger import LedgerKey, Tokens, open_ledger
from tests.redis_server import RedisServer, free_port, redis_server_or_skip

ROOT = Path(__file__).resolve().parents[2]
LONG = "m" * 5000
HOSTILE = {
    # What a client chose → what the CSV cell must say (a ``'`` first: no formula).
    "=cmd|' /C calc'!A0": "'=cmd|' /C calc'!A0",
    "+SUM(1,1)": "'+SUM(1,1)",
    "@SUM(A1)": "'@SUM(A1)",
    "-2+3": "'-2+3",
    "\t=1+1": "'\\t=1+1",
    "\r=1+1": "'\\r=1+1",
    "gpt-4o\n2026-01-01  forged  row": "gpt-4o\\n2026-01-01  forged  row",
    "gpt-\u202eevil": "gpt-\\u202eevil",
    "\u2066iso\u2069": "\\u2066iso\\u2069",
    "a\u200eb\u200fc": "a\\u200eb\\u200fc",
    "\x1b[31mred": "\\x1b[31mred",
    "c1\x9bx": "c1\\x9bx",
    "back\\slash": "back\\\\slash",
    LONG: LONG,
}
COLUMNS = ("route", "model", "key", "client", "user")
PLAIN = {
    "day": "2026-03-01",
    "route": "r",
    "model": "gpt-4o",
    "key": "K",
    "client": "c",
    "user": "",
}


def ledger_with_hostile_names(path: Path) -> list[LedgerKey]:
    """An SQLite ledger with each hostile name in each text column, one row each."""
    keys = [
        LedgerKey(**{**PLAIN, column: name})  # type: ignore[arg-type]
        for column in COLUMNS
        for name in HOSTILE
    ]
    ledger = open_ledger(str(path))
    for key in keys:
        ledger.count(key, Tokens(1, 10, 0, 0, 5, 0))
    ledger.close()
    return keys


def run(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "usage.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_csv_cells_never_run_as_formulas_and_show_every_character(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    keys = ledger_with_hostile_names(path)
    done = run("--store", str(path), "--csv")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "\r" not in text and "\t" not in text and "\x1b" not in text and "\u202e" not in text
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    assert header[:6] == ["day", "route", "model", "key", "client", "user"]
    assert len(body) == len(keys)  # no row forged by a newline
    found = {column: set[str]() for column in COLUMNS}
    for row in body:
        assert row[6:12] == ["1", "10", "0", "0", "5", "0"]  # numbers stay numbers
        for i, column in enumerate(COLUMNS, start=1):
            if row[i] != PLAIN[column]:
                found[column].add(row[i])
    for column in COLUMNS:
        assert found[column] == set(HOSTILE.values()), column  # the long name whole
    for row in body:
        for cell in row[:6]:
            assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r")


def test_the_table_shows_one_line_per_row_escaped_and_cut(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    keys = ledger_with_hostile_names(path)
    done = run("--store", str(path))
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    # header, rule, one line per row, rule, total (and the price table's note, if any)
    assert len([line for line in out if line.startswith("2026-03-01")]) == len(keys)
    assert not re.search(
        r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]", done.stdout
    )
    assert all(unicodedata.category(c) not in ("Cc", "Cf") for c in done.stdout if c != "\n")
    assert max(len(line) for line in out) < 600  # a 5 000-character name stretches nothing
    assert "m" * 59 + "…" in done.stdout and "m" * 60 not in done.stdout
    for shown in ("gpt-4o\\n2026-01-01  forged  row", "gpt-\\u202eevil", "\\u2066iso\\u2069",
                  "a\\u200eb\\u200fc", "\\x1b[31mred", "c1\\x9bx", "\\t=1+1", "\\r=1+1",
                  "back\\\\slash", "=cmd|' /C calc'!A0"):  # fmt: skip
        assert shown in done.stdout, shown
    rule = out[1]
    assert set(rule) <= {"-", " "}
    for line in out[2 : 2 + len(keys)]:
        assert len(line) <= len(rule)  # every row within the columns


def test_without_store_it_reads_the_gateways_redis_and_says_so(tmp_path: Path) -> None:
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 6379)) == 0:
            pytest.skip("something listens on 127.0.0.1:6379: the default cannot be tested")
    said = "scripts/usage: no --store given: reading redis://127.0.0.1:6379/0"
    done = run("--csv")
    assert done.returncode == 1
    first, second = done.stderr.splitlines()
    assert first.startswith(said) and "docs/deploy.md" in first
    assert second == (
        "scripts/usage: cannot reach Redis at redis://127.0.0.1:6379/0: connection refused; "
        "start it or pass --store"
    )
    assert done.stdout == ""
    with RedisServer(redis_server_or_skip(), port=6379) as server:
        ledger = open_ledger(server.url)
        ledger.count(LedgerKey("2026-03-02", "gw", "gpt-4o", "K", "alice", "bob"), Tokens(1))
        ledger.close()
        done = run("--csv", "--by", "client,user")
    assert done.returncode == 0
    assert done.stderr.splitlines() == [first]
    assert done.stdout.splitlines()[1].startswith("alice,bob,1,")


def test_an_unreachable_redis_is_said_to_the_person_running_it() -> None:
    port = free_port()
    done = run("--store", f"redis://:hunter2-secret@127.0.0.1:{port}/0")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        f"scripts/usage: cannot reach Redis at redis://:***@127.0.0.1:{port}/0: "
        "connection refused; start it or pass --store\n"
    )
    assert "memory" not in done.stderr and "hunter2" not in done.stderr


def test_a_redis_that_wants_a_password_says_so() -> None:
    with RedisServer(redis_server_or_skip(), extra=("--requirepass", "right-pass")) as server:
        bare = run("--store", server.url)
        wrong = run("--store", f"redis://:wrong-pass@127.0.0.1:{server.port}/0")
    assert bare.returncode == wrong.returncode == 1
    assert "wants a password" in bare.stderr and "--store" in bare.stderr
    assert "refused the password" in wrong.stderr and "wrong-pass" not in wrong.stderr
    assert len(bare.stderr.splitlines()) == len(wrong.stderr.splitlines()) == 1


def test_a_missing_file_is_said_plainly(tmp_path: Path) -> None:
    done = run("--store", str(tmp_path / "nothing.db"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"scripts/usage: no such file: {tmp_path / 'nothing.db'}")
    assert not (tmp_path / "nothing.db").exists()
