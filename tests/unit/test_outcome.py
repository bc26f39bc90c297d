"""Flow outcomes: one mark per outcome, the logfmt line, the counters and the stats text."""

from __future__ import annotations

import re
import shlex
from collections import Counter

import pytest

from addon.outcome import MARKS, OUTCOMES, FlowReport, stats_text


def test_every_outcome_has_its_own_mark() -> None:
    assert set(MARKS) == set(OUTCOMES)
    assert len(set(MARKS.values())) == len(MARKS)


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ([], "rewritten"),
        (["fallback"], "fallback"),
        (["fallback", "rejected"], "rejected"),
        (["loop_guard", "fallback"], "loop_guard"),
        (["retried", "fallback"], "fallback"),
    ],
)
def test_the_most_telling_outcome_wins(outcomes: list[str], expected: str) -> None:
    report = FlowReport("r")
    for o in outcomes:
        report.add_outcome(o)
    assert report.outcome == expected
    assert report.mark == MARKS[expected]


def test_retries_and_repairs_show_in_the_mark_of_a_rewritten_flow() -> None:
    repaired = FlowReport("r", notes=Counter({"tool call arguments repaired": 2}))
    assert repaired.mark == MARKS["repaired"] and repaired.repairs == 2
    retried = FlowReport("r", notes=Counter({"tool call arguments repaired": 1}))
    retried.retries["staged retry 1"] += 1
    assert retried.mark == MARKS["retried"]  # a retry says more than a repair
    failed = FlowReport("r", notes=Counter({"tool call arguments repaired": 1}))
    failed.add_outcome("fallback")
    assert failed.mark == MARKS["fallback"]


def test_the_line_is_logfmt_with_counts_and_time() -> None:
    report = FlowReport(
        "claude code",
        client="anthropic",
        upstream="openai_chat",
        mode="stream",
        status=200,
        spent_ns=1_234_567,
        notes=Counter(
            {
                "reasoning restored from the store by call id": 2,
                "thinking signature repaired from the store by text": 1,
            }
        ),
        counts={"events_in": 12, "skipped": 0},
        reason='said "no" to sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789',
    )
    report.retries["required tool call"] += 1
    line = report.line()
    assert line.startswith("cursor-bridge flow ")
    fields = dict(
        part.split("=", 1) for part in shlex.split(line.removeprefix("cursor-bridge flow "))
    )
    assert fields == {
        "route": "claude code",
        "outcome": "retried",  # a rewrite that asked again says so
        "client": "anthropic",
        "upstream": "openai_chat",
        "mode": "stream",
        "status": "200",
        "events_in": "12",
        "restores": "3",
        "retries": "1",
        "bridge_ms": "1.23",
        "reason": fields["reason"],
    }
    assert "sk-ant-api03" not in line  # redacted
    assert "skipped" not in fields  # zero counts are left out


def test_counters_and_stats_text() -> None:
    total: Counter[str] = Counter()
    a = FlowReport("r", notes=Counter({"tool call arguments repaired": 1}))
    b = FlowReport("r")
    b.add_outcome("fallback")
    b.retries["staged retry 1"] += 2
    c = FlowReport("r", outcome="rejected")
    for report in (a, b, c):
        total.update(report.counters())
    total["requests rewritten"] += 2
    text = stats_text(total, 3725)
    assert text.startswith("flows: 1 rejected, 1 fallback, 1 repaired; ")  # a is repaired
    assert "repairs: 1; restores: 0; retries: 2 (staged retry 1: 2); fallbacks: 1" in text
    assert "other: 2 requests rewritten" in text
    assert text.endswith("up 1:02:05")
    assert stats_text(Counter(), 0).startswith("flows: none; repairs: 0")
    assert re.search(r"up 0:00:00$", stats_text(Counter(), 0))
