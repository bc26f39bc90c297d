"""The processes measured: the scripted upstream and one mitmdump per column (bare, or the
bridge on one route), started, watched and stopped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchlib.base import CLK_TCK, HOST, MAIN_SCRIPT, MITMDUMP, REPO, START_TIMEOUT, free_port


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when this process dies (Linux prctl)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _child_env(root: Path = REPO) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in {"http_proxy", "https_proxy", "all_proxy"}
    }
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["PYTHONUNBUFFERED"] = "1"
    # One hash seed for every child, so that identical processes at least lay out their dicts
    # and sets alike (the second bare mitmdump's column shows the noise that is left).
    env["PYTHONHASHSEED"] = "0"
    env[BENCH_KEY_ENV] = BENCH_KEY
    env.update(POOL_KEYS)
    if root != REPO:
        # A baseline checkout (``--baseline``): its ``addon`` package ahead of the work tree's
        # editable install, which Python consults only after ``PYTHONPATH``.
        env["PYTHONPATH"] = os.pathsep.join(
            [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
    return env


def _process_cpu_clock(pid: int) -> int:
    """The clock id of ``pid``'s CPU time, all its threads (glibc's ``clock_getcpuclockid``:
    ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``, which Python does not wrap)."""
    return ((~pid) << 3) | 2


class Proc:
    """A child process: CPU seconds and RSS from /proc, log in a file, always stopped."""

    def __init__(self, name: str, argv: list[str], log: Path, root: Path = REPO) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=root,
                env=_child_env(root),
                preexec_fn=_die_with_parent,
            )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def cpu(self) -> float:
        """CPU seconds so far, every thread's (the dead ones' too): the kernel's process CPU
        clock, in ns (``clock_getcpuclockid``); where it cannot be read, user + system from
        /proc in clock ticks (10 ms: a window of 0.05 s of one stream's CPU was 4 or 5 ticks,
        a ratio of two such windows 1.25x apart by the tick alone)."""
        with contextlib.suppress(OSError):
            return time.clock_gettime_ns(_process_cpu_clock(self.pid)) / 1e9
        with open(f"/proc/{self.pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)

    def rss_mb(self) -> float:
        with open(f"/proc/{self.pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def start_upstream(tmp: Path) -> tuple[Proc, int]:
    log = tmp / "upstream.log"
    proc = Proc(
        "upstream", [sys.executable, str(REPO / "scripts" / "bench.py"), "--serve-upstream"], log
    )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if m := re.search(r"listening (\d+)", log.read_text(errors="replace")):
            return proc, int(m.group(1))
        if not proc.alive():
            break
        time.sleep(0.05)
    raise RuntimeError(f"the scripted upstream did not start:\n{proc.log_tail()}")


@dataclass(frozen=True)
class Config:
    key: str
    title: str
    dialect: str
    bridge: bool = True
    options: tuple[tuple[str, str], ...] = ()
    routes: str = ""
    """A routes file's text (``bridge_routes``); empty: the default routes."""
    scripts: tuple[Path, ...] = ()
    """More mitmproxy scripts, loaded after the addon (``addon/health.py`` behind HAProxy)."""
    root: Path = REPO
    """The checkout whose addon this column runs: the work tree, or a ``--baseline`` REF's."""

    @property
    def route(self) -> str:
        """The route measured, the same for a work-tree column and its baseline's."""
        return self.key.split(BASELINE_MARK, 1)[0]


BASELINE_MARK = "@"
"""Between a route's key and ``base`` in a baseline column's key (``openai@base``)."""


BENCH_KEY_ENV = "CB_BENCH_ROUTE_KEY"
BENCH_KEY = "sk-bench-route/KEY+0123456789abcdef"
"""The key of the ``keyed`` column's route (the scripted upstream takes any key)."""

POOL_KEYS = {
    "CB_BENCH_POOL_KEY_A": "sk-bench-pool/KEY+A-0123456789abcdef",
    "CB_BENCH_POOL_KEY_B": "sk-bench-pool/KEY+B-0123456789abcdef",
}
"""A key pool's variables and keys (the gateway's limits columns; the upstream takes any)."""

KEYED_ROUTES = f"""
[[routes]]
name = "chat"
path = "*/chat/completions"
api_key_env = "{BENCH_KEY_ENV}"
"""
"""OpenAI→OpenAI on a route with ``api_key_env``: the proxy holds a key, so every answer is
searched for it (docs/observability.md#keys-in-answers); the same-dialect fast path with that
search added."""


FALLBACK_ROUTES = """
[[routes]]
name = "chat"
path = "*/chat/completions"
fallback = ["backup"]

[[routes]]
name = "backup"
path = "*/chat/completions"
model = "never-*"
"""
"""OpenAI→OpenAI on a route with a ``fallback`` chain: every request goes through the relay
(the first route answers, the chain is never walked)."""


