"""Claude Code (``claude -p``) runs a real Read tool loop through the bridge.

The scripted upstream answers turn 1 with a ``Read`` of a file holding a random token;
Claude Code reads it on its side and sends the result; turn 2 must carry the token and is
answered with text quoting it, which must be Claude Code's final result. Upstreams: every
dialect ``loop.answer`` speaks, its own (same dialect) and the others (a dialect change).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.real.clients.loop import UPSTREAMS, Call, ToolLoop
from tests.real.clients.programs import Bridge, Finished, Program, base_env, check_loop, run

KEY = "sk-ant-real-client-test-key"


def claude(program: Program, bridge: Bridge, project: Path, prompt: str) -> Finished:
    home = project.parent / "home"
    env = base_env(home) | {
        "ANTHROPIC_BASE_URL": bridge.base_url,
        "ANTHROPIC_API_KEY": KEY,
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    argv = [
        str(program.binary),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--allowedTools",
        "Read",
        "--max-turns",
        "4",
        "--model",
        "claude-sonnet-4-6",
    ]
    return run(argv, cwd=project, env=env)


def final_result(done: Finished) -> str:
    """The ``result`` of the last ``{"type": "result"}`` line of stream-json output."""
    results = [
        json.loads(line)
        for line in done.stdout.splitlines()
        if line.startswith("{") and '"type":"result"' in line.replace(" ", "")
    ]
    assert results, f"no result line:\n{done.describe()}"
    result = results[-1]
    assert not result.get("is_error"), done.describe()
    return str(result.get("result", ""))


@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_claude_code_reads_a_file_through_the_bridge(
    program: Callable[[str], Program], project: Path, token: str, upstream: str
) -> None:
    claude_code = program("claude-code")
    target = project / "notes.txt"
    call = Call("Read", {"file_path": str(target)}, id="call_real_read_1")
    loop = ToolLoop(upstream, call, token)
    with Bridge("anthropic", loop, project.parent) as bridge:
        done = claude(claude_code, bridge, project, f"Read {target} and tell me the token.")
    check_loop(done, bridge, final_result(done), KEY)
