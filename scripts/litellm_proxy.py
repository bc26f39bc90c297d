#!/usr/bin/env python3
"""Install LiteLLM's proxy, pinned, into its own venv in a cache outside the work tree (issue 28).

``litellm[proxy]==LITELLM_VERSION`` goes into ``$XDG_CACHE_HOME/cursor-bridge/litellm/<version>/``
(``~/.cache`` if unset; ``$CURSOR_BRIDGE_CACHE`` replaces ``.../cursor-bridge``), not into the
project's ``.venv``: it pulls ~70 packages (~730 MB: numpy, polars, boto3, azure …) with tight
pins of its own (``cryptography<51``, ``rich<14`` …) that must never move what mitmproxy runs
on, and it runs as a separate server process anyway. Idempotent: a finished install (its
``installed.json``) is reused. ``--check`` installs nothing (exit 1 if absent); ``--json``
prints the venv's python, the ``litellm`` program and the version. Exit status 2: pip could
not install it here (no index reachable); tests skip on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

LITELLM_VERSION = "1.108.7"
REQUIREMENT = f"litellm[proxy]=={LITELLM_VERSION}"


def cache_root() -> Path:
    explicit = os.environ.get("CURSOR_BRIDGE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cursor-bridge"


def install_dir(version: str = LITELLM_VERSION) -> Path:
    return cache_root() / "litellm" / version


def marker(version: str = LITELLM_VERSION) -> Path:
    return install_dir(version) / "installed.json"


def say(message: str) -> None:
    print(f"[litellm_proxy] {message}", file=sys.stderr, flush=True)


def installed(version: str = LITELLM_VERSION) -> dict[str, str] | None:
    """The install's paths if it is finished and its program is still there."""
    try:
        info: dict[str, str] = json.loads(marker(version).read_text())
    except (OSError, ValueError):
        return None
    if not (Path(info.get("python", "")).is_file() and Path(info.get("litellm", "")).is_file()):
        return None
    return info


def ensure(version: str = LITELLM_VERSION) -> dict[str, str]:
    """Install ``litellm[proxy]==version`` into its own venv unless already done."""
    info = installed(version)
    if info is not None:
        return info
    root = install_dir(version)
    env_dir = root / "venv"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    started = time.monotonic()
    say(f"creating {env_dir}")
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    say(f"pip install {REQUIREMENT} (2-8 minutes, ~730 MB)")
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q",
         f"litellm[proxy]=={version}"],
        stdout=sys.stderr,
    )  # fmt: skip
    if done.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise InstallFailed(f"pip install litellm[proxy]=={version} failed ({done.returncode})")
    info = {
        "version": version,
        "python": str(python),
        "litellm": str(env_dir / "bin" / "litellm"),
        "seconds": f"{time.monotonic() - started:.0f}",
    }
    marker(version).write_text(json.dumps(info, indent=1) + "\n")
    say(f"installed in {info['seconds']} s")
    return info


class InstallFailed(RuntimeError):
    """pip could not install LiteLLM here (most often: no package index reachable)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print python, program and version")
    parser.add_argument("--check", action="store_true", help="install nothing: exit 1 if absent")
    args = parser.parse_args(argv)
    if args.check:
        info = installed()
        print(info["litellm"] if info else "not installed")
        return 0 if info else 1
    try:
        info = ensure()
    except InstallFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(info) if args.json else info["litellm"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
