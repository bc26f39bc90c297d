"""``scripts/gateway``: N mitmdump workers with the bridge, behind one HAProxy.

    scripts/gateway --workers 2 --mode reverse:https://api.example.com \\
        --set bridge_store=redis://127.0.0.1:6379/0

starts N ``mitmdump -s addon/main.py -s addon/health.py`` workers, each on a free port of
127.0.0.1 with the mitmdump options given, and Debian's ``haproxy`` in front of them on
``--listen-host``:``--listen-port`` (127.0.0.1:8080 unless told), with a haproxy.cfg written
into a temporary folder (``--print-config`` shows it). Every line the children print is
printed here, prefixed with its name (``w1``, ``w2``, …, ``haproxy``); the gateway's own lines
start with ``gateway``. ``--set bridge_metrics=HOST:PORT`` gives each worker its own metrics
listener (worker 1 ``PORT``, worker 2 ``PORT+1`` …; ``HOST:0`` a free port each), named in
the ready line: scrape every worker (docs/deploy.md#metrics). Ctrl-C (SIGINT), SIGTERM or SIGHUP stops HAProxy and every worker
(each in a process group of its own: SIGTERM, then SIGKILL after ``STOP_TIMEOUT`` s). A worker
that dies is said in one line and left out by HAProxy's health check; HAProxy dying, or the
last worker, ends the gateway with exit status 1.

Why HAProxy is set up as it is (``haproxy_config``):

- ``balance leastconn``: a streamed answer holds its worker for seconds to minutes, so the
  number of requests sent to each (round robin) says little about its load; the number of
  streams it is serving now does.
- Health: ``option httpchk`` every second against ``addon/health.PATH``, which the worker
  answers itself (``addon/health.py``), never the upstream. A TCP check would pass on a
  worker whose event loop is stuck (the kernel completes the handshake from the listen
  backlog), and a check of an upstream path would send the upstream a request per second
  per worker, and take every worker out when the upstream is down. Workers run with
  ``connection_strategy=lazy`` (unless told otherwise): with mitmproxy's ``eager`` default
  each check's connection would also open one to the upstream. A worker is out after 2
  failed checks, or at once when a request cannot connect to it (``observe layer4``); a
  request whose connection to a worker fails is tried again on another (``retries``,
  ``option redispatch``), which is safe because nothing of it was sent.
- Timeouts for long streams: ``timeout server`` / ``timeout client`` are inactivity limits
  (not the length of a stream), set to ``STREAM_IDLE``: a model may think for minutes before
  its first byte. ``timeout tunnel`` only applies to upgraded connections (WebSocket), which
  LLM clients do not use here; it is set as long anyway. ``timeout http-request`` bounds how
  long a client may take to send its request's headers.
- Keep-alive on both sides (HAProxy's default; no ``option http-server-close``): a worker's
  connection to the upstream (TLS, seconds to set up across the world) belongs to the
  client connection it serves, so HAProxy reusing its idle connections to the workers keeps
  those upstream connections warm.
- No ``option forwardfor``: the bridge does not need the client's address, and in reverse
  mode mitmproxy passes every request header on, so an ``X-Forwarded-For`` would tell the
  upstream provider the client's address.
- Streams are not buffered: HAProxy forwards a response as it arrives unless told to
  buffer; ``option http-buffer-request`` (which buffers requests, not answers) is not set,
  and ``option http-no-delay`` sends each event at once rather than letting the kernel wait
  for more (``MSG_MORE``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import re
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from addon.config.options import ConfigError, parse_metrics_address, parse_store_url
from addon.redact import redact
from addon.stores.base import display_url

ROOT = Path(__file__).resolve().parents[1]
MAIN_SCRIPT = ROOT / "addon" / "main.py"
HEALTH_SCRIPT = ROOT / "addon" / "health.py"
HEALTH_PATH = "/_cursor_bridge/health"
"""``addon/health.PATH`` (that file is a mitmproxy script, not imported here)."""
HEALTH_DUMPER_FILTER = "!(~u /_cursor_bridge/health$)"
"""``addon/health.DUMPER_FILTER``: the health checks left out of each worker's flow log."""
LOOPBACK = "127.0.0.1"
STREAM_IDLE = "10m"
"""``timeout client`` / ``timeout server``: the longest silence of a stream."""
START_TIMEOUT = 90.0
"""Seconds for every worker (several start at once on few cores) and HAProxy to listen."""
STOP_TIMEOUT = 10.0
"""Seconds the children get after SIGTERM before SIGKILL."""
CHECK_INTER = "1s"
"""HAProxy's health check interval."""
QUIET = re.compile(r"^\[[\d:.]+\]\[[^\]]*\] client (?:connect|disconnect)$")
"""A worker's lines not printed: its client is always HAProxy (its health checks too), so
they would say nothing but that HAProxy connected, every second."""
INSTALL_HINT = (
    "scripts/gateway needs HAProxy (Debian's package `haproxy`), and it is not installed "
    "(looked for `haproxy` on PATH, /usr/sbin and /usr/local/sbin). Install it as root: "
    "`apt-get install haproxy`"
)
SERVICES_HINT = (
    ", or run `scripts/services.py` (`scripts/test` does, once per machine, unless "
    "CURSOR_BRIDGE_INSTALL_SERVICES=0)"
)


