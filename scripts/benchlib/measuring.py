"""The measurements: unpaced streams in paired windows, paced streams, request bodies to the
upstream, memory after many small requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchlib.base import IO_TIMEOUT, MAX_EVENTS, RECEIVED, X, percentile
from benchlib.bodies import http_request
from benchlib.loadgen import Collect, Conn, Delays, Stamps
from benchlib.plan import Plan, Progress
from benchlib.processes import Proc, Proxy


@dataclass
class CpuSnapshot:
    wall: float
    proxy: float
    upstream: float
    loadgen: float


def _loadgen_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def snapshot(proxy: Proxy, upstream: Proc) -> CpuSnapshot:
    return CpuSnapshot(time.monotonic(), proxy.proc.cpu(), upstream.cpu(), _loadgen_cpu())


def cpu_since(before: CpuSnapshot, proxy: Proxy, upstream: Proc) -> dict[str, float]:
    now = snapshot(proxy, upstream)
    return {
        "wall_s": now.wall - before.wall,
        "proxy_cpu_s": now.proxy - before.proxy,
        "upstream_cpu_s": now.upstream - before.upstream,
        "loadgen_cpu_s": now.loadgen - before.loadgen,
    }


async def one_stream(
    port: int,
    dialect: str,
    events: int,
    pace: float,
    delays: Delays | None,
    start_after: float = 0.0,
    per_chunk: int = 1,
) -> Stamps:
    """One streamed request: ``events`` events, at ``pace`` per second or (0) unpaced (read
    lazily, ``Conn``)."""
    if start_after:
        await asyncio.sleep(start_after)
    stamps = Stamps(events, delays)
    conn = await Conn.connect(port, lazy=not pace)
    try:
        raw = http_request(
            port, dialect, stream=True, events=events, pace=pace, per_chunk=per_chunk
        )
        timeout = (events / pace if pace else events / 2000) + 60
        resp = await conn.request(raw, stamps, timeout)
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {bytes(stamps.sample[:300])!r}")
        if stamps.total is None:
            raise RuntimeError("the stream ended without the upstream's last events")
    finally:
        conn.close()
    return stamps


async def warm_up(proxy: Proxy) -> dict[str, Any]:
    """One small request and one short stream; fail early with the log if they do not work."""
    dialect = proxy.config.dialect
    conn = await Conn.connect(proxy.port)
    try:
        sink = Collect()
        resp = await conn.request(http_request(proxy.port, dialect, stream=False), sink, 30)
        if resp.status != 200 or not RECEIVED.search(sink.body):
            raise RuntimeError(f"HTTP {resp.status}: {sink.body[:300]!r}")
    finally:
        conn.close()
    stamps = await one_stream(proxy.port, dialect, 20, 0.0, None)
    if stamps.unique != 20:
        raise RuntimeError(f"{stamps.unique} of 20 events arrived: {bytes(stamps.sample[:600])!r}")
    invoke_call = b"tool_calls" in stamps.sample and b"read_file" in stamps.sample
    if proxy.config.route == "invoke" and not invoke_call:
        raise RuntimeError(f"no tool call parsed from the invoke text: {bytes(stamps.sample)!r}")
    return {"invoke_call_parsed": invoke_call}


async def small_requests(
    proxy: Proxy, upstream: Proc, total: int, concurrency: int
) -> dict[str, Any]:
    """``total`` small non-streamed requests on ``concurrency`` keep-alive connections."""
    raw = http_request(proxy.port, proxy.config.dialect, stream=False)
    errors = 0
    rss_before = proxy.proc.rss_mb()

    async def worker(n: int) -> None:
        nonlocal errors
        conn: Conn | None = None
        try:
            for _ in range(n):
                if conn is None or not conn.open:
                    conn = await Conn.connect(proxy.port)
                sink = Collect()
                try:
                    resp = await conn.request(raw, sink, IO_TIMEOUT)
                except (ConnectionError, TimeoutError):
                    errors += 1
                    conn.close()
                    conn = None
                    continue
                if resp.status != 200:
                    errors += 1
                if not resp.keep_alive:
                    conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()

    before = snapshot(proxy, upstream)
    share = [
        total // concurrency + (1 if i < total % concurrency else 0) for i in range(concurrency)
    ]
    await asyncio.gather(*(worker(n) for n in share))
    cpu = cpu_since(before, proxy, upstream)
    await asyncio.sleep(0.2)  # let the proxy finish closing connections
    return {
        "requests": total,
        "errors": errors,
        "requests_per_s": total / cpu["wall_s"],
        "rss_before_mb": rss_before,
        "rss_after_mb": proxy.proc.rss_mb(),
        **cpu,
    }


async def unpaced_window(
    proxy: Proxy, upstream: Proc, streams: int, each: int, per_chunk: int = 1
) -> dict[str, Any]:
    """One window: ``streams`` at once, ``each`` events each, as fast as they go."""
    dialect = proxy.config.dialect
    before = snapshot(proxy, upstream)
    results = await asyncio.gather(
        *(
            one_stream(proxy.port, dialect, each, 0.0, None, per_chunk=per_chunk)
            for _ in range(streams)
        ),
        return_exceptions=True,
    )
    cpu = cpu_since(before, proxy, upstream)
    ok = [r for r in results if isinstance(r, Stamps)]
    failed = [r for r in results if not isinstance(r, Stamps)]
    received = sum(s.unique for s in ok)
    wall = cpu["wall_s"]
    return {
        "streams": streams,
        "events_per_stream": each,
        "events_received": received,
        "events_per_s": received / wall,
        "proxy_cpu_us_per_event": 1e6 * cpu["proxy_cpu_s"] / received if received else float("nan"),
        "proxy_cpu_pct": 100 * cpu["proxy_cpu_s"] / wall,
        "upstream_cpu_pct": 100 * cpu["upstream_cpu_s"] / wall,
        "loadgen_cpu_pct": 100 * cpu["loadgen_cpu_s"] / wall,
        "lost": sum(s.lost for s in ok) + each * len(failed),
        "reordered": sum(s.reordered for s in ok),
        "failed_streams": len(failed),
        "first_error": repr(failed[0]) if failed else None,
        "rss_after_mb": proxy.proc.rss_mb(),
        **cpu,
    }


async def unpaced(
    proxy: Proxy,
    upstream: Proc,
    streams: int,
    seconds: float,
    min_events: int,
    rate_hint: float | None = None,
    per_chunk: int = 1,
) -> dict[str, Any]:
    """``streams`` at once, each as fast as it goes, about ``seconds`` long and at least
    ``min_events`` events (so that starting the requests is a small part of it).

    mitmproxy reads from the upstream whatever the client takes (no backpressure), so an
    upstream that stops after some time would not bound the run: the number of events is
    set instead, from ``rate_hint`` (events/s) or from shorter runs' rates (a few, each up
    to 10 times longer than the one before, until one lasts at least half of ``seconds``);
    the last run is the result."""
    guess = int(rate_hint * seconds / streams) if rate_hint else 4000 // streams
    each = min(MAX_EVENTS, max(min_events, guess))
    for attempt in range(5):
        r = await unpaced_window(proxy, upstream, streams, each, per_chunk)
        if r["wall_s"] >= seconds / 2 or attempt == 4 or each >= MAX_EVENTS:
            break
        if r["failed_streams"]:
            break  # the figures say so; a longer run would not help
        grow = min(10.0, seconds / max(r["wall_s"], 1e-3))
        each = min(MAX_EVENTS, max(each + 1, int(each * grow)))
    return r


PAIRED = ("events_per_s", "proxy_cpu_us_per_event")
"""The unpaced figures whose ratio to bare is taken pair by pair (``unpaced_paired``)."""


async def unpaced_paired(
    plan: Plan,
    upstream: Proc,
    proxies: Sequence[Proxy],
    streams: int,
    per_chunk: int,
    say: Progress,
    kind: str,
) -> dict[str, dict[str, Any]]:
    """Unpaced throughput as ratios that the machine's changes of speed do not set.

    This VM runs at one speed for some seconds, then at another (bare mitmdump's best and
    worst 3 s rounds of one run differ by 1.8 times). So bare mitmdump (``proxies[0]``) is
    measured between every two windows of the other columns, each window about
    ``plan.unpaced_seconds`` long: bare, A, bare, B, bare, …, each round in another order.
    A window's ratio is its figure over the geometric mean of the bare windows either side
    of it (a change of speed that lasts longer than a window cancels out); a column's ratio
    is the median of its ``plan.unpaced_rounds`` pairs, its figures the median of its
    windows. What was lost or reordered in any window stays counted.

    Every column gets the same load: the events per stream that make bare mitmdump's window
    about ``plan.unpaced_seconds`` long (a slower column's window lasts longer). Starting a
    stream costs every proxy something, more so with many at once: with fewer events per
    stream, a slower column would pay that cost over fewer events and look slower still."""
    base, others = proxies[0], list(proxies[1:])
    seconds = plan.unpaced_seconds
    each: dict[str, int] = {}
    errors: dict[str, str] = {}
    for p in proxies:  # the events a window needs for ``seconds``: bare's, else each column's
        try:
            r = await unpaced(
                p, upstream, streams, seconds, plan.unpaced_min_events, None, per_chunk
            )
        except Exception as e:
            errors[p.config.key] = f"{type(e).__name__}: {e}"[:500]
            continue
        rate = r["events_per_s"] * seconds / streams
        each[p.config.key] = min(MAX_EVENTS, max(plan.unpaced_min_events, int(rate)))
        if p is base:
            each = dict.fromkeys((q.config.key for q in proxies), each[base.config.key])
            break
    windows: dict[str, list[dict[str, Any]]] = {p.config.key: [] for p in proxies}
    pairs: dict[str, dict[str, list[float]]] = {
        p.config.key: {k: [] for k in PAIRED} for p in others
    }

    async def window(p: Proxy) -> dict[str, Any] | None:
        key = p.config.key
        if key in errors:
            return None
        try:
            r = await unpaced_window(p, upstream, streams, each[key], per_chunk)
        except Exception as e:
            errors[key] = f"{type(e).__name__}: {e}"[:500]
            say(f"{kind:9} {key:9} {streams:3}: ERROR {errors[key][:200]}")
            return None
        windows[key].append(r)
        say(
            f"{kind:9} {key:9} {streams:3} {X} {r['events_per_stream']}: {r['events_per_s']:7.0f}"
            f" ev/s, {r['proxy_cpu_us_per_event']:5.1f} µs/event, lost {r['lost']}, failed"
            f" {r['failed_streams']}, CPU % proxy {r['proxy_cpu_pct']:.0f} upstream"
            f" {r['upstream_cpu_pct']:.0f} load gen {r['loadgen_cpu_pct']:.0f}"
            f" in {r['wall_s']:.2f} s"
        )
        return r

    before = await window(base)
    for turn in range(plan.unpaced_rounds * len(others)):
        if before is None:
            break  # bare mitmdump failed: nothing left to pair with
        p = others[(turn + turn // len(others)) % len(others)]  # each round in another order
        r = await window(p)
        after = await window(base)
        if r is not None and after is not None:
            for k in PAIRED:
                pairs[p.config.key][k].append(r[k] / (before[k] * after[k]) ** 0.5)
        before = after
    out: dict[str, dict[str, Any]] = {}
    for p in proxies:
        key = p.config.key
        if not windows[key]:
            out[key] = {"error": errors.get(key, "no window measured")}
            continue
        out[key] = summarize_windows(windows[key], pairs.get(key))
        if key in errors:
            out[key]["error_later"] = errors[key]
    return out


def summarize_windows(
    windows: Sequence[dict[str, Any]], pairs: dict[str, list[float]] | None
) -> dict[str, Any]:
    """A column's windows as one measurement: the median of each figure, the sum of what
    was lost, and (not bare) each paired figure's ratios, sorted, with their median."""

    out: dict[str, Any] = {
        k: statistics.median(w[k] for w in windows)
        for k in (
            *PAIRED,
            "proxy_cpu_pct",
            "upstream_cpu_pct",
            "loadgen_cpu_pct",
            "wall_s",
        )
    }
    out.update(
        streams=windows[0]["streams"],
        events_per_stream=windows[0]["events_per_stream"],
        windows=len(windows),
        events_per_s_each=[w["events_per_s"] for w in windows],
        lost=sum(w["lost"] for w in windows),
        reordered=sum(w["reordered"] for w in windows),
        failed_streams=sum(w["failed_streams"] for w in windows),
        first_error=next((w["first_error"] for w in windows if w["first_error"]), None),
        rss_after_mb=windows[-1]["rss_after_mb"],
    )
    for k, ratios in (pairs or {}).items():
        if ratios:
            out[f"{k}_ratios"] = sorted(ratios)
            out[f"{k}_ratio"] = statistics.median(ratios)
    return out


async def paced(
    proxy: Proxy, upstream: Proc, streams: int, events: int, pace: float, spread: float
) -> dict[str, Any]:
    """``streams`` streams of ``events`` at ``pace`` each, their starts spread over ``spread``
    seconds. Delays and CPU are taken in the steady state (all streams started, none ended
    yet; from 0.1 s after the last start); delays over the whole run are in the JSON too."""
    start = time.monotonic_ns()
    lo, hi = start + int((spread + 0.1) * 1e9), start + int(events / pace * 1e9)
    steady = hi - lo >= 200_000_000
    delays = Delays((lo, hi) if steady else None)
    rss: list[float] = []
    window: list[CpuSnapshot] = []
    stop = asyncio.Event()

    async def sample() -> None:
        for _ in range(1_000_000):
            due = lo if not window else hi
            if steady and len(window) < 2 and time.monotonic_ns() >= due:
                window.append(snapshot(proxy, upstream))
            rss.append(proxy.proc.rss_mb())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05 if steady and len(window) < 2 else 0.25)
            if stop.is_set():
                return

    sampler = asyncio.create_task(sample())
    before = snapshot(proxy, upstream)
    try:
        results = await asyncio.gather(
            *(
                one_stream(
                    proxy.port, proxy.config.dialect, events, pace, delays, i * spread / streams
                )
                for i in range(streams)
            ),
            return_exceptions=True,
        )
    finally:
        stop.set()
        await sampler
    cpu = cpu_since(before, proxy, upstream)
    if len(window) == 2:
        a, b = window
        span = b.wall - a.wall
        pct = [100 * (b.proxy - a.proxy) / span, 100 * (b.upstream - a.upstream) / span]
        pct.append(100 * (b.loadgen - a.loadgen) / span)
    else:  # no steady window: the whole run
        span = cpu["wall_s"]
        pct = [100 * cpu[k] / span for k in ("proxy_cpu_s", "upstream_cpu_s", "loadgen_cpu_s")]
    ok = [r for r in results if isinstance(r, Stamps)]
    failed = [r for r in results if not isinstance(r, Stamps)]
    chosen = delays.steady if steady else delays.all
    chosen.sort()
    delays.all.sort()
    return {
        "streams": streams,
        "events_per_stream": events,
        "pace": pace,
        "steady_window_s": span if len(window) == 2 else None,
        "delay_samples": len(chosen),
        "delay_p50_ms": percentile(chosen, 0.50) / 1e6,
        "delay_p99_ms": percentile(chosen, 0.99) / 1e6,
        "delay_max_ms": (chosen[-1] / 1e6) if chosen else float("nan"),
        "delay_all_p50_ms": percentile(delays.all, 0.50) / 1e6,
        "delay_all_p99_ms": percentile(delays.all, 0.99) / 1e6,
        "delay_all_max_ms": (delays.all[-1] / 1e6) if delays.all else float("nan"),
        "lost": sum(s.lost for s in ok) + events * len(failed),
        "reordered": sum(s.reordered for s in ok),
        "failed_streams": len(failed),
        "first_error": repr(failed[0]) if failed else None,
        "proxy_cpu_pct": pct[0],
        "upstream_cpu_pct": pct[1],
        "loadgen_cpu_pct": pct[2],
        "rss_max_mb": max(rss) if rss else float("nan"),
        **cpu,
    }


async def body_to_upstream(proxy: Proxy, raw: bytes) -> float:
    """Seconds from the first byte sent until the upstream had the whole body."""
    conn = await Conn.connect(proxy.port)
    try:
        sink = Collect()
        sent = time.monotonic_ns()
        resp = await conn.request(raw, sink, 120)
        m = RECEIVED.search(sink.body)
        if resp.status != 200 or not m:
            raise RuntimeError(f"HTTP {resp.status}: {sink.body[:300]!r}")
        return (int(m.group(1)) - sent) / 1e9
    finally:
        conn.close()
