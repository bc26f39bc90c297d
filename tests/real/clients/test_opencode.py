"""OpenCode (``opencode run``) runs a real read tool loop through the bridge.

OpenCode talks OpenAI chat completions to an ``@ai-sdk/openai-compatible`` provider
declared in the project's ``opencode.json``. The scripted upstream answers turn 1 with a
``read`` of a file holding a random token (its title request gets a short text); turn 2
must carry the token and is answered with text quoting it, which must be in OpenCode's
output. Upstreams: every dialect ``loop.answer`` speaks, its own and the others.
Variants: two parallel reads in turn 1; the upstream (Gemini Code Assist too) answering
whole what OpenCode asked to stream (it always streams); Kiro and Gemini Code Assist upstreams (``wrapped``) in 3 turns (two parallel
calls, one call, the text).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.e2e.harness import Reply
from tests.real.clients.loop import MODEL, UPSTREAMS, Call, ToolLoop
from tests.real.clients.programs import (
    Agent,
    Bridge,
    Finished,
    Program,
    ThroughBridge,
    base_env,
    notes,
    rounds_of,
    run,
)
from tests.real.clients.wrapped import WRAPPED, loop_for

KEY = "sk-real-client-opencode-key"


def opencode(program: Program, bridge: Bridge, project: Path, prompt: str) -> Finished:
    home = project.parent / "home"
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "bridge",
        "options": {"baseURL": f"{bridge.base_url}/v1", "apiKey": KEY},
        "models": {MODEL: {"name": MODEL, "tool_call": True}},
    }
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"bridge": provider},
        "model": f"bridge/{MODEL}",
        "small_model": f"bridge/{MODEL}",
        "autoupdate": False,
        "share": "disabled",
    }
    (project / "opencode.json").write_text(json.dumps(config, indent=2))
    env = base_env(home) | {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_PURE": "1",
        # Its config folder gets an npm install of its plugin package: keep it off the network.
        "npm_config_registry": "http://127.0.0.1:9/",
        "npm_config_offline": "true",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
    }
    argv = [str(program.binary), "run", "--format", "json", "-m", f"bridge/{MODEL}", prompt]
    return run(argv, cwd=project, env=env)


def texts(done: Finished) -> list[str]:
    """The text parts OpenCode printed (``--format json`` output)."""
    out = []
    for line in done.stdout.splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        part = event.get("part") or {}
        if event.get("type") == "text" or part.get("type") == "text":
            out.append(str(part.get("text", "")))
    return out


def read(n: int, path: Path) -> Call:
    return Call("read", {"filePath": str(path)}, id=f"call_real_read_{n}")


OPENCODE = Agent("opencode", "openai_chat", KEY, opencode, lambda done: "\n".join(texts(done)))


@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_opencode_reads_a_file_through_the_bridge(
    through_bridge: ThroughBridge, project: Path, token: str, upstream: str
) -> None:
    target = project / "notes.txt"
    loop = ToolLoop(upstream, [[(read(1, target), token)]])
    through_bridge(OPENCODE, loop, [target])


@pytest.mark.parametrize("upstream", ["openai_chat", "openai_responses"])
def test_opencode_reads_two_files_in_parallel(
    through_bridge: ThroughBridge, project: Path, upstream: str
) -> None:
    files = notes(project, 2)
    loop = ToolLoop(upstream, rounds_of(files, read, 2))
    through_bridge(OPENCODE, loop, [p for p, _ in files])


@pytest.mark.parametrize("upstream", ["gemini", "anthropic"])
def test_opencode_streams_what_the_upstream_answers_whole(
    through_bridge: ThroughBridge, project: Path, token: str, upstream: str
) -> None:
    target = project / "notes.txt"
    loop = loop_for(upstream, [[(read(1, target), token)]], whole=True)
    through_bridge(OPENCODE, loop, [target])
    # Its limit: every request it sends asks for a stream (it has no whole mode).
    asked = [t.stream for t in loop.turns if t.rec.method == "POST"]
    assert asked and all(asked), f"OpenCode asked for a stream every time: {asked}"


@pytest.mark.parametrize("upstream", sorted(WRAPPED))
def test_opencode_runs_three_turns_through_the_bridge(
    through_bridge: ThroughBridge, project: Path, upstream: str
) -> None:
    files = notes(project, 3)
    loop = WRAPPED[upstream](upstream, rounds_of(files, read, 2, 1))
    through_bridge(OPENCODE, loop, [p for p, _ in files])


class NumberedPerAnswer(ToolLoop):
    """An OpenAI-compatible server that numbers its calls per answer (``call_0``, ``call_1``
    every turn, as many do): the bridge renames the turn-2 ``call_0`` (it is in OpenCode's
    history already) to ``call_0_2``, on this same-dialect route too (issue 28)."""

    CLIENT_IDS = ("call_0", "call_1", "call_0_2")
    """The ids OpenCode gets for the calls of the rounds (2 calls, then 1), in order."""

    def reply(self, stream: bool, text: str | None, calls: Sequence[Call]) -> Reply:
        numbered = [dataclasses.replace(c, id=f"call_{i}") for i, c in enumerate(calls)]
        return super().reply(stream, text, numbered)

    def result_id(self, call: Call) -> str:
        return self.CLIENT_IDS[[c for c, _ in self.pairs].index(call)]


def test_opencode_runs_three_turns_over_a_server_that_numbers_calls_per_answer(
    through_bridge: ThroughBridge, project: Path
) -> None:
    files = notes(project, 3)
    loop = NumberedPerAnswer("openai_chat", rounds_of(files, read, 2, 1))
    through_bridge(OPENCODE, loop, [p for p, _ in files])
