"""Fixtures for the real client programs: ``program(name)`` skips with its reason if missing.

A failing test's report carries the client's command line and output, and the mitmdump log.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.real.clients.programs import Program, Unavailable, locate


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
