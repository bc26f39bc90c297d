"""A real ``redis-server`` for the tests of the shared store: its own, on 127.0.0.1, on a free
port, in memory only (``--save '' --appendonly no``), stopped and started again on the same port
when a test asks (Redis lost and back). ``scripts/services.py`` installs it (Debian's
``redis-server``); where it is missing, ``redis_server_or_skip`` skips with that reason."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

HOST = "127.0.0.1"
_FOLDERS = ("/usr/bin", "/usr/sbin", "/usr/local/bin")


def redis_server_program() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    for folder in _FOLDERS:
        path = Path(folder) / "redis-server"
        if path.is_file():
            return str(path)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class RedisServer:
    """``redis-server`` on ``port`` (a free one by default); ``extra`` arguments as given."""

    def __init__(self, program: str, port: int = 0, extra: tuple[str, ...] = ()) -> None:
        self.program = program
        self.port = port or free_port()
        self.extra = extra
        self._dir = tempfile.TemporaryDirectory(prefix="cursor-bridge-redis-")
        self._proc: subprocess.Popen[bytes] | None = None
        self.log = Path(self._dir.name) / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        command = [
            self.program,
            "--bind", HOST, "--port", str(self.port), "--save", "", "--appendonly", "no",
            "--dir", self._dir.name, "--logfile", str(self.log), *self.extra,
        ]  # fmt: skip
        self._proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise RuntimeError(f"redis-server exited ({self._proc.returncode}): {err}")
            if self._answers():
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} in {timeout} s")

    def _answers(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                reply = s.recv(64)
        except OSError:
            return False
        # +PONG, or -NOAUTH with a password: either way it is serving.
        return reply.startswith((b"+PONG", b"-NOAUTH"))

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self._dir.cleanup()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def redis_server_or_skip() -> str:
    """The ``redis-server`` program, or a skip that says why there is none."""
    program = redis_server_program()
    if program is None:
        pytest.skip(
            "redis-server is not installed: scripts/services.py installs Debian's "
            "(apt-get install redis-server); scripts/test runs it unless "
            "CURSOR_BRIDGE_INSTALL_SERVICES=0"
        )
    return program
