"""Gemini CLI (``gemini -p``) runs a real read_file tool loop through the bridge.

Gemini CLI talks ``streamGenerateContent?alt=sse`` to ``GOOGLE_GEMINI_BASE_URL`` with an API
key. The scripted upstream answers turn 1 with a ``read_file`` of a file holding a random
token; Gemini CLI reads it and sends a ``functionResponse``; turn 2 must carry the token
and is answered with text quoting it, which must be in Gemini CLI's output. Upstreams: every
dialect ``loop.answer`` speaks, its own (same dialect) and the others (a dialect change).
Variants: two parallel reads in turn 1; the upstream (Gemini Code Assist too) answering
whole what Gemini CLI asked to stream (it always streams); Kiro and Gemini Code Assist upstreams (``wrapped``) in 3 turns (two parallel
calls, one call, the text).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.real.clients.loop import UPSTREAMS, Call, ToolLoop
from tests.real.clients.programs import (
    Agent,
    Finished,
    Program,
    Served,
    ThroughBridge,
    base_env,
    notes,
    rounds_of,
    run,
)
from tests.real.clients.wrapped import WRAPPED, loop_for

KEY = "real-client-gemini-key"


def gemini(program: Program, bridge: Served, project: Path, prompt: str) -> Finished:
    home = project.parent / "home"
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings, indent=2))
    env = base_env(home) | {
        "GEMINI_API_KEY": KEY,
        "GOOGLE_GEMINI_BASE_URL": bridge.base_url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    argv = [
        "node",
        str(program.binary),
        "-p",
        prompt,
        "--approval-mode",
        "yolo",
        "--output-format",
        "stream-json",
        "--model",
        "gemini-2.5-flash",
    ]
    return run(argv, cwd=project, env=env)


def assistant_text(done: Finished) -> str:
    """The assistant's text in Gemini CLI's stream-json output (its message events)."""
    out = ""
    for line in done.stdout.splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event.get("type") == "message" and event.get("role") == "assistant":
            out += str(event.get("content", ""))
    return out


def read(n: int, path: Path) -> Call:
    return Call("read_file", {"file_path": str(path)}, id=f"call_real_read_{n}")


GEMINI_CLI = Agent("gemini-cli", "gemini", KEY, gemini, assistant_text)


@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_gemini_cli_reads_a_file_through_the_bridge(
    through_bridge: ThroughBridge, project: Path, token: str, upstream: str
) -> None:
    target = project / "notes.txt"
    loop = ToolLoop(upstream, [[(read(1, target), token)]])
    through_bridge(GEMINI_CLI, loop, [target])


@pytest.mark.parametrize("upstream", ["gemini", "anthropic"])
def test_gemini_cli_reads_two_files_in_parallel(
    through_bridge: ThroughBridge, project: Path, upstream: str
) -> None:
    files = notes(project, 2)
    loop = ToolLoop(upstream, rounds_of(files, read, 2))
    through_bridge(GEMINI_CLI, loop, [p for p, _ in files])


@pytest.mark.parametrize("upstream", ["openai_chat", "gemini_code_assist"])
def test_gemini_cli_streams_what_the_upstream_answers_whole(
    through_bridge: ThroughBridge, project: Path, token: str, upstream: str
) -> None:
    target = project / "notes.txt"
    loop = loop_for(upstream, [[(read(1, target), token)]], whole=True)
    through_bridge(GEMINI_CLI, loop, [target])
    # Its limit: every request it sends asks for a stream (it has no whole mode).
    asked = [t.stream for t in loop.turns if t.rec.method == "POST"]
    assert asked and all(asked), f"Gemini CLI asked for a stream every time: {asked}"


@pytest.mark.parametrize("upstream", sorted(WRAPPED))
def test_gemini_cli_runs_three_turns_through_the_bridge(
    through_bridge: ThroughBridge, project: Path, upstream: str
) -> None:
    files = notes(project, 3)
    loop = WRAPPED[upstream](upstream, rounds_of(files, read, 2, 1))
    through_bridge(GEMINI_CLI, loop, [p for p, _ in files])
