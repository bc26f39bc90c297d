"""The metrics' label values are bounded by the configuration (``addon.report.metrics_labels``): a
client's 5,000-character model is ``other``, a request without a client key ``anonymous``, a
route the routes file does not name ``other``; what a flow counts follows the ledger's
booking; ``bridge_metrics`` is read as HOST:PORT."""

from __future__ import annotations

from decimal import Decimal

import pytest

from addon.config.options import ConfigError, parse_metrics_address
from addon.config.routes import Route
from addon.plan.fallback import Failure, Reason
from addon.plan.key_pool import revoked_mark
from addon.report.metrics_labels import (
    ANONYMOUS,
    CAPTION,
    OTHER,
    Booking,
    LabelBounds,
    bridge_counters,
    call_counts,
    flow_counts,
    key_pool_states,
    route_models,
)
from addon.report.outcome import FlowReport
from addon.stores.ledger import LedgerKey, Tokens

KEYED = Route(name="keyed", model=("gpt-4o", "claude-*"), model_map=(("fast", "gpt-4o-mini"),))
POOL = Route(name="pool", api_key_env=("KEY_A", "KEY_B", "KEY_C"))
BOUNDS = LabelBounds([KEYED, POOL], models=("gpt-5", "sonnet-*"))


def test_a_5000_character_model_is_other() -> None:
    assert BOUNDS.model("keyed", "m" * 5000) == OTHER
    assert BOUNDS.model("keyed", "claude-" + "x" * 5000) == OTHER  # a glob names no model


def test_models_the_route_or_bridge_models_name_are_kept() -> None:
    assert route_models(KEYED) == {"gpt-4o", "fast", "gpt-4o-mini"}
    assert BOUNDS.model("keyed", "gpt-4o-mini") == "gpt-4o-mini"
    assert BOUNDS.model("keyed", "gpt-5") == "gpt-5"  # bridge_models
    assert BOUNDS.model("pool", "gpt-4o") == OTHER  # another route's name
    assert BOUNDS.model("keyed", None) == OTHER
    assert BOUNDS.model("unknown", "gpt-4o") == OTHER


def test_an_unknown_client_is_anonymous_and_a_route_outside_the_file_other() -> None:
    assert BOUNDS.client(None) == ANONYMOUS and BOUNDS.client("") == ANONYMOUS
    assert BOUNDS.client("alice") == "alice"
    assert BOUNDS.route("pool#KEY_A") == "pool"
    assert BOUNDS.route("x" * 5000) == OTHER
    assert BOUNDS.route("nope#KEY_A") == OTHER


def _booking(model: str, client: str) -> Booking:
    key = LedgerKey("2025-01-01", "keyed", model, "", client)
    return Booking(key, Tokens(1, 20, 100, 5, 30, 10))


def test_an_answered_flow_counts_the_ledgers_tokens_under_bounded_labels() -> None:
    report = FlowReport("keyed", client="openai_chat", upstream="openai_chat", status=200)
    long = "m" * 5000
    counts = flow_counts(
        BOUNDS,
        report,
        model=long,
        client="",
        booking=_booking(long, ""),
        cost=Decimal("0.5"),
    )
    assert (counts.route, counts.client, counts.model) == ("keyed", ANONYMOUS, OTHER)
    assert dict(counts.tokens) == {
        "input": 20,
        "output": 30,
        "cache_read": 100,
        "cache_write": 5,
        "reasoning": 10,
    }
    assert counts.cost == Decimal("0.5") and counts.outcome == "rewritten"
    assert counts.upstream_errors == ()


def test_a_flow_the_ledger_does_not_book_counts_no_tokens_and_its_error() -> None:
    report = FlowReport("keyed", client="openai_chat", upstream="openai_chat", status=500)
    counts = flow_counts(
        BOUNDS, report, model="gpt-4o", client="bob", booking=None, cost=Decimal(1)
    )
    assert counts.tokens == () and counts.cost is None
    assert counts.upstream_errors == (("keyed", "500"),)
    assert counts.client == "bob" and counts.model == "gpt-4o"


