"""``bridge.usage``: the usage ledger's table as mitmweb's command shows it (issue 37)."""

from __future__ import annotations

from mitmproxy.test import taddons

from addon.shell.ledger_book import UsageCounting
from addon.shell.reasoning_store import ReasoningStoreLife
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
