"""cursor-bridge demo: a real two-turn tool loop through the proxy, no API key, no network.

    scripts/demo          # mitmdump in front of a scripted local model; prints every hop
    scripts/demo --web    # the same through mitmweb; prints its URL, waits for Enter

What runs, all on 127.0.0.1 (random free ports):

- a scripted *model without native tool calling*: an OpenAI chat-completions server
  that reads the ``invoke`` trigger and the tool list from the system prompt it gets
  and answers like a model following that instruction — first a call of
  ``read_file``, then, once the tool result is in the history, a text answer that
  quotes it;
- the proxy: a real ``mitmdump -s addon/main.py --mode reverse:… --set
  bridge_tool_mode=invoke`` (or ``mitmweb`` with ``--web``);
- the client: the official ``openai`` SDK, streaming, with a ``read_file`` tool
  that really reads a file of this repository.

For each turn it prints what went over each hop: client → proxy, proxy →
upstream, upstream → proxy, proxy → client. Every wait is bounded; every
process and thread it starts is stopped on success, failure and Ctrl-C. On
failure it exits non-zero with one line saying what went wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import tomllib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, cast

try:
    import httpx
    import openai
except ImportError:
    sys.exit("demo failed: the openai SDK is missing; scripts/demo installs it into .venv")
except KeyboardInterrupt:  # Ctrl-C while importing: nothing started yet
    print("\ndemo: interrupted", file=sys.stderr)
    sys.exit(130)

# Beside this file (its folder is on the path of ``python scripts/demo.py``): shared with
# the e2e harness.
from mitmdump_ready import READY_MARK, NotServing, wait_serving, write_probe

ROOT = Path(__file__).resolve().parents[1]
ADDON = ROOT / "addon" / "main.py"
BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
MODEL = "plain-model-without-tools"
API_KEY = "demo-key-not-a-secret"  # nothing checks it; the scripted model needs none
FILE = "pyproject.toml"  # what the model asks to read
QUESTION = f"What is this project's name and version? Read {FILE} to find out."
TRIGGER_RE = re.compile(r"<<CALL_[A-Za-z0-9]{8}>>")
STARTUP_TIMEOUT = 45.0  # mitmdump/mitmweb until it serves
REQUEST_TIMEOUT = 30.0  # each HTTP request of the SDK (and the model's socket reads)
DEMO_TIMEOUT = 120.0  # the whole run, --web's wait for Enter excepted
STOP_TIMEOUT = 10.0  # SIGTERM → SIGKILL

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file of the repository the user is working in.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the repository"}
                },
                "required": ["path"],
            },
        },
    }
]


class DemoError(Exception):
    """A failure the demo reports as its one line."""


class Stopped(Exception):
    """SIGTERM / SIGHUP: shut down like on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# --------------------------------------------------------------------------- output


