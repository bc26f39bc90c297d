"""End to end: ``scripts/demo.py`` runs its two-turn tool loop and says what went over the wire.

The demo is run as users run it (a child process of the venv's Python, not the bash
wrapper, which would reinstall), with a bounded wait, and judged by its output and
exit status only. ``--web`` is driven like a user would: open the printed URL (here
mitmweb's own HTTP API), then press Enter.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

from tests.e2e.harness import REPO

DEMO = REPO / "scripts" / "demo.py"
TIMEOUT = 150.0


def demo_env() -> dict[str, str]:
    """Ours without proxy settings (the demo stays on loopback anyway), fixed width, no colour."""
    drop = {"http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy"}
    env = {k: v for k, v in os.environ.items() if k.lower() not in drop}
    env["COLUMNS"] = "110"  # the widest the demo wraps at: no quoted line is split
    env["NO_COLOR"] = "1"
    return env


def project() -> tuple[str, str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return str(data["name"]), str(data["version"])


def test_the_demo_runs_both_turns_and_quotes_the_file() -> None:
    done = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=Path("/"),  # the demo finds the repository itself
        env=demo_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr}\n{out[-3000:]}"
    assert done.stderr.strip() == ""

    # Every hop, in both turns, in order.
    hops = ["client → proxy", "proxy → upstream", "upstream → proxy", "proxy → client"]
    turn1, rest = out.split("Turn 1", 1)[1].split("The client runs read_file", 1)
    tool_run, turn2 = rest.split("Turn 2", 1)
    for turn in (turn1, turn2):
        positions = [turn.index(hop) for hop in hops]
        assert positions == sorted(positions), turn

    # Turn 1: the bridge's instruction with this request's trigger, the model's text call,
    # and the client's real tool call.
    trigger = re.search(r"this request's trigger: (<<CALL_[A-Za-z0-9]{8}>>)", turn1)
    assert trigger is not None, turn1
    assert "native tools field: removed by the bridge" in turn1
    assert "<function_list>" in turn1 and '<function name="read_file">' in turn1
    assert (
        f'{trigger.group(1)}\n   │ <invoke name="read_file">{{"path": "pyproject.toml"}}' in turn1
    )
    assert "tool_calls: id=call_" in turn1 and "name=read_file" in turn1
    assert "finish_reason: tool_calls" in turn1

    # The tool really read the file.
    name, version = project()
    assert f'name = "{name}"' in tool_run and f'version = "{version}"' in tool_run

    # Turn 2: the same trigger (one conversation: the prompt's bytes repeat, issue 35), the call
    # and its result rendered as text, the answer quoting the file.
    trigger2 = re.search(r"this request's trigger: (<<CALL_[A-Za-z0-9]{8}>>)", turn2)
    assert trigger2 is not None and trigger2.group(1) == trigger.group(1)
    assert '<tool_result id="call_' in turn2
    assert f"{trigger2.group(1)}\n   │ <invoke name=" in turn2
    assert "finish_reason: stop" in turn2
    answer = turn2.split("proxy → client", 1)[1]
    assert f'name = "{name}"' in answer and f'version = "{version}"' in answer
    assert f"So this project is {name}, version {version}." in answer

    summary = " ".join(out.rsplit("══ Done", 1)[1].split())  # wrapped prose, joined again
    assert f"the model's answer quotes the file: {name} {version}." in summary
    assert "sk-" not in out  # no key-shaped string anywhere


def read_until(lines: queue.Queue[str | None], pattern: str, deadline: float) -> re.Match[str]:
    seen: list[str] = []
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"{pattern!r} not printed in time:\n{''.join(seen)}"
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            continue
        assert line is not None, f"the demo ended before {pattern!r}:\n{''.join(seen)}"
        seen.append(line)
        if m := re.search(pattern, line):
            return m


def test_the_demo_through_mitmweb_shows_the_flows_and_stops_on_enter() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(DEMO), "--web"],
        cwd=REPO,
        env=demo_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + TIMEOUT
    try:
        url = read_until(lines, r"mitmweb: open (http://127\.0\.0\.1:\d+/\?token=\w+)", deadline)
        read_until(lines, r"Press Enter", deadline)
        assert proc.poll() is None  # waiting for the user

        # Both turns are flows in mitmweb.
        base, token = url.group(1).split("/?token=")
        request = urllib.request.Request(
            f"{base}/flows", headers={"Authorization": f"Bearer {token}"}
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=10) as resp:
            flows = json.loads(resp.read())
        paths = [f["request"]["path"] for f in flows if f.get("type") == "http"]
        assert paths == ["/v1/chat/completions", "/v1/chat/completions"], flows
        # Each answer's timeline, with mitmproxy's default store_streamed_bodies.
        for flow in flows:
            view = urllib.request.Request(
                f"{base}/flows/{flow['id']}/response/content/cursor-bridge.json",
                headers={"Authorization": f"Bearer {token}"},
            )
            with opener.open(view, timeout=10) as resp:
                text = json.loads(resp.read())["text"]
            assert "upstream sent" in text and "client got" in text, text

        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None and proc.stderr.read().strip() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_the_demo_says_in_one_line_why_it_failed(tmp_path: Path) -> None:
    """A proxy that cannot start (here: no mitmdump next to the Python) is one line, exit 1."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.symlink_to(sys.executable)
    env = demo_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run(
        [str(python), str(DEMO)],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("demo failed: ") and "mitmdump" in errors[0]
