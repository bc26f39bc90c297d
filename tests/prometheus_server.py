"""A real ``prometheus`` (Debian's package) for the metrics tests: its own, on a free loopback
port, with a config and a storage folder of its own (never the package's service), scraping
the targets given every second. ``scripts/services.py`` installs it; where it is missing,
``prometheus_or_skip`` skips with that reason. Every wait is bounded."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.redis_server import HOST, free_port

_FOLDERS = ("/usr/bin", "/usr/sbin", "/usr/local/bin")


def prometheus_program() -> str | None:
    found = shutil.which("prometheus")
    if found:
        return found
    for folder in _FOLDERS:
        path = Path(folder) / "prometheus"
        if path.is_file():
            return str(path)
    return None


def prometheus_or_skip() -> str:
    found = prometheus_program()
    if found is None:
        pytest.skip(
            "prometheus is not installed (Debian's package `prometheus`): "
            "`apt-get install prometheus`, or scripts/services.py"
        )
    return found


class PrometheusServer:
    """``prometheus`` scraping ``targets`` (``host:port``) as job ``cursor-bridge``."""

    def __init__(self, program: str, targets: Sequence[str]) -> None:
        self.program = program
        self.targets = list(targets)
        self.port = free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="cursor-bridge-prometheus-")
        self.folder = Path(self._dir.name)
        self.log = self.folder / "prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def config(self) -> str:
        targets = ", ".join(f'"{t}"' for t in self.targets)
        return (
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: cursor-bridge\n    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: [{targets}]\n"
        )

    def start(self, timeout: float = 30.0) -> PrometheusServer:
        config = self.folder / "prometheus.yml"
        config.write_text(self.config())
        command = [
            self.program,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.folder / 'data'}",
            f"--web.listen-address={HOST}:{self.port}",
        ]
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                text = self.log.read_text(errors="replace")
                self.stop()
                raise RuntimeError(f"prometheus did not start:\n{text[-3000:]}")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def query(self, expr: str) -> dict[str, Any]:
        """The query API's whole answer (``status``, ``data`` or ``error``) for ``expr``."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                answer: dict[str, Any] = json.loads(r.read())
        except urllib.error.HTTPError as e:  # a bad query: 400 with the error in the body
            answer = json.loads(e.read())
        return answer

    def vector(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """An instant vector's samples: ``(labels, value)``."""
        answer = self.query(expr)
        assert answer["status"] == "success", (expr, answer)
        return [(s["metric"], float(s["value"][1])) for s in answer["data"]["result"]]

    def value(self, expr: str) -> float | None:
        found = self.vector(expr)
        return found[0][1] if found else None

    def wait_for(self, expr: str, expected: float, timeout: float = 30.0) -> None:
        """Until ``expr`` (one value) is ``expected`` (a scrape every second)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.value(expr)
            if got is not None and abs(got - expected) < 1e-9:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expr} is {got}, not {expected}, after {timeout} s")
            time.sleep(0.25)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        self._proc = None
        self._dir.cleanup()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