CONFIGS: tuple[Config, ...] = (
    Config("bare", "bare mitmdump", "openai", bridge=False),
    Config("bare2", "bare mitmdump again (the noise)", "openai", bridge=False),
    Config("openai", "OpenAI→OpenAI (Cursor)", "openai"),
    Config(
        "keyed", "OpenAI→OpenAI with `api_key_env` (keys searched)", "openai", routes=KEYED_ROUTES
    ),
    Config("anthropic", "Anthropic→OpenAI (Claude Code)", "anthropic"),
    Config("invoke", "`invoke` text protocol", "openai", options=(("bridge_tool_mode", "invoke"),)),
    Config("gemini", "Gemini→OpenAI", "gemini"),
    Config("responses", "Responses→OpenAI", "responses"),
    Config(
        "fallback", "OpenAI→OpenAI with a `fallback` (the relay)", "openai", routes=FALLBACK_ROUTES
    ),
)


@dataclass
class Proxy:
    config: Config
    proc: Proc
    port: int


def mitmdump_argv(config: Config, upstream: int, port: int, confdir: Path) -> list[str]:
    argv = [str(MITMDUMP)]
    if config.bridge:
        argv += ["-s", str(config.root / MAIN_SCRIPT.relative_to(REPO))]
    for script in config.scripts:
        argv += ["-s", str(script)]
    argv += ["--mode", f"reverse:http://{HOST}:{upstream}", "--listen-host", HOST]
    argv += ["--listen-port", str(port)]
    settings = {
        "connection_strategy": "lazy",
        "confdir": str(confdir),
        "flow_detail": "0",
        **({} if config.bridge else {"stream_large_bodies": "1"}),
        **dict(config.options),
    }
    if config.routes:
        routes = confdir / "routes.toml"
        routes.write_text(config.routes)
        settings["bridge_routes"] = str(routes)
    for k, v in settings.items():
        argv += ["--set", f"{k}={v}"]
    return argv


def spawn_proxy(config: Config, upstream: int, tmp: Path) -> Proxy:
    confdir = tmp / f"confdir-{config.key}"
    confdir.mkdir(exist_ok=True)
    port = free_port()
    argv = mitmdump_argv(config, upstream, port, confdir)
    log = tmp / f"mitmdump-{config.key}.log"
    return Proxy(config, Proc(config.key, argv, log, root=config.root), port)


def can_connect(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def start_proxies(configs: Sequence[Config], upstream: int, tmp: Path) -> list[Proxy]:
    """Start them all at once; wait until each listens (a port taken meanwhile: retried)."""
    proxies = [spawn_proxy(c, upstream, tmp) for c in configs]
    deadline = time.monotonic() + START_TIMEOUT
    pending = list(range(len(proxies)))
    retries = 0
    while pending:
        for i in list(pending):
            p = proxies[i]
            if not p.proc.alive():
                log = p.proc.log_tail()
                if "address already in use" in log.lower() and retries < 5:
                    retries += 1
                    proxies[i] = spawn_proxy(p.config, upstream, tmp)
                    continue
                raise RuntimeError(f"mitmdump ({p.config.title}) exited during startup:\n{log}")
            text = p.proc.log.read_text(errors="replace")
            if "listening at" in text and can_connect(p.port):
                if any(s in text for s in ("Error logged during startup", "Traceback")):
                    raise RuntimeError(f"mitmdump ({p.config.title}) logged an error:\n{text}")
                pending.remove(i)
        if pending and time.monotonic() > deadline:
            names = ", ".join(proxies[i].config.title for i in pending)
            raise RuntimeError(f"mitmdump not ready after {START_TIMEOUT:.0f} s: {names}")
        time.sleep(0.05)
    return proxies


@contextlib.contextmanager
def running_processes(
    configs: Sequence[Config],
) -> Iterator[tuple[Proc, int, list[Proxy]]]:
    """The upstream and one mitmdump per config; all of them stopped on the way out."""
    procs: list[Proc] = []
    with tempfile.TemporaryDirectory(prefix="cursor-bridge-bench-") as name:
        tmp = Path(name)
        try:
            upstream, port = start_upstream(tmp)
            procs.append(upstream)
            proxies = start_proxies(configs, port, tmp)
            procs += [p.proc for p in proxies]
            yield upstream, port, proxies
        finally:
            for proc in procs:
                with contextlib.suppress(Exception):
                    proc.stop()
            # spawn_proxy may have left a process behind if start_proxies raised
            for child in _children():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)


def _children() -> list[int]:
    """Our direct children still running (/proc/self/task/*/children)."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path("/proc/self/task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(x) for x in (task / "children").read_text().split()]
    return out
