"""Codex CLI (``codex exec``) runs a real shell tool loop through the bridge.

Codex talks the Responses API to a custom model provider (``wire_api = "responses"``). The
scripted upstream answers turn 1 with an ``exec_command`` running ``cat`` on a file holding
a random token; Codex runs it and sends the output; turn 2 must carry the token and is
answered with text quoting it, which must be Codex's last agent message. Upstreams: every
dialect ``loop.answer`` speaks, its own (same dialect) and the others (a dialect change).
Variants: two parallel ``cat`` calls in turn 1; the upstream (Gemini Code Assist too)
answering whole what Codex asked to stream (Codex always streams: its Responses client has
no whole mode); Kiro and Gemini Code Assist upstreams (``wrapped``) in 3 turns (two
parallel calls, one call, the text).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.real.clients.loop import UPSTREAMS, Call, CutOnce, ToolLoop
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

KEY = "sk-real-client-codex-key"


def codex(
    program: Program, bridge: Served, project: Path, prompt: str, config: str = ""
) -> Finished:
    """Codex against ``bridge``; ``config``: top-level config.toml lines added to the test's."""
    home = project.parent / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f"""\
model = "gpt-5.5"
model_provider = "bridge"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
{config}
[analytics]
enabled = false

[model_providers.bridge]
name = "bridge"
base_url = "{bridge.base_url}/v1"
wire_api = "responses"
env_key = "BRIDGE_KEY"
request_max_retries = 0
stream_max_retries = 0
"""
    )
    env = base_env(home) | {"CODEX_HOME": str(codex_home), "BRIDGE_KEY": KEY}
    argv = [str(program.binary), "exec", "--skip-git-repo-check", "--json", prompt]
    return run(argv, cwd=project, env=env)


def agent_messages(done: Finished) -> list[str]:
    """The text of each ``agent_message`` item Codex completed (``--json`` output)."""
    texts = []
    for line in done.stdout.splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        item = event.get("item") or {}
        if event.get("type") == "item.completed" and item.get("type") == "agent_message":
            texts.append(str(item.get("text", "")))
    return texts


def cat(project: Path) -> Callable[[int, Path], Call]:
    def call(n: int, path: Path) -> Call:
        arguments = {"cmd": f"cat {path.name}", "workdir": str(project)}
        return Call("exec_command", arguments, id=f"call_real_cat_{n}")

    return call


CODEX = Agent(
    "codex",
    "openai_responses",
    KEY,
    codex,
    lambda done: "\n".join(agent_messages(done)[-1:]),
    prompt=lambda paths: "Show me the tokens written in the notes files.",
)


@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_codex_runs_cat_through_the_bridge(
    through_bridge: ThroughBridge, project: Path, token: str, upstream: str
) -> None:
    loop = ToolLoop(upstream, [[(cat(project)(1, project / "notes.txt"), token)]])
    through_bridge(CODEX, loop)


@pytest.mark.parametrize("upstream", ["openai_responses", "openai_chat"])
def test_codex_runs_two_cats_in_parallel(
    through_bridge: ThroughBridge, project: Path, upstream: str
) -> None:
    loop = ToolLoop(upstream, rounds_of(notes(project, 2), cat(project), 2))
    through_bridge(CODEX, loop)


@pytest.mark.parametrize("upstream", ["anthropic", "gemini"])
def test_codex_streams_what_the_upstream_answers_whole(
    through_bridge: ThroughBridge, project: Path, token: str, upstream: str
) -> None:
    loop = loop_for(upstream, [[(cat(project)(1, project / "notes.txt"), token)]], whole=True)
    through_bridge(CODEX, loop)
    # Its limit: every request it sends asks for a stream (it has no whole mode).
    asked = [t.stream for t in loop.turns if t.rec.method == "POST"]
    assert asked and all(asked), f"Codex asked for a stream every time: {asked}"


@pytest.mark.parametrize("upstream", sorted(WRAPPED))
def test_codex_runs_three_turns_through_the_bridge(
    through_bridge: ThroughBridge, project: Path, upstream: str
) -> None:
    loop = WRAPPED[upstream](upstream, rounds_of(notes(project, 3), cat(project), 2, 1))
    through_bridge(CODEX, loop)


@pytest.mark.parametrize("upstream", ["openai_responses", "openai_chat"])
def test_codex_retries_a_stream_the_upstream_broke_off(
    through_bridge: ThroughBridge,
    project: Path,
    token: str,
    upstream: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 42: the upstream closes the connection in the middle of the first streamed answer
    (no last chunk). Codex (``stream_max_retries = 2``) gets ``response.failed`` with
    ``server_error`` and the bridge's message, not a broken connection, says "Reconnecting...
    1/2" and asks again: the loop runs to its end. With ``stream_max_retries = 0`` (its
    other tests) it would stop there (docs/streams.md)."""
    real = run

    def retrying(argv: list[str], cwd: Path, env: dict[str, str]) -> Finished:
        config = Path(env["CODEX_HOME"]) / "config.toml"
        text = config.read_text().replace("stream_max_retries = 0", "stream_max_retries = 2")
        config.write_text(text)
        return real(argv, cwd=cwd, env=env)

    monkeypatch.setattr(sys.modules[__name__], "run", retrying)
    loop = CutOnce(upstream, [[(cat(project)(1, project / "notes.txt"), token)]])
    done = through_bridge(CODEX, loop)
    kinds = [(t.kind, t.stream) for t in loop.turns if t.rec.method == "POST"]
    assert kinds[:3] == [("call", True), ("broken", True), ("call", True)], kinds
    # What it read was the bridge's error (its message), not a broken connection.
    said = [line for line in done.stdout.splitlines() if '"type":"error"' in line]
    assert said and "(upstream_cut)" in said[0] and "Reconnecting" in said[0], said
