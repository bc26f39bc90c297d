#!/usr/bin/env python3
"""What one reasoning-store call costs the event loop, per backend: p50 / p99 / max µs of
``put``, ``get`` (a hit) and ``get`` (a miss), of ``secret``, and of a long conversation's
restore (200 call ids: one ``get`` each, or one ``get_many``),
in memory, in SQLite and in Redis (a ``redis-server`` of its own on a free loopback port, or
``--url`` for one of yours). The store's calls run in mitmproxy's hooks, on the event loop:
this is the time they hold it (docs/speed.md, "The reasoning store").

Values are shaped like a real record (a Gemini signature of ~1.3 KB and its call's extras).
Usage: ``.venv/bin/python scripts/bench_store.py [--n 5000] [--url redis://…] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from addon.stores.reasoning import ReasoningStore, Scope

SCOPE = Scope.of("cursor", "generativelanguage.googleapis.com", "gemini-3-pro-preview")
RECORD = {
    "thinking": [{"text": "", "signature": "CiQB" + "x" * 1300}],
    "extra": {"thoughtSignature": True},
}

HISTORY = [("call", f"c{i}") for i in range(200)]


def timed(n: int, call: Callable[[int], object]) -> dict[str, float]:
    """µs per call: p50, p99, max."""
    times = []
    for i in range(n):
        started = time.perf_counter_ns()
        call(i)
        times.append((time.perf_counter_ns() - started) / 1000)
    times.sort()
    return {
        "p50": statistics.median(times),
        "p99": times[min(len(times) - 1, int(len(times) * 0.99))],
        "max": times[-1],
    }


def measure(store: ReasoningStore, n: int) -> dict[str, dict[str, float]]:
    for i in range(200):  # warm up: connections, scripts loaded, caches
        store.put(SCOPE, "call", f"warm{i}", RECORD)
        store.get(SCOPE, "call", f"warm{i}")
    return {
        "put": timed(n, lambda i: store.put(SCOPE, "call", f"c{i}", RECORD)),
        "get hit": timed(n, lambda i: store.get(SCOPE, "call", f"c{i}")),
        "get miss": timed(n, lambda i: store.get(SCOPE, "call", f"none{i}")),
        "secret": timed(n, lambda i: store.secret),
        # A long conversation's restore: its 200 call ids, one by one and at once.
        "200 gets": timed(max(n // 50, 20), lambda i: [store.get(SCOPE, *k) for k in HISTORY]),
        "get_many": timed(max(n // 50, 20), lambda i: store.get_many(SCOPE, HISTORY)),
    }


@contextmanager
def redis_server() -> Iterator[str]:
    program = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(program).is_file():
        sys.exit("redis-server is not installed: scripts/services.py installs it")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        proc = subprocess.Popen(
            [program, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
             "--appendonly", "no", "--dir", folder],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        sys.exit("redis-server did not start")
                    time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000, help="calls of each kind")
    parser.add_argument("--url", help="a Redis of yours (default: one of its own)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, path in (("memory", ""), ("sqlite", str(Path(folder) / "store.sqlite"))):
            store = ReasoningStore(path)
            results[name] = measure(store, args.n)
            store.close()
    with redis_server() if args.url is None else _given(args.url) as url:
        store = ReasoningStore(url, notify=lambda notice: print(notice.text, file=sys.stderr))
        results["redis"] = measure(store, args.n)
        store.close()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'backend':8} {'call':9} {'p50 µs':>8} {'p99 µs':>8} {'max µs':>8}")
    for backend, calls in results.items():
        for call, t in calls.items():
            print(f"{backend:8} {call:9} {t['p50']:8.1f} {t['p99']:8.1f} {t['max']:8.0f}")
    return 0


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    sys.exit(main())
