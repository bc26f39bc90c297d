"""Flow outcomes: one mark per outcome, the logfmt line, the counters and the stats text."""

from __future__ import annotations

import re
import shlex
from collections import Counter

import pytest

from addon.model import TalliedNote, Tally, Usage
from addon.report.outcome import MARKS, OUTCOMES, FlowReport, Outcome, cache_fields, stats_text
from addon.transforms.repair import NOTE_REPAIRED


def test_every_outcome_has_its_own_mark() -> None:
    assert set(MARKS) == set(OUTCOMES)
    assert len(set(MARKS.values())) == len(MARKS)


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ([], "rewritten"),
        (["not_rewritten"], "not_rewritten"),
        (["not_rewritten", "rejected"], "rejected"),
        (["loop_guard", "not_rewritten"], "loop_guard"),
        (["retried", "not_rewritten"], "not_rewritten"),
    ],
)
def test_the_most_telling_outcome_wins(outcomes: list[str], expected: str) -> None:
    report = FlowReport("r")
    for o in outcomes:
        report.add_outcome(Outcome(o))
    assert report.outcome == expected
    assert report.mark == MARKS[expected]


def test_retries_and_repairs_show_in_the_mark_of_a_rewritten_flow() -> None:
    repaired = FlowReport("r", notes=Counter({NOTE_REPAIRED: 2}))
    assert repaired.mark == MARKS[Outcome.REPAIRED] and repaired.repairs == 2
    retried = FlowReport("r", notes=Counter({NOTE_REPAIRED: 1}))
    retried.retries["staged retry 1"] += 1
    assert retried.mark == MARKS[Outcome.RETRIED]  # a retry says more than a repair
    failed = FlowReport("r", notes=Counter({NOTE_REPAIRED: 1}))
    failed.add_outcome(Outcome.NOT_REWRITTEN)
    assert failed.mark == MARKS[Outcome.NOT_REWRITTEN]


def test_a_notes_text_counts_nothing_its_tally_does() -> None:
    """Repairs and restores are counted from the typed notes, never from a note's text: a
    plain note that reads like a repair is not one, and a renamed repair note still counts."""
    lookalike = FlowReport("r", notes=Counter({"tool call arguments repaired": 2}))
    assert (lookalike.repairs, lookalike.final) == (0, Outcome.REWRITTEN)
    renamed = FlowReport("r", notes=Counter({TalliedNote("arguments mended", Tally.REPAIR): 3}))
    assert (renamed.repairs, renamed.restores, renamed.final) == (3, 0, Outcome.REPAIRED)
    restored = TalliedNote("reasoning restored from the store by call id", Tally.RESTORE)
    assert restored == "reasoning restored from the store by call id"  # the text people read
    report = FlowReport("r", notes=Counter({restored: 2}))
    assert (report.repairs, report.restores, report.final) == (0, 2, Outcome.REWRITTEN)


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
                TalliedNote("reasoning restored from the store by call id", Tally.RESTORE): 2,
                TalliedNote("thinking signature repaired from the store by text", Tally.RESTORE): 1,
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
    a = FlowReport("r", notes=Counter({NOTE_REPAIRED: 1}))
    b = FlowReport("r")
    b.add_outcome(Outcome.NOT_REWRITTEN)
    b.retries["staged retry 1"] += 2
    c = FlowReport("r", outcome=Outcome.REJECTED)
    for report in (a, b, c):
        total.update(report.counters())
    total["requests rewritten"] += 2
    text = stats_text(total, 3725)
    assert text.startswith("flows: 1 rejected, 1 not_rewritten, 1 repaired; ")  # a is repaired
    assert "repairs: 1; restores: 0; retries: 2 (staged retry 1: 2); not rewritten: 1" in text
    assert "other: 2 requests rewritten" in text
    assert text.endswith("up 1:02:05")
    assert stats_text(Counter(), 0).startswith("flows: none; repairs: 0")
    assert re.search(r"up 0:00:00$", stats_text(Counter(), 0))


