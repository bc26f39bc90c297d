"""The command line: ``scripts/bench``'s flags, the two sections in turn, the tables printed."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

import benchlib
from benchlib.base import X
from benchlib.baseline import BaselineError, baseline_table, checkout, with_baselines
from benchlib.gateway_section import (
    COLUMNS,
    GATEWAY_FULL,
    GATEWAY_QUICK,
    cpu_split,
    run_gateway,
    store_summary,
)
from benchlib.inprocess import bench_request, bench_stream, host
from benchlib.plan import FULL, QUICK, Progress
from benchlib.processes import CONFIGS
from benchlib.run import run_proxies
from benchlib.table import inprocess_table, proxy_table
from benchlib.upstream import serve_upstream


def run_inprocess(reps: int, say: Progress) -> dict[str, Any]:
    out: dict[str, Any] = {"reps": reps}
    for key, protocol in (("stream", False), ("textproto", True)):
        base, ours, size = bench_stream(reps, protocol=protocol)
        out[key] = {
            "bytes": size,
            "bridge_ms": ours * 1e3,
            "baseline_ms": base * 1e3,
            "ratio": ours / base,
            "mb_per_s": size / ours / 1e6,
        }
        say(
            f"{key:9} {size / 1e6:4.2f} MB SSE: processor {ours * 1e3:7.1f} ms vs line split"
            f" {base * 1e3:6.1f} ms → {ours / base:4.1f}{X} ({size / ours / 1e6:.1f} MB/s)"
        )
    base, ours, size = bench_request(reps)
    out["request"] = {
        "bytes": size,
        "bridge_ms": ours * 1e3,
        "baseline_ms": base * 1e3,
        "ratio": ours / base,
    }
    say(
        f"request   {size / 1e6:4.2f} MB Cursor body: decode+transforms+encode {ours * 1e3:6.1f} ms"
        f" vs json.loads+dumps {base * 1e3:6.1f} ms → {ours / base:4.1f}{X}"
    )
    return out


def _raise_nofile() -> None:
    """Room for 400 streams: each is a socket here, two in mitmdump, one in the upstream."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 8192 if hard == resource.RLIM_INFINITY else min(8192, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=benchlib.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a reduced run (under a minute)")
    parser.add_argument("--no-proxy", action="store_true", help="only the in-process section")
    parser.add_argument("--json", metavar="PATH", type=Path, help="write the raw numbers here")
    parser.add_argument(
        "--routes",
        metavar="KEYS",
        default=",".join(c.key for c in CONFIGS[1:]),
        help="columns besides bare mitmdump, which is always measured; comma-separated"
        " (default: all of " + ", ".join(c.key for c in CONFIGS[1:]) + ")",
    )
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="leave the proxies, the upstream and the load generator to the scheduler (default:"
        " the proxies on the last CPU, the rest on the others)",
    )
    parser.add_argument(
        "--gateway",
        action="store_true",
        help="only section 3: the bridge's workers behind HAProxy (scripts/gateway) against"
        " bare mitmdump, HAProxy before bare mitmdump and one worker alone (needs haproxy)",
    )
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also measure each route as the commit REF (a branch, tag or id) has it, in a git"
        " worktree of its own, as a column beside the work tree's; a table of work tree / REF"
        " follows",
    )
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream()
        return
    if args.gateway:
        sys.exit(main_gateway(args.quick, args.json))

    # SIGTERM ends the run like Ctrl-C: the finally blocks stop every child.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    wanted = {k.strip() for k in args.routes.split(",") if k.strip()}
    unknown = wanted - {c.key for c in CONFIGS}
    if unknown:
        parser.error(f"unknown route(s) {', '.join(sorted(unknown))}")
    configs = [c for c in CONFIGS if c.key == "bare" or c.key in wanted]
    if args.baseline and args.no_proxy:
        parser.error("--baseline measures mitmdump columns: it cannot go with --no-proxy")
    plan = QUICK if args.quick else FULL
    reps = 3 if args.quick else 7
    say = Progress()
    report: dict[str, Any] = {
        "quick": args.quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": sys.platform,
            **host(),
        },
    }
    m = report["machine"]
    say(
        f"host: {m['cpu_model'] or 'CPU model unknown'}; a 1,000-step Python loop"
        f" {m['python_loop_us']:.1f} µs, a msgspec read and write of one stream event"
        f" {m['json_event_ns']:.0f} ns"
    )
    say(f"section 1: in process (best of {reps}; ratio = bridge / baseline, lower is better)")
    report["in_process"] = run_inprocess(reps, say)
    tables = ["### In process\n", inprocess_table(report["in_process"])]
    if not args.no_proxy:
        _raise_nofile()
        say("section 2: mitmdump on 127.0.0.1 (ratio = bridge column / bare mitmdump column)")
        report["plan"] = plan.__dict__
        load_before = _loadavg()
        with contextlib.ExitStack() as stack:
            if args.baseline:
                try:
                    root, short = stack.enter_context(checkout(args.baseline))
                except BaselineError as e:
                    parser.error(str(e))
                label = f"{args.baseline} ({short})" if short != args.baseline else short
                configs = with_baselines(configs, root, label)
                report["baseline"] = {"ref": args.baseline, "commit": short}
                say(f"baseline: {label} checked out in {root}")
            report["configs"] = {c.key: c.title for c in configs}
            report["proxy"], placed = run_proxies(plan, configs, say, pinned=not args.no_pin)
        report["machine"]["placement"] = placed
        report["machine"]["loadavg_1min"] = [load_before, _loadavg()]
        say(f"1-minute load average {load_before} at the start, {_loadavg()} at the end")
        tables += [
            "\n### Through mitmdump on 127.0.0.1\n",
            f"Ratios in parentheses: bridge column / bare mitmdump. {os.cpu_count()} CPUs"
            f" ({placed}); CPU is shown for the proxy, the scripted upstream and the load"
            f" generator. Host: {m['cpu_model'] or 'CPU model unknown'}; a 1,000-step Python"
            f" loop takes {m['python_loop_us']:.1f} µs, a msgspec read and write of one"
            f" stream event {m['json_event_ns']:.0f} ns; 1-minute load average"
            f" {load_before} at the start of this section, {m['loadavg_1min'][1]} at its end"
            " (other work on the machine shows there).\n",
            proxy_table(plan, configs, report["proxy"]),
        ]
        if args.baseline:
            tables += [
                f"\n### Work tree against {args.baseline}\n",
                "Each figure: the work tree's ratio to bare mitmdump over the baseline's, both"
                " from the same run (below 1 for events/s, above 1 for CPU: the work tree is"
                " slower).\n",
                baseline_table(plan, configs, report["proxy"]),
            ]
    say("done")
    print()
    print("\n".join(tables))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nraw numbers: {args.json}")


