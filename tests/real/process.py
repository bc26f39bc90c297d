"""A server process the real-server tests start: wait until it answers, read its log, stop it.

Shared by ``llama_cpp.LlamaServer`` and ``litellm_proxy.LiteLLMProxy``; loopback only,
every wait bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import IO

import httpx


def log_tail(log: IO[bytes], limit: int = 8000) -> str:
    """The last ``limit`` characters a process wrote to ``log``."""
    log.seek(0)
    text = log.read().decode("utf-8", "replace")
    return text if len(text) <= limit else "…\n" + text[-limit:]


def wait_ok(
    process: subprocess.Popen[bytes],
    url: str,
    name: str,
    log: IO[bytes],
    timeout: float,
    interval: float,
) -> None:
    """Until ``url`` answers 200; the process's log in the error if it exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited ({process.returncode}):\n{log_tail(log)}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(interval)
    raise TimeoutError(f"{name} not ready after {timeout} s:\n{log_tail(log)}")


def stop_process(process: subprocess.Popen[bytes], timeout: float, group: bool = False) -> None:
    """Terminate, then kill after ``timeout``; ``group``: the process's whole session."""
    if process.poll() is not None:
        return

    def send(sig: signal.Signals) -> None:
        if group:
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)

    send(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait(timeout)