# --------------------------------------------------------------------------- cache (issue 35)


def _fields(line: str) -> dict[str, str]:
    return dict(
        part.split("=", 1) for part in shlex.split(line.removeprefix("cursor-bridge flow "))
    )


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        pytest.param(None, [], id="no-usage"),
        pytest.param(Usage(input_tokens=10, output_tokens=5), [], id="no-cache-counts"),
        pytest.param(
            Usage(input_tokens=12, cache_read_tokens=1800, cache_write_tokens=188),
            [("cache_read", 1800), ("cache_write", 188), ("cache_share", "90%")],
            id="anthropic",
        ),
        pytest.param(
            Usage(input_tokens=200, cache_read_tokens=800),
            [("cache_read", 800), ("cache_share", "80%")],
            id="read-only",
        ),
        pytest.param(
            Usage(input_tokens=50, cache_read_tokens=0, cache_write_tokens=0),
            [("cache_read", 0), ("cache_write", 0), ("cache_share", "0%")],
            id="reported-zeros-are-written",
        ),
        pytest.param(
            Usage(input_tokens=100, cache_write_tokens=900),
            [("cache_write", 900)],
            id="write-only-no-share",
        ),
        pytest.param(
            Usage(output_tokens=3, cache_read_tokens=40),
            [("cache_read", 40)],
            id="input-unknown-no-share",
        ),
        pytest.param(
            Usage(input_tokens=0, cache_read_tokens=0),
            [("cache_read", 0)],
            id="empty-input-no-share",
        ),
        pytest.param(
            Usage(input_tokens=199, cache_read_tokens=1),
            [("cache_read", 1), ("cache_share", "1%")],  # 0.5% rounded half up
            id="half-up",
        ),
        pytest.param(
            Usage(input_tokens=1, cache_read_tokens=999),
            [("cache_read", 999), ("cache_share", "100%")],
            id="rounded",
        ),
    ],
)
def test_cache_fields_say_only_what_the_upstream_reported(
    usage: Usage | None, expected: list[tuple[str, str | int]]
) -> None:
    assert cache_fields(usage) == expected


def test_the_line_has_the_cache_fields_of_the_answers_usage() -> None:
    report = FlowReport(
        "claude",
        client="openai_chat",
        upstream="anthropic",
        mode="stream",
        status=200,
        counts={"events_in": 7},
        usage=Usage(
            input_tokens=12, output_tokens=7, cache_read_tokens=1800, cache_write_tokens=188
        ),
    )
    line = report.line()
    assert " events_in=7 cache_read=1800 cache_write=188 cache_share=90% bridge_ms=" in line
    fields = _fields(line)
    assert (fields["cache_read"], fields["cache_write"], fields["cache_share"]) == (
        "1800",
        "188",
        "90%",
    )


@pytest.mark.parametrize(
    "usage",
    [None, Usage(input_tokens=10, output_tokens=5, total_tokens=15)],
    ids=["no-usage", "no-cache-counts"],
)
def test_the_line_has_no_cache_fields_the_upstream_did_not_report(usage: Usage | None) -> None:
    line = FlowReport("r", client="openai_chat", upstream="openai_chat", usage=usage).line()
    assert "cache_" not in line


def test_a_cut_answer_says_its_cause_and_counts_as_cut() -> None:
    """A flow whose body the upstream broke off: ``cut=`` on its one line, after its status,
    and one ``answers cut by the upstream``, never ``answers not translatable``."""
    report = FlowReport("r", status=502, cut="upstream_reset")
    report.add_outcome(Outcome.NOT_REWRITTEN)
    assert "status=502 cut=upstream_reset " in report.line()
    counters = report.counters()
    assert counters["answers cut by the upstream"] == 1
    assert "answers not translatable" not in counters
    assert "cut=" not in FlowReport("r", status=200).line()
    assert "answers cut by the upstream" not in FlowReport("r").counters()
