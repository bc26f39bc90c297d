#!/usr/bin/env python3
"""Install the real client programs (issue 28) from npm, once per machine, and print their paths.

Claude Code, Codex CLI, OpenCode and Gemini CLI, at pinned versions, each installed with
``npm install --prefix`` into ``$XDG_CACHE_HOME/cursor-bridge/npm/<package>@<version>/``
(``~/.cache`` if unset; ``$CURSOR_BRIDGE_CACHE`` replaces ``.../cursor-bridge``). Idempotent: a
finished install (its ``installed.json`` marker) is reused. Prints ``name path`` per client,
or with ``--json`` a mapping. ``--check`` installs nothing (exit 1 if one is missing).
Exit status 2 means node or npm is missing; 3 that an install failed (tests skip on both).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

INSTALL_TIMEOUT = 600.0


@dataclass(frozen=True)
class Client:
    name: str
    package: str
    version: str
    binary: str
    """The name under ``node_modules/.bin``."""


CLIENTS = {
    c.name: c
    for c in (
        Client("claude-code", "@anthropic-ai/claude-code", "2.1.197", "claude"),
        Client("codex", "@openai/codex", "0.169.0", "codex"),
        Client("opencode", "opencode-ai", "1.18.33", "opencode"),
        Client("gemini-cli", "@google/gemini-cli", "0.61.0", "gemini"),
    )
}


class NodeMissing(RuntimeError):
    """node or npm is not on PATH."""


class InstallFailed(RuntimeError):
    """npm could not install a client; the message holds npm's last lines."""


def cache_root() -> Path:
    explicit = os.environ.get("CURSOR_BRIDGE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cursor-bridge"


def install_dir(client: Client) -> Path:
    return cache_root() / "npm" / f"{client.package.replace('/', '+')}@{client.version}"


def binary_path(client: Client) -> Path:
    return install_dir(client) / "node_modules" / ".bin" / client.binary


def installed(client: Client) -> bool:
    return (install_dir(client) / "installed.json").is_file() and binary_path(client).exists()


def say(message: str) -> None:
    print(f"[clients] {message}", file=sys.stderr, flush=True)


def check_node() -> None:
    missing = [tool for tool in ("node", "npm") if not shutil.which(tool)]
    if missing:
        raise NodeMissing(f"cannot install the client programs: {' and '.join(missing)} missing")


def ensure(client: Client) -> Path:
    """The client's binary, installed first if the cache has none."""
    if installed(client):
        return binary_path(client)
    check_node()
    target = install_dir(client)
    target.parent.mkdir(parents=True, exist_ok=True)
    spec = f"{client.package}@{client.version}"
    started = time.monotonic()
    say(f"npm install {spec} -> {target}")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".partial-") as tmp:
        cmd = ["npm", "install", "--prefix", tmp, "--no-audit", "--no-fund", "--no-save", spec]
        env = {**os.environ, "npm_config_update_notifier": "false"}
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, env=env
            )
        except subprocess.TimeoutExpired as e:
            raise InstallFailed(f"npm install {spec} took over {INSTALL_TIMEOUT:.0f} s") from e
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
            raise InstallFailed(f"npm install {spec} failed ({done.returncode}):\n{tail}")
        marker = {"package": client.package, "version": client.version, "command": cmd[:-1]}
        (Path(tmp) / "installed.json").write_text(json.dumps(marker, indent=2) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        os.rename(tmp, target)
        # TemporaryDirectory's cleanup finds nothing left to remove.
        Path(tmp).mkdir()
    say(f"installed {spec} in {time.monotonic() - started:.0f} s")
    if not binary_path(client).exists():
        raise InstallFailed(f"npm installed {spec} but {binary_path(client)} is missing")
    return binary_path(client)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"clients (default all: {', '.join(CLIENTS)})")
    parser.add_argument("--json", action="store_true", help="print a JSON mapping name -> info")
    parser.add_argument("--check", action="store_true", help="install nothing: exit 1 if missing")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in CLIENTS]
    if unknown:
        parser.error(f"unknown client(s) {unknown}; known: {', '.join(CLIENTS)}")
    chosen = [CLIENTS[n] for n in args.names or CLIENTS]
    info: dict[str, dict[str, str]] = {}
    status = 0
    for client in chosen:
        entry = {"package": client.package, "version": client.version}
        try:
            if args.check:
                if not installed(client):
                    raise InstallFailed(f"{client.package}@{client.version} not installed")
                path = binary_path(client)
            else:
                path = ensure(client)
            entry["binary"] = str(path)
        except NodeMissing as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except InstallFailed as err:
            entry["error"] = str(err)
            status = 1 if args.check else 3
        info[client.name] = entry
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for name, entry in info.items():
            print(name, entry.get("binary") or f"ERROR {entry['error']}")
    return status


if __name__ == "__main__":
    sys.exit(main())