def test_a_chains_failures_are_fallbacks_and_the_relayed_last_error_counts_once() -> None:
    failures = [
        Failure("pool#KEY_A", Reason.ANSWERED_FAILURE, "HTTP 429", 30.0),
        Failure("pool#KEY_B", Reason.UNREACHABLE, "connection refused"),
        Failure("pool#KEY_C", Reason.SKIPPED),
        Failure("pool#KEY_A", Reason.KEY_REFUSED, "HTTP 401 invalid_api_key, revoked for 3600 s"),
    ]
    report = FlowReport("pool", status=401)
    counts = flow_counts(
        BOUNDS,
        report,
        model=None,
        client="alice",
        booking=None,
        cost=None,
        failures=failures,
        served="pool#KEY_A",
    )
    assert counts.upstream_errors == (
        ("pool", "429"),
        ("pool", "unreachable"),
        ("pool", "401"),
    )
    assert counts.fallbacks == (
        ("pool", "answered_failure"),
        ("pool", "unreachable"),
        ("pool", "skipped"),
        ("pool", "key_refused"),
    )
    # No route answered: the 502 is the bridge's own, not an upstream's.
    gone = flow_counts(
        BOUNDS,
        FlowReport("pool", status=502),
        model=None,
        client=None,
        booking=None,
        cost=None,
        failures=failures[1:2],
        served=None,
    )
    assert gone.upstream_errors == (("pool", "unreachable"),)
    rejected = FlowReport("keyed", outcome="rejected", status=400)
    by_bridge = flow_counts(BOUNDS, rejected, model=None, client=None, booking=None, cost=None)
    assert by_bridge.upstream_errors == () and by_bridge.outcome == "rejected"


def test_key_pool_states_from_the_cooldowns() -> None:
    cooling = {"pool#KEY_A", revoked_mark("pool#KEY_A"), "pool#KEY_B"}
    found = key_pool_states([KEYED, POOL], cooling.__contains__)
    assert found == [("pool", "ready", 1), ("pool", "cooling", 1), ("pool", "revoked", 1)]


def test_bridge_counters_read_bridge_stats() -> None:
    counters = {"repairs": 3, "loop guard answers": 2, "not rewritten": 1}
    got = dict(bridge_counters({**counters, "answers cut by the upstream": 4}))
    assert got == {
        "repairs": 3,
        "restores": 0,
        "loop_guard_stops": 2,
        "not_rewritten": 1,
        "answers_cut": 4,
    }


@pytest.mark.parametrize(
    ("value", "host", "port", "loopback"),
    [
        ("127.0.0.1:9464", "127.0.0.1", 9464, True),
        ("localhost:0", "localhost", 0, True),
        ("[::1]:9464", "::1", 9464, True),
        ("0.0.0.0:9464", "0.0.0.0", 9464, False),
        ("metrics.internal:9100", "metrics.internal", 9100, False),
    ],
)
def test_bridge_metrics_is_host_and_port(value: str, host: str, port: int, loopback: bool) -> None:
    address = parse_metrics_address(value)
    assert address is not None
    assert (address.host, address.port, address.loopback) == (host, port, loopback)


@pytest.mark.parametrize("value", ["9464", "127.0.0.1", ":9464", "h:99999", "::1:9464", "a b:1"])
def test_a_bad_bridge_metrics_names_the_option(value: str) -> None:
    with pytest.raises(ConfigError, match="bridge_metrics"):
        parse_metrics_address(value)
    assert parse_metrics_address("") is None


def test_a_caption_call_counts_under_its_vision_route_with_bounded_labels() -> None:
    """A caption call (``call_counts``): one request with the outcome ``caption``, the
    ledger's tokens and cost, under the vision route; its model bounded as a flow's."""
    eyes = Route(name="eyes", model_map=(("*", "looker-1"),))
    bounds = LabelBounds([KEYED, eyes])
    key = LedgerKey("2026-12-06", "eyes", "looker-1", "", "alice")
    booked = Booking(key, Tokens(1, 85, 0, 0, 9, 0))
    counts = call_counts(bounds, booked, "openai_chat", Decimal("0.25"))
    assert (counts.route, counts.client, counts.model) == ("eyes", "alice", "looker-1")
    assert (counts.upstream, counts.outcome, counts.cost) == (
        "openai_chat",
        CAPTION,
        Decimal("0.25"),
    )
    assert dict(counts.tokens) == {
        "input": 85,
        "output": 9,
        "cache_read": 0,
        "cache_write": 0,
        "reasoning": 0,
    }
    stray = Booking(LedgerKey("2026-12-06", "gone", "m" * 5000, "", None), Tokens(1))
    other = call_counts(bounds, stray, "", None)
    assert (other.route, other.client, other.model, other.upstream) == (
        OTHER,
        ANONYMOUS,
        OTHER,
        OTHER,
    )
