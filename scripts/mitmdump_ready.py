"""The one start-up probe for a mitmdump (or mitmweb) that runs the addon: is it serving yet?

Used by ``scripts/demo.py`` and by the e2e harness (``tests/e2e/harness.py``), which start
mitmdump as a child and must know, within a bound, that it serves — or why it does not (it
exited, or logged an error while loading or configuring the addon) — before they send it
anything.

How: a second script (``write_probe``), loaded after the addon with another ``-s``, logs
``READY_MARK`` two event-loop turns after mitmproxy's ``running`` hook, that is after
mitmproxy's last check for errors logged during startup (which exits with "Error logged
during startup, exiting..." before the mark). ``wait_serving`` then waits until the log says
"listening at host:port" and holds the mark, holds none of ``STARTUP_FAILURES``, and the port
accepts a connection.

Why here, in ``scripts/``: this is where the programs that start mitmdump live, and the only
folder both users can import from without installing anything. ``scripts/demo.py`` runs as
``python scripts/demo.py`` from any folder, so its own folder is on its path (``import
mitmdump_ready``) and ``tests/`` is not; the tests run with the repository root on their path
(``from scripts.mitmdump_ready import …``, as they import ``tests.…``). ``addon/`` would
import from anywhere too, but it is the product the proxy loads, and this is not part of it.
Standard library only: the demo imports it before anything else is checked.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

READY_MARK = "mitmdump_ready: startup complete"
"""The line the probe script logs once mitmproxy's startup checks are behind it."""

STARTUP_FAILURES = ("Error logged during startup", "error in script", "Traceback")
"""Text in the log that means the start failed although mitmdump may still be running."""

PROBE = f"""\
import asyncio
import logging


class _Ready:
    def running(self):
        loop = asyncio.get_running_loop()
        log = lambda: logging.getLogger("mitmdump_ready").info({READY_MARK!r})
        loop.call_soon(lambda: loop.call_soon(log))


addons = [_Ready()]
"""


class NotServing(RuntimeError):
    """mitmdump exited, logged a startup error, or did not serve in time: ``why`` says which
    (``"exited with 1 during startup"``, ``"logged an error during startup"``, ``"not ready
    after 30 s"``), ``log`` is its log as it was then."""

    def __init__(self, why: str, log: str) -> None:
        super().__init__(why)
        self.why = why
        self.log = log


def write_probe(folder: Path) -> Path:
    """The probe script, written into ``folder``: pass it with ``-s`` after the addon."""
    path = folder / "mitmdump_ready_probe.py"
    path.write_text(PROBE)
    return path


def can_connect(host: str, port: int) -> bool:
    """``host:port`` accepts a TCP connection now (within half a second)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_serving(
    proc: subprocess.Popen[bytes],
    log_text: Callable[[], str],
    host: str,
    port: int,
    timeout: float,
    *,
    also: Callable[[str], bool] = lambda text: True,
) -> str:
    """Wait until ``proc`` (a mitmdump started with ``write_probe``'s script, its output in
    the log ``log_text`` reads) serves on ``host:port`` and ``also(log)`` holds; return the
    log then. Raises ``NotServing`` when it exits, logs a startup error, or ``timeout``
    seconds pass."""
    listening = f"listening at {host}:{port}"
    deadline = time.monotonic() + timeout
    while True:
        exited = proc.poll() is not None
        text = log_text()
        if exited:
            proc.wait()
            raise NotServing(f"exited with {proc.returncode} during startup", log_text())
        if listening in text and READY_MARK in text:
            if any(s in text for s in STARTUP_FAILURES):
                raise NotServing("logged an error during startup", text)
            if also(text) and can_connect(host, port):
                return text
        if time.monotonic() >= deadline:
            raise NotServing(f"not ready after {timeout:g} s", text)
        time.sleep(0.02)
