"""``scripts/gateway`` as a test runs it: a real process (HAProxy and N mitmdump workers) in
front of a ``ScriptedUpstream``, its prefixed output in a file, every wait bounded.

``GatewayRun`` skips the test (``pytest.skip``, with the reason) when HAProxy is not
installed: ``scripts/services.py`` installs it where it can (``scripts/test`` runs it).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.e2e.harness import HOST, REPO, _can_connect, _child_env, free_port

GATEWAY = REPO / "scripts" / "gateway.py"
READY = re.compile(
    r"gateway \| ready: HAProxy on http://\S+ pid (?P<haproxy>\d+) → (?P<workers>.*?) \(config"
)
WORKER = re.compile(r"(w\d+) 127\.0\.0\.1:(\d+) pid (\d+)")

_live: weakref.WeakSet[GatewayRun] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for g in list(_live):
        with contextlib.suppress(Exception):
            g.stop()


def haproxy_program() -> str | None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from gateway import find_haproxy
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return find_haproxy()


def require_haproxy() -> str:
    found = haproxy_program()
    if found is None:
        pytest.skip(
            "HAProxy is not installed (no `haproxy` on PATH, /usr/sbin or /usr/local/sbin): "
            "`apt-get install haproxy`, or scripts/services.py"
        )
    return found


class GatewayRun:
    """``scripts/gateway --workers N`` in reverse mode before ``upstream_port``."""

    def __init__(
        self,
        upstream_port: int,
        workers: int = 2,
        options: Sequence[str] = (),
        confdir: Path | None = None,
    ) -> None:
        self.haproxy = require_haproxy()
        self._dir = tempfile.TemporaryDirectory(prefix="cursor-bridge-gateway-test-")
        tmp = Path(self._dir.name)
        self.log_path = tmp / "gateway.log"
        self.confdir = confdir or tmp / "confdir"
        self.confdir.mkdir(exist_ok=True)
        self.port = 0
        self.args = [
            "--workers",
            str(workers),
            "--mode",
            f"reverse:http://{HOST}:{upstream_port}",
            "--set",
            f"confdir={self.confdir}",
            *options,
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.haproxy_pid = 0
        self.workers: dict[str, tuple[int, int]] = {}
        """Name → (port, pid), from the ready line."""

    def start(self, timeout: float = 90.0) -> GatewayRun:
        for _attempt in range(3):
            self.port = free_port()
            with self.log_path.open("wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, str(GATEWAY), "--listen-port", str(self.port), *self.args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=REPO,
                    env=_child_env(),
                )
            _live.add(self)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if m := READY.search(self.log_text()):
                    self.haproxy_pid = int(m["haproxy"])
                    self.workers = {
                        name: (int(port), int(pid))
                        for name, port, pid in WORKER.findall(m["workers"])
                    }
                    if _can_connect(self.port):
                        return self
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
            text = self.log_text()
            self.stop()
            if "cannot bind socket" in text or "Address already in use" in text:
                continue  # HAProxy's port was taken meanwhile
            raise RuntimeError(f"scripts/gateway did not start:\n{text}")
        raise RuntimeError(f"scripts/gateway found no free port in 3 tries:\n{self.log_text()}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def lines_of(self, name: str) -> list[str]:
        """What ``name`` (``w1``, ``haproxy``, ``gateway``) printed, prefix removed."""
        out = []
        for line in self.log_text().splitlines():
            prefix, sep, rest = line.partition(" | ")
            if sep and prefix.strip() == name:
                out.append(rest)
        return out

    def wait_for_log(self, pattern: str, timeout: float = 15.0) -> re.Match[str]:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            if m := regex.search(self.log_text()):
                return m
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{pattern!r} not in the gateway's log after {timeout} s")
            time.sleep(0.05)

    def pids(self) -> list[int]:
        return [self.haproxy_pid, *(pid for _, pid in self.workers.values())]

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        """SIGTERM to the gateway (it stops its children), SIGKILL to whatever is left."""
        proc, self.proc = self.proc, None
        _live.discard(self)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for pid in self.pids():
            if pid and alive(pid) and ours(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> GatewayRun:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, ended but not yet waited for, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != b"Z"


def ours(pid: int) -> bool:
    """``pid`` is one of the gateway's programs (not a process that took a freed pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"mitmdump" in cmdline or b"haproxy" in cmdline