# --------------------------------------------------------------------------- HAProxy


def find_haproxy() -> str | None:
    """HAProxy's program: on PATH, else where Debian puts it (a non-root PATH may lack sbin)."""
    found = shutil.which("haproxy")
    if found:
        return found
    for folder in ("/usr/sbin", "/usr/local/sbin"):
        path = Path(folder) / "haproxy"
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def install_hint() -> str:
    services = (ROOT / "scripts" / "services.py").is_file()
    return INSTALL_HINT + (SERVICES_HINT if services else "") + "."


def haproxy_config(
    listen_host: str,
    listen_port: int,
    workers: Sequence[tuple[str, int]],
    *,
    stats_socket: Path | None = None,
) -> str:
    """haproxy.cfg for ``workers`` (host, port) behind ``listen_host:listen_port`` (the module's
    docstring says why each line is there)."""
    bind = f"[{listen_host}]" if ":" in listen_host else listen_host
    servers = "\n".join(
        f"    server w{i} {f'[{host}]' if ':' in host else host}:{port}"
        for i, (host, port) in enumerate(workers, 1)
    )
    stats = (
        f"    stats socket {stats_socket} mode 600 level admin\n"
        if stats_socket is not None
        else ""
    )
    return f"""\
# Written by scripts/gateway (cursor-bridge): HAProxy in front of {len(workers)} mitmdump worker(s).
global
    # No maxconn here: HAProxy sizes it from the open-files limit it may raise to.
{stats}
defaults
    mode http
    maxconn 4096
    timeout connect 5s
    # Inactivity limits, not stream lengths: a model may think for minutes before its first byte.
    timeout client {STREAM_IDLE}
    timeout server {STREAM_IDLE}
    # Upgraded connections only (WebSocket); none expected, kept as long anyway.
    timeout tunnel 1h
    timeout http-request 30s
    timeout http-keep-alive 60s
    timeout queue 30s
    timeout check 5s
    # A request whose connection to a worker fails goes to another one (nothing was sent).
    retries 3
    option redispatch 1
    # Each event of a stream goes out at once.
    option http-no-delay
    # Not set: option forwardfor (mitmproxy would pass X-Forwarded-For on to the upstream),
    # option http-buffer-request, option http-server-close.

frontend cursor_bridge
    bind {bind}:{listen_port}
    default_backend workers

backend workers
    # Streams hold a worker for minutes: the fewest open streams, not the fewest requests.
    balance leastconn
    # Answered by each worker itself (addon/health.py), never by the upstream.
    option httpchk
    http-check send meth GET uri {HEALTH_PATH} ver HTTP/1.1 hdr Host localhost
    http-check expect status 200
    default-server check inter {CHECK_INTER} fastinter 250ms fall 2 rise 2 observe layer4 error-limit 1 on-error mark-down
{servers}
"""


# --------------------------------------------------------------------------- command line


@dataclass
class Options:
    workers: int
    listen_host: str
    listen_port: int
    haproxy: str | None
    print_config: bool
    mitmdump: list[str]
    """The options given for every worker, as given."""


