"""Find the real client programs and run them headless, bounded, through a bridge (issue 28).

``scripts/clients.py`` installs them from npm into a cache outside the work tree;
``locate(name)`` asks it for one (installing it unless ``CURSOR_BRIDGE_INSTALL_CLIENTS=0``)
and raises ``Unavailable`` (a skip with its reason) where node/npm is missing or the install
failed. ``run()`` starts a program in its own process group with a scrubbed environment (a
temporary ``HOME``, no proxy variables, telemetry and updates off) and kills the whole group
when it overruns. ``Bridge`` is a scripted upstream with a real mitmdump in reverse mode
before it, routed from one client dialect to one upstream dialect.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol

from tests.e2e.harness import Proxy, ScriptedUpstream
from tests.real.clients.loop import Call, ToolLoop

REPO = Path(__file__).resolve().parents[3]
INSTALL_SCRIPT = REPO / "scripts" / "clients.py"
INSTALL_ENV = "CURSOR_BRIDGE_INSTALL_CLIENTS"
RUN_TIMEOUT = 120.0
"""Seconds before a client is killed: a run takes 5-40 s on 2 busy cores."""

CLIENT_PATHS = {
    "openai_chat": "*/chat/completions",
    "anthropic": "*/v1/messages",
    "openai_responses": "*/responses",
    "gemini": "*/models/*:*enerateContent",
}
"""The path glob of each client dialect's route."""


class Unavailable(RuntimeError):
    """The program cannot be run here; the message says why and what to do."""


@dataclass(frozen=True)
class Program:
    name: str
    version: str
    binary: Path


_located: dict[str, Program | Unavailable] = {}


def locate(name: str) -> Program:
    """The installed program (installed now if missing and allowed); Unavailable if not."""
    if name not in _located:
        try:
            _located[name] = _locate(name)
        except Unavailable as why:
            _located[name] = why
    found = _located[name]
    if isinstance(found, Unavailable):
        raise found
    return found


def _locate(name: str) -> Program:
    if not (shutil.which("node") and shutil.which("npm")):
        raise Unavailable(f"{name}: node and npm are needed to install and run it")
    args = [sys.executable, str(INSTALL_SCRIPT), "--json", name]
    if os.environ.get(INSTALL_ENV) == "0":
        args.append("--check")
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as e:
        raise Unavailable(f"{name}: scripts/clients.py took over 900 s") from e
    try:
        entry = json.loads(done.stdout)[name]
    except (ValueError, KeyError):
        raise Unavailable(
            f"{name}: scripts/clients.py failed ({done.returncode}): {done.stderr[-2000:]}"
        ) from None
    if "binary" not in entry:
        hint = f" (set {INSTALL_ENV}=1 or run scripts/clients.py)" if "--check" in args else ""
        raise Unavailable(f"{name}: {entry.get('error', 'not installed')}{hint}")
    return Program(name, entry["version"], Path(entry["binary"]))


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Finished:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\nexit {self.returncode} after {self.seconds:.1f} s\n"
            f"--- stdout ---\n{self.stdout[-6000:]}\n--- stderr ---\n{self.stderr[-6000:]}"
        )


