"""``scripts/bench``'s statistics: paired unpaced windows and the paced capacity.

The machine is replaced by a script of its speed over time (the real windows need seven
mitmdumps): what the pairing must cancel is a machine that changes speed between windows."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))  # scripts/bench runs with scripts/ on its path

from benchlib import inprocess, measuring, run  # noqa: E402
from benchlib.plan import Plan  # noqa: E402


@pytest.fixture
def bench() -> ModuleType:
    """The measuring module: its ``unpaced`` and ``unpaced_window`` are replaced by fakes."""
    return measuring


@dataclass(frozen=True)
class FakeConfig:
    key: str


@dataclass(frozen=True)
class FakeProxy:
    config: FakeConfig


def machine(
    bench: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    cost: dict[str, float],
    speed: list[float],
    fail: dict[str, int] | None = None,
) -> list[str]:
    """Unpaced windows whose events/s is ``speed[i] / cost[column]`` for the i-th window
    (the calibrating ones not counted), CPU per event its inverse; ``fail[key]`` makes that
    column's n-th window raise. Returns the order in which columns were measured."""
    order: list[str] = []
    fail = fail or {}

    def figures(key: str, each: int) -> dict[str, Any]:
        i = len(order)
        order.append(key)
        if fail.get(key) == sum(k == key for k in order):
            raise ConnectionError("upstream went away")
        rate = speed[i % len(speed)] / cost[key]
        return {
            "streams": 1,
            "events_per_stream": each,
            "events_received": 1000,
            "events_per_s": rate,
            "proxy_cpu_us_per_event": 1e6 / rate,
            "proxy_cpu_pct": 99.0,
            "upstream_cpu_pct": 5.0,
            "loadgen_cpu_pct": 20.0,
            "lost": 0,
            "reordered": 0,
            "failed_streams": 0,
            "first_error": None,
            "rss_after_mb": 80.0,
            "wall_s": 1000 / rate,
        }

    async def calibrate(proxy: FakeProxy, *args: Any) -> dict[str, Any]:
        return {"events_per_s": 1000.0 / cost[proxy.config.key]}

    async def window(
        proxy: FakeProxy, upstream: object, streams: int, each: int, *args: Any
    ) -> dict[str, Any]:
        return figures(proxy.config.key, each)

    monkeypatch.setattr(bench, "unpaced", calibrate)
    monkeypatch.setattr(bench, "unpaced_window", window)
    return order


def run_paired(bench: ModuleType, keys: list[str], rounds: int) -> dict[str, dict[str, Any]]:
    plan = Plan(
        requests=1,
        unpaced_streams=(1,),
        unpaced_seconds=1.0,
        unpaced_min_events=10,
        paced_streams=(25,),
        paced_events=10,
        pace=100.0,
        spread=0.1,
        body_sizes=(),
        body_reps=1,
        unpaced_rounds=rounds,
    )
    proxies = [FakeProxy(FakeConfig(k)) for k in keys]
    result: dict[str, dict[str, Any]] = asyncio.run(
        bench.unpaced_paired(plan, None, proxies, 1, 1, lambda text: None, "unpaced")
    )
    return result