def _settings(args: Sequence[str]) -> dict[str, str]:
    """``--set name=value`` (and ``--set=name=value``) among mitmdump's options."""
    out: dict[str, str] = {}
    it = iter(args)
    for arg in it:
        value: str | None = None
        if arg == "--set":
            value = next(it, None)
        elif arg.startswith("--set="):
            value = arg[len("--set=") :]
        if value and "=" in value:
            name, _, v = value.partition("=")
            out[name.strip()] = v
    return out


def _modes(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in ("--mode", "-m"):
            out.append(next(it, ""))
        elif arg.startswith("--mode="):
            out.append(arg[len("--mode=") :])
    if mode := _settings(args).get("mode"):
        out.append(mode)
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"scripts/gateway: error: {message}\n")


def parse_args(argv: Sequence[str]) -> Options:
    parser = _Parser(
        prog="scripts/gateway",
        description=__doc__.split("\n\nWhy HAProxy")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
        epilog="Every other option goes to each mitmdump worker (it must include a reverse "
        "mode: --mode reverse:https://UPSTREAM). With more than one worker, give the workers a "
        "shared store (--set bridge_store=redis://HOST:PORT/DB): without it each keeps its "
        "own state in memory. Running it by hand, with systemd, or on several machines: "
        "docs/deploy.md.",
    )
    parser.add_argument("--workers", type=int, default=2, metavar="N", help="mitmdump workers (2)")
    parser.add_argument(
        "--listen-port", type=int, default=8080, metavar="P", help="HAProxy's port (8080)"
    )
    parser.add_argument(
        "--listen-host",
        default=LOOPBACK,
        metavar="H",
        help="HAProxy's address (127.0.0.1; 0.0.0.0 for every interface)",
    )
    parser.add_argument(
        "--haproxy", metavar="PATH", help="HAProxy's program (default: `haproxy` on PATH or sbin)"
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the haproxy.cfg it would write (worker ports as placeholders) and exit",
    )
    ns, rest = parser.parse_known_args(list(argv))
    if ns.workers < 1:
        parser.error("--workers takes a number >= 1")
    if not 0 < ns.listen_port < 65536:
        parser.error("--listen-port takes a port number (1-65535)")
    taken = {"listen_port", "listen_host"} & set(_settings(rest))
    if taken or any(a in ("-p", "--listen-port", "--listen-host") for a in rest):
        parser.error(
            "the workers' addresses are the gateway's to choose: give --listen-host/--listen-port "
            "for HAProxy only"
        )
    if not ns.print_config and not any(m.startswith("reverse:") for m in _modes(rest)):
        parser.error("the workers run in reverse mode: give --mode reverse:https://UPSTREAM")
    return Options(
        ns.workers, ns.listen_host, ns.listen_port, ns.haproxy, ns.print_config, list(rest)
    )


def store_warning(opts: Options) -> str | None:
    """One line when several workers would each keep their own state."""
    if opts.workers < 2:
        return None
    store = _settings(opts.mitmdump).get("bridge_store", "").strip()
    try:
        if parse_store_url(store).shared:  # the workers' own reading of bridge_store
            return None
    except ConfigError as e:
        return f"warning: {e}: every worker will refuse to start"
    where = f"bridge_store={store!r} (a file of each machine)" if store else "no bridge_store"
    return (
        f"warning: {opts.workers} workers with {where}: each worker keeps its own state in memory"
        " (the reasoning store, cooldowns, …), so a conversation whose turns land on different"
        " workers loses what the earlier ones left; give every worker one store:"
        " --set bridge_store=redis://HOST:PORT/DB"
    )


def worker_argv(opts: Options, port: int, metrics: str = "") -> list[str]:
    """A worker's mitmdump: ``metrics`` its own ``bridge_metrics`` (``worker_metrics``) in
    place of the one given."""
    mitmdump = Path(sys.executable).parent / "mitmdump"
    argv = [str(mitmdump), "-s", str(MAIN_SCRIPT), "-s", str(HEALTH_SCRIPT)]
    argv += ["--listen-host", LOOPBACK, "--listen-port", str(port)]
    given = _settings(opts.mitmdump)
    if "connection_strategy" not in given:
        argv += ["--set", "connection_strategy=lazy"]
    if "dumper_filter" not in given:
        argv += ["--set", f"dumper_filter={HEALTH_DUMPER_FILTER}"]
    if not metrics:
        return argv + opts.mitmdump
    return (
        argv
        + _without_setting(opts.mitmdump, "bridge_metrics")
        + [
            "--set",
            f"bridge_metrics={metrics}",
        ]
    )


