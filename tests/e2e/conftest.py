"""Fixtures for end-to-end tests: one scripted upstream and one mitmdump for the session.

- ``upstream``: the session's ``ScriptedUpstream``, emptied before and after each test;
  an exception raised by a test's ``upstream.script`` fails that test, and so does a body the
  real service would refuse (``upstream.violations``; ``upstream.strict = False`` for a test
  that sends one on purpose).
- ``proxy``: mitmdump with the addon and default options, shared by the session.
- ``start_proxy(**options)``: another mitmdump (e.g. ``bridge_tool_mode="invoke"``),
  stopped after the test.

Every test here is marked ``e2e``; a failing test's report carries the tail of the
log of each mitmdump still running.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Proxy, ScriptedUpstream, live_proxies

E2E_DIR = Path(__file__).resolve().parent
LOG_TAIL = 6000


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(E2E_DIR):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and item.path.is_relative_to(E2E_DIR):
        for p in live_proxies():
            text = p.log_text()
            tail = text if len(text) <= LOG_TAIL else "…\n" + text[-LOG_TAIL:]
            report.sections.append((f"mitmdump on port {p.port} ({call.when})", tail))
    return report


@pytest.fixture(scope="session")
def _upstream_server() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        yield server


@pytest.fixture
def upstream(_upstream_server: ScriptedUpstream) -> Iterator[ScriptedUpstream]:
    """The session's upstream, emptied before each test."""
    _upstream_server.reset()
    yield _upstream_server
    errors = list(_upstream_server.errors)
    violations = list(_upstream_server.violations)
    _upstream_server.reset()
    if errors:
        pytest.fail("upstream.script raised:\n" + "\n".join(errors), pytrace=False)
    if violations:
        pytest.fail(
            "the upstream refused what the real service refuses:\n" + "\n".join(violations),
            pytrace=False,
        )


@pytest.fixture(scope="session")
def proxy(_upstream_server: ScriptedUpstream) -> Iterator[Proxy]:
    """mitmdump with the addon and default options, in reverse mode before the upstream."""
    with Proxy(_upstream_server.port) as p:
        yield p


@pytest.fixture
def start_proxy(_upstream_server: ScriptedUpstream) -> Iterator[Callable[..., Proxy]]:
    """Start another mitmdump with ``bridge_*`` options; stopped after the test."""
    started: list[Proxy] = []

    def start(**options: object) -> Proxy:
        p = Proxy(_upstream_server.port, options)
        started.append(p)
        return p.start()

    yield start
    for p in started:
        p.close()
