"""The report: the in-process and the proxy tables, ratios to the same run's baselines."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchlib.base import BATCH, NONE, X
from benchlib.plan import Plan
from benchlib.processes import Config
from benchlib.run import BODY_WARMUP, PACED_BOUND_MS


def _ratio(value: float, base: float) -> str:
    if not (base and base == base and value == value):  # zero or nan
        return ""
    return f" ({value / base:.2f}{X})"


def _num(value: float, digits: int = 0) -> str:
    if value != value:
        return NONE
    return f"{value:,.{digits}f}"


@dataclass
class Row:
    label: str
    cell: Callable[[dict[str, Any], dict[str, Any] | None], str]
    """(this column's measurement, bare's measurement or None for bare) → the cell."""
    measurement: str


def rows(plan: Plan, results: dict[str, Any]) -> list[Row]:
    out: list[Row] = []

    def value(
        key: str, digits: int = 0, ratio: bool = True
    ) -> Callable[[dict[str, Any], dict[str, Any] | None], str]:
        def cell(m: dict[str, Any], base: dict[str, Any] | None) -> str:
            text = _num(float(m[key]), digits)
            if ratio and base is not None and key in base:
                text += _ratio(float(m[key]), float(base[key]))
            return text

        return cell

    def paired(key: str, digits: int = 0) -> Callable[[dict[str, Any], dict[str, Any] | None], str]:
        """The column's median, its ratio to bare the median of its pairs' (the lowest and
        highest pair after it); where no pair was measured, as ``value`` writes it."""
        plain = value(key, digits)

        def cell(m: dict[str, Any], base: dict[str, Any] | None) -> str:
            ratios = m.get(f"{key}_ratios")
            if base is None or not ratios:
                return plain(m, base)
            text = _num(float(m[key]), digits)
            mid = float(m[f"{key}_ratio"])
            if len(ratios) == 1:
                return text + f" ({mid:.2f}{X})"
            return text + f" ({mid:.2f}{X}, {ratios[0]:.2f}-{ratios[-1]:.2f})"

        return cell

    def pair(a: str, b: str, digits: int) -> Callable[[dict[str, Any], dict[str, Any] | None], str]:
        def cell(m: dict[str, Any], base: dict[str, Any] | None) -> str:
            text = f"{_num(float(m[a]), digits)} / {_num(float(m[b]), digits)}"
            if base is not None and a in base and b in base:
                ra, rb = _ratio(float(m[a]), float(base[a])), _ratio(float(m[b]), float(base[b]))
                if ra and rb:
                    text += f" ({ra[2:-2]}{X} / {rb[2:-2]}{X})"
            return text

        return cell

    def cpu_pct(m: dict[str, Any], base: dict[str, Any] | None) -> str:
        text = (
            f"{m['proxy_cpu_pct']:.0f} / {m['upstream_cpu_pct']:.0f} / {m['loadgen_cpu_pct']:.0f}"
        )
        if base is not None and base.get("proxy_cpu_pct"):
            text += f" ({m['proxy_cpu_pct'] / base['proxy_cpu_pct']:.2f}{X})"
        return text

    def lost(m: dict[str, Any], base: dict[str, Any] | None) -> str:
        text = f"{m['lost']} / {m['reordered']}"
        return text + (f", {m['failed_streams']} streams failed" if m["failed_streams"] else "")

    runs = [(f"unpaced_{n}", n, "") for n in plan.unpaced_streams]
    runs += [(f"burst_{n}", n, f", {BATCH} events per HTTP chunk") for n in plan.burst_streams]
    windows = (
        f"{plan.unpaced_rounds} windows of ~{plan.unpaced_seconds:g} s, each between two of"
        " bare's; median, and the lowest-highest pair"
        if plan.unpaced_rounds > 1
        else f"a window of ~{plan.unpaced_seconds:g} s between two of bare's"
    )
    for name, n, burst in runs:
        label = f"unpaced, {n} stream{'s' if n > 1 else ''} at once{burst} ({windows})"
        out.append(Row(f"{label}: events/s", paired("events_per_s"), name))
        out.append(Row(f"{label}: lost / reordered events", lost, name))
        out.append(
            Row(f"{label}: proxy CPU per event, µs", paired("proxy_cpu_us_per_event", 1), name)
        )
        out.append(Row(f"{label}: CPU % proxy / upstream / load gen", cpu_pct, name))
    for k in plan.paced_streams:
        name = f"paced_{k}"
        label = f"paced, K={k} {X} {plan.paced_events} events at {plan.pace:g}/s, steady state"
        out.append(
            Row(
                f"{label}: added delay p50 / p99, ms", pair("delay_p50_ms", "delay_p99_ms", 2), name
            )
        )
        out.append(Row(f"{label}: lost / reordered events", lost, name))
        out.append(Row(f"{label}: CPU % proxy / upstream / load gen", cpu_pct, name))
        out.append(Row(f"{label}: proxy RSS max, MB", value("rss_max_mb"), name))

    def capacity(m: dict[str, Any], base: dict[str, Any] | None) -> str:
        text = str(m["text"])
        if base is not None and base.get("k") and m.get("k"):
            text += f" ({m['k'] / base['k']:.2f}{X})"
        return text

    out.append(
        Row(
            f"paced: most streams (of K = {', '.join(map(str, plan.paced_streams))}"
            + (
                ", then halfway between the last within and the first past, "
                + {1: "once", 2: "twice"}.get(plan.paced_halvings, f"{plan.paced_halvings} times")
                if plan.paced_halvings
                else ""
            )
            + f") with p99 added delay ≤ {PACED_BOUND_MS:g} ms",
            capacity,
            "paced_capacity",
        )
    )
    for size in plan.body_sizes:
        out.append(
            Row(
                f"{size / 1e6:g} MB request body until the upstream has it, p50 of {plan.body_reps}"
                f" (after {BODY_WARMUP} not counted), ms",
                value("p50_ms", 1),
                f"body_{size}",
            )
        )
        out.append(
            Row(
                f"{size / 1e6:g} MB request body until the upstream has it, the first a proxy"
                " sees (memory fresh from the system), ms",
                value("first_ms", 1),
                f"body_{size}",
            )
        )
    out.append(
        Row(f"{plan.requests:,} small requests: requests/s", value("requests_per_s"), "memory")
    )
    out.append(Row("RSS after start + warm-up, MB", value("rss_before_mb"), "memory"))
    out.append(
        Row(f"RSS after {plan.requests:,} small requests, MB", value("rss_after_mb"), "memory")
    )
    out.append(
        Row("RSS at the end of the run (right after the 10 MB bodies), MB", value("rss_mb"), "end")
    )
    return out


def proxy_table(
    plan: Plan, configs: Sequence[Config], results: dict[str, Any], only_measured: bool = False
) -> str:
    """The table; ``only_measured``: without the rows no column has a measurement for (a
    section that measures part of a ``Plan``)."""
    head = "| measurement | " + " | ".join(c.title for c in configs) + " |"
    lines = [head, "|---" * (len(configs) + 1) + "|"]
    for row in rows(plan, results):
        if only_measured and not any(
            isinstance(results.get(c.key, {}).get(row.measurement), dict) for c in configs
        ):
            continue
        cells = []
        base_m = results.get("bare", {}).get(row.measurement)
        if not isinstance(base_m, dict) or "error" in base_m:
            base_m = None
        for c in configs:
            m = results.get(c.key, {}).get(row.measurement)
            if not isinstance(m, dict):
                cells.append(NONE)
            elif "error" in m:
                cells.append("error")
            else:
                try:
                    cells.append(row.cell(m, None if c.key == "bare" else base_m))
                except (KeyError, TypeError, ValueError, ZeroDivisionError):
                    cells.append(NONE)
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def inprocess_table(results: dict[str, Any]) -> str:
    names = {
        "stream": "1 MB OpenAI tool-call SSE, random 1-64 B chunks: full processor vs SSE line split",
        "textproto": "1 MB SSE with thinking + `invoke` calls: processor with the text parser vs line split",
        "request": "1 MB Cursor body: decode + transforms + encode vs `json.loads` + `json.dumps`",
    }
    lines = ["| benchmark | bridge | baseline | ratio |", "|---|---|---|---|"]
    for key, label in names.items():
        r = results.get(key)
        if not r:
            continue
        speed = f" ({r['mb_per_s']:.1f} MB/s)" if "mb_per_s" in r else ""
        lines.append(
            f"| {label} | {r['bridge_ms']:.0f} ms | {r['baseline_ms']:.0f} ms |"
            f" {r['ratio']:.1f}{X}{speed} |"
        )
    return "\n".join(lines)