SECRET_OPTIONS = ("upstream_auth", "proxyauth")
"""mitmproxy options whose values are credentials (``user:password``)."""
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")


def shown_command(args: Sequence[str]) -> str:
    """The workers' mitmdump arguments fit for a line: a URL's password and query left out
    (``bridge_store=redis://:PASSWORD@…``), a credential option's value and key-shaped
    strings replaced."""
    shown = []
    for arg in args:
        name, eq, _ = arg.partition("=")
        if eq and name in SECRET_OPTIONS:
            arg = f"{name}=***"
        shown.append(URL.sub(lambda m: display_url(m[0]), arg))
    return redact(shlex.join(shown), tokens=False)


def worker_metrics(opts: Options, index: int) -> str:
    """Worker ``index``'s (1, 2, …) own ``bridge_metrics`` when one was given: ``HOST:PORT``
    gives worker 1 ``PORT``, worker 2 ``PORT+1`` …; ``HOST:0`` each a free port. Empty: none
    given (a bad value is left to the workers to refuse, each in one line)."""
    value = _settings(opts.mitmdump).get("bridge_metrics", "")
    try:
        address = parse_metrics_address(value)
    except ConfigError:
        return ""
    if address is None:
        return ""
    port = free_port() if address.port == 0 else address.port + index - 1
    return _hostport(address.host, port)


def _without_setting(args: Sequence[str], name: str) -> list[str]:
    """``args`` without its ``--set name=…`` (both spellings)."""
    out: list[str] = []
    it = iter(args)
    for arg in it:
        if arg == "--set":
            value = next(it, "")
            if value.partition("=")[0].strip() != name:
                out += [arg, value]
        elif arg.startswith("--set=") and arg[6:].partition("=")[0].strip() == name:
            continue
        else:
            out.append(arg)
    return out


# --------------------------------------------------------------------------- children


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the gateway dies (Linux prctl)."""
    if _LIBC is not None:
        with contextlib.suppress(Exception):
            _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_LIBC: ctypes.CDLL | None
try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # not a glibc/musl system
    _LIBC = None


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass(eq=False)
class Child:
    """One process of the gateway (a worker or HAProxy), in its own process group, its output
    read line by line and printed with its name in front."""

    name: str
    argv: list[str]
    port: int
    metrics: str = ""
    """A worker's own ``bridge_metrics`` (``HOST:PORT``); empty: none."""
    popen: subprocess.Popen[bytes] | None = None
    partial: bytes = b""
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=400))
    reported: bool = False
    """Its end was said."""

    def spawn(self) -> None:
        self.partial = b""
        self.recent.clear()
        self.reported = False
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=_child_env(),
            start_new_session=True,
            preexec_fn=_die_with_parent if _LIBC is not None else None,
        )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def exit_text(self) -> str:
        assert self.popen is not None
        code = self.popen.poll()
        if code is None:
            return "running"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
            return f"killed by signal {-code}"
        return f"exited with status {code}"

    def signal_group(self, sig: int) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)  # its group: whatever it started goes too


