"""Fixtures for the real client programs: ``program(name)`` skips with its reason if missing;
``through_bridge(agent, loop, paths)`` runs one through a bridge and checks the loop.

A failing test's report carries the client's command line and output, and the mitmdump log.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.real.clients.loop import ToolLoop
from tests.real.clients.programs import (
    Agent,
    Bridge,
    Finished,
    Program,
    ThroughBridge,
    Unavailable,
    check_loop,
    locate,
)


@pytest.fixture(scope="session")
def program() -> Callable[[str], Program]:
    """``program("claude-code")``: the installed client, or a skip saying why not."""

    def get(name: str) -> Program:
        try:
            return locate(name)
        except Unavailable as why:
            pytest.skip(str(why))

    return get


@pytest.fixture
def token() -> str:
    return f"TOKEN-{secrets.token_hex(8).upper()}"


@pytest.fixture
def project(tmp_path: Path, token: str) -> Path:
    """A project folder holding ``notes.txt`` with the token; a private HOME beside it."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text(f"The secret token is {token}.\n")
    (tmp_path / "home").mkdir()
    return root


@pytest.fixture
def through_bridge(program: Callable[[str], Program], project: Path) -> ThroughBridge:
    """``through_bridge(agent, loop, paths=())``: the agent's program (or a skip saying why not),
    asked to read ``paths`` in ``project``, run through a bridge before the scripted ``loop``;
    then ``check_loop`` on what it printed as its answer. Returns how it finished."""

    def run(agent: Agent, loop: ToolLoop, paths: Sequence[Path] = ()) -> Finished:
        found = program(agent.program)
        with Bridge(agent.dialect, loop, project.parent) as bridge:
            done = agent.run(found, bridge, project, agent.prompt(paths))
        check_loop(done, bridge, agent.answer(done), agent.key)
        return done

    return run