def main_gateway(quick: bool, json_path: Path | None) -> int:
    """Section 3 alone (``--gateway``); 3 when HAProxy is not installed."""
    from gateway import find_haproxy, install_hint

    haproxy = find_haproxy()
    if haproxy is None:
        print(install_hint(), file=sys.stderr)
        return 3
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    _raise_nofile()
    plan = GATEWAY_QUICK if quick else GATEWAY_FULL
    say = Progress()
    machine = {"cpus": os.cpu_count(), "python": sys.version.split()[0], **host()}
    say(
        f"host: {machine['cpu_model'] or 'CPU model unknown'}; a 1,000-step Python loop"
        f" {machine['python_loop_us']:.1f} µs"
    )
    say(
        "section 3: workers behind HAProxy on 127.0.0.1 (ratio = column / bare mitmdump;"
        " a column's CPU is all its processes')"
    )
    load_before = _loadavg()
    results, configs = run_gateway(plan, COLUMNS, haproxy, say)
    machine["loadavg_1min"] = [load_before, _loadavg()]
    say(f"done (1-minute load average {load_before} at the start, {_loadavg()} at the end)")
    print()
    print("### Workers behind HAProxy\n")
    print(
        f"Ratios in parentheses: column / bare mitmdump. {os.cpu_count()} CPUs, processes not"
        " pinned; CPU is the column's (HAProxy and its workers), the scripted upstream's and the"
        f" load generator's. Host: {machine['cpu_model'] or 'CPU model unknown'}; a 1,000-step"
        f" Python loop takes {machine['python_loop_us']:.1f} µs; 1-minute load average"
        f" {machine['loadavg_1min'][0]} at the start, {machine['loadavg_1min'][1]} at the end"
        " (other work on the machine shows there).\n"
    )
    print(proxy_table(plan, configs, results, only_measured=True))
    split = cpu_split(results)
    if split:
        print("\nCPU of the unpaced windows, by process:\n")
        print(split)
    store = store_summary(results)
    if store:
        print("\nThe store on Redis (issue 43):\n")
        print(store)
    if json_path:
        report = {"quick": quick, "machine": machine, "plan": plan.__dict__, "gateway": results}
        json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nraw numbers: {json_path}")
    return 0


def _loadavg() -> str:
    """The 1-minute load average (another job on the machine takes CPU from the run)."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"
