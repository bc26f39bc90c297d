#!/usr/bin/env python3
"""Install the real engines the team-gateway tests run against (issue 37), with apt-get.

Debian's ``redis-server`` (the shared store's engine: ``bridge_store=redis://…``; its tests
start their own on a free loopback port), ``haproxy`` (the workers' front) and ``prometheus``
(the tests of ``bridge_metrics`` run its binary on a free loopback port with a config and
storage of their own, never the package's service), each only when its program is missing.
What it does is said on stderr: ``[services] apt-get install …``. It installs nothing, and
says why, when it cannot: not root, no ``apt-get`` (not Debian), or ``--check``. Idempotent; the tests that need a missing program skip, naming it.

Exit status: 0 all present (or installed), 1 ``--check`` found one missing, 2 it could not
install (the reason is on stderr). ``--json`` prints each service's program path (or null).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SERVICES = {
    "redis-server": "redis-server",
    "haproxy": "haproxy",
    "prometheus": "prometheus",
}
"""Program → the Debian package that installs it."""
_SBIN = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")


def say(message: str) -> None:
    print(f"[services] {message}", file=sys.stderr, flush=True)


def program(name: str) -> str | None:
    """Where ``name`` is: PATH first, then the sbin folders a non-root PATH may lack."""
    found = shutil.which(name)
    if found:
        return found
    for folder in _SBIN:
        path = Path(folder) / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def why_not() -> str | None:
    """Why apt-get cannot install here; None: it can."""
    if shutil.which("apt-get") is None:
        return "no apt-get here (not Debian or Ubuntu): install them with your system's packages"
    if os.geteuid() != 0:
        return "not root: run 'sudo apt-get install " + " ".join(SERVICES.values()) + "'"
    return None


def apt_get(*args: str) -> int:
    command = ["apt-get", *args]
    say(" ".join(command))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # apt's own chatter goes to stderr with ours; stdout stays for --json.
    return subprocess.run(command, stdout=sys.stderr, env=env, check=False).returncode


def ensure(names: list[str]) -> int:
    missing = [n for n in names if program(n) is None]
    for name in names:
        if name not in missing:
            say(f"{name}: {program(name)}")
    if not missing:
        return 0
    reason = why_not()
    if reason is not None:
        say(f"not installing {', '.join(missing)}: {reason}")
        return 2
    packages = sorted({SERVICES[n] for n in missing})
    # The package lists of a new machine are empty: one update first.
    if apt_get("update", "-qq") != 0:
        say("apt-get update failed: the package index is not reachable")
        return 2
    if apt_get("install", "-y", "-qq", "--no-install-recommends", *packages) != 0:
        say(f"apt-get install {' '.join(packages)} failed")
        return 2
    still = [n for n in missing if program(n) is None]
    if still:
        say(f"installed, yet not found: {', '.join(still)}")
        return 2
    for name in missing:
        say(f"{name}: {program(name)} (installed)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"of {', '.join(SERVICES)} (default: all)")
    parser.add_argument("--check", action="store_true", help="install nothing; exit 1 if missing")
    parser.add_argument("--json", action="store_true", help="print each program's path")
    args = parser.parse_args(argv)
    names: list[str] = args.names or list(SERVICES)
    unknown = [n for n in names if n not in SERVICES]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)} (known: {', '.join(SERVICES)})")
    if args.check:
        missing = [n for n in names if program(n) is None]
        for name in names:
            say(f"{name}: {program(name) or 'missing'}")
        status = 1 if missing else 0
    else:
        status = ensure(names)
    if args.json:
        print(json.dumps({n: program(n) for n in names}))
    return status


if __name__ == "__main__":
    sys.exit(main())