class Printer:
    def __init__(self) -> None:
        cols = shutil.get_terminal_size((100, 24)).columns
        self.width = max(60, min(cols, 110))
        self.color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")

    def _style(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def out(self, text: str = "") -> None:
        print(text, flush=True)

    def title(self, text: str) -> None:
        bar = "═" * max(0, self.width - len(text) - 5)
        self.out()
        self.out(self._style("1", f"══ {text} {bar}"))

    def hop(self, arrow: str, what: str) -> None:
        self.out()
        self.out(self._style("1;36", f"── {arrow}") + f"  {what}")

    def note(self, text: str) -> None:
        for line in textwrap.wrap(text, self.width - 3) or [""]:
            self.out(f"   {line}")

    def block(self, text: str, max_lines: int = 40) -> None:
        """``text`` verbatim in a frame, long lines wrapped, at most ``max_lines`` lines."""
        prefix, cont = "   │ ", "   ┆ "
        room = self.width - len(prefix)
        lines = text.split("\n")
        shown = lines[:max_lines]
        for line in shown:
            indent = line[: len(line) - len(line.lstrip(" "))]
            pieces = textwrap.wrap(
                line.strip(" "),
                room,
                initial_indent=indent,
                subsequent_indent=indent,
                break_on_hyphens=False,
            ) or [""]
            self.out(prefix + pieces[0])
            for piece in pieces[1:]:
                self.out(cont + piece)
        if len(lines) > max_lines:
            self.out(f"{prefix}… ({len(lines) - max_lines} more lines)")


def clip(text: str, max_lines: int) -> str:
    lines = text.split("\n")
    if len(lines) <= max_lines:
        return text
    return "\n".join([*lines[:max_lines], f"… ({len(lines) - max_lines} more lines)"])


def content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


# --------------------------------------------------------------------------- the model


@dataclass
class Exchange:
    """One request the scripted model got, and what it answered."""

    path: str
    body: dict[str, Any]
    text: str
    pieces: int
    streamed: bool


def model_answer(body: dict[str, Any]) -> str:
    """What a plain chat model that follows the bridge's instruction would write.

    Everything comes from the request: the trigger and the tool names from the
    system prompt, the file's content from the ``<tool_result>`` in the last user
    message. Nothing is read from disk here.
    """
    messages = body.get("messages") or []
    system = "\n".join(
        content_text(m.get("content")) for m in messages if m.get("role") == "system"
    )
    last_user = next(
        (content_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    results = re.findall(r'<tool_result id="[^"]*">(.*?)</tool_result>', last_user, re.S)
    if results:
        said = results[-1]
        name = re.search(r'^name\s*=\s*"([^"]+)"', said, re.M)
        version = re.search(r'^version\s*=\s*"([^"]+)"', said, re.M)
        if name and version:
            return (
                f"The tool result is {FILE}. Its [project] table says:\n\n"
                f"    {name.group(0)}\n    {version.group(0)}\n\n"
                f"So this project is {name.group(1)}, version {version.group(1)}."
            )
        return f"The tool result has no name and version; it begins: {said[:80]!r}"
    trigger = TRIGGER_RE.search(system)
    tools = re.findall(r'<function name="([^"]+)">', system)
    if trigger is None or "read_file" not in tools:
        return "I have no tools in this conversation, so I cannot read the file."
    call = json.dumps({"path": FILE})
    return (
        f"I'll read {FILE} to find out.\n"
        f'{trigger.group(0)}\n<invoke name="read_file">{call}</invoke>\n'
    )


def completion_chunks(text: str, prompt: int) -> list[dict[str, Any]]:
    """``text`` as OpenAI chat-completion chunks of 1-8 characters, like a model streams."""
    base = {"id": "chatcmpl-demo", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
    rng = random.Random(len(text))
    out: list[dict[str, Any]] = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    ]
    pos = 0
    while pos < len(text):
        n = rng.randint(1, 8)
        out.append({**base, "choices": [{"index": 0, "delta": {"content": text[pos : pos + n]}}]})
        pos += n
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    out.append({**base, "choices": [], "usage": usage(prompt, text)})
    return out


class ScriptedModel:
    """An OpenAI chat-completions server on 127.0.0.1 for a model with no native tools."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def start(self) -> ScriptedModel:
        model = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # Not socketserver's traceback on stderr: the demo reports it in its one line.
                error = sys.exc_info()[1]
                model._record(None, f"the scripted model failed to answer: {error!r}")

        server = Server((HOST, 0), self._handler())
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT)
            self._thread = None

    def _record(self, exchange: Exchange | None, error: str | None = None) -> None:
        with self._lock:
            if exchange is not None:
                self.exchanges.append(exchange)
            if error is not None:
                self.errors.append(error)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = REQUEST_TIMEOUT

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("transfer-encoding", "").lower():
                    parts: list[bytes] = []
                    while size := int(self.rfile.readline(100).split(b";")[0] or b"0", 16):
                        parts.append(self.rfile.read(size))
                        self.rfile.readline(100)
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length) if length else b""

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._body()
                self._json(404, {"error": {"message": f"no {self.path} here"}})

            def do_POST(self) -> None:
                raw = self._body()
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no {self.path} here"}})
                    return
                try:
                    body = json.loads(raw)
                    text = model_answer(body)
                except Exception as e:
                    model._record(None, f"the model could not read the request: {e!r}")
                    self._json(400, {"error": {"message": "unreadable request"}})
                    return
                prompt = max(1, len(raw) // 4)
                if body.get("stream"):
                    chunks = completion_chunks(text, prompt)
                    model._record(Exchange(self.path, body, text, len(chunks), True))
                    self._stream(chunks)
                else:
                    model._record(Exchange(self.path, body, text, 1, False))
                    self._json(200, whole_completion(text, prompt))

            def _stream(self, chunks: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
                for event in [*events, b"data: [DONE]\n\n"]:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            do_PUT = do_PATCH = do_DELETE = do_GET

        return Handler


def usage(prompt: int, text: str) -> dict[str, int]:
    """Token counts as a model would report them, estimated at ~4 bytes a token."""
    completion = max(1, len(text.encode()) // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def whole_completion(text: str, prompt: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-demo",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": usage(prompt, text),
    }


# --------------------------------------------------------------------------- the proxy


def free_ports(n: int) -> list[int]:
    """``n`` different ports free on 127.0.0.1 right now (they may be taken before use)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind((HOST, 0))
        return [int(s.getsockname()[1]) for s in socks]


def child_env() -> dict[str, str]:
    """Our environment without proxy settings, so nothing leaves loopback."""
    drop = {"http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy"}
    env = {k: v for k, v in os.environ.items() if k.lower() not in drop}
    env["NO_PROXY"] = env["no_proxy"] = f"{HOST},localhost"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ProxyProcess:
    """``mitmdump`` (or ``mitmweb``) with the addon, in reverse mode before ``upstream_port``."""

    def __init__(self, upstream_port: int, workdir: Path, web: bool) -> None:
        self.upstream_port = upstream_port
        self.web = web
        self.tool = "mitmweb" if web else "mitmdump"
        self.workdir = workdir
        self.log_path = workdir / f"{self.tool}.log"
        self.probe = write_probe(workdir)  # the start-up probe's script
        self.confdir = workdir / "confdir"  # a fresh CA, none of the user's settings
        self.confdir.mkdir(exist_ok=True)
        self.port = 0
        self.web_port = 0
        self.web_url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        exe = BIN / self.tool
        args = [
            str(exe),
            "-s",
            str(ADDON),
            "-s",
            str(self.probe),
            "--mode",
            f"reverse:http://{HOST}:{self.upstream_port}",
            "--listen-host",
            HOST,
            "--listen-port",
            str(self.port),
        ]
        settings = {
            "bridge_tool_mode": "invoke",
            "confdir": str(self.confdir),
            "connection_strategy": "lazy",
        }
        if self.web:
            settings |= {
                "web_host": HOST,
                "web_port": str(self.web_port),
                "web_open_browser": "false",
            }
        for k, v in settings.items():
            args += ["--set", f"{k}={v}"]
        return args

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self) -> None:
        exe = BIN / self.tool
        if not exe.exists():
            raise DemoError(f"{exe} not found: run scripts/demo, which installs it into .venv")
        for _attempt in range(3):
            self.port, self.web_port = free_ports(2)
            with self.log_path.open("wb") as log:
                self._proc = subprocess.Popen(
                    self.command(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=ROOT,
                    env=child_env(),
                    start_new_session=True,  # Ctrl-C reaches us; we stop it ourselves
                )
            try:
                self._wait_ready()
                return
            except DemoError:
                self.stop()
                if "address already in use" not in self.log_text().lower():
                    raise
        raise DemoError(f"{self.tool}: no free port in 3 tries")

    def _wait_ready(self) -> None:
        assert self._proc is not None
        web = re.compile(r"Web server listening at (\S+)")
        try:
            text = wait_serving(
                self._proc,
                self.log_text,
                HOST,
                self.port,
                STARTUP_TIMEOUT,
                also=lambda log: not self.web or web.search(log) is not None,
            )
        except NotServing as e:
            raise DemoError(f"{self.tool} {e.why}: {last_error_line(e.log)}") from None
        found = web.search(text)
        self.web_url = found.group(1) if found else ""

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def bridge_lines(self, since: int) -> tuple[list[str], int]:
        """The log's lines about the bridge written after offset ``since``, and the new end."""
        text = self.log_text()
        new = text[since:]
        keep = [
            line.strip()
            for line in new.splitlines()
            if "bridge" in line.lower() and READY_MARK not in line and "Loading script" not in line
        ]
        return keep, len(text)


ROUTINE = (
    "Loading script",
    "listening at",
    "Error logged during startup",
    "client connect",
    "client disconnect",
    READY_MARK,
)


def last_error_line(log: str) -> str:
    """The line of a mitmdump log that says why it stopped (its routine lines skipped)."""
    lines = [re.sub(r"^\[[\d:.]+\]\s*", "", line).strip() for line in log.splitlines()]
    said = [line for line in lines if line and not any(r in line for r in ROUTINE)]
    return said[-1][:300] if said else "(nothing in its log)"


# --------------------------------------------------------------------------- the client


def read_file(path: str) -> str:
    """The ``read_file`` tool: a text file inside the repository, nothing outside it."""
    target = (ROOT / path).resolve()
    if not target.is_relative_to(ROOT) or not target.is_file():
        return f"error: {path} is not a file of this repository"
    return target.read_text(encoding="utf-8", errors="replace")[:20_000]


@dataclass
class Turn:
    request: dict[str, Any] = field(default_factory=dict)
    """The body the SDK put on the wire."""
    chunks: int = 0
    content: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    finish: str | None = None
    usage: dict[str, Any] | None = None
    first_call_delta: str = ""
    """The first ``delta`` carrying ``tool_calls``, as JSON."""


def make_client(proxy_port: int, captured: list[bytes]) -> openai.OpenAI:
    def on_request(request: httpx.Request) -> None:
        captured.append(request.read())

    http_client = openai.DefaultHttpxClient(
        trust_env=False,  # no proxy from the environment: loopback only
        event_hooks={"request": [on_request]},
    )
    return openai.OpenAI(
        base_url=f"http://{HOST}:{proxy_port}/v1",
        api_key=API_KEY,
        max_retries=0,
        timeout=REQUEST_TIMEOUT,
        http_client=http_client,
    )


def run_turn(client: openai.OpenAI, messages: list[dict[str, Any]], captured: list[bytes]) -> Turn:
    turn = Turn()
    slots: dict[int, list[str]] = {}
    before = len(captured)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=cast(Any, messages),
        tools=cast(Any, TOOLS),
        stream=True,
        stream_options={"include_usage": True},
    )
    with contextlib.closing(stream):
        for chunk in stream:
            turn.chunks += 1
            if chunk.usage is not None:
                turn.usage = chunk.usage.model_dump(exclude_none=True)
            for choice in chunk.choices:
                turn.content += choice.delta.content or ""
                turn.finish = choice.finish_reason or turn.finish
                if choice.delta.tool_calls and not turn.first_call_delta:
                    delta = choice.delta.model_dump(exclude_none=True)
                    turn.first_call_delta = json.dumps(delta, ensure_ascii=False)
                for t in choice.delta.tool_calls or []:
                    slot = slots.setdefault(t.index, ["", "", ""])
                    slot[0] += t.id or ""
                    if t.function is not None:
                        slot[1] += t.function.name or ""
                        slot[2] += t.function.arguments or ""
    turn.calls = [(s[0], s[1], s[2]) for _, s in sorted(slots.items())]
    if len(captured) > before:
        turn.request = json.loads(captured[-1])
    return turn


# --------------------------------------------------------------------------- the hops


def summarise_message(m: dict[str, Any]) -> str:
    role = m.get("role", "?")
    head = f"[{role}]"
    if role == "tool":
        head += f" tool_call_id={m.get('tool_call_id')}"
    lines = [head]
    text = content_text(m.get("content"))
    if text:
        lines.append(clip(text, 6))
    for call in m.get("tool_calls") or []:
        fn = call.get("function") or {}
        lines.append(f"tool_calls: {call.get('id')} {fn.get('name')}({fn.get('arguments')})")
    return "\n".join(lines)


def show_client_request(p: Printer, turn: Turn) -> None:
    body = turn.request
    p.hop("client → proxy", "POST /v1/chat/completions  (openai SDK)")
    tools = ", ".join(
        f"{t['function']['name']}({', '.join(t['function']['parameters']['properties'])})"
        for t in body.get("tools") or []
    )
    p.note(
        f"model={body.get('model')}  stream={body.get('stream')}  "
        f"native tools: {tools or 'none'}  messages: {len(body.get('messages') or [])}"
    )
    p.block("\n\n".join(summarise_message(m) for m in body.get("messages") or []))


def show_upstream_request(p: Printer, ex: Exchange, first: bool) -> None:
    body = ex.body
    p.hop("proxy → upstream", f"POST {ex.path}  (what the model received)")
    dropped = [k for k in ("tools", "tool_choice") if k in body]
    p.note(
        f"stream={body.get('stream')}  native tools field: "
        + ("still there: " + ", ".join(dropped) if dropped else "removed by the bridge")
    )
    messages = body.get("messages") or []
    system = "\n".join(
        content_text(m.get("content")) for m in messages if m.get("role") == "system"
    )
    trigger = TRIGGER_RE.search(system)
    p.note(
        f"this request's trigger: {trigger.group(0) if trigger else '(none!)'}"
        + ("" if first else "  (the same on every turn of a conversation: its bytes stay cached)")
    )
    if first:
        p.note("system prompt (the client's line, then the bridge's instruction):")
        p.block(system, max_lines=32)
    else:
        lines = [line for line in system.splitlines() if trigger and trigger.group(0) in line]
        p.note("system prompt: the same instruction, the same trigger, e.g.:")
        p.block("\n".join(lines[:2]) or "(no trigger in the system prompt)")
    history = [m for m in messages if m.get("role") != "system"]
    p.note("history as the model sees it (tool calls and results rendered as text):")
    p.block("\n\n".join(summarise_message(m) for m in history), max_lines=30)


def show_upstream_answer(p: Printer, ex: Exchange) -> None:
    how = f"{ex.pieces} SSE chunks" if ex.streamed else "one JSON answer"
    p.hop("upstream → proxy", f"the model's raw text ({how})")
    p.block(ex.text)


def show_client_answer(p: Printer, turn: Turn) -> None:
    p.hop("proxy → client", f"what the SDK got ({turn.chunks} chunks)")
    lines = ["content:", *(f"  {line}" for line in turn.content.split("\n"))]
    if not turn.content:
        lines = ["content: (none)"]
    for call_id, name, args in turn.calls:
        lines.append(f"tool_calls: id={call_id} name={name} arguments={args}")
    lines.append(f"finish_reason: {turn.finish}")
    if turn.usage:
        lines.append(f"usage: {json.dumps(turn.usage)}")
    p.block("\n".join(lines))
    if turn.first_call_delta:
        p.note("the delta that carried the call, as the SDK parsed it:")
        p.block(turn.first_call_delta)


def show_bridge_log(p: Printer, lines: list[str]) -> None:
    if lines:
        p.note("the proxy's log for this flow:")
        p.block("\n".join(lines), max_lines=8)


# --------------------------------------------------------------------------- the run


def expected_project() -> tuple[str, str]:
    project = tomllib.loads((ROOT / FILE).read_text(encoding="utf-8"))["project"]
    return str(project["name"]), str(project["version"])


def one_exchange(model: ScriptedModel, count: int) -> Exchange:
    if model.errors:
        raise DemoError(model.errors[0])
    if len(model.exchanges) != count:
        raise DemoError(f"the model got {len(model.exchanges)} request(s), expected {count}")
    return model.exchanges[-1]


def demo(p: Printer, web: bool) -> None:
    """Start everything, run the two turns, stop everything (also on failure and Ctrl-C)."""
    with contextlib.ExitStack() as stack:
        try:
            run(p, web, stack)
        finally:
            # Shutting down from here on: bounded, and not cut short by a second Ctrl-C.
            signal.alarm(0)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)


def run(p: Printer, web: bool, stack: contextlib.ExitStack) -> None:
    name, version = expected_project()
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cursor-bridge-")))
    model = ScriptedModel().start()
    stack.callback(model.stop)
    proxy = ProxyProcess(model.port, workdir, web)
    stack.callback(proxy.stop)

    p.title("cursor-bridge demo: a tool loop for a model without tool calling")
    p.note(
        f"scripted model (no native tools) on {HOST}:{model.port}; starting {proxy.tool} "
        f"with addon/main.py and bridge_tool_mode=invoke …"
    )
    proxy.start()
    p.note(
        f"proxy on {HOST}:{proxy.port} (reverse mode → {HOST}:{model.port}); "
        f"client: openai SDK, streaming. No API key, no network."
    )
    if web:
        p.out()
        p.out(f"   mitmweb: open {proxy.web_url}")

    captured: list[bytes] = []
    client = make_client(proxy.port, captured)
    stack.callback(client.close)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding assistant in the user's repository."},
        {"role": "user", "content": QUESTION},
    ]
    log_pos = len(proxy.log_text())

    # Turn 1: the model asks for the file.
    p.title("Turn 1: the question")
    t1 = call_proxy(client, messages, captured)
    ex1 = one_exchange(model, 1)
    show_client_request(p, t1)
    show_upstream_request(p, ex1, first=True)
    show_upstream_answer(p, ex1)
    show_client_answer(p, t1)
    bridge_log, log_pos = proxy.bridge_lines(log_pos)
    show_bridge_log(p, bridge_log)
    if "<invoke" not in ex1.text:
        raise DemoError(f"turn 1: the model wrote no call: {ex1.text!r}")
    if t1.finish != "tool_calls" or [c[1] for c in t1.calls] != ["read_file"]:
        raise DemoError(
            f"turn 1: expected one read_file call, got {t1.calls!r} (finish {t1.finish!r})"
        )
    if "<invoke" in t1.content:
        raise DemoError("turn 1: the invoke markup reached the client as text")
    call_id, tool, arguments = t1.calls[0]

    # The client runs the tool for real.
    path = str(json.loads(arguments).get("path", ""))
    result = read_file(path)
    p.title(f"The client runs {tool}")
    p.note(f'{tool}(path="{path}") → {len(result)} characters, read from {ROOT / path}')
    p.block(clip(result, 8))

    # Turn 2: the result goes back; the model answers from it.
    messages += [
        {
            "role": "assistant",
            "content": t1.content or None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool, "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]
    p.title("Turn 2: the tool result goes back")
    t2 = call_proxy(client, messages, captured)
    ex2 = one_exchange(model, 2)
    show_client_request(p, t2)
    show_upstream_request(p, ex2, first=False)
    show_upstream_answer(p, ex2)
    show_client_answer(p, t2)
    bridge_log, log_pos = proxy.bridge_lines(log_pos)
    show_bridge_log(p, bridge_log)
    if t2.calls or t2.finish != "stop":
        raise DemoError(f"turn 2: expected a text answer, got {t2.calls!r} ({t2.finish!r})")
    if name not in t2.content or version not in t2.content:
        raise DemoError(f"turn 2: the answer does not quote {FILE}: {t2.content!r}")

    p.title("Done")
    p.note(
        f"Two turns through {proxy.tool}: the model wrote a text call with this request's "
        f"trigger, the client got a real tool_calls entry, ran {tool} on {path}, and the "
        f"model's answer quotes the file: {name} {version}."
    )
    if web:
        p.out()
        p.out(f"   mitmweb is still running: {proxy.web_url}")
        p.out("   Press Enter (or Ctrl-C) to stop it.")
        signal.alarm(0)  # the wait for Enter is the user's
        wait_for_enter(proxy)
    p.out()


def call_proxy(
    client: openai.OpenAI, messages: list[dict[str, Any]], captured: list[bytes]
) -> Turn:
    try:
        return run_turn(client, messages, captured)
    except openai.APIStatusError as e:
        raise DemoError(f"the proxy answered {e.status_code}: {e.message}") from None
    except openai.APIError as e:
        raise DemoError(f"the request through the proxy failed: {e}") from None


def wait_for_enter(proxy: ProxyProcess) -> None:
    """Until Enter, end of input, Ctrl-C, or mitmweb exiting by itself."""
    done = threading.Event()

    def read() -> None:
        with contextlib.suppress(Exception):
            sys.stdin.readline()
        done.set()

    threading.Thread(target=read, daemon=True).start()
    while not done.wait(0.2):
        if not proxy.alive():
            raise DemoError("mitmweb exited while waiting for Enter")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--web", action="store_true", help="run mitmweb instead of mitmdump and print its URL"
    )
    args = parser.parse_args(argv)
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="replace")  # type: ignore[union-attr]

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    def too_long(signum: int, frame: FrameType | None) -> None:
        raise DemoError(f"the demo did not finish within {DEMO_TIMEOUT:.0f} s")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    signal.signal(signal.SIGALRM, too_long)
    signal.alarm(int(DEMO_TIMEOUT))
    try:
        demo(Printer(), args.web)
        return 0
    except DemoError as e:
        fail(str(e))
        return 1
    except KeyboardInterrupt:
        fail("interrupted; everything it started is stopped", prefix="demo: ")
        return 128 + signal.SIGINT
    except Stopped as e:
        fail(f"stopped by {e}; everything it started is stopped", prefix="demo: ")
        return 128 + e.signum
    except Exception as e:
        fail(f"unexpected {type(e).__name__}: {e}")
        return 1
    finally:
        signal.alarm(0)


def fail(message: str, prefix: str = "demo failed: ") -> None:
    line = " ".join(message.split())
    print(f"\n{prefix}{line}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
