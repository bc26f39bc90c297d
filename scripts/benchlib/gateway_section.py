"""Section 3 (``scripts/bench --gateway``): the bridge's workers behind HAProxy, as
``scripts/gateway`` runs them, against bare mitmdump in the same run.

Columns, each before the same scripted upstream and measured by the same load generator as
section 2 (OpenAI→OpenAI, Cursor's route):

- bare mitmdump (the baseline of every ratio);
- HAProxy in front of bare mitmdump (with ``addon/health.py`` loaded to answer HAProxy's
  health check): what HAProxy alone costs;
- the bridge, one worker, no HAProxy (section 2's OpenAI→OpenAI column);
- HAProxy in front of one bridge worker;
- HAProxy in front of two bridge workers;
- the bridge, one worker, its store in memory, on a route with a key pool of two keys and a
  client keys file whose key (the one the load generator sends) has limits — rpm, tpm,
  max_parallel and a budget, too high ever to refuse, so that every request takes the limits'
  steps: checked, reserved, priced, settled (``POOL_ROUTES``, ``CLIENT_KEYS``);
- the same worker with its store (reasoning, usage ledger, cooldowns, the key pool's choice and
  the client key's counts) on a Redis of the run's own (issue 43: against the in-memory
  column, events/s and CPU per event);
- the same with that Redis slowed by 5 ms per answer (a delaying TCP forwarder,
  ``tests/delay_forwarder.py``): the paced runs' p99 added delay against the full-speed one's
  (``store_summary``).

HAProxy's configuration is ``scripts/gateway.py``'s (``haproxy_config``: leastconn, the health
check every second, ``http-no-delay``). A column's CPU and memory are those of all its
processes (HAProxy and its workers). The processes are not pinned to CPUs: two workers need
two CPUs to be worth anything, and on a 2-core machine the upstream and the load generator
take part of the second one, which the figures show.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway import HEALTH_SCRIPT, haproxy_config

from benchlib.base import CLIENT_KEY, HOST, REPO, START_TIMEOUT, X, free_port
from benchlib.measuring import paced, unpaced_paired, warm_up
from benchlib.plan import Plan, Progress
from benchlib.processes import (
    POOL_KEYS,
    Config,
    Proc,
    Proxy,
    can_connect,
    start_proxies,
    start_upstream,
)
from benchlib.run import guarded, paced_capacity


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    bridge: bool
    workers: int
    haproxy: bool
    store: str = ""
    """``redis``: ``bridge_store`` on the run's Redis; ``slow``: through the 5 ms forwarder."""
    limits: bool = False
    """A key pool on the route (``POOL_ROUTES``) and the client keys file (``CLIENT_KEYS``)."""


COLUMNS: tuple[Column, ...] = (
    Column("bare", "bare mitmdump", bridge=False, workers=1, haproxy=False),
    Column("haproxy_bare", "HAProxy → bare mitmdump", bridge=False, workers=1, haproxy=True),
    Column("bridge", "bridge, 1 worker, no HAProxy", bridge=True, workers=1, haproxy=False),
    Column("haproxy_1", "HAProxy → 1 bridge worker", bridge=True, workers=1, haproxy=True),
    Column("haproxy_2", "HAProxy → 2 bridge workers", bridge=True, workers=2, haproxy=True),
    Column("pool", "bridge, 1 worker, key pool + client key limits", True, 1, False, limits=True),
    Column("redis", "the same, Redis store", True, 1, False, store="redis", limits=True),
    Column("redis_slow", "the same, Redis 5 ms late", True, 1, False, store="slow", limits=True),
)
POOL_ROUTES = f"""
[[routes]]
name = "chat"
path = "*/chat/completions"
api_key_env = [{", ".join(f'"{name}"' for name in POOL_KEYS)}]
price = {{input = 2.0, output = 8.0}}
"""
"""OpenAI→OpenAI on a key pool of two keys (so every flow goes through the relay, a key chosen
for its conversation), priced for the client key's budget whatever the price table knows."""
CLIENT_KEYS = f"""
bench = {{ key = "{CLIENT_KEY}", rpm = 1000000, tpm = 1000000000, max_parallel = 10000, \
budget_usd = 1000000.0, budget_period = "month" }}
"""
"""The load generator's key, with every limit: far above what a run asks, never refusing (one
line: the backslash joins them, as TOML's inline tables take no line break)."""
SLOW_REDIS = 0.005
"""Seconds the forwarder holds each of Redis's answers in the ``slow`` column."""
STORE_PACED = 30
"""Paced streams of the store's own comparison (issue 43 measured main with 30): the Redis
column and the slowed one in turn, ``STORE_ROUNDS`` times, below saturation."""
STORE_ROUNDS = 3

