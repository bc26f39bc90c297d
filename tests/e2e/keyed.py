"""Scripted upstreams that each want one key in their dialect's header, for the e2e tests of
routes to several upstreams (``test_routing``, ``test_fallback``): what a key looks like on
the wire per dialect, the credentials a request carried, the services started and stopped
together with the check that no key reached another host than its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import pytest

from tests.e2e.harness import Proxy, Recorded, ScriptedUpstream

CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")


def wanted(dialect: str, key: str) -> dict[str, str]:
    """The credential header a service of ``dialect`` wants its key in."""
    if dialect == "anthropic":
        return {"x-api-key": key}
    if dialect == "gemini":
        return {"x-goog-api-key": key}
    return {"authorization": f"Bearer {key}"}


def sent(rec: Recorded) -> dict[str, str]:
    """The credential headers a request carried."""
    return {h: rec.headers[h] for h in CREDENTIAL_HEADERS if h in rec.headers}


class Keyed(Protocol):
    key: str
    server: ScriptedUpstream

    def __call__(self, rec: Recorded) -> object: ...


@contextmanager
def running[S: Keyed](
    keys: Mapping[str, str],
    make: Callable[[str, str, ScriptedUpstream], S],
    every_key: tuple[str, ...],
) -> Iterator[dict[str, S]]:
    """One started ``ScriptedUpstream`` per dialect of ``keys``, scripted by ``make``; after
    the test: no script error, and no key of ``every_key`` but its own reached a service."""
    servers = {d: ScriptedUpstream().start() for d in keys}
    try:
        out = {d: make(d, keys[d], s) for d, s in servers.items()}
        for service in out.values():
            service.server.script = service  # type: ignore[assignment]
        yield out
        for service in out.values():
            assert not service.server.errors, service.server.errors
            for rec in service.server.requests:
                assert not [k for k in every_key if k != service.key and k in str(rec.header_list)]
    finally:
        for server in servers.values():
            server.stop()


@contextmanager
def routed(
    start_proxy: Callable[..., Proxy],
    routes: Path,
    text: str,
    env: Mapping[str, str],
    monkeypatch: pytest.MonkeyPatch,
    every_key: tuple[str, ...],
) -> Iterator[Proxy]:
    """A mitmdump on the routes ``text`` (written to ``routes``), each route's key in its
    environment variable (``env``: name → value); after the test no key in its log and no
    traceback."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    routes.write_text(text)
    proxy = start_proxy(bridge_routes=str(routes))
    yield proxy
    log = proxy.log_text()
    assert not [k for k in every_key if k in log]
    assert "Traceback" not in log
