"""``--baseline REF``: another commit's bridge measured as columns of the same run.

REF is checked out in a detached git worktree (removed at the end); each route's column is
measured twice, the work tree's and REF's, side by side against the same bare mitmdump, so a
change's cost is read from one run rather than from two runs on a machine whose speed drifts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchlib.base import NONE, REPO, X
from benchlib.plan import Plan
from benchlib.processes import BASELINE_MARK, Config


class BaselineError(Exception):
    """REF is not a commit of this repository, or git could not check it out."""


def _git(*args: str, cwd: Path = REPO) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise BaselineError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[tuple[Path, str]]:
    """REF in a detached worktree: its path and the commit's short id; removed on the way out."""
    try:
        commit = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except BaselineError:
        raise BaselineError(f"--baseline {ref!r} is not a commit of {REPO}") from None
    short = _git("rev-parse", "--short", commit)
    with tempfile.TemporaryDirectory(prefix="cursor-bridge-baseline-") as tmp:
        path = Path(tmp) / "checkout"
        _git("worktree", "add", "--detach", "--quiet", str(path), commit)
        try:
            yield path, short
        finally:
            with contextlib.suppress(BaselineError, subprocess.TimeoutExpired):
                _git("worktree", "remove", "--force", str(path))


def with_baselines(configs: Sequence[Config], root: Path, label: str) -> list[Config]:
    """Each bridge column followed by the same route run from ``root`` (bare ones stay single)."""
    out: list[Config] = []
    for c in configs:
        out.append(c)
        if c.bridge:
            out.append(
                dataclasses.replace(
                    c, key=f"{c.key}{BASELINE_MARK}base", title=f"{c.title} at {label}", root=root
                )
            )
    return out


def _paired(m: dict[str, Any] | None, key: str) -> float | None:
    """A column's ratio to bare mitmdump (the median of its paired windows), if measured."""
    if not isinstance(m, dict) or "error" in m:
        return None
    value = m.get(f"{key}_ratio")
    return float(value) if isinstance(value, int | float) else None


def baseline_table(plan: Plan, configs: Sequence[Config], results: dict[str, Any]) -> str:
    """Work tree / baseline per route and unpaced run: events/s and proxy CPU per event, each
    taken from the two columns' ratios to the bare windows beside them."""
    runs = [f"unpaced_{n}" for n in plan.unpaced_streams]
    runs += [f"burst_{n}" for n in plan.burst_streams]
    routes = [c for c in configs if c.bridge and c.key == c.route]
    # The first route measured, as REF has it: every route is also held against it (a bound
    # such as "every route at 0.9 of today's plain route" reads off the last columns).
    first = f"{routes[0].key}{BASELINE_MARK}base" if routes else ""
    versus = f"tree / base's {routes[0].key}" if routes else ""
    head = "| route | run | events/s: tree / base | proxy CPU per event: tree / base |"
    head += f" events/s: {versus} | proxy CPU per event: {versus} |"
    lines = [head, "|---|---|---|---|---|---|"]
    for c in routes:
        base_key = f"{c.key}{BASELINE_MARK}base"
        for run in runs:
            cells = []
            for against in (base_key, first):
                for key in ("events_per_s", "proxy_cpu_us_per_event"):
                    tree = _paired(results.get(c.key, {}).get(run), key)
                    base = _paired(results.get(against, {}).get(run), key)
                    cells.append(f"{tree / base:.2f}{X}" if tree and base else NONE)
            lines.append(f"| {c.title} | {run.replace('_', ' ')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
