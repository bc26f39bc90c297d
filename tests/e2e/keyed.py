"""Scripted upstreams that each want one key in their dialect's header, for the e2e tests of
routes to several upstreams (``test_routing``, ``test_fallback``): what a key looks like on
the wire per dialect, the credentials a request carried, the services started and stopped
together with the check that no key reached another host than its own; and two mitmdump
workers on one real redis-server before one scripted upstream, for the tests of a key pool
shared by workers (``test_key_pools``, ``test_key_revocation``, ``test_key_probe``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import openai
import pytest

from tests.e2e.harness import Proxy, Recorded, Reply, ScriptedUpstream
from tests.redis_server import RedisServer, redis_server_or_skip

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


@dataclass
class Workers[S]:
    """Two mitmdump workers on one redis-server (``redis_url``) before one scripted upstream
    whose script is ``up``."""

    one: Proxy
    two: Proxy
    up: S
    redis_url: str
    every_key: tuple[str, ...]
    """The keys (the proxy's and the client's) no log may show."""

    def cooldown_entries(self) -> list[str]:
        """The store's cooldown entries (keys cooling, revoked or probed), sorted."""
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            return sorted(k.decode() for k in client.keys("cursor-bridge:cool:*"))
        finally:
            client.close()

    def log(self) -> str:
        return self.one.log_text() + self.two.log_text()

    def clean(self) -> None:
        """No traceback and no key in either worker's log."""
        for proxy in (self.one, self.two):
            log = proxy.log_text()
            assert "Traceback" not in log and not [k for k in self.every_key if k in log]


@contextmanager
def two_workers[S](
    start_proxy: Callable[..., Proxy],
    routes: Path,
    text: str,
    env: Mapping[str, str],
    monkeypatch: pytest.MonkeyPatch,
    up: S,
    every_key: tuple[str, ...],
    **options: object,
) -> Iterator[Workers[S]]:
    """A redis-server, then two mitmdump workers on it with the routes ``text`` (written to
    ``routes``), each route's key in its environment variable (``env``: name → value) and
    ``options``; the redis-server stopped after the test."""
    with RedisServer(redis_server_or_skip()) as redis:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        routes.write_text(text)
        one, two = (
            start_proxy(bridge_routes=str(routes), bridge_store=redis.url, **options)
            for _ in range(2)
        )
        yield Workers(one, two, up, redis.url, every_key)


class WorkerPairs:
    """Two workers on one redis-server at a time, each pair before ``server`` with a script of
    its own (``start``)."""

    def __init__(
        self,
        start_proxy: Callable[..., Proxy],
        routes: Path,
        env: Mapping[str, str],
        monkeypatch: pytest.MonkeyPatch,
        every_key: tuple[str, ...],
    ) -> None:
        self.server = ScriptedUpstream().start()
        self.stack = ExitStack()
        self._start = start_proxy
        self._routes = routes
        self._env = env
        self._monkeypatch = monkeypatch
        self._every_key = every_key

    def start[S: Callable[[Recorded], Reply]](
        self, script: S, text: str, **options: object
    ) -> Workers[S]:
        """Two workers on a new redis-server with the routes ``text``, ``server`` answering
        as ``script`` says."""
        self.server.script = script
        pair = two_workers(
            self._start, self._routes, text, self._env, self._monkeypatch, script,
            self._every_key, **options,
        )  # fmt: skip
        return self.stack.enter_context(pair)


@contextmanager
def worker_pairs(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    routes: Path,
    env: Mapping[str, str],
    monkeypatch: pytest.MonkeyPatch,
    every_key: tuple[str, ...],
) -> Iterator[WorkerPairs]:
    """``WorkerPairs`` for one test; after it: no script error, nothing sent to the session's
    upstream (every request went to ``server``), the servers stopped."""
    pairs = WorkerPairs(start_proxy, routes, env, monkeypatch, every_key)
    try:
        with pairs.stack:
            yield pairs
            assert not pairs.server.errors, pairs.server.errors
            assert not upstream.requests
    finally:
        pairs.server.stop()


def wait_for(what: Callable[[], bool], seconds: float = 90.0) -> None:
    """Until ``what`` holds (bounded: a wait, never a time the test asserts)."""
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.1)


def chat(proxy: Proxy, client_key: str, opening: str, model: str, stream: bool) -> str:
    """The text of a one-message chat through ``proxy`` with the official OpenAI SDK (no
    retries of its own), streamed or not."""
    client = openai.OpenAI(
        base_url=f"{proxy.base_url}/v1", api_key=client_key, max_retries=0, timeout=30
    )
    messages: Any = [{"role": "user", "content": opening}]
    if not stream:
        done = client.chat.completions.create(model=model, messages=messages)
        return done.choices[0].message.content or ""
    chunks = client.chat.completions.create(model=model, messages=messages, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