GATEWAY_FULL = Plan(
    requests=0,
    unpaced_streams=(1, 10, 50),
    unpaced_seconds=1.0,
    unpaced_min_events=400,
    paced_streams=(100, 200, 300, 400),
    paced_events=600,
    pace=100.0,
    spread=1.0,
    body_sizes=(),
    body_reps=0,
    unpaced_rounds=5,
)
GATEWAY_QUICK = Plan(
    requests=0,
    unpaced_streams=(1, 10, 50),
    unpaced_seconds=0.3,
    unpaced_min_events=100,
    paced_streams=(50,),
    paced_events=80,
    pace=100.0,
    spread=0.2,
    body_sizes=(),
    body_reps=0,
)


class Group(Proc):
    """A column's processes (HAProxy and its workers) as one: CPU and memory summed."""

    def __init__(self, name: str, procs: Sequence[Proc]) -> None:  # spawns nothing
        self.name = name
        self.procs = list(procs)
        self.log = self.procs[0].log
        self.popen = self.procs[0].popen
        self.pid = self.procs[0].pid

    def alive(self) -> bool:
        return all(p.alive() for p in self.procs)

    def cpu(self) -> float:
        return sum(p.cpu() for p in self.procs)

    def cpu_each(self) -> dict[str, float]:
        return {p.name: p.cpu() for p in self.procs}

    def rss_mb(self) -> float:
        return sum(p.rss_mb() for p in self.procs)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(f"--- {p.name}\n{p.log_tail(lines)}" for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            p.stop()


def start_haproxy(program: str, name: str, ports: Sequence[int], tmp: Path) -> tuple[Proc, int]:
    """HAProxy with scripts/gateway's configuration before ``ports``; until it listens."""
    for _attempt in range(5):
        port = free_port()
        cfg = tmp / f"haproxy-{name}.cfg"
        cfg.write_text(haproxy_config(HOST, port, [(HOST, p) for p in ports]))
        proc = Proc(f"{name}.haproxy", [program, "-db", "-f", str(cfg)], tmp / f"{name}.log")
        deadline = time.monotonic() + START_TIMEOUT
        while proc.alive() and not can_connect(port):
            if time.monotonic() > deadline:
                proc.stop()
                raise RuntimeError(f"HAProxy ({name}) not listening:\n{proc.log_tail()}")
            time.sleep(0.05)
        if proc.alive():
            return proc, port
        if "cannot bind" not in proc.log_tail().lower():
            raise RuntimeError(f"HAProxy ({name}) exited:\n{proc.log_tail()}")
    raise RuntimeError(f"HAProxy ({name}): no free port in 5 tries")


@contextlib.contextmanager
def running_columns(
    columns: Sequence[Column], haproxy: str
) -> Iterator[tuple[Proc, list[Proxy], list[Group]]]:
    """The upstream, every column's workers and HAProxy; all stopped on the way out."""
    procs: list[Proc] = []
    with (
        tempfile.TemporaryDirectory(prefix="cursor-bridge-bench-gateway-") as name,
        contextlib.ExitStack() as stack,
    ):
        tmp = Path(name)
        try:
            upstream, upstream_port = start_upstream(tmp)
            procs.append(upstream)
            stores = stack.enter_context(redis_stores(columns))
            clients = tmp / "clients.toml"
            clients.write_text(CLIENT_KEYS)
            configs = [
                Config(
                    f"{c.key}.w{i}",
                    f"{c.title}, worker {i}",
                    "openai",
                    bridge=c.bridge,
                    options=(
                        *((("bridge_store", stores[c.store]),) if c.store else ()),
                        *((("bridge_client_keys", str(clients)),) if c.limits else ()),
                    ),
                    routes=POOL_ROUTES if c.limits else "",
                    scripts=(HEALTH_SCRIPT,) if c.haproxy else (),
                )
                for c in columns
                for i in range(1, c.workers + 1)
            ]
            workers = start_proxies(configs, upstream_port, tmp)
            procs += [w.proc for w in workers]
            proxies: list[Proxy] = []
            groups: list[Group] = []
            for c in columns:
                mine = [w for w in workers if w.config.key.startswith(c.key + ".")]
                config = Config(c.key, c.title, "openai", bridge=c.bridge)
                if not c.haproxy:
                    proxies.append(Proxy(config, mine[0].proc, mine[0].port))
                    continue
                front, port = start_haproxy(haproxy, c.key, [w.port for w in mine], tmp)
                procs.append(front)
                group = Group(c.key, [front, *(w.proc for w in mine)])
                groups.append(group)
                proxies.append(Proxy(config, group, port))
            yield upstream, proxies, groups
        finally:
            for proc in procs:
                with contextlib.suppress(Exception):
                    proc.stop()
            for child in _children():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)


