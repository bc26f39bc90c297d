"""Fixtures for the real-server tests: ``llama_server``, one llama-server for the session.

It skips, with the reason, where the binary is not built (``scripts/llama_server.py``
builds it; ``CURSOR_BRIDGE_BUILD_LLAMA=1`` lets the fixture build it) or cannot be built.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.real.llama_cpp import LlamaServer, Unavailable, locate


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    try:
        paths = locate()
    except Unavailable as why:
        pytest.skip(str(why))
    with LlamaServer.start(paths) as server:
        yield server
