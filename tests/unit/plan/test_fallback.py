"""Fallbacks decided sans-IO (issue 29): which answers fall back, ``Retry-After``, the cooldown
table on an injected clock, the next route of a chain, the line naming what was tried, the
client's error when nothing answered; and the routes file's checks of ``fallback``,
``timeout`` and ``cooldown``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from addon.config.routes import Route, check_fallbacks, fallback_chain
from addon.config.routes_file import RoutesError, load_routes
from addon.dialects import DIALECTS
from addon.plan.fallback import (
    MAX_RETRY_AFTER,
    Failure,
    MemoryCooldowns,
    Reason,
    all_failed,
    cooldown_after,
    falls_back,
    first_route,
    next_route,
    retry_after,
    tried_line,
)
from addon.plan.values import tenths

NOW = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


A = Route(name="a", fallback=("b", "c"), cooldown=10)
B = Route(name="b", upstream="anthropic", upstream_url="https://b.example", api_key_env="KB")
C = Route(name="c", upstream="gemini", upstream_url="https://c.example", api_key_env="KC")
CHAIN = fallback_chain(A, (A, B, C))


# ----------------------------------------------------------------------------- statuses


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 529, 599])
def test_429_and_5xx_fall_back(status: int) -> None:
    assert falls_back(status)


@pytest.mark.parametrize("status", [200, 201, 204, 301, 400, 401, 403, 404, 413, 422, 428, 600])
def test_answers_and_the_requests_own_faults_do_not(status: int) -> None:
    assert not falls_back(status)


@given(st.integers(min_value=0, max_value=1000))
def test_falls_back_is_exactly_429_and_5xx(status: int) -> None:
    assert falls_back(status) == (status == 429 or 500 <= status < 600)


# ----------------------------------------------------------------------------- Retry-After


@pytest.mark.parametrize(
    ("value", "wait"),
    [
        ("30", 30.0),
        (" 0 ", 0.0),
        ("99999999", MAX_RETRY_AFTER),
        (format_datetime(datetime.fromtimestamp(NOW + 45, UTC), usegmt=True), 45.0),
        (format_datetime(datetime.fromtimestamp(NOW - 45, UTC), usegmt=True), 0.0),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("1.5", None),
        ("٣٠", None),  # digits, but not ASCII ones
        ("9" * 100, None),
    ],
)
def test_retry_after_reads_seconds_and_http_dates_bounded(
    value: str | None, wait: float | None
) -> None:
    assert retry_after(value, NOW) == wait


@given(st.text(max_size=80))
def test_retry_after_never_raises_and_stays_in_bounds(value: str) -> None:
    got = retry_after(value, NOW)
    assert got is None or 0.0 <= got <= MAX_RETRY_AFTER


@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_an_http_date_waits_until_that_second_within_bounds(offset: int) -> None:
    date = format_datetime(datetime.fromtimestamp(NOW + offset, UTC), usegmt=True)
    assert retry_after(date, NOW) == min(max(float(offset), 0.0), MAX_RETRY_AFTER)
    assert retry_after(str(max(offset, 0)), NOW) == min(float(max(offset, 0)), MAX_RETRY_AFTER)


def test_cooldown_after_prefers_retry_after_then_the_routes_own() -> None:
    assert cooldown_after(A, 429, 12.0) == 12.0
    assert cooldown_after(A, 429, None) == 10.0
    assert cooldown_after(A, 503, None) == 10.0
    assert cooldown_after(A, None, None) == 10.0  # connection refused, timeout
    assert cooldown_after(A, 500, None) is None  # may be this request's own trouble
    assert cooldown_after(A, 500, 7.0) == 7.0


# ----------------------------------------------------------------------------- cooldowns


def test_a_route_cools_down_until_its_time_is_up() -> None:
    clock = Clock()
    table = MemoryCooldowns(clock)
    table.cool("a", 30)
    assert table.cooling("a") and table.left("a") == 30
    clock.now += 29.5
    assert table.cooling("a")
    clock.now += 0.5
    assert not table.cooling("a") and table.left("a") == 0
    table.cool("a", 0)
    assert not table.cooling("a")


def test_a_shorter_cooldown_never_shortens_a_longer_one() -> None:
    clock = Clock()
    table = MemoryCooldowns(clock)
    table.cool("a", 60)
    table.cool("a", 5)
    assert table.left("a") == 60


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 100)), max_size=20))
def test_cooling_routes_are_skipped_in_chain_order(cools: list[tuple[str, float]]) -> None:
    table = MemoryCooldowns(Clock())
    for name, seconds in cools:
        table.cool(name, seconds)
    route, skipped = first_route(CHAIN, table)
    cooling = [r for r in CHAIN if table.cooling(r.name)]
    if len(cooling) < len(CHAIN):
        assert route is next(r for r in CHAIN if not table.cooling(r.name))
        assert skipped == tuple(CHAIN[: CHAIN.index(route)])
    else:  # all cooling: the one that frees first
        assert table.left(route.name) == min(table.left(r.name) for r in CHAIN)
        assert set(skipped) == set(CHAIN) - {route}
    nxt, passed = next_route(CHAIN, [route.name], table)
    later = [r for r in CHAIN if r is not route and not table.cooling(r.name)]
    assert nxt is (later[0] if later else None)
    # Every route passed over before it is named: none is left out of the tried line.
    end = CHAIN.index(nxt) if nxt is not None else len(CHAIN)
    assert passed == tuple(r for r in CHAIN[:end] if r is not route)


def test_next_route_keeps_chain_order_and_skips_what_was_tried() -> None:
    table = MemoryCooldowns(Clock())
    assert next_route(CHAIN, ["a"], table) == (B, ())
    assert next_route(CHAIN, ["a", "b"], table) == (C, ())
    assert next_route(CHAIN, ["a", "b", "c"], table) == (None, ())
    table.cool("b", 5)
    assert next_route(CHAIN, ["a"], table) == (C, (B,))
    table.cool("c", 5)
    assert next_route(CHAIN, ["a"], table) == (None, (B, C))


# ----------------------------------------------------------------------------- reports


def test_the_tried_line_names_each_route_and_why() -> None:
    failures = (
        Failure("primary", Reason.UNREACHABLE, "connection refused", 30.0),
        Failure("second", Reason.ANSWERED_FAILURE, "HTTP 429", 12.4),
        Failure("third", Reason.ANSWERED_FAILURE, "HTTP 500"),
        Failure("fourth", Reason.SKIPPED, cooling=8.0),
        Failure("fifth", Reason.SKIPPED, cooling=0.43),
        Failure("sixth", Reason.SKIPPED, cooling=0.01),
    )
    assert tried_line(failures) == (
        "primary (connection refused, cooling down 30 s), second (HTTP 429, cooling down "
        "12.4 s), third (HTTP 500), fourth (skipped, cooling down 8 s), fifth (skipped, "
        "cooling down 0.5 s), sixth (skipped, cooling down 0.1 s)"
    )


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(30.0, "30"), (29.97, "30"), (29.91, "30"), (29.9, "29.9"), (0.4, "0.4"), (0.43, "0.5"),
     (0.01, "0.1"), (0.0, "0"), (3600.0, "3600")],
)  # fmt: skip
def test_a_cooldown_is_said_to_a_tenth_of_a_second_never_0_while_it_lasts(
    seconds: float, said: str
) -> None:
    assert tenths(seconds) == said


@pytest.mark.parametrize(
    ("client", "reason", "why", "status"),
    [
        ("openai_chat", Reason.UNREACHABLE, "connection refused", 502),
        ("anthropic", Reason.TIMED_OUT, "timed out before the first byte", 504),
        ("gemini", Reason.TIMED_OUT, "connect timed out", 504),
        ("openai_responses", Reason.UNREACHABLE, "connection failed (No route to host)", 502),
    ],
)
def test_nothing_reachable_is_a_502_or_504_in_the_clients_dialect(
    client: str, reason: Reason, why: str, status: int
) -> None:
    got, body = all_failed(DIALECTS[client], (Failure("a", reason, why, 30.0),))
    assert got == status
    data = json.loads(body)
    text = json.dumps(data)
    assert "tried: a (" in text and why in text
    if client == "anthropic":
        assert data["type"] == "error"
    assert "error" in data


# ----------------------------------------------------------------------------- routes file


def load(tmp_path: Path, text: str) -> tuple[Route, ...]:
    p = tmp_path / "routes.toml"
    p.write_text(text)
    return load_routes(p)


ROUTE_B = '[[routes]]\nname = "b"\nupstream = "anthropic"\n'


def test_a_routes_file_with_fallback_timeout_and_cooldown(tmp_path: Path) -> None:
    routes = load(
        tmp_path,
        '[[routes]]\nname = "a"\nfallback = ["b"]\ntimeout = 15\ncooldown = 0.5\n' + ROUTE_B,
    )
    assert routes[0].fallback == ("b",) and routes[0].timeout == 15.0
    assert routes[0].cooldown == 0.5 and routes[1].timeout == 60.0
    assert fallback_chain(routes[0], routes) == routes


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '[[routes]]\nname = "a"\nfallback = ["nope"]\n',
            "route 'a': fallback: no route is named 'nope'",
        ),
        (
            '[[routes]]\nname = "a"\nfallback = ["a"]\n',
            "route 'a': fallback: a route cannot fall back to itself",
        ),
        (
            '[[routes]]\nname = "a"\nfallback = ["b"]\n[[routes]]\nname = "b"\nfallback = ["a"]\n',
            "route 'a': fallback: a cycle (a -> b -> a)",
        ),
        (
            '[[routes]]\nname = "a"\nfallback = ["b"]\n[[routes]]\nname = "b"\nfallback = ["c"]\n'
            '[[routes]]\nname = "c"\nfallback = ["b"]\n',
            "a cycle (a -> b -> c -> b)",
        ),
        (
            '[[routes]]\nname = "a"\nfallback = ["b"]\n[[routes]]\nname = "b"\n'
            'client = "anthropic"\npath = "*/v1/messages"\n',
            "route 'a': fallback: route 'b' takes anthropic clients, this route openai_chat",
        ),
        (
            '[[routes]]\nname = "a"\nfallback = ["k"]\n[[routes]]\nname = "k"\n'
            'upstream = "kiro"\ntoken_file = "/t.json"\n',
            "route 'k' reads a Kiro token_file",
        ),
        ('[[routes]]\nname = "a"\nfallback = ["b", "b"]\n' + ROUTE_B, "names a route twice: b"),
        ('[[routes]]\nname = "a"\nfallback = [""]\n', "route names must be non-empty strings"),
        ('[[routes]]\nname = "a"\nfallback = 3\n', "routes[0].fallback: must be a list"),
        ('[[routes]]\nname = "a"\ntimeout = 0\n', "routes[0].timeout"),
        ('[[routes]]\nname = "a"\ntimeout = -1\n', "routes[0].timeout"),
        ('[[routes]]\nname = "a"\ntimeout = "60"\n', "routes[0].timeout"),
        ('[[routes]]\nname = "a"\ntimeout = true\n', "routes[0].timeout"),
        ('[[routes]]\nname = "a"\ntimeout = nan\n', "routes[0].timeout"),
        ('[[routes]]\nname = "a"\ntimeout = 1e9\n', "routes[0].timeout"),
        ('[[routes]]\nname = "a"\ncooldown = -1\n', "routes[0].cooldown"),
        ('[[routes]]\nname = "a"\ncooldown = inf\n', "routes[0].cooldown"),
    ],
)
def test_a_bad_fallback_is_refused_at_start_with_one_line(
    tmp_path: Path, text: str, said: str
) -> None:
    with pytest.raises(RoutesError) as e:
        load(tmp_path, text)
    message = str(e.value)
    assert "\n" not in message and message.startswith("routes file '")
    assert said in message


def test_routes_made_in_code_are_checked_the_same_way() -> None:
    with pytest.raises(ValueError, match="timeout: must be more than 0"):
        Route(name="a", timeout=0)
    with pytest.raises(ValueError, match="cooldown"):
        Route(name="a", cooldown=-1)
    with pytest.raises(ValueError, match="no route is named 'z'"):
        check_fallbacks((Route(name="a", fallback=("z",)),))
    check_fallbacks((A, B, C))  # a good chain passes
