"""A run of section 2: the proxies started and pinned, each measurement in turn, the paced
capacity found between the grid's points.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from benchlib.base import BATCH, HOST, X, percentile
from benchlib.bodies import http_request, long_text
from benchlib.measuring import body_to_upstream, paced, small_requests, unpaced_paired, warm_up
from benchlib.plan import Plan, Progress
from benchlib.processes import Config, Proc, Proxy, running_processes


async def guarded(
    out: dict[str, Any],
    name: str,
    measurement: Coroutine[Any, Any, dict[str, Any]],
    say: Progress,
    label: str,
) -> dict[str, Any] | None:
    """Run one measurement; an error is recorded (and shown) instead of ending the run."""
    try:
        result = await measurement
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
        say(f"{label}: ERROR {type(e).__name__}: {str(e)[:200]}")
        return None
    out[name] = result
    return result


async def measure(
    plan: Plan, upstream: Proc, proxies: list[Proxy], say: Progress
) -> dict[str, dict[str, Any]]:
    res: dict[str, dict[str, Any]] = {p.config.key: {} for p in proxies}
    for p in proxies:
        res[p.config.key]["warm_up"] = await warm_up(p)
        res[p.config.key]["rss_idle_mb"] = p.proc.rss_mb()
    say("all proxies answer: " + ", ".join(f"{p.config.key} pid {p.proc.pid}" for p in proxies))

    for p in proxies:
        key = p.config.key
        job = small_requests(p, upstream, plan.requests, plan.concurrency)
        if r := await guarded(res[key], "memory", job, say, f"memory {key}"):
            say(
                f"memory    {key:9} {r['requests']} requests: {r['requests_per_s']:5.0f}/s,"
                f" RSS {r['rss_before_mb']:.0f} → {r['rss_after_mb']:.0f} MB, errors {r['errors']}"
            )

    async def paced_k(p: Proxy, k: int, tries: int) -> None:
        """K paced streams through ``p``; a try past the bound is followed by another, up to
        ``tries`` (the better of them counts: the capacity is not set by one slow moment)."""
        key = p.config.key
        for attempt in range(tries):
            job = paced(p, upstream, k, plan.paced_events, plan.pace, plan.spread)
            before = res[key].get(f"paced_{k}")
            r = await guarded(res[key], f"paced_{k}", job, say, f"paced {k} {key}")
            if r is None:
                if before is not None:  # the first try stands
                    res[key][f"paced_{k}"] = before
                return
            say(
                f"paced     {key:9} K={k:3}: delay p50 {r['delay_p50_ms']:6.2f} ms"
                f" p99 {r['delay_p99_ms']:7.2f} ms, lost {r['lost']}, reordered"
                f" {r['reordered']}, CPU % proxy {r['proxy_cpu_pct']:.0f} upstream"
                f" {r['upstream_cpu_pct']:.0f} load gen {r['loadgen_cpu_pct']:.0f},"
                f" RSS {r['rss_max_mb']:.0f} MB"
            )
            if before is not None:
                keep = before if before["delay_p99_ms"] < r["delay_p99_ms"] else r
                res[key][f"paced_{k}"] = {**keep, "attempts": attempt + 1}
            if _within(res[key][f"paced_{k}"]):
                return

    for i, k in enumerate(plan.paced_streams):
        for p in proxies:
            key = p.config.key
            # A K past the bound, where the K before was within it, is measured once more.
            past = [res[key].get(f"paced_{j}") for j in plan.paced_streams[max(0, i - 2) : i]]
            if len(past) == 2 and not any(_within(m) for m in past):
                # Two Ks in a row past the bound: more streams only take longer to say so.
                continue
            earlier = past[-1] if past else None
            await paced_k(p, k, 2 if plan.paced_retry and (i == 0 or _within(earlier)) else 1)

    # The grid's steps are a quarter of a column's capacity or more: the K halfway between the
    # last within the bound and the first past it, ``paced_halvings`` times, all columns taking
    # turns (a slow stretch of the machine falls on all of them alike).
    for _ in range(plan.paced_halvings):
        for p in proxies:
            cap = paced_capacity(res[p.config.key])
            if cap["k"] and cap["past"] and cap["past"] - cap["k"] >= 4:
                await paced_k(p, (cap["k"] + cap["past"]) // 2, 2 if plan.paced_retry else 1)

    for p in proxies:
        res[p.config.key]["paced_capacity"] = paced_capacity(res[p.config.key])

    runs = [("unpaced", n, 1) for n in plan.unpaced_streams]
    runs += [("burst", n, BATCH) for n in plan.burst_streams]
    for kind, n, per_chunk in runs:
        row = await unpaced_paired(plan, upstream, proxies, n, per_chunk, say, kind)
        for key, m in row.items():
            res[key][f"{kind}_{n}"] = m
        say(
            f"{kind:9} {n:3} streams, ratio to bare (median of pairs): "
            + ", ".join(
                f"{key} {m['events_per_s_ratio']:.2f}{X}"
                for key, m in row.items()
                if "events_per_s_ratio" in m
            )
        )

    for size in plan.body_sizes:
        raws = {
            p.config.key: http_request(p.port, p.config.dialect, stream=False, text=long_text(size))
            for p in proxies
        }
        times: dict[str, list[float]] = {p.config.key: [] for p in proxies}
        errors: dict[str, str] = {}
        # Configs interleaved: drift hits them all alike. The first ``BODY_WARMUP`` rounds are
        # not counted: a proxy's first bodies of a size take memory fresh from the system
        # (page faults), which a proxy that keeps serving such bodies has done already; the
        # first one's time is kept apart (``first_ms``).
        firsts: dict[str, float] = {}
        for rep in range(BODY_WARMUP + plan.body_reps):
            for p in proxies:
                if p.config.key in errors:
                    continue
                try:
                    took = await body_to_upstream(p, raws[p.config.key])
                except Exception as e:
                    errors[p.config.key] = f"{type(e).__name__}: {e}"[:500]
                    continue
                if rep == 0:
                    firsts[p.config.key] = took
                if rep >= BODY_WARMUP:
                    times[p.config.key].append(took)
        for p in proxies:
            key = p.config.key
            if key in errors:
                res[key][f"body_{size}"] = {"error": errors[key]}
                say(f"body      {key:9} {size / 1e6:g} MB: ERROR {errors[key][:200]}")
                continue
            ts = sorted(times[key])
            res[key][f"body_{size}"] = {
                "bytes": len(raws[key]),
                "p50_ms": percentile(ts, 0.5) * 1e3,
                "min_ms": ts[0] * 1e3,
                "first_ms": firsts[key] * 1e3,
                "all_ms": [t * 1e3 for t in times[key]],
            }
            say(
                f"body      {key:9} {size / 1e6:g} MB → upstream: p50 {percentile(ts, 0.5) * 1e3:7.1f} ms"
                f" (min {ts[0] * 1e3:.1f}; the first body {firsts[key] * 1e3:.1f})"
            )
        raws.clear()
    for p in proxies:
        res[p.config.key]["end"] = {"rss_mb": p.proc.rss_mb()}
    return res


BODY_WARMUP = 3
"""Rounds of request bodies before the counted ones (``measure``)."""
PACED_BOUND_MS = 50.0
"""The added delay (p99) a user starts to notice: paced capacity is the largest K under it."""


def paced_capacity(results: dict[str, Any]) -> dict[str, Any]:
    """The largest K of a column's paced runs (the grid's and the halvings') whose p99 added
    delay stayed within ``PACED_BOUND_MS`` with nothing lost, every smaller K within it too
    (the issue's "paced streams before p99 passes 50 ms"): ``k`` (0: not even the
    smallest), ``past`` (the first K past the bound, or None), ``text`` as the table shows
    it."""
    measured = sorted(
        int(name[6:]) for name in results if name.startswith("paced_") and name[6:].isdigit()
    )
    best, past = 0, None
    for k in measured:
        if not _within(results[f"paced_{k}"]):
            past = k
            break
        best = k
    if past is None:
        text = f"≥ {best}"
    elif best == 0:
        text = f"< {past}"
    else:
        text = f"{best} (not {past})"
    return {"k": best, "past": past, "text": text, "measured": measured}


def _within(m: object) -> bool:
    """A paced measurement within the bound: p99 added delay ≤ ``PACED_BOUND_MS``, nothing
    lost, no stream failed."""
    return (
        isinstance(m, dict)
        and "error" not in m
        and m.get("delay_p99_ms", float("inf")) <= PACED_BOUND_MS
        and not m.get("lost")
        and not m.get("failed_streams")
    )


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` on ``cpus`` only."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that just ended
            os.sched_setaffinity(int(task.name), cpus)


def pin_processes(upstream: Proc, proxies: Sequence[Proxy]) -> str | None:
    """The proxies on one CPU of their own, the upstream and the load generator on the
    others: what is measured never waits for the load behind it, and never moves between
    CPUs mid-run (left to the scheduler on this 2-core VM, a proxy that had been idle
    sometimes shared a CPU with the load generator for a whole window, its CPU per event
    up by a fifth). None where that cannot be done (one CPU, no affinity calls), else what
    was done."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if len(cpus) < 2:
        return None
    mine, rest = {cpus[-1]}, set(cpus[:-1])
    try:
        for p in proxies:
            pin(p.proc.pid, mine)
        pin(upstream.pid, rest)
        pin(os.getpid(), rest)
    except OSError:
        return None
    return f"proxies on CPU {cpus[-1]}, upstream and load generator on CPU {', '.join(map(str, sorted(rest)))}"


def run_proxies(
    plan: Plan, configs: Sequence[Config], say: Progress, pinned: bool = True
) -> tuple[dict[str, Any], str]:
    """Each column's measurements, and where the processes ran."""
    with running_processes(configs) as (upstream, port, proxies):
        say(f"upstream pid {upstream.pid} on {HOST}:{port}; {len(proxies)} mitmdumps listening")
        how = pin_processes(upstream, proxies) if pinned else None
        placed = how or "processes not pinned to CPUs" + (
            " (one CPU, or no way to set affinity here)" if pinned else " (--no-pin)"
        )
        say(placed)
        results = asyncio.run(measure(plan, upstream, proxies, say))
        for p in proxies:
            # What the proxy logged beyond its start: errors would put the figures in doubt.
            text = p.proc.log.read_text(errors="replace")
            noted = [
                line
                for line in text.splitlines()
                if re.search(r"traceback|error|warn|exception", line, re.IGNORECASE)
            ]
            results[p.config.key]["log"] = {"lines": len(text.splitlines()), "noted": noted[:20]}
            if noted:
                say(
                    f"{p.config.key}: {len(noted)} log line(s) with errors/warnings, e.g. {noted[0]}"
                )
    return results, placed
