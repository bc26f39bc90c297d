"""Fixtures for the real-server tests: ``llama_server``, one llama-server for the session, and
``litellm``, one LiteLLM proxy in front of it.

It skips, with the reason, where the binary is not built (``scripts/llama_server.py``
builds it; ``CURSOR_BRIDGE_BUILD_LLAMA=1`` lets the fixture build it) or cannot be built.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from tests.e2e.harness import live_proxies
from tests.real import litellm_proxy
from tests.real.litellm_proxy import LiteLLMProxy
from tests.real.llama_cpp import LlamaServer, Unavailable, locate

LOG_TAIL = 6000


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test's report carries the tail of each running mitmdump's log."""
    report = yield
    if report.failed:
        for p in live_proxies():
            text = p.log_text()
            tail = text if len(text) <= LOG_TAIL else "…\n" + text[-LOG_TAIL:]
            report.sections.append((f"mitmdump on port {p.port} ({call.when})", tail))
    return report


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    try:
        paths = locate()
    except Unavailable as why:
        pytest.skip(str(why))
    with LlamaServer.start(paths) as server:
        yield server


LOCKED_ARGS = ("--api-key", "sk-only-this-key")


@pytest.fixture(scope="session")
def litellm(llama_server: LlamaServer) -> Iterator[LiteLLMProxy]:
    """LiteLLM before ``llama_server`` (``litellm_proxy.config_for``: its model, the client
    drivers' model names, and ``LOCKED_MODEL``); skipped where LiteLLM cannot be installed."""
    try:
        install = litellm_proxy.locate()
    except litellm_proxy.Unavailable as why:
        pytest.skip(str(why))
    # A second llama-server behind a key LiteLLM does not have: its 401 is the bad-key error
    # (a wrong key for LiteLLM itself is a 400 "No connected db." without a database).
    locked = LlamaServer.start(llama_server.paths, ctx_size=512, extra_args=LOCKED_ARGS)
    try:
        with LiteLLMProxy.start(
            llama_server.base_url, install, locked_base_url=locked.base_url
        ) as server:
            yield server
    finally:
        locked.stop()
