"""What a failed attempt of a chain does, decided sans-IO (issue 41, point 2): given the
attempt's facts (the link, its chain, the status, the headers as a map, the error's body, what
the key's probe said, the time), the entries of the cooldowns table that cool and for how
long, whether the key is revoked and rechecked, whether the client gets the answer or the next
link is tried, the tried line's failure and the log line; the recheck of a revoked key; a link
passed over; the client's answer when every key is out; what the flow says of its answer.
Each rule as a row of a table: the shell (``addon.shell.outbound.attempts``) only applies."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from addon.config.routes import Route, fallback_chain
from addon.dialects import DIALECTS
from addon.plan.failed_attempt import (
    Attempted,
    Cooling,
    Probed,
    Step,
    answered,
    empty_body,
    every_key_out,
    is_error,
    no_answer,
    rechecked,
    skipped,
    upstream_cooling,
)
from addon.plan.fallback import (
    Failure,
    Level,
    MemoryCooldowns,
    NoAnswer,
    Reason,
    told,
)
from addon.plan.flow_plan import FlowPlan
from addon.plan.key_pool import links
from addon.plan.key_probe import PROBED_FOR, RECHECK_HOLD, Probe, ProbeResult
from addon.report.outcome import FlowReport, Outcome

NOW = 1_800_000_000.0
RECHECK = 3600.0
PLAIN = Route(name="a", cooldown=10, fallback=("b",))
B = Route(name="b", upstream="anthropic", api_key_env="KB")
POOL = Route(name="pool", api_key_env=("KEY_A", "KEY_B"), cooldown=30, fallback=("b",))
CHAIN = fallback_chain(PLAIN, (PLAIN, B))
LINKS = links(fallback_chain(POOL, (POOL, B)), b"s" * 32, "opening:x")
KEY = LINKS[0]
OTHER = LINKS[1]
PROBE = Probe("/v1/models", "authorization")


def link(route: Route) -> str:
    return f"pool#{route.key_env}"


def body(**error: object) -> bytes:
    return json.dumps({"error": error}).encode()


INVALID = body(message="Incorrect API key provided", code="invalid_api_key")
NO_MODEL = body(message="no access to model `x`", code="model_not_found")
AMBIGUOUS = json.dumps({"error": "unauthorized"}).encode()


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


# ----------------------------------------------------------------------------- which answers


@pytest.mark.parametrize(
    ("route", "status", "error"),
    [
        (PLAIN, 200, False),
        (PLAIN, 400, False),
        (PLAIN, 401, False),
        (PLAIN, 429, True),
        (PLAIN, 500, True),
        (PLAIN, 503, True),
        (KEY, 200, False),
        (KEY, 400, True),
        (KEY, 401, True),
        (KEY, 402, True),
        (KEY, 403, True),
        (KEY, 404, False),
        (KEY, 429, True),
        (KEY, 502, True),
    ],
)
def test_which_answers_are_errors_read_whole_and_judged(
    route: Route, status: int, error: bool
) -> None:
    assert is_error(route, status) is error


# ----------------------------------------------------------------------------- an error answer


@dataclass(frozen=True)
class Row:
    """One row: the facts in, the verdict out (``line``: a piece of the log line's text)."""

    facts: Attempted
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...]
    probed: Probed | None
    step: Step
    cool: tuple[Cooling, ...]
    failure: Failure | None
    recheck: bool
    level: Level | None
    line: str


def revoked(seconds: float, route: Route = KEY) -> tuple[Cooling, ...]:
    return (Cooling(link(route), seconds), Cooling(f"revoked:{link(route)}", seconds))


def refused(revoke: bool, detail: str) -> Failure:
    return Failure(link(KEY), Reason.KEY_REFUSED, detail, revoked=revoke)


def on(route: Route, chain: tuple[Route, ...], **facts: object) -> Attempted:
    return Attempted(route, chain, recheck=RECHECK, **facts)  # type: ignore[arg-type]


