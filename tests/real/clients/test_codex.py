"""Codex CLI (``codex exec``) runs a real shell tool loop through the bridge.

Codex talks the Responses API to a custom model provider (``wire_api = "responses"``). The
scripted upstream answers turn 1 with an ``exec_command`` running ``cat`` on a file holding
a random token; Codex runs it and sends the output; turn 2 must carry the token and is
answered with text quoting it, which must be Codex's last agent message. Upstreams: every
dialect ``loop.answer`` speaks, its own (same dialect) and the others (a dialect change).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.real.clients.loop import UPSTREAMS, Call, ToolLoop
from tests.real.clients.programs import Bridge, Finished, Program, base_env, check_loop, run

KEY = "sk-real-client-codex-key"


def codex(program: Program, bridge: Bridge, project: Path, prompt: str) -> Finished:
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


@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_codex_runs_cat_through_the_bridge(
    program: Callable[[str], Program], project: Path, token: str, upstream: str
) -> None:
    codex_cli = program("codex")
    call = Call("exec_command", {"cmd": "cat notes.txt", "workdir": str(project)})
    loop = ToolLoop(upstream, call, token)
    with Bridge("openai_responses", loop, project.parent) as bridge:
        done = codex(codex_cli, bridge, project, "Show me the token written in notes.txt.")
    check_loop(done, bridge, "\n".join(agent_messages(done)[-1:]), KEY)
