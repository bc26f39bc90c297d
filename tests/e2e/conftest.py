"""Fixtures for end-to-end tests: one scripted upstream and one mitmdump for the session."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.e2e.harness import Proxy, ScriptedUpstream


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def _upstream_server() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        yield server


@pytest.fixture
def upstream(_upstream_server: ScriptedUpstream) -> Iterator[ScriptedUpstream]:
    """The session's upstream, emptied before each test."""
    _upstream_server.reset()
    yield _upstream_server
    _upstream_server.reset()


@pytest.fixture(scope="session")
def proxy(_upstream_server: ScriptedUpstream) -> Iterator[Proxy]:
    """mitmdump with the addon and default options, in reverse mode before the upstream."""
    with Proxy(_upstream_server.port) as p:
        yield p


@pytest.fixture
def start_proxy(_upstream_server: ScriptedUpstream) -> Iterator[Callable[..., Proxy]]:
    """Start another mitmdump with ``bridge_*`` options; stopped after the test."""
    started: list[Proxy] = []

    def start(**options: str) -> Proxy:
        p = Proxy(_upstream_server.port, options).start()
        started.append(p)
        return p

    yield start
    for p in started:
        p.__exit__(None, None, None)