ROWS = {
    "a 503 cools the route for its cooldown": Row(
        on(PLAIN, CHAIN), 503, b"", (), None, Step.NEXT, (Cooling("a", 10),),
        Failure("a", Reason.ANSWERED_FAILURE, "HTTP 503", 10), False, Level.INFO,
        "cursor-bridge [a]: upstream answered HTTP 503: falling back (cooling down 10 s)",
    ),
    "a 429's Retry-After is the cooldown": Row(
        on(PLAIN, CHAIN), 429, b"", (("retry-after", "45"),), None, Step.NEXT,
        (Cooling("a", 45),), Failure("a", Reason.ANSWERED_FAILURE, "HTTP 429", 45), False,
        Level.INFO, "HTTP 429: falling back (cooling down 45 s)",
    ),
    "a 500 without Retry-After falls back, nothing cools": Row(
        on(PLAIN, CHAIN), 500, b"", (), None, Step.NEXT, (),
        Failure("a", Reason.ANSWERED_FAILURE, "HTTP 500"), False, Level.INFO,
        "cursor-bridge [a]: upstream answered HTTP 500: falling back",
    ),
    "another 4xx of a route is the client's": Row(
        on(PLAIN, CHAIN), 400, b"", (), None, Step.ANSWER, (), None, False, None, "",
    ),
    "a key's own 429 cools that key only": Row(
        on(KEY, LINKS), 429, b"", (("retry-after", "20"),), None, Step.NEXT,
        (Cooling(link(KEY), 20),),
        Failure(link(KEY), Reason.ANSWERED_FAILURE, "HTTP 429", 20), False, Level.INFO, "",
    ),
    "a key's 503 cools every key of its route": Row(
        on(KEY, LINKS), 503, b"", (), None, Step.NEXT,
        (Cooling(link(LINKS[0]), 30), Cooling(link(LINKS[1]), 30)),
        Failure(link(KEY), Reason.ANSWERED_FAILURE, "HTTP 503", 30), False, Level.INFO, "",
    ),
    "an invalid key is revoked for bridge_key_recheck": Row(
        on(KEY, LINKS), 401, INVALID, (), None, Step.NEXT, revoked(RECHECK),
        refused(True, "HTTP 401 invalid_api_key, revoked for 3600 s"), False, Level.WARNING,
        f"cursor-bridge [pool]: key {KEY.key_env} refused (HTTP 401 invalid_api_key, OpenAI): "
        "left out for 3600 s by this process, then tried again (bridge_key_recheck)",
    ),
    "with a probe and a shared table: held for the recheck, by every worker": Row(
        on(KEY, LINKS, probe=PROBE, shared=True), 401, INVALID, (), None, Step.NEXT,
        revoked(RECHECK + RECHECK_HOLD),
        refused(True, "HTTP 401 invalid_api_key, revoked for 3600 s"), True, Level.WARNING,
        "left out for 3600 s by every worker, then probed with GET /v1/models",
    ),
    "one key revoked per request: the second is passed on": Row(
        on(KEY, LINKS, revoked_already=True), 401, INVALID, (), None, Step.NEXT, (),
        refused(False, "HTTP 401 invalid_api_key, not revoked: one key per request"), False,
        Level.WARNING, "not left out, this request left out a key already; trying the next",
    ),
    "a model the key may not use is the request's own": Row(
        on(KEY, LINKS), 403, NO_MODEL, (), None, Step.ANSWER, (), None, False, Level.INFO,
        f"key {KEY.key_env} answered HTTP 403, the request's own (model_not_found, OpenAI): "
        "answered, no key left out",
    ),
    "an ambiguous 401 without a probe is answered": Row(
        on(KEY, LINKS), 401, AMBIGUOUS, (), None, Step.ANSWER, (), None, False, Level.INFO,
        "HTTP 401, not known to be the key's fault: answered, no key left out",
    ),
    "an ambiguous 401 with a probe asks it first": Row(
        on(KEY, LINKS, probe=PROBE), 401, AMBIGUOUS, (), None, Step.PROBE, (), None, False,
        None, "",
    ),
    "its probe refused the key: revoked": Row(
        on(KEY, LINKS, probe=PROBE), 401, AMBIGUOUS, (), Probed(ProbeResult.REFUSED),
        Step.NEXT, revoked(RECHECK + RECHECK_HOLD),
        refused(True, "HTTP 401 and its probe GET /v1/models refused the key, revoked for 3600 s"),
        True, Level.WARNING, "refused (HTTP 401 and its probe GET /v1/models refused the key)",
    ),
    "its probe refused the key, one revoked already: passed on": Row(
        on(KEY, LINKS, probe=PROBE, revoked_already=True), 401, AMBIGUOUS, (),
        Probed(ProbeResult.REFUSED), Step.NEXT, (),
        refused(False, "HTTP 401 and its probe GET /v1/models refused the key, "
                "not revoked: one key per request"),
        False, Level.WARNING, "not left out",
    ),
    "its probe accepted the key: answered, the probe remembered": Row(
        on(KEY, LINKS, probe=PROBE), 401, AMBIGUOUS, (), Probed(ProbeResult.ACCEPTED),
        Step.ANSWER, (Cooling(f"probed:{link(KEY)}", PROBED_FOR),), None, False, Level.INFO,
        "not known to be the key's fault (its probe GET /v1/models accepted the key): answered",
    ),
    "its probe proved nothing: answered, the probe remembered": Row(
        on(KEY, LINKS, probe=PROBE), 403, AMBIGUOUS, (), Probed(ProbeResult.NO_PROOF),
        Step.ANSWER, (Cooling(f"probed:{link(KEY)}", PROBED_FOR),), None, False, Level.INFO,
        "(its probe GET /v1/models proves nothing)",
    ),
    "its probe was asked a moment ago: answered, not asked again": Row(
        on(KEY, LINKS, probe=PROBE), 401, AMBIGUOUS, (), Probed(None), Step.ANSWER, (), None,
        False, Level.INFO, "(its probe GET /v1/models was asked a moment ago)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_an_error_answer_is_judged_as_its_row_says(row: Row) -> None:
    got = answered(row.facts, row.status, dict(row.headers), row.body, NOW, row.probed)
    assert (got.step, got.cool, got.failure, got.recheck) == (
        row.step,
        row.cool,
        row.failure,
        row.recheck,
    )
    if row.level is None:
        assert got.line is None
    else:
        assert got.line is not None and got.line.level is row.level
        assert row.line in got.line.text


def test_a_retry_after_date_is_read_on_the_clock_given() -> None:
    now = datetime(2027, 1, 15, 8, 0, 0, tzinfo=UTC).timestamp()
    headers = {"retry-after": "Fri, 15 Jan 2027 08:00:30 GMT"}
    got = answered(on(PLAIN, CHAIN), 503, headers, b"", now)
    assert got.cool == (Cooling("a", 30),)


def test_no_line_or_key_value_reaches_the_verdict_of_a_key() -> None:
    """The words name the key's variable, never a value (the body's own text is not quoted)."""
    leaky = body(message="Incorrect API key provided: sk-live-SECRET", code="invalid_api_key")
    got = answered(on(KEY, LINKS), 401, {}, leaky, NOW)
    assert got.line is not None and got.failure is not None
    assert "SECRET" not in got.line.text + got.failure.describe()


# ----------------------------------------------------------------------------- no answer


NO_COOLDOWN = Route(name="c", cooldown=0)


@pytest.mark.parametrize(
    ("route", "chain", "opened", "cooled"),
    [
        (PLAIN, CHAIN, False, (Cooling("a", 10),)),
        (KEY, LINKS, False, (Cooling(link(LINKS[0]), 30), Cooling(link(LINKS[1]), 30))),
        (KEY, LINKS, True, (Cooling(link(KEY), 30),)),
        (NO_COOLDOWN, (NO_COOLDOWN,), False, (Cooling("c", 0),)),
    ],
    ids=["a route", "a key: every key of its route", "a key's body broke: that key", "no cooldown"],
)
def test_no_answer_cools_the_route_or_the_key(
    route: Route, chain: tuple[Route, ...], opened: bool, cooled: tuple[Cooling, ...]
) -> None:
    gone = NoAnswer(Reason.UNREACHABLE, "connection refused")
    got = no_answer(Attempted(route, chain), gone, opened)
    name = link(route) if route is KEY else route.name
    cooling = cooled[0].seconds
    assert (got.step, got.cool, got.recheck) == (Step.NEXT, cooled, False)
    assert got.failure == Failure(name, Reason.UNREACHABLE, "connection refused", cooling)
    assert got.line is not None and got.line.level is Level.INFO
    assert (
        got.line.text == f"cursor-bridge [{route.name}]: upstream connection refused: falling back"
    )


@pytest.mark.parametrize(
    ("cause", "reason"),
    [
        ("upstream_idle", Reason.TIMED_OUT),
        ("upstream_cut", Reason.UNREACHABLE),
        ("upstream_reset", Reason.UNREACHABLE),
    ],
)
def test_a_2xx_whose_body_ended_before_its_first_byte_is_no_answer(
    cause: str, reason: Reason
) -> None:
    gone = empty_body(200, cause)
    assert gone == NoAnswer(reason, f"HTTP 200, its body ended before its first byte ({cause})")
    got = no_answer(Attempted(KEY, LINKS), gone, True)
    assert got.cool == (Cooling(link(KEY), 30),) and got.failure is not None
    assert got.failure.reason is reason


def test_only_the_keys_of_the_failing_route_cool_together() -> None:
    assert upstream_cooling(LINKS, KEY, 5) == tuple(Cooling(link(r), 5) for r in LINKS[:2])
    assert upstream_cooling(LINKS, LINKS[2], 5) == (Cooling("b", 5),)


# ----------------------------------------------------------------------------- the recheck


@pytest.mark.parametrize(
    ("result", "cool", "clear", "level", "again", "words"),
    [
        (ProbeResult.REFUSED, revoked(60 + RECHECK_HOLD), (), Level.WARNING, 60.0,
         "still refused by its probe GET /v1/models: left out for 60 s more"),
        (ProbeResult.ACCEPTED, (), (link(KEY), f"revoked:{link(KEY)}"), Level.INFO, None,
         "accepted by its probe GET /v1/models: back in the pool"),
        (ProbeResult.NO_PROOF, (), (link(KEY), f"revoked:{link(KEY)}"), Level.INFO, None,
         "proves nothing: back in the pool, the next request that asks for it is its recheck"),
    ],
)  # fmt: skip
def test_a_revoked_keys_recheck_is_its_probe(
    result: ProbeResult,
    cool: tuple[Cooling, ...],
    clear: tuple[str, ...],
    level: Level,
    again: float | None,
    words: str,
) -> None:
    got = rechecked(KEY, PROBE, result, 60.0)
    assert (got.cool, got.clear, got.line.level, got.again) == (cool, clear, level, again)
    assert words in got.line.text and f"key {KEY.key_env}" in got.line.text


# ----------------------------------------------------------------------------- passed over


def test_a_link_passed_over_says_how_long_it_still_cools_or_that_it_was_revoked() -> None:
    clock = Clock()
    cooldowns = MemoryCooldowns(clock)
    cooldowns.cool("a", 12.34)
    cooldowns.cool(link(KEY), 100)
    cooldowns.cool(f"revoked:{link(KEY)}", 100)
    cooldowns.cool(link(OTHER), 7)
    assert skipped(PLAIN, cooldowns).describe() == "a (skipped, cooling down 12.4 s)"
    assert skipped(KEY, cooldowns).describe() == f"{link(KEY)} (revoked, tried again in 100 s)"
    assert skipped(OTHER, cooldowns).describe() == f"{link(OTHER)} (skipped, cooling down 7 s)"


@pytest.mark.parametrize(
    ("revoke", "status", "why", "headers"),
    [
        (False, 429, "every key cooling down", {"retry-after": "5"}),
        (True, 503, "every key refused", {}),
    ],
)
def test_every_key_out_is_the_clients_429_or_503_and_its_line(
    revoke: bool, status: int, why: str, headers: dict[str, str]
) -> None:
    pool = links((Route(name="pool", api_key_env=("KEY_A", "KEY_B")),), b"s" * 32, "x")
    cooldowns = MemoryCooldowns(Clock())
    for r in pool:
        cooldowns.cool(link(r), 4.2 if r is pool[0] else 9)
        if revoke:
            cooldowns.cool(f"revoked:{link(r)}", 9)
    failures = tuple(skipped(r, cooldowns) for r in pool)
    out = every_key_out(DIALECTS["openai_chat"], pool, cooldowns, failures)
    assert (out.status, out.headers) == (status, headers)
    assert json.loads(out.body)["error"]["message"].startswith("cursor-bridge: every key")
    assert out.comment.startswith(f"cursor-bridge [pool]: answered {status}: {why}; tried: pool#")
    assert out.meta == {"route": "pool", "action": "rejected"}
    after = " (Retry-After 5)" if headers else ""
    assert out.report == FlowReport(
        "pool",
        Outcome.REJECTED,
        client="openai_chat",
        upstream="openai_chat",
        reason=f"answered {status}: {why}{after}",
        fields={"tried": out.comment.split("tried: ")[1]},
    )


# ----------------------------------------------------------------------------- what the flow says


def plan_of(route: Route) -> FlowPlan:
    return FlowPlan(route, DIALECTS["openai_chat"], DIALECTS[route.upstream])


FAILED_A = Failure("a", Reason.ANSWERED_FAILURE, "HTTP 503", 10)
SKIPPED_A = Failure("a", Reason.SKIPPED, cooling=3)


def test_nothing_fell_back_nothing_is_said() -> None:
    assert told(plan_of(PLAIN), 200, "https://a.example", (), "a") is None


def test_a_fallback_that_served_names_it_and_what_was_tried() -> None:
    said = told(plan_of(B), 200, "https://b.example", (FAILED_A,), "a")
    assert said is not None
    assert said.comment == (
        "cursor-bridge [b]: served by b (https://b.example, model ?); "
        "tried: a (HTTP 503, cooling down 10 s)"
    )
    fallback = said.meta["fallback"]
    assert fallback == {
        "served_by": "b",
        "upstream_url": "https://b.example",
        "model": "",
        "tried": ["a (HTTP 503, cooling down 10 s)"],
    }
    assert said.meta["route"] == "b" and said.fell_back and not said.passed
    assert said.line is not None and said.line.level is Level.INFO
    assert said.line.text == (
        "cursor-bridge [b]: fallback answered HTTP 200; tried: a (HTTP 503, cooling down 10 s)"
    )
    report = FlowReport("a", fields={"key": "KA"})
    said.edit.apply(report)
    assert (report.route, report.upstream, report.outcome) == ("b", "anthropic", Outcome.REWRITTEN)
    assert report.fields == {
        "upstream_url": "https://b.example",
        "tried": "a (HTTP 503, cooling down 10 s)",
    }


def test_a_key_of_a_pool_that_served_is_named_by_its_variable() -> None:
    said = told(plan_of(OTHER), 200, "https://p.example", (SKIPPED_A,), "pool")
    assert said is not None and said.line is None and not said.fell_back  # only passed over
    report = FlowReport("pool")
    said.edit.apply(report)
    assert report.fields["key"] == OTHER.key_env
    assert said.meta["fallback"]["served_by"] == link(OTHER)  # type: ignore[index]


def test_every_route_failed_the_last_error_is_relayed_and_said() -> None:
    last = Failure("b", Reason.ANSWERED_FAILURE, "HTTP 500")
    said = told(plan_of(B), 500, "https://b.example", (FAILED_A, last), "a")
    assert said is not None and not said.fell_back and not said.passed
    words = "no route answered; tried: a (HTTP 503, cooling down 10 s), b (HTTP 500)"
    assert said.comment == f"cursor-bridge [b]: {words}"
    assert said.line is not None and said.line.level is Level.WARNING
    assert said.meta == {
        "fallback": {"served_by": None, "tried": [f.describe() for f in (FAILED_A, last)]}
    }
    report = FlowReport("a")
    said.edit.apply(report)
    assert (report.route, report.outcome, report.reason) == ("b", Outcome.NOT_REWRITTEN, words)


def test_no_route_reachable_is_a_rejection_passed_on_as_it_is() -> None:
    gone = Failure("b", Reason.TIMED_OUT, "timed out before the first byte")
    said = told(None, 504, "", (FAILED_A, gone), "a")
    assert said is not None and said.passed and not said.fell_back
    assert said.comment.startswith("cursor-bridge [b]: no upstream reachable; tried: a (")
    assert said.meta["route"] == "b" and said.meta["action"] == "rejected"
    report = FlowReport("a", mode="stream", fields={"model": "x"})
    said.edit.apply(report)
    assert (report.route, report.outcome, report.mode) == ("b", Outcome.REJECTED, "")
    assert report.reason == "answered 504: no upstream reachable"
    assert list(report.fields) == ["tried"]