def base_env(home: Path) -> dict[str, str]:
    """A scrubbed environment: PATH (with node), a private HOME, loopback not proxied."""
    node = shutil.which("node")
    dirs = [str(Path(node).parent)] if node else []
    path = os.pathsep.join(dict.fromkeys([*dirs, "/usr/local/bin", "/usr/bin", "/bin"]))
    return {
        "PATH": path,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "TMPDIR": str(home / "tmp"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def run(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = RUN_TIMEOUT
) -> Finished:
    """Run to the end, or kill its whole process group after ``timeout`` s (AssertionError)."""
    started = time.monotonic()
    Path(env["TMPDIR"]).mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        stdout, stderr = proc.communicate(timeout=10)
        done = Finished(argv, -9, stdout, stderr, time.monotonic() - started)
        raise AssertionError(f"killed after {timeout:.0f} s:\n{done.describe()}") from None
    except BaseException:
        _kill_group(proc.pid)
        proc.wait(10)
        raise
    _kill_group(proc.pid)  # what it left running (language servers, daemons)
    return Finished(argv, proc.returncode, stdout, stderr, time.monotonic() - started)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


# --------------------------------------------------------------------------- the bridge


class Served(Protocol):
    """What a client is pointed at: a ``Bridge``, or a scripted upstream it is recorded
    against (``ScriptedUpstream``)."""

    @property
    def base_url(self) -> str: ...


class Bridge:
    """A ``ToolLoop`` upstream and a real mitmdump before it, routing ``client`` → ``upstream``."""

    def __init__(self, client: str, loop: ToolLoop, workdir: Path) -> None:
        self.client = client
        self.loop = loop
        self.upstream = ScriptedUpstream()
        self.upstream.script = loop
        routes = workdir / "routes.toml"
        routes.write_text(
            "[[routes]]\n"
            f'name = "real-client"\npath = "{CLIENT_PATHS[client]}"\n'
            f'client = "{client}"\nupstream = "{loop.dialect}"\n{loop.route_extra}'
        )
        self._routes = routes
        self.proxy: Proxy | None = None

    @property
    def base_url(self) -> str:
        assert self.proxy is not None
        return self.proxy.base_url

    def log(self) -> str:
        return self.proxy.log_text() if self.proxy else ""

    def __enter__(self) -> Bridge:
        self.upstream.start()
        try:
            self.proxy = Proxy(self.upstream.port, {"bridge_routes": str(self._routes)})
            self.proxy.__enter__()
        except BaseException:
            self.upstream.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.proxy is not None:
                self.proxy.close()
        finally:
            self.upstream.stop()


def notes(project: Path, count: int) -> list[tuple[Path, str]]:
    """``count`` files ``notes-<n>.txt`` in ``project``, each holding a fresh random token."""
    out = []
    for n in range(1, count + 1):
        token = f"TOKEN-{secrets.token_hex(8).upper()}"
        path = project / f"notes-{n}.txt"
        path.write_text(f"The secret token is {token}.\n")
        out.append((path, token))
    return out


def rounds_of(
    files: list[tuple[Path, str]], call: Callable[[int, Path], Call], *sizes: int
) -> list[list[tuple[Call, str]]]:
    """``files`` split into rounds of ``sizes`` calls, ``call(n, path)`` the n-th call."""
    rounds, it = [], iter(enumerate(files, 1))
    for size in sizes:
        rounds.append([(call(n, path), token) for n, (path, token) in itertools.islice(it, size)])
    return rounds


def check_loop(done: Finished, bridge: Bridge, answer: str, key: str) -> None:
    """The loop ran: each round of calls answered in a turn, every call's result (its id,
    its token) upstream in the last request, every token in ``answer`` (what the client
    printed as its final text), nothing refused, no key in the log."""
    loop, log = bridge.loop, bridge.log()
    context = f"{done.describe()}\n--- mitmdump ---\n{log[-6000:]}"
    assert not bridge.upstream.errors, "\n".join([*bridge.upstream.errors, context])
    assert not bridge.upstream.violations, "\n".join([*bridge.upstream.violations, context])
    assert not loop.of("refused"), f"the upstream refused a request:\n{context}"
    assert done.returncode == 0, context
    rounds = {turn.round for turn in loop.turns if turn.kind == "call"}
    assert rounds == set(range(len(loop.rounds))), f"rounds played: {rounds}:\n{context}"
    finals = loop.of("final")
    assert len(finals) == 1, f"{len(finals)} requests carried every token:\n{context}"
    results = loop.results(finals[0])
    for call, token in loop.pairs:
        call_id = loop.result_id(call)
        paired = [text for got, text in results if got == call_id and token in text]
        assert paired, f"no result of {call_id} holds {token}: {results}:\n{context}"
        assert token in answer, context
    assert key not in log
    assert "Traceback" not in log, context


# --------------------------------------------------------------------------- the clients


def read_prompt(paths: Sequence[Path]) -> str:
    """The task most clients get: read those files and say their tokens."""
    return f"Read {' and '.join(str(p) for p in paths)} and tell me the tokens."


@dataclass(frozen=True)
class Agent:
    """A real client program as its tests drive it (the ``through_bridge`` fixture)."""

    program: str
    """Its name for ``scripts/clients.py`` (``locate``)."""
    dialect: str
    """The client dialect it speaks to the bridge (the route's ``client``)."""
    key: str
    """The API key it is given: never in the bridge's log."""
    run: Callable[[Program, Bridge, Path, str], Finished]
    """Runs it headless in the project folder with a prompt, against the bridge."""
    answer: Callable[[Finished], str]
    """Its final text, from its output."""
    prompt: Callable[[Sequence[Path]], str] = read_prompt
    """Its task, given the files the loop's calls read."""


ThroughBridge = Callable[..., Finished]
"""The ``through_bridge`` fixture: ``(agent, loop, paths=()) → how the program finished``."""
