"""End to end (issue 35): a 20-turn agent loop of every client dialect through a real mitmdump
to an Anthropic upstream that caches prompts as Anthropic does (``tests/e2e/cache_loop.py``,
``tests/anthropic_cache.py``). Turns ≥ 2 read at least 85% of their input from the cache,
whatever the client speaks, streamed and whole; no request reaches the upstream with more than
4 breakpoints (it would refuse it), Claude Code's own (2 to 4) included."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cache_loop import DIALECTS, TURNS, CacheBench, LoopResult

GOAL = 0.85
CASES = list(DIALECTS)


@pytest.fixture(scope="module")
def bench() -> Iterator[CacheBench]:
    """One caching upstream and one mitmdump on the loop's routes for the module."""
    with CacheBench() as b:
        yield b
        assert "Traceback" not in b.proxy.log_text()


def check(result: LoopResult) -> None:
    assert not result.errors, result.errors
    assert not result.violations, result.violations
    assert not result.refusals, result.refusals
    assert len(result.usages) == TURNS
    assert max(result.breakpoints) <= 4, result.breakpoints
    shares = ", ".join(f"{s:.0%}" for s in result.shares())
    assert result.share >= GOAL, (
        f"{result.dialect}: {result.share:.1%} of the input of turns >= 2 read from the cache "
        f"(per turn: {shares}; breakpoints per request: {result.breakpoints})"
    )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("dialect", CASES)
def test_later_turns_read_most_of_their_input_from_the_cache(
    bench: CacheBench, dialect: str, stream: bool
) -> None:
    check(bench.run(dialect, TURNS, stream))


@pytest.mark.parametrize("marks", [2, 4])
def test_claude_codes_own_breakpoints_are_never_pushed_past_four(
    bench: CacheBench, marks: int
) -> None:
    result = bench.run("anthropic_breakpoints", TURNS, True, client_breakpoints=marks)
    check(result)
    assert min(result.breakpoints[1:]) >= marks  # the client's own are kept
