"""The usage ledger (``addon.stores.ledger``) on each backend — memory, SQLite, a real ``redis-server``
(skipped, saying why, where it is missing) — and its table (``addon.report.usage_table``): grouping,
``--since``, CSV, the cache read share, a known model priced, an unknown one left blank."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from addon.model import Usage
from addon.report.usage_table import csv_text, genai_prices, lines, parse_by, table_text, total
from addon.stores import redis_backend as store_redis
from addon.stores.ledger import (
    OTHER,
    LedgerKey,
    MemoryCounters,
    Tokens,
    UsageLedger,
    open_ledger,
    user_label,
)
from addon.stores.reasoning import ReasoningStore
from tests.redis_server import RedisServer, redis_server_or_skip

GPT = LedgerKey("2026-01-02", "openai", "gpt-4o", "OPENAI_API_KEY", "alice", "bob")
UNKNOWN = LedgerKey("2026-01-03", "local", "my-own-finetune-xyz", "", "bob")
ONE = Tokens.of(
    Usage(input_tokens=100, output_tokens=50, cache_read_tokens=300, reasoning_tokens=20)
)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], UsageLedger]]:
    """A maker of ledgers on one backend: each new one sees what the others counted (but
    memory, which is one process's)."""
    made: list[UsageLedger] = []
    server: RedisServer | None = None
    if request.param == "memory":
        first = open_ledger("")
        made.append(first)

        def make() -> UsageLedger:
            return first
    else:
        if request.param == "redis":
            server = RedisServer(redis_server_or_skip()).start()
            where = server.url
        else:
            where = str(tmp_path / "store.db")

        def make() -> UsageLedger:
            led = open_ledger(where)
            made.append(led)
            return led

    yield make
    for led in made:
        led.close()
    if server is not None:
        server.close()


def test_counts_add_up_by_key(ledger: Callable[[], UsageLedger]) -> None:
    a = ledger()
    a.count(GPT, ONE)
    a.count(GPT, ONE)
    a.count(UNKNOWN, Tokens.of(None))
    rows = ledger().rows()
    assert rows[GPT] == Tokens(2, 200, 600, 0, 100, 40)
    assert rows[UNKNOWN] == Tokens(requests=1)
    assert ledger().rows(since="2026-01-03") == {UNKNOWN: Tokens(requests=1)}


def test_sqlite_ledger_lives_beside_the_reasoning_store(tmp_path: Path) -> None:
    path = str(tmp_path / "store.db")
    store = ReasoningStore(path)
    led = open_ledger(path)
    led.count(GPT, ONE)
    led.close()
    store.close()
    again = open_ledger(path)
    assert again.rows() == {GPT: ONE}
    again.close()


def test_redis_layout_is_a_hash_per_day() -> None:
    import redis

    with RedisServer(redis_server_or_skip()) as server:
        led = open_ledger(server.url)
        led.count(GPT, ONE)
        raw = redis.Redis.from_url(server.url)
        table = raw.hgetall(f"{store_redis.PREFIX}usage:2026-01-02")
        assert table[b'["openai","gpt-4o","OPENAI_API_KEY","alice","bob","requests"]'] == b"1"
        assert table[b'["openai","gpt-4o","OPENAI_API_KEY","alice","bob","cache_read"]'] == b"300"
        assert raw.smembers(f"{store_redis.PREFIX}usage:days") == {b"2026-01-02"}
        led.close()


def test_redis_ledger_keeps_counts_while_redis_is_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_redis, "RETRY_FIRST", 0.05)
    monkeypatch.setattr(store_redis, "RETRY_MOST", 0.2)
    with RedisServer(redis_server_or_skip()) as server:
        led = open_ledger(server.url)
        led.count(GPT, ONE)
        server.stop()
        led.count(GPT, ONE)  # no error: kept here
        server.start()
        import time

        reader = open_ledger(server.url)
        deadline = time.monotonic() + 10
        while reader.rows().get(UNKNOWN) is None:
            led.count(UNKNOWN, Tokens.of(None))  # the next add sends what waited
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # The restarted Redis is empty (no persistence): what it has of GPT is the count made
        # while it was away, once (the add that found Redis gone kept it once, not twice).
        assert reader.rows().get(GPT) == ONE
        led.close()
        reader.close()