class Gateway:
    def __init__(self, opts: Options, haproxy: str, out: Printer) -> None:
        self.opts = opts
        self.haproxy_program = haproxy
        self.say = out
        self.tmp = Path(tempfile.mkdtemp(prefix="cursor-bridge-gateway-"))
        self.config_path = self.tmp / "haproxy.cfg"
        self.workers: list[Child] = []
        self.haproxy: Child | None = None
        self.selector = selectors.DefaultSelector()
        self.stop_requested = 0
        """Signals received: the first stops everything, a second one stops it harder."""

    # ------------------------------------------------------------- output

    def _watch(self, child: Child) -> None:
        assert child.popen is not None and child.popen.stdout is not None
        os.set_blocking(child.popen.stdout.fileno(), False)
        self.selector.register(child.popen.stdout, selectors.EVENT_READ, child)

    def pump(self, timeout: float) -> None:
        """Print what the children wrote, waiting up to ``timeout`` s for something."""
        if not self.selector.get_map():
            time.sleep(timeout)
            return
        try:
            events = self.selector.select(timeout)
        except InterruptedError:
            return
        for key, _ in events:
            child: Child = key.data
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._flush(child, final=True)
                self.selector.unregister(key.fileobj)
                with contextlib.suppress(OSError):
                    key.fileobj.close()  # type: ignore[union-attr]
                continue
            child.partial += data
            self._flush(child)

    def _flush(self, child: Child, final: bool = False) -> None:
        *lines, child.partial = child.partial.split(b"\n")
        if final and child.partial:
            lines.append(child.partial)
            child.partial = b""
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            child.recent.append(line)
            if child is self.haproxy or not QUIET.match(line):
                self.say(child.name, line)

    def drain(self) -> None:
        """Print what is left in the pipes of children that ended (until their end of file,
        at most ~5 s)."""
        for _ in range(100):
            watched = self.selector.get_map().values()
            if all(key.data.alive() for key in watched):
                return
            self.pump(0.05)

    # ------------------------------------------------------------- start

    def start(self) -> bool:
        """Workers, then HAProxy; False (having said why) if something did not start."""
        confdir = Path(
            os.path.expanduser(_settings(self.opts.mitmdump).get("confdir", "~/.mitmproxy"))
        )
        self.workers = [Child(f"w{i}", [], 0) for i in range(1, self.opts.workers + 1)]
        # mitmproxy makes its CA on first start; several workers making it at once in one
        # confdir could each write their own. The first one alone makes it, then the rest.
        first_alone = not (confdir / "mitmproxy-ca.pem").exists() and len(self.workers) > 1
        groups = [self.workers[:1], self.workers[1:]] if first_alone else [self.workers]
        for group in groups:
            for w in group:
                self._spawn_worker(w)
            if not self._wait_workers(group):
                return False
        return self._start_haproxy()

    def _spawn_worker(self, w: Child) -> None:
        w.port = free_port()
        w.metrics = worker_metrics(self.opts, int(w.name[1:]))
        w.argv = worker_argv(self.opts, w.port, w.metrics)
        w.spawn()
        self._watch(w)

    def _wait_workers(self, workers: Sequence[Child]) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        pending = list(workers)
        retries = 0
        while pending:
            if self.stop_requested:
                return False
            self.pump(0.05)
            for w in list(pending):
                if not w.alive():
                    self.drain()
                    text = "\n".join(w.recent).lower()
                    if "address already in use" in text and retries < 5:
                        retries += 1
                        self._spawn_worker(w)  # the port was taken meanwhile: another one
                        continue
                    w.reported = True
                    self.say(
                        "gateway", f"{w.name} {w.exit_text()} while starting (its lines above)"
                    )
                    return False
                if any("listening at" in line for line in w.recent) and can_connect(
                    LOOPBACK, w.port
                ):
                    pending.remove(w)
            if pending and time.monotonic() > deadline:
                names = ", ".join(w.name for w in pending)
                self.say("gateway", f"not listening after {START_TIMEOUT:.0f} s: {names}")
                return False
        return True

    def _start_haproxy(self) -> bool:
        self.config_path.write_text(
            haproxy_config(
                self.opts.listen_host,
                self.opts.listen_port,
                [(LOOPBACK, w.port) for w in self.workers],
                stats_socket=self.tmp / "haproxy.sock",
            )
        )
        # -db: in the foreground, its messages (a worker DOWN or UP) on stderr.
        argv = [self.haproxy_program, "-db", "-f", str(self.config_path)]
        self.haproxy = Child("haproxy", argv, self.opts.listen_port)
        self.haproxy.spawn()
        self._watch(self.haproxy)
        host = LOOPBACK if self.opts.listen_host in ("0.0.0.0", "::", "") else self.opts.listen_host
        deadline = time.monotonic() + START_TIMEOUT
        while not can_connect(host, self.opts.listen_port):
            if self.stop_requested:
                return False
            self.pump(0.05)
            if not self.haproxy.alive():
                self.drain()
                self.haproxy.reported = True
                self.say("gateway", f"haproxy {self.haproxy.exit_text()} while starting")
                return False
            if time.monotonic() > deadline:
                self.say("gateway", f"haproxy not listening after {START_TIMEOUT:.0f} s")
                return False
        return True

    # ------------------------------------------------------------- run and stop

    def run(self) -> int:
        """Until a signal (0) or until HAProxy or the last worker is gone (1)."""
        while not self.stop_requested:
            self.pump(0.2)
            for w in self.workers:
                if not w.alive() and not w.reported:
                    w.reported = True
                    left = sum(x.alive() for x in self.workers)
                    self.say(
                        "gateway",
                        f"{w.name} (127.0.0.1:{w.port}, pid {w.pid}) {w.exit_text()}; HAProxy's"
                        f" health check takes it out; {left} of {len(self.workers)} workers left",
                    )
            if self.haproxy is not None and not self.haproxy.alive():
                self.drain()
                self.haproxy.reported = True
                self.say("gateway", f"haproxy {self.haproxy.exit_text()}: stopping the workers")
                return 1
            if not any(w.alive() for w in self.workers):
                self.say("gateway", "no worker left: stopping")
                return 1
        return 0

    def stop(self) -> None:
        """HAProxy first (no new requests), then the workers: SIGTERM to each process group,
        SIGKILL to what is left after ``STOP_TIMEOUT`` s (or at a second Ctrl-C)."""
        children = [c for c in [self.haproxy, *self.workers] if c is not None and c.popen]
        for c in children:
            if c.alive():
                c.signal_group(signal.SIGTERM)
        signals_seen = self.stop_requested
        deadline = time.monotonic() + STOP_TIMEOUT
        while any(c.alive() for c in children):
            self.pump(0.05)
            if time.monotonic() > deadline or self.stop_requested > signals_seen:
                for c in children:
                    if c.alive():
                        self.say("gateway", f"{c.name} still running: SIGKILL")
                        c.signal_group(signal.SIGKILL)
                for c in children:
                    assert c.popen is not None
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        c.popen.wait(5)
                break
        for c in children:
            # Whatever a child left in its group (nothing, normally) goes with it.
            c.signal_group(signal.SIGKILL)
        self.drain()
        self.selector.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested += 1