@contextlib.contextmanager
def redis_stores(columns: Sequence[Column]) -> Iterator[dict[str, str]]:
    """A ``redis-server`` of the run's own and the 5 ms forwarder before it, when a column
    asks: ``bridge_store`` URL by column ``store``."""
    if not any(c.store for c in columns):
        yield {}
        return
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.delay_forwarder import DelayForwarder
    from tests.redis_server import RedisServer, redis_server_program

    program = redis_server_program()
    if program is None:
        raise RuntimeError("redis-server is not installed: scripts/services.py installs it")
    with (
        RedisServer(program) as server,
        DelayForwarder(server.port, SLOW_REDIS) as slow,
    ):
        yield {"redis": server.url, "slow": f"redis://{HOST}:{slow.port}/1"}


def store_summary(results: dict[str, Any]) -> str:
    """Issue 43's figures: the Redis column against the in-memory one with the same key pool
    and client key limits (events/s, CPU per event, unpaced; bound: at least 0.9x, at most
    1.11x), and the slowed Redis's paced p99 added delay against full speed's (at most 5 ms)."""
    lines = []
    mem, red, slow = (results.get(k, {}) for k in ("pool", "redis", "redis_slow"))
    for key, m in mem.items():
        r = red.get(key)
        if not (key.startswith("unpaced_") and isinstance(m, dict) and isinstance(r, dict)):
            continue
        try:
            # Each column's ratio to the bare windows beside its own (the median of its pairs):
            # the machine's drift between the two columns' windows cancels out.
            eps = r["events_per_s_ratio"] / m["events_per_s_ratio"]
            cpu = r["proxy_cpu_us_per_event_ratio"] / m["proxy_cpu_us_per_event_ratio"]
        except (KeyError, TypeError, ZeroDivisionError):
            continue
        held = "holds" if eps >= 0.9 and cpu <= 1.11 else "does NOT hold"
        lines.append(
            f"- {key}: Redis store / in memory: {eps:.2f}{X} events/s, {cpu:.2f}{X} CPU per event"
            f" (bound >= 0.9{X}, <= 1.11{X}: {held})"
        )
    for key, r in red.items():
        s = slow.get(key)
        paced_run = key.startswith("paced_") or key == "store_paced"
        if not (paced_run and isinstance(r, dict) and isinstance(s, dict)):
            continue
        try:
            added = s["delay_p99_ms"] - r["delay_p99_ms"]
        except (KeyError, TypeError):
            continue
        held = "holds" if added <= 5.0 else "does NOT hold"
        if key == "store_paced":
            key = f"paced {STORE_PACED} streams, median of {STORE_ROUNDS} rounds in turn"
        lines.append(
            f"- {key}: p99 delay {r['delay_p99_ms']:.2f} ms with Redis at full speed, "
            f"{s['delay_p99_ms']:.2f} ms with it 5 ms late ({added:+.2f} ms; bound +5 ms:"
            f" {held})"
        )
    return "\n".join(lines)


