"""Limits per client key in the client keys file (``addon.config.client_keys``) and a route's
``price`` and ``reserve_max_output`` (``addon.config.routes_file``): every bad input is one
error naming the file, the line, the client and the key, never a key."""

from __future__ import annotations

import pytest

from addon.config.client_keys import ClientKeysError, Limits, parse_client_keys
from addon.config.routes import DEFAULT_RESERVE_MAX_OUTPUT, TokenPrice
from addon.config.routes_file import read_routes

ALICE = "sk-alice-0123456789abcdef"
BOB = "sk-bob-fedcba9876543210"
ENV = {"BOB_KEY": BOB}
WHERE = "bridge_client_keys: keys.toml"

ISSUE_FILE = f"""\
alice = {{ key = "{ALICE}", rpm = 60, tpm = 200000, max_parallel = 4, budget_usd = 20.0, budget_period = "month" }}
bob = {{ env = "BOB_KEY", budget_usd = 5.0, budget_period = "day" }}
carol = "sk-carol-0123456789abcdef"
[defaults]   # for every key that does not set its own
rpm = 120
"""


def test_the_issues_example_reads_as_written() -> None:
    keys = parse_client_keys(ISSUE_FILE, ENV, WHERE)
    assert keys.names == ("alice", "bob", "carol")
    assert keys.match(ALICE) == "alice" and keys.match(BOB) == "bob"
    assert keys.limits_of("alice") == Limits(60, 200000, 4, 20.0, "month")
    assert keys.limits_of("bob") == Limits(rpm=120, budget_usd=5.0, budget_period="day")
    assert keys.limits_of("carol") == Limits(rpm=120)
    assert not keys.limits_of("nobody")


def test_a_bare_string_without_defaults_has_no_limit() -> None:
    keys = parse_client_keys(f'alice = "{ALICE}"\n', {}, WHERE)
    assert keys.limits == () and not keys.limits_of("alice")


def test_defaults_give_a_budget_period_a_client_may_use() -> None:
    text = f'alice = {{ key = "{ALICE}", budget_usd = 2 }}\n[defaults]\nbudget_period = "week"\n'
    keys = parse_client_keys(text, {}, WHERE)
    assert keys.limits_of("alice") == Limits(budget_usd=2.0, budget_period="week")


def test_a_client_written_as_a_header_table_is_read() -> None:
    text = f'[alice]\nkey = "{ALICE}"\nmax_parallel = 2\n'
    assert parse_client_keys(text, {}, WHERE).limits_of("alice") == Limits(max_parallel=2)


