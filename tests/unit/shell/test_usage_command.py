"""``bridge.usage``: the usage ledger's table as mitmweb's command shows it (issue 37)."""

from __future__ import annotations

from mitmproxy.test import taddons

from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.usage import UsageCounting
from addon.usage import LedgerKey, Tokens


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
