"""Start and stop llama.cpp's ``llama-server`` on 127.0.0.1 for tests (issue 28).

``scripts/llama_server.py`` builds the binary and fetches the model into a cache outside
the work tree; ``locate()`` asks it where they are (building first only when told to),
``LlamaServer.start()`` runs the server on a free loopback port with SmolLM2 and a
tool-capable chat template and waits, bounded, for ``/health``. Glossary: *unavailable*
means no binary or model here (a skip with its reason, never a pass).
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from tests.real.process import log_tail, prepared, stop_process, wait_ok

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "llama_server.py"
HOST = "127.0.0.1"
# Set to 1 to build llama-server (~25 CPU-minutes) from a test run when the cache has none;
# scripts/test builds it before pytest unless this is 0.
BUILD_ENV = "CURSOR_BRIDGE_BUILD_LLAMA"


class Unavailable(RuntimeError):
    """llama-server or its model is not here; the message says why and what to run."""


@dataclass(frozen=True)
class Paths:
    version: str
    server: Path
    model: Path
    tool_template: Path


def locate(build: bool | None = None) -> Paths:
    """The cached binary, model and template; built first if ``build`` (default: $BUILD_ENV)."""
    if build is None:
        build = os.environ.get(BUILD_ENV) == "1"
    info = prepared(
        BUILD_SCRIPT,
        build,
        f"llama-server not built: run `python scripts/llama_server.py` or set {BUILD_ENV}=1",
        "llama-server cannot be built here: cmake or a C++ compiler is missing",
        Unavailable,
    )
    return Paths(
        version=info["version"],
        server=Path(info["server"]),
        model=Path(info["model"]),
        tool_template=Path(info["tool_template"]),
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LlamaServer:
    """One running llama-server; ``base_url`` has no trailing slash and no ``/v1``."""

    paths: Paths
    port: int
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    argv: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @classmethod
    def start(
        cls,
        paths: Paths | None = None,
        *,
        ctx_size: int = 4096,
        extra_args: tuple[str, ...] = (),
        timeout: float = 60.0,
        port: int | None = None,
        threads: int = 1,
    ) -> LlamaServer:
        paths = paths or locate()
        port = port or free_port()
        argv = [
            str(paths.server),
            "--model", str(paths.model),
            "--host", HOST,
            "--port", str(port),
            "--ctx-size", str(ctx_size),
            # One thread: on a busy machine (2 cores shared) two spin-waiting threads made
            # prompts 2-3 times slower and answers 5 times slower than one.
            "--threads", str(threads),
            "--threads-batch", str(threads),
            "--parallel", "1",
            "--jinja",
            "--chat-template-file", str(paths.tool_template),
            "--no-webui",
            *extra_args,
        ]  # fmt: skip
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        server = cls(paths=paths, port=port, process=process, log=log, argv=argv)
        try:
            server.wait_healthy(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def wait_healthy(self, timeout: float) -> None:
        wait_ok(self.process, f"{self.base_url}/health", "llama-server", self.log, timeout, 0.2)

    def log_text(self, limit: int = 8000) -> str:
        return log_tail(self.log, limit)

    def stop(self, timeout: float = 10.0) -> None:
        stop_process(self.process, timeout)
        self.log.close()

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