BAD = [
    pytest.param(
        ISSUE_FILE + 'dave = "sk-dave-0123456789abcdef"\n',
        "line 6: [defaults] holds only limits",
        id="client-after-defaults",
    ),
    pytest.param(
        f'alice = "{ALICE}"\ndefaults = "sk-dflt-0123456789abcdef"\n',
        "line 2: no client may be called 'defaults'",
        id="client-called-defaults",
    ),
    pytest.param(
        f'alice = "{ALICE}"\ndefaults = {{ key = "sk-dflt-0123456789abcdef" }}\n',
        "line 2: [defaults] holds only limits (rpm, tpm, max_parallel, budget_usd, "
        "budget_period), not 'key'",
        id="defaults-with-a-key",
    ),
    pytest.param(
        f'alice = "{ALICE}"\n[defaults]\nrpm = 0\n', "[defaults]: rpm must be", id="defaults-zero"
    ),
    pytest.param(
        f'\nalice = {{ key = "{ALICE}", rpm = 0 }}',
        "line 2: client 'alice': rpm must be a whole number of at least 1",
        id="rpm-zero",
    ),
    pytest.param(f'alice = {{ key = "{ALICE}", tpm = -5 }}', "tpm must be", id="tpm-negative"),
    pytest.param(f'alice = {{ key = "{ALICE}", tpm = 1.5 }}', "tpm must be", id="tpm-float"),
    pytest.param(
        f'alice = {{ key = "{ALICE}", max_parallel = true }}', "max_parallel must", id="bool"
    ),
    pytest.param(
        f'alice = {{ key = "{ALICE}", budget_usd = -1, budget_period = "day" }}',
        "budget_usd must be a number of US dollars from 0",
        id="budget-negative",
    ),
    pytest.param(
        f'alice = {{ key = "{ALICE}", budget_usd = "5", budget_period = "day" }}',
        "budget_usd must be",
        id="budget-text",
    ),
    pytest.param(
        f'alice = {{ key = "{ALICE}", budget_usd = inf, budget_period = "day" }}',
        "budget_usd must be",
        id="budget-inf",
    ),
    pytest.param(
        f'alice = {{ key = "{ALICE}", budget_usd = 5, budget_period = "year" }}',
        "budget_period must be one of day, week, month, total (got 'year')",
        id="period-unknown",
    ),
    pytest.param(
        f'alice = {{ key = "{ALICE}", budget_usd = 5 }}',
        "client 'alice': budget_usd needs budget_period",
        id="budget-without-period",
    ),
    pytest.param(
        f'alice = {{ key = "{ALICE}", budget_period = "day" }}',
        "budget_period without budget_usd",
        id="period-without-budget",
    ),
    pytest.param(
        f'alice = {{ key = "{ALICE}", rpx = 5 }}', "unknown key 'rpx'", id="unknown-limit"
    ),
    pytest.param(
        f'alice = {{ key = "{ALICE}", env = "BOB_KEY" }}', "one of them", id="key-and-env"
    ),
    pytest.param("alice = { rpm = 5 }", "one of them", id="neither-key-nor-env"),
    pytest.param("alice = { key = 5 }", "key must be a non-empty string", id="key-number"),
    pytest.param('alice = { key = "short" }', "shorter than 16", id="key-short"),
    pytest.param("alice = { env = 5 }", "env must be a variable's name", id="env-number"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_limit_is_one_error_naming_the_line_client_and_key(text: str, message: str) -> None:
    with pytest.raises(ClientKeysError) as err:
        parse_client_keys(text, ENV, WHERE)
    said = str(err.value)
    assert said.startswith(WHERE + ": ")
    assert message in said
    for key in (ALICE, BOB, "sk-dave-0123456789abcdef", "sk-dflt-0123456789abcdef"):
        assert key not in said


# --------------------------------------------------------------------------- routes


def test_a_routes_price_and_reserve_max_output() -> None:
    (route,) = read_routes(
        {"routes": [{"name": "a", "price": {"input": 1, "output": 2}, "reserve_max_output": 64}]}
    )
    assert route.price == TokenPrice(1.0, 2.0) and route.reserve_max_output == 64
    # cache prices not given are the input's
    assert route.price.usd(1_000_000, 1_000_000, 0, 500_000) == pytest.approx(3.0)
    (plain,) = read_routes({"routes": [{"name": "b"}]})
    assert plain.price is None and plain.reserve_max_output == DEFAULT_RESERVE_MAX_OUTPUT == 4096


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"price": {"input": 1}}, "routes[0].price.output: Field required (in route 'a')"),
        ({"price": {"input": 1, "output": -2}}, "price.output: Input should be greater than"),
        ({"price": {"input": "x", "output": 2}}, "price.input: Input should be a valid number"),
        ({"price": {"input": 1, "output": 2, "x": 1}}, "price.x: unknown key (allowed: input"),
        ({"price": 5}, "price: Input should be a valid dictionary (e.g. {input = 0.5"),
        ({"reserve_max_output": 0}, "reserve_max_output: Input should be greater than"),
        ({"reserve_max_output": "5"}, "reserve_max_output: Input should be a valid integer"),
        ({"reserve_max_output": 1.5}, "reserve_max_output: Input should be a valid integer"),
    ],
)
def test_a_bad_price_or_reserve_is_one_error_naming_the_key(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as err:
        read_routes({"routes": [{"name": "a", **fields}]})
    assert message in str(err.value)


def test_a_route_built_in_code_checks_price_and_reserve_too() -> None:
    from addon.config.routes import Route

    with pytest.raises(ValueError, match="reserve_max_output"):
        Route("a", reserve_max_output=0)
    with pytest.raises(ValueError, match=r"price\.input"):
        TokenPrice(-1.0, 1.0)
