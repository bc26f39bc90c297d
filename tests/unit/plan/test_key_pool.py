"""Key pools decided sans-IO (issue 37): a conversation's own key first, the same on every
worker of one store and spread over conversations; cooling and revoked keys skipped; every key
cooling → the route's fallback, else the client's 429 with ``Retry-After``; the routes file's
list of ``api_key_env`` names."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from addon.config.routes import Route, fallback_chain
from addon.config.routes_file import RoutesError, load_routes
from addon.dialects import DIALECTS
from addon.plan.fallback import MemoryCooldowns, first_route, next_route
from addon.plan.key_pool import (
    KeyAction,
    all_cooling,
    is_link,
    key_order,
    key_verdict,
    link_name,
    links,
    reads_error,
    revoked_mark,
)

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
    table.cool(b, 3600)
    table.cool(revoked_mark(b), 3600)
    first, skipped = first_route(chain, table)
    assert first is chain[2] and [link_name(r) for r in skipped] == [a, b]
    assert table.cooling(revoked_mark(b)) and not table.cooling(revoked_mark(a))
    assert next_route(chain, [a, b, c], table) == (BACKUP, ())
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
        DIALECTS["anthropic"], min(table.left(link_name(r)) for r in chain), False
    )
    assert status == 429 and headers == {"retry-after": "13"}
    assert json.loads(body)["type"] == "error"
    _, _, chat = all_cooling(DIALECTS["openai_chat"], 0.1, False)
    assert "every key" in json.loads(chat)["error"]["message"]


INVALID_KEY = json.dumps(
    {"error": {"message": "Incorrect API key provided: sk-…abcd.", "type": "invalid_request_error",
     "param": None, "code": "invalid_api_key"}}
).encode()  # fmt: skip
FORBIDDEN_MODEL = json.dumps(
    {"error": {"message": "key not allowed to access model. This key can only access "
     "models=['gpt-5']. Tried to access gpt-x", "type": "key_model_access_denied",
     "param": "model", "code": "401"}}
).encode()  # fmt: skip


def test_only_the_keys_own_fault_revokes_a_key_of_a_pool_and_one_per_request() -> None:
    link = chain_for(ALONE, "c")[0]
    revoke = key_verdict(link, 401, INVALID_KEY, revoked_already=False)
    assert revoke is not None and revoke.action is KeyAction.REVOKE
    assert revoke.detail(401, 3600) == "HTTP 401 invalid_api_key, revoked for 3600 s"
    again = key_verdict(link, 401, INVALID_KEY, revoked_already=True)
    assert again is not None and again.action is KeyAction.PASS_ON
    assert again.detail(401, 3600) == "HTTP 401 invalid_api_key, not revoked: one key per request"
    for body in (FORBIDDEN_MODEL, b'{"error":{"message":"who knows","code":403}}', b"<html>"):
        answer = key_verdict(link, 403, body, revoked_already=False)
        assert answer is not None and answer.action is KeyAction.ANSWER
    # Not a key of a pool, or nothing about the key: the fallback rules apply.
    assert key_verdict(BACKUP, 401, INVALID_KEY, revoked_already=False) is None
    assert key_verdict(link, 429, b'{"error":{"message":"slow down"}}', False) is None
    assert key_verdict(link, 400, b'{"error":{"message":"bad tools"}}', False) is None
    assert reads_error(link, 401) and reads_error(link, 400) and reads_error(link, 429)
    assert not reads_error(link, 500) and not reads_error(link, 200)
    assert not reads_error(BACKUP, 401)


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
    from addon.plan.flow_plan import FlowPlan
    from addon.shell.ledger_book import ledger_key

    for link in chain_for(ALONE, "opening:ledger"):
        plan = FlowPlan(link, DIALECTS["openai_chat"], DIALECTS["openai_chat"])
        assert ledger_key(plan, 0.0).key == link.key_env
    plain = FlowPlan(BACKUP, DIALECTS["openai_chat"], DIALECTS["anthropic"])
    assert ledger_key(plain, 0.0).key == "KEY_BACKUP"


def test_every_key_revoked_is_a_503_without_retry_after() -> None:
    status, headers, body = all_cooling(DIALECTS["openai_chat"], 3595, True)
    assert status == 503 and headers == {}
    assert "refused" in json.loads(body)["error"]["message"]


@pytest.mark.parametrize("value", [0, -5, True, "60"])
def test_bridge_key_recheck_takes_whole_seconds_of_at_least_one(value: object) -> None:
    from addon.config.options import DEFAULTS, ConfigError, parse_settings

    assert DEFAULTS["bridge_key_recheck"] == 3600
    assert (
        parse_settings(lambda n: {"bridge_key_recheck": 2}.get(n, DEFAULTS[n]), {}).key_recheck
        == 2.0
    )
    with pytest.raises(ConfigError, match="bridge_key_recheck takes a whole number of seconds"):
        parse_settings(lambda n: {"bridge_key_recheck": value}.get(n, DEFAULTS[n]), {})
