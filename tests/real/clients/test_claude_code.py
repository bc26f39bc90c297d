"""Claude Code (``claude -p``) runs a real Read tool loop through the bridge.

The scripted upstream answers turn 1 with a ``Read`` of a file holding a random token;
Claude Code reads it on its side and sends the result; turn 2 must carry the token and is
answered with text quoting it, which must be Claude Code's final result. Upstreams: every
dialect ``loop.answer`` speaks, its own (same dialect) and the others (a dialect change).
Variants: two parallel calls in turn 1 (two files, two tokens); the upstream (Gemini Code
Assist too) answering whole what Claude Code asked to stream; every stream cut before its
first event, so that Claude Code asks again without streaming (its non-streaming fallback)
and the bridge carries that whole request and answer; Kiro and Gemini Code Assist
upstreams (``wrapped``) in 3 turns (two parallel calls, one call, the text).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.e2e.harness import JSONReply, Reply, SSEReply, sse_from_payloads
from tests.real.clients.loop import UPSTREAMS, Call, CutOnce, ToolLoop, gemini_chunk
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

KEY = "sk-ant-real-client-test-key"


def claude(
    program: Program, bridge: Served, project: Path, prompt: str, allowed: str = "Read"
) -> Finished:
    """Claude Code against ``bridge``, allowed the tool ``allowed`` (``Read`` in the loops)."""
    home = project.parent / "home"
    env = base_env(home) | {
        "ANTHROPIC_BASE_URL": bridge.base_url,
        "ANTHROPIC_API_KEY": KEY,
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_RETRIES": "2",
    }
    argv = [
        str(program.binary),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--allowedTools",
        allowed,
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


def read(n: int, path: Path) -> Call:
    return Call("Read", {"file_path": str(path)}, id=f"call_real_read_{n}")


CLAUDE_CODE = Agent("claude-code", "anthropic", KEY, claude, final_result)


@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_claude_code_reads_a_file_through_the_bridge(
    through_bridge: ThroughBridge, project: Path, token: str, upstream: str
) -> None:
    target = project / "notes.txt"
    loop = ToolLoop(upstream, [[(read(1, target), token)]])
    through_bridge(CLAUDE_CODE, loop, [target])


@pytest.mark.parametrize("upstream", ["anthropic", "gemini"])
def test_claude_code_reads_two_files_in_parallel(
    through_bridge: ThroughBridge, project: Path, upstream: str
) -> None:
    files = notes(project, 2)
    loop = ToolLoop(upstream, rounds_of(files, read, 2))
    through_bridge(CLAUDE_CODE, loop, [p for p, _ in files])


@pytest.mark.parametrize("upstream", ["openai_chat", "openai_responses", "gemini_code_assist"])
def test_claude_code_streams_what_the_upstream_answers_whole(
    through_bridge: ThroughBridge, project: Path, token: str, upstream: str
) -> None:
    target = project / "notes.txt"
    loop = loop_for(upstream, [[(read(1, target), token)]], whole=True)
    through_bridge(CLAUDE_CODE, loop, [target])
    asked = [t.stream for t in loop.turns if t.kind in ("call", "final")]
    assert asked and all(asked), f"Claude Code asked for a stream: {asked}"


@pytest.mark.parametrize("upstream", sorted(WRAPPED))
def test_claude_code_runs_three_turns_through_the_bridge(
    through_bridge: ThroughBridge, project: Path, upstream: str
) -> None:
    files = notes(project, 3)
    loop = WRAPPED[upstream](upstream, rounds_of(files, read, 2, 1))
    through_bridge(CLAUDE_CODE, loop, [p for p, _ in files])


@pytest.mark.parametrize("upstream", ["anthropic", "gemini_code_assist"])
def test_claude_code_asks_without_streaming_when_its_stream_breaks(
    through_bridge: ThroughBridge, project: Path, token: str, upstream: str
) -> None:
    target = project / "notes.txt"
    loop = loop_for(upstream, [[(read(1, target), token)]], cut_streams=True)
    through_bridge(CLAUDE_CODE, loop, [target])
    assert loop.of("cut"), "Claude Code never asked for a stream"
    asked = [t.stream for t in loop.turns if t.kind in ("call", "final")]
    assert asked == [False, False], f"Claude Code's fallback asked for a stream: {asked}"


class SameResponseId(ToolLoop):
    """A Gemini-compatible server that names every answer alike (one ``responseId``): the ids
    the bridge makes for Gemini's calls (``call_<responseId>_<n>``) repeat from turn to turn.
    Claude Code then held two ``tool_use`` blocks under one id and read the same file again
    until its turn limit (issue 28); the bridge renames the repeat."""

    def reply(self, stream: bool, text: str | None, calls: Sequence[Call]) -> Reply:
        chunk = gemini_chunk(text, calls) | {"responseId": "same-every-answer"}
        return SSEReply(sse_from_payloads([chunk])) if stream else JSONReply(chunk)


def test_claude_code_runs_three_turns_over_a_gemini_server_that_repeats_its_answer_id(
    through_bridge: ThroughBridge, project: Path
) -> None:
    files = notes(project, 3)
    loop = SameResponseId("gemini", rounds_of(files, read, 2, 1))
    through_bridge(CLAUDE_CODE, loop, [p for p, _ in files])
    assert [t.round for t in loop.turns if t.kind == "call"] == [0, 1]


@pytest.mark.parametrize("upstream", ["anthropic", "openai_chat"])
def test_claude_code_asks_again_when_the_upstream_breaks_its_stream_off(
    through_bridge: ThroughBridge, project: Path, token: str, upstream: str
) -> None:
    """Issue 42: the upstream closes the connection in the middle of the first streamed
    answer (no last chunk). The bridge ends Claude Code's stream with an ``error`` event of
    type ``overloaded_error`` (tests/e2e/test_stream_endings.py), and Claude Code asks the
    same turn again, streamed, even with ``CLAUDE_CODE_MAX_RETRIES=0``: the loop runs to its
    end (docs/streams.md)."""
    target = project / "notes.txt"
    loop = CutOnce(upstream, [[(read(1, target), token)]])
    through_bridge(CLAUDE_CODE, loop, [target])
    kinds = [(t.kind, t.stream) for t in loop.turns if t.rec.method == "POST"]
    at = kinds.index(("broken", True))
    assert kinds[at - 1 : at + 2] == [("call", True), ("broken", True), ("call", True)], kinds
