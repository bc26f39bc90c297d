"""A server process the real-server tests start: where its script put it, wait until it
answers, read its log, stop it.

Shared by ``llama_cpp.LlamaServer`` and ``litellm_proxy.LiteLLMProxy``; loopback only,
every wait bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx


def prepared(
    script: Path, prepare: bool, absent: str, impossible: str, unavailable: type[Exception]
) -> dict[str, Any]:
    """What a preparing script (``scripts/llama_server.py``, ``scripts/litellm_proxy.py``)
    says with ``--json``: where it built or installed its program. Without ``prepare`` it
    is only asked (``--check``) and ``absent`` is raised as ``unavailable`` when nothing is
    there; its exit status 2 (no toolchain, no package index) raises ``impossible``."""
    args = [sys.executable, str(script)]
    if not prepare:
        check = subprocess.run([*args, "--check"], capture_output=True, text=True)
        if check.returncode != 0:
            raise unavailable(absent)
    done = subprocess.run([*args, "--json"], stdout=subprocess.PIPE, text=True)
    if done.returncode == 2:
        raise unavailable(impossible)
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} failed with exit status {done.returncode}")
    info: dict[str, Any] = json.loads(done.stdout)
    return info


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