def test_bare_is_measured_between_every_two_windows_each_round_in_another_order(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    order = machine(bench, monkeypatch, {"bare": 1.0, "a": 1.0, "b": 1.0, "c": 1.0}, [1.0])
    run_paired(bench, ["bare", "a", "b", "c"], rounds=2)
    assert order[0::2] == ["bare"] * 7
    assert order[1::2] == ["a", "b", "c", "b", "c", "a"]


def test_phases_of_another_speed_do_not_move_the_ratio(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine runs at full speed, then at half for a stretch of windows, then at 1.3:
    only a pair that straddles a change is off, and the median of five pairs is exactly the
    column's cost."""
    cost = {"bare": 1.0, "bare2": 1.0, "slow": 1.25, "fast": 0.9}
    speed = [1.0] * 9 + [0.5] * 12 + [1.3] * 10
    order = machine(bench, monkeypatch, cost, speed)
    out = run_paired(bench, list(cost), rounds=5)
    assert len(order) == 31
    assert "events_per_s_ratio" not in out["bare"]
    assert out["bare"]["windows"] == 16
    for key in ("bare2", "slow", "fast"):
        m = out[key]
        assert m["windows"] == 5
        assert m["events_per_s_ratios"] == sorted(m["events_per_s_ratios"])
        assert len(m["events_per_s_ratios"]) == 5
        assert m["events_per_s_ratio"] == pytest.approx(1 / cost[key])
        assert m["proxy_cpu_us_per_event_ratio"] == pytest.approx(cost[key])


def test_a_steady_drift_cancels_in_every_pair(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine slows by 7% a window all run long: over the geometric mean of the bare
    windows either side, every pair's ratio is the column's cost."""
    cost = {"bare": 1.0, "slow": 1.25, "fast": 0.8}
    machine(bench, monkeypatch, cost, [0.93**i for i in range(13)])
    out = run_paired(bench, list(cost), rounds=3)
    assert out["slow"]["events_per_s_ratios"] == pytest.approx([0.8] * 3)
    assert out["fast"]["events_per_s_ratios"] == pytest.approx([1.25] * 3)
    assert out["slow"]["proxy_cpu_us_per_event_ratio"] == pytest.approx(1.25)


def test_figures_are_the_medians_of_the_windows(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    cost = {"bare": 1.0, "slow": 1.25}
    machine(bench, monkeypatch, cost, [3.0, 1.0, 2.0, 5.0, 4.0, 6.0, 7.0])
    out = run_paired(bench, list(cost), rounds=3)
    # bare's windows ran at 3, 2, 4, 7 (median 3.5); the column's at 1, 5, 6 over 1.25.
    assert out["bare"]["events_per_s"] == pytest.approx(3.5)
    assert out["slow"]["events_per_s"] == pytest.approx(5 / 1.25)
    assert out["slow"]["lost"] == 0 and out["slow"]["windows"] == 3


def test_a_column_that_fails_is_an_error_and_the_others_go_on(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    cost = {"bare": 1.0, "broken": 1.0, "fine": 1.1}
    order = machine(bench, monkeypatch, cost, [1.0], fail={"broken": 1})
    out = run_paired(bench, list(cost), rounds=3)
    assert out["broken"] == {"error": "ConnectionError: upstream went away"}
    assert order.count("broken") == 1  # never tried again
    assert len(out["fine"]["events_per_s_ratios"]) == 3
    assert out["fine"]["events_per_s_ratio"] == pytest.approx(1 / 1.1)


def test_bare_failing_ends_the_row_for_everyone(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    cost = {"bare": 1.0, "a": 1.0}
    machine(bench, monkeypatch, cost, [1.0], fail={"bare": 1})
    out = run_paired(bench, list(cost), rounds=3)
    assert out["bare"] == {"error": "ConnectionError: upstream went away"}
    assert out["a"] == {"error": "no window measured"}


def paced_result(p99: float, lost: int = 0) -> dict[str, Any]:
    return {"delay_p99_ms": p99, "lost": lost, "failed_streams": 0}


def test_paced_capacity_reads_the_grid_and_the_halvings(bench: ModuleType) -> None:
    results = {
        "paced_25": paced_result(1.0),
        "paced_50": paced_result(2.0),
        "paced_75": paced_result(200.0),
        "paced_62": paced_result(30.0),
        "paced_68": paced_result(80.0),
        "memory": {"requests": 10},
    }
    cap = run.paced_capacity(results)
    assert (cap["k"], cap["past"], cap["text"]) == (62, 68, "62 (not 68)")
    assert cap["measured"] == [25, 50, 62, 68, 75]


@pytest.mark.parametrize(
    ("results", "text"),
    [
        ({"paced_25": paced_result(1.0), "paced_50": paced_result(2.0)}, "≥ 50"),
        ({"paced_25": paced_result(60.0)}, "< 25"),
        ({"paced_25": paced_result(1.0), "paced_50": paced_result(1.0, lost=3)}, "25 (not 50)"),
        ({"paced_25": paced_result(1.0), "paced_50": {"error": "boom"}}, "25 (not 50)"),
        # A larger K within the bound after a smaller one past it does not count.
        (
            {
                "paced_25": paced_result(1.0),
                "paced_50": paced_result(99.0),
                "paced_75": paced_result(9.0),
            },
            "25 (not 50)",
        ),
    ],
)
def test_paced_capacity_is_the_last_k_before_the_first_past_the_bound(
    bench: ModuleType, results: dict[str, Any], text: str
) -> None:
    assert run.paced_capacity(results)["text"] == text


def test_bare_failing_midway_stops_the_row_with_what_was_measured(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No window of another column is measured once there is no bare window to pair it with."""
    cost = {"bare": 1.0, "a": 1.25, "b": 1.0}
    order = machine(bench, monkeypatch, cost, [1.0], fail={"bare": 3})
    out = run_paired(bench, list(cost), rounds=3)
    assert order == ["bare", "a", "bare", "b", "bare"]
    assert out["a"]["events_per_s_ratios"] == pytest.approx([0.8])
    assert "events_per_s_ratios" not in out["b"] and out["b"]["windows"] == 1
    assert out["bare"]["error_later"] == "ConnectionError: upstream went away"


def test_the_host_line_names_the_cpu_and_times_both_pieces_of_work(bench: ModuleType) -> None:
    h = inprocess.host(reps=2)
    assert set(h) == {"cpu_model", "python_loop_us", "json_event_ns"}
    assert isinstance(h["cpu_model"], str)
    assert 0 < h["python_loop_us"] < 100_000 and 0 < h["json_event_ns"] < 1_000_000
    assert inprocess._reference_loop() == sum(i * i for i in range(1000))


def test_baseline_columns_follow_their_route() -> None:
    """``--baseline``: each bridge column is followed by the same route from the other
    checkout; bare mitmdump stays single; the baseline column measures the same route."""
    from benchlib.baseline import with_baselines
    from benchlib.processes import CONFIGS, mitmdump_argv

    chosen = [c for c in CONFIGS if c.key in {"bare", "openai", "invoke"}]
    other = Path("/elsewhere/checkout")
    out = with_baselines(chosen, other, "main (abc123)")
    assert [c.key for c in out] == ["bare", "openai", "openai@base", "invoke", "invoke@base"]
    assert [c.route for c in out] == ["bare", "openai", "openai", "invoke", "invoke"]
    base = out[4]
    assert base.options == chosen[2].options and base.title.endswith("at main (abc123)")
    argv = mitmdump_argv(base, 1, 2, Path("/tmp/confdir"))
    assert argv[argv.index("-s") + 1] == str(other / "addon" / "main.py")


def test_baseline_table_divides_the_paired_ratios() -> None:
    from benchlib.base import NONE, X
    from benchlib.baseline import baseline_table, with_baselines
    from benchlib.plan import QUICK
    from benchlib.processes import CONFIGS

    configs = with_baselines([c for c in CONFIGS if c.key in {"bare", "openai"}], Path("/x"), "r")
    run = f"unpaced_{QUICK.unpaced_streams[0]}"
    results = {
        "openai": {run: {"events_per_s_ratio": 0.9, "proxy_cpu_us_per_event_ratio": 1.5}},
        "openai@base": {run: {"events_per_s_ratio": 1.0, "proxy_cpu_us_per_event_ratio": 1.2}},
    }
    table = baseline_table(QUICK, configs, results)
    row = next(
        line for line in table.splitlines() if f"unpaced {QUICK.unpaced_streams[0]} " in line
    )
    assert f"0.90{X}" in row and f"1.25{X}" in row
    # a run neither column measured shows no figure rather than a made-up one
    missing = next(line for line in table.splitlines() if "unpaced" in line and line != row)
    assert NONE in missing


def test_baseline_table_holds_every_route_against_the_baselines_first_route() -> None:
    """The bound of issue 41 (every route against today's plain route) reads off one row."""
    from benchlib.base import X
    from benchlib.baseline import baseline_table, with_baselines
    from benchlib.plan import QUICK
    from benchlib.processes import CONFIGS

    keys = {"bare", "openai", "fallback"}
    configs = with_baselines([c for c in CONFIGS if c.key in keys], Path("/x"), "r")
    run = f"unpaced_{QUICK.unpaced_streams[0]}"
    results = {
        "openai@base": {run: {"events_per_s_ratio": 0.8, "proxy_cpu_us_per_event_ratio": 1.2}},
        "fallback": {run: {"events_per_s_ratio": 0.76, "proxy_cpu_us_per_event_ratio": 1.32}},
        "fallback@base": {run: {"events_per_s_ratio": 0.5, "proxy_cpu_us_per_event_ratio": 2.0}},
    }
    table = baseline_table(QUICK, configs, results)
    assert "tree / base's openai" in table.splitlines()[0]
    row = next(line for line in table.splitlines() if "fallback" in line and run[8:] in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:] == [f"1.52{X}", f"0.66{X}", f"0.95{X}", f"1.10{X}"]


def test_baseline_of_no_commit_is_refused() -> None:
    from benchlib.baseline import BaselineError, checkout

    with pytest.raises(BaselineError, match="not a commit"), checkout("no-such-ref-xyz"):
        pass