@pytest.mark.parametrize(
    ("user", "label"),
    [
        pytest.param("alice@example.com", "alice@example.com", id="plain-user-kept"),
        pytest.param(None, "", id="no-user"),
        pytest.param("sk-proj-abcdefghijklmnop", "user:", id="key-prefix-hashed"),
        pytest.param("x" * 40, "user:", id="long-token-hashed"),
        pytest.param("has space", "user:", id="odd-characters-hashed"),
    ],
)
def test_user_label(user: str | None, label: str) -> None:
    got = user_label(user)
    assert got.startswith(label)
    if label == "user:":
        assert len(got) == len("user:") + 12
        assert user is not None and user not in got


# --------------------------------------------------------------------------- the table


def fixed_price(model: str, day: str, tokens: Tokens) -> Decimal | None:
    return Decimal("0.5") * tokens.requests if model == "gpt-4o" else None


def test_lines_group_by_and_total() -> None:
    rows = {GPT: ONE, UNKNOWN: Tokens(requests=2), GPT.__class__(*GPT.labels()[:4], "z"): ONE}
    found = lines(rows, ("model",), fixed_price)
    assert [line.labels for line in found] == [("gpt-4o",), ("my-own-finetune-xyz",)]
    gpt, other = found
    assert gpt.tokens.requests == 2 and gpt.cost == Decimal("1.0") and gpt.unpriced == 0
    assert other.cost is None and other.unpriced == 2
    assert gpt.cache_share == "75%"  # 600 read of 800
    whole = total(found, 1)
    assert whole.tokens.requests == 4 and whole.cost == Decimal("1.0") and whole.unpriced == 2


def test_table_and_csv() -> None:
    rows = {GPT: ONE, UNKNOWN: Tokens(requests=1)}
    by = parse_by("day,model")
    found = lines(rows, by, fixed_price)
    text = table_text(found, by, fixed_price)
    head, _, first, second, _, last = text.splitlines()
    assert head.split()[:3] == ["day", "model", "requests"]
    assert first.split()[:2] == ["2026-01-02", "gpt-4o"] and "0.5000" in first
    assert second.split()[-1] == "1"  # unpriced, no cost cell
    assert last.startswith("total")
    csv = csv_text(found, by).splitlines()
    assert csv[0] == (
        "day,model,requests,input,cache_read,cache_write,output,reasoning,searches,"
        "cache_share,cost_usd,unpriced"
    )
    assert csv[1] == "2026-01-02,gpt-4o,1,100,300,0,50,20,0,75%,0.50000000,"
    assert csv[2] == "2026-01-03,my-own-finetune-xyz,1,0,0,0,0,0,0,,,1"


def test_no_price_table_says_so() -> None:
    found = lines({GPT: ONE}, ("model",), None)
    assert found[0].cost is None
    assert "genai-prices" in table_text(found, ("model",), None)


def test_parse_by_refuses_an_unknown_dimension() -> None:
    assert parse_by("") == ("day", "route", "model", "key", "client", "user")
    assert parse_by("client,user") == ("client", "user")
    with pytest.raises(ValueError, match="'users'"):
        parse_by("day,users")


def test_a_full_memory_ledger_folds_new_users_not_clients() -> None:
    counters = MemoryCounters(limit=1)
    counters.add(GPT, ONE)
    counters.add(LedgerKey(*GPT.labels()[:5], "mallory-1"), ONE)
    assert set(counters.rows()) == {GPT, LedgerKey(*GPT.labels()[:5], OTHER)}


def test_genai_prices_prices_a_known_model_and_not_an_unknown_one() -> None:
    price = genai_prices()
    if price is None:
        pytest.skip("genai-prices is not installed (the usage extra)")
    tokens = Tokens(1, 1_000_000, 0, 0, 1_000_000, 0)
    cost = price("gpt-4o", "2025-06-01", tokens)
    # gpt-4o: $2.50 per million input tokens, $10 per million output tokens.
    assert cost == Decimal("12.5")
    assert price("my-own-finetune-xyz", "2025-06-01", tokens) is None
    cached = price("gpt-4o", "2025-06-01", Tokens(1, 0, 1_000_000, 0, 0, 0))
    assert cached is not None and cached < Decimal("2.5")  # cache reads are cheaper