# --------------------------------------------------------------------------- helpers


class Printer:
    """Each line with its source's name in front; one write per line (lines of children that
    write at once do not interleave)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.width = max(len(n) for n in names)

    def __call__(self, name: str, line: str) -> None:
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.write(f"{name:>{self.width}} | {line}\n")
            sys.stdout.flush()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def can_connect(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if opts.print_config:
        placeholders = [(LOOPBACK, 10001 + i) for i in range(opts.workers)]
        print(haproxy_config(opts.listen_host, opts.listen_port, placeholders), end="")
        return 0
    haproxy = opts.haproxy or find_haproxy()
    if haproxy is None:
        print(install_hint(), file=sys.stderr)
        return 3
    names = ["gateway", "haproxy", *(f"w{i}" for i in range(1, opts.workers + 1))]
    say = Printer(names)
    if warning := store_warning(opts):
        say("gateway", warning)
    gw = Gateway(opts, haproxy, say)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, gw.on_signal)
    status = 1
    try:
        say(
            "gateway",
            f"starting {opts.workers} worker(s): mitmdump {shown_command(opts.mitmdump)}",
        )
        if gw.start():
            assert gw.haproxy is not None
            ports = ", ".join(
                f"{w.name} 127.0.0.1:{w.port} pid {w.pid}"
                + (f" metrics http://{w.metrics}/metrics" if w.metrics else "")
                for w in gw.workers
            )
            say(
                "gateway",
                f"ready: HAProxy on http://{_hostport(opts.listen_host, opts.listen_port)}"
                f" pid {gw.haproxy.pid} → {ports} (config {gw.config_path}); Ctrl-C stops"
                " them all",
            )
            status = gw.run()
        elif gw.stop_requested:
            status = 0
    finally:
        gw.stop()
        say("gateway", "stopped")
    return status


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


if __name__ == "__main__":
    sys.exit(main())
