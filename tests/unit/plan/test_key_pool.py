"""Key pools decided sans-IO (issue 37): a conversation's own key first, the same on every
worker of one store and spread over conversations; cooling and revoked keys skipped; every key
cooling → the route's fallback, else the client's 429 with ``Retry-After``; the routes file's
list of ``api_key_env`` names."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from addon.dialects import DIALECTS
from addon.plan.fallback import MemoryCooldowns, first_route, next_route
from addon.plan.key_pool import (
    REVOKED_FOR,
    all_cooling,
    is_link,
    key_order,
    link_name,
    links,
    refused_key,
    revoked,
)
from addon.routes import Route, fallback_chain
from addon.routes_file import RoutesError, load_routes

SECRET = b"s" * 32
POOL = Route(name="gpt", api_key_env=("KEY_A", "KEY_B", "KEY_C"), fallback=("backup",))
BACKUP = Route(name="backup", upstream="anthropic", api_key_env="KEY_BACKUP")
ALONE = Route(name="alone", api_key_env=("KEY_A", "KEY_B"))


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def chain_for(route: Route, conversation: str) -> tuple[Route, ...]:
    return links(fallback_chain(route, (POOL, BACKUP, ALONE)), SECRET, conversation)


def test_a_pool_is_one_link_per_key_before_the_fallback_routes() -> None:
    chain = chain_for(POOL, "opening:x")
    assert [link_name(r) for r in chain[:3]] == [
        f"gpt#{k}" for k in key_order(POOL.key_pool, SECRET, "opening:x")
    ]
    assert sorted(r.key_env or "" for r in chain[:3]) == ["KEY_A", "KEY_B", "KEY_C"]
    assert all(is_link(r) and r.name == "gpt" for r in chain[:3])
    assert chain[3] is BACKUP and link_name(BACKUP) == "backup"


def test_the_sticky_key_is_stable_per_conversation_and_spread_over_conversations() -> None:
    firsts = Counter(key_order(POOL.key_pool, SECRET, f"opening:{i}")[0] for i in range(300))
    assert set(firsts) == {"KEY_A", "KEY_B", "KEY_C"}
    assert min(firsts.values()) > 60  # about 100 each
    for i in range(20):  # the same on every call (every worker with the store's secret)
        assert key_order(POOL.key_pool, SECRET, f"session:{i}") == key_order(
            POOL.key_pool, SECRET, f"session:{i}"
        )
    # another secret (another store) orders them otherwise for some conversation
    assert any(
        key_order(POOL.key_pool, SECRET, f"k{i}") != key_order(POOL.key_pool, b"t" * 32, f"k{i}")
        for i in range(20)
    )


def test_a_key_that_leaves_moves_only_its_own_conversations() -> None:
    """Rendezvous order: a conversation keeps its key while another key cools down."""
    table = MemoryCooldowns(Clock())
    table.cool("gpt#KEY_B", 30)
    for i in range(100):
        chain = chain_for(POOL, f"opening:{i}")
        first, skipped = first_route(chain, table)
        assert first is not None
        own = chain[0]
        if own.key_env != "KEY_B":
            assert first is own and skipped == ()
        else:
            assert first is chain[1] and skipped == (own,)


def test_cooling_and_revoked_keys_are_skipped_then_the_fallback() -> None:
    table = MemoryCooldowns(Clock())
    chain = chain_for(POOL, "opening:y")
    a, b, c = (link_name(r) for r in chain[:3])
    table.cool(a, 30)
    table.cool(b, REVOKED_FOR)
    first, skipped = first_route(chain, table)
    assert first is chain[2] and [link_name(r) for r in skipped] == [a, b]
    assert revoked(table.left(b)) and not revoked(table.left(a))
    assert next_route(chain, [c], table) is BACKUP
    table.cool(c, 5)
    first, _ = first_route(chain, table)
    assert first is BACKUP  # every key cooling: the route's fallback


def test_every_key_cooling_without_a_fallback_is_the_clients_429() -> None:
    table = MemoryCooldowns(Clock())
    chain = chain_for(ALONE, "opening:z")
    table.cool("alone#KEY_A", 40)
    table.cool("alone#KEY_B", 12.2)
    first, skipped = first_route(chain, table)
    assert first is None and skipped == chain
    status, headers, body = all_cooling(
        DIALECTS["anthropic"], min(table.left(link_name(r)) for r in chain)
    )
    assert status == 429 and headers == {"retry-after": "13"}
    assert json.loads(body)["type"] == "error"
    _, _, chat = all_cooling(DIALECTS["openai_chat"], 0.1)
    assert "every key" in json.loads(chat)["error"]["message"]


def test_401_and_403_revoke_only_a_key_of_a_pool() -> None:
    link = chain_for(ALONE, "c")[0]
    assert refused_key(link, 401) and refused_key(link, 403)
    assert not refused_key(link, 429) and not refused_key(BACKUP, 401)
    assert revoked(REVOKED_FOR) and not revoked(86400)


# ----------------------------------------------------------------------------- the file


def write(tmp_path: Path, api_key_env: str) -> Path:
    p = tmp_path / "r.toml"
    p.write_text(f'[[routes]]\nname = "gpt"\napi_key_env = {api_key_env}\n')
    return p


def test_a_list_of_names_is_a_pool_and_a_string_one_key(tmp_path: Path) -> None:
    (route,) = load_routes(write(tmp_path, '["KEY_A", "KEY_B"]'))
    assert route.api_key_env == ("KEY_A", "KEY_B") and route.key_pool == ("KEY_A", "KEY_B")
    assert route.key_env == "KEY_A" and route.key_names == ("KEY_A", "KEY_B")
    (one,) = load_routes(write(tmp_path, '"KEY_A"'))
    assert one.api_key_env == "KEY_A" and one.key_pool == () and one.key_names == ("KEY_A",)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[]", "at least one environment variable"),
        ('["KEY_A", "KEY_A"]', "names a variable twice: KEY_A"),
        ('["KEY_A", "NOT A NAME"]', "environment variable name"),
        ('["KEY_A", 3]', "environment variable name"),
        ("3", "environment variable name"),
    ],
)
def test_a_bad_pool_is_refused_naming_the_key(tmp_path: Path, value: str, message: str) -> None:
    with pytest.raises(RoutesError, match="api_key_env") as e:
        load_routes(write(tmp_path, value))
    assert message in str(e.value) and "(in route 'gpt')" in str(e.value)


def test_a_pool_built_in_code_is_checked_too() -> None:
    with pytest.raises(ValueError, match="twice"):
        Route(name="x", api_key_env=("A", "A"))
    assert Route(name="x", api_key_env=["A", "B"]).api_key_env == ("A", "B")  # type: ignore[arg-type]


def test_the_ledger_names_the_key_the_attempt_used() -> None:
    from addon.plan.flow import FlowPlan
    from addon.shell.usage import ledger_key

    for link in chain_for(ALONE, "opening:ledger"):
        plan = FlowPlan(link, DIALECTS["openai_chat"], DIALECTS["openai_chat"])
        assert ledger_key(plan, 0.0).key == link.key_env
    plain = FlowPlan(BACKUP, DIALECTS["openai_chat"], DIALECTS["anthropic"])
    assert ledger_key(plain, 0.0).key == "KEY_BACKUP"


def test_every_key_revoked_is_a_503_without_retry_after() -> None:
    status, headers, body = all_cooling(DIALECTS["openai_chat"], REVOKED_FOR - 5)
    assert status == 503 and headers == {}
    assert "refused" in json.loads(body)["error"]["message"]