def _children() -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path("/proc/self/task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(x) for x in (task / "children").read_text().split()]
    return out


async def measure_gateway(
    plan: Plan, upstream: Proc, proxies: list[Proxy], groups: list[Group], say: Progress
) -> dict[str, dict[str, Any]]:
    res: dict[str, dict[str, Any]] = {p.config.key: {} for p in proxies}
    for p in proxies:
        res[p.config.key]["warm_up"] = await warm_up(p)
        res[p.config.key]["rss_idle_mb"] = p.proc.rss_mb()
    say("all columns answer: " + ", ".join(p.config.key for p in proxies))
    cpu_before = {g.name: g.cpu_each() for g in groups}
    for n in plan.unpaced_streams:
        row = await unpaced_paired(plan, upstream, proxies, n, 1, say, "unpaced")
        for key, m in row.items():
            res[key][f"unpaced_{n}"] = m
        say(
            f"unpaced   {n:3} streams, ratio to bare (median of pairs): "
            + ", ".join(
                f"{key} {m['events_per_s_ratio']:.2f}{X}"
                for key, m in row.items()
                if "events_per_s_ratio" in m
            )
        )
    for g in groups:
        after = g.cpu_each()
        res[g.name]["unpaced_cpu_s_by_process"] = {
            k: after[k] - cpu_before[g.name][k] for k in after
        }
    for k in plan.paced_streams:
        for p in proxies:
            key = p.config.key
            job = paced(p, upstream, k, plan.paced_events, plan.pace, plan.spread)
            if r := await guarded(res[key], f"paced_{k}", job, say, f"paced {k} {key}"):
                say(
                    f"paced     {key:12} K={k:3}: delay p50 {r['delay_p50_ms']:6.2f} ms"
                    f" p99 {r['delay_p99_ms']:7.2f} ms, lost {r['lost']}, CPU % column"
                    f" {r['proxy_cpu_pct']:.0f} upstream {r['upstream_cpu_pct']:.0f} load gen"
                    f" {r['loadgen_cpu_pct']:.0f}"
                )
    for p in proxies:
        res[p.config.key]["paced_capacity"] = paced_capacity(res[p.config.key])
    await store_rounds(plan, upstream, proxies, res, say)
    return res


async def store_rounds(
    plan: Plan,
    upstream: Proc,
    proxies: list[Proxy],
    res: dict[str, dict[str, Any]],
    say: Progress,
) -> None:
    """``STORE_PACED`` paced streams through the Redis column and the slowed one in turn,
    ``STORE_ROUNDS`` times (``store_paced`` in each: every run, and the median p50 / p99): the
    difference of two p99s is read from runs seconds apart, not minutes."""
    pair = [p for p in proxies if p.config.key in ("redis", "redis_slow")]
    if len(pair) != 2:
        return
    runs: dict[str, list[dict[str, Any]]] = {p.config.key: [] for p in pair}
    for i in range(STORE_ROUNDS):
        for p in pair if i % 2 == 0 else pair[::-1]:
            key = p.config.key
            job = paced(p, upstream, STORE_PACED, plan.paced_events, plan.pace, plan.spread)
            got: dict[str, Any] = {}
            if r := await guarded(got, "run", job, say, f"store paced {key}"):
                runs[key].append(r)
                say(
                    f"store     {key:12} K={STORE_PACED:3} round {i + 1}: delay p50"
                    f" {r['delay_p50_ms']:6.2f} ms p99 {r['delay_p99_ms']:7.2f} ms, lost {r['lost']}"
                )
    for key, got_runs in runs.items():
        if got_runs:
            res[key]["store_paced"] = {
                "streams": STORE_PACED,
                "runs": got_runs,
                "delay_p50_ms": statistics.median(r["delay_p50_ms"] for r in got_runs),
                "delay_p99_ms": statistics.median(r["delay_p99_ms"] for r in got_runs),
            }


def run_gateway(
    plan: Plan, columns: Sequence[Column], haproxy: str, say: Progress
) -> tuple[dict[str, Any], list[Config]]:
    """Each column's measurements, and the configs (for the table)."""
    with running_columns(columns, haproxy) as (upstream, proxies, groups):
        say(
            f"upstream pid {upstream.pid}; "
            + ", ".join(f"{p.config.key} on port {p.port}" for p in proxies)
            + "; processes not pinned"
        )
        results = asyncio.run(measure_gateway(plan, upstream, proxies, groups, say))
        return results, [p.config for p in proxies]


def cpu_split(results: dict[str, Any]) -> str:
    """One line per HAProxy column: how its unpaced CPU was spread over its processes."""
    lines = []
    for key, r in results.items():
        split = r.get("unpaced_cpu_s_by_process")
        if not split:
            continue
        total = sum(split.values()) or 1.0
        parts = ", ".join(
            f"{name.split('.', 1)[-1]} {100 * s / total:.0f}%" for name, s in split.items()
        )
        lines.append(f"- {key}: {parts} of {total:.1f} CPU s")
    return "\n".join(lines)
