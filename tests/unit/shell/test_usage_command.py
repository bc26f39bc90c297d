"""``bridge.usage``: the usage ledger's table as mitmweb's command shows it (issue 37)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from mitmproxy.test import taddons

from addon.shell.ledger_book import UsageCounting
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.settings import BridgeSettings
from addon.stores.ledger import LedgerKey, Tokens


def test_bridge_usage_shows_every_row_with_its_key_name_and_client() -> None:
    usage = UsageCounting(ReasoningStoreLife())
    with taddons.context(usage):
        key = LedgerKey("2026-11-28", "gpt", "gpt-4o", "OPENAI_KEY_A", "alice")
        usage.ledger.count(key, Tokens(1, 20, 100, 0, 30, 10))
        usage.ledger.count(key, Tokens(1, 20, 100, 0, 30, 10))
        text = usage.usage()
    row = next(line for line in text.splitlines() if "alice" in line)
    for word in ("2026-11-28", "gpt-4o", "OPENAI_KEY_A", "alice"):
        assert word in row
    assert "total" in text
    assert "sk-" not in text  # names only, never a key


def test_bridge_usage_shows_names_escaped_and_cut_with_the_user_column() -> None:
    """What a client chose (a model, a ``user``) reaches the command's table as one line,
    its control and bidi characters escaped, a long name cut (issue 40 point 5)."""
    usage = UsageCounting(ReasoningStoreLife())
    names = ["gpt\n2026-01-01  forged", "x\u202eevil", "\x1b[2Jclear", "m" * 5000]
    with taddons.context(usage):
        for name in names:
            usage.ledger.count(LedgerKey("2026-11-28", "r", name, "K", "alice", name), Tokens(1))
        text = usage.usage()
    lines = text.splitlines()
    assert lines[0].split()[:6] == ["day", "route", "model", "key", "client", "user"]
    assert len([line for line in lines if line.startswith("2026-11-28")]) == len(names)
    assert "\u202e" not in text and "\x1b" not in text
    for shown in ("gpt\\n2026-01-01  forged", "x\\u202eevil", "\\x1b[2Jclear"):
        assert text.count(shown) == 2  # model and user
    assert "m" * 59 + "…" in text and "m" * 60 not in text
    assert max(len(line) for line in lines) < 400


def test_bridge_usage_on_a_file_never_waits_for_the_store_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ledger in a file (or Redis) is read on the store thread: the command, which runs on the
    event loop, answers at once while that thread is busy (issue 43 point 1: no store call on
    the loop), the table follows in the log, and the next command shows it at once."""
    life = ReasoningStoreLife()
    usage = UsageCounting(life)
    caplog.set_level(logging.INFO)
    with taddons.context(BridgeSettings(), life, usage) as tctx:
        tctx.configure(life, bridge_store=str(tmp_path / "store.db"))
        tctx.configure(usage, bridge_store=str(tmp_path / "store.db"))
        assert not usage.ledger.in_memory
        key = LedgerKey("2026-12-06", "gpt", "gpt-4o", "OPENAI_KEY_A", "alice")
        usage.ledger.count(key, Tokens(1, 20, 100, 0, 30, 10))
        busy, free = threading.Event(), threading.Event()

        def hold() -> None:
            busy.set()
            assert free.wait(10)

        held = life.worker.submit(hold)
        assert busy.wait(10)  # the store thread is busy: a wait for it would never end
        answered: list[str] = []
        command = threading.Thread(target=lambda: answered.append(usage.usage()))
        command.start()
        command.join(10)
        assert answered == [
            "usage: reading the ledger on the store thread; the table follows in the log"
        ]
        free.set()
        held.result(10)
        for _ in range(100):  # the read's callback logs the table (bounded: 10 s)
            if "alice" in caplog.text:
                break
            time.sleep(0.1)
        assert "OPENAI_KEY_A" in caplog.text
        again = usage.usage()
        assert again.startswith("usage as read at ") and "alice" in again
        life.done()
        usage.done()
