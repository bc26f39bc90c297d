"""A key's probe sent (``addon.plan.key_probe`` says which and what its answers mean): the GET
without the key, then — only when that one was refused — with it, through the relay's client
(``Retry.open_via``: the way the key's own requests go, an upstream proxy included), each bounded
by the probe's timeout. One probe per key at a time on this worker (concurrent requests wait
for the same one); the recheck of a revoked key after ``bridge_key_recheck`` is a task of the
worker that revoked it. Rules: docs/routes.md ("A key's probe")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from mitmproxy import http

from addon.plan.fallback import NoAnswer
from addon.plan.key_probe import Probe, ProbeResult, needs_key, probe_result
from addon.shell.notes import log, log_internal_error
from addon.shell.outbound.retry import Retry

MAX_BODY = 64 * 1024
"""A probe's answer is read to at most this many bytes (and dropped: its status says it)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a key's probe goes: the probe, the origin of the key's requests (a request sent
    for that key: its scheme, host and port), the upstream proxy they go through, the key's
    environment variable (its value read when the probe is sent) and the timeout."""

    probe: Probe
    scheme: str
    host: str
    port: int
    via: tuple[str, str] | None
    key_env: str
    timeout: float

    def request(self, headers: tuple[tuple[str, str], ...]) -> http.Request:
        return http.Request(
            self.host,
            self.port,
            b"GET",
            self.scheme.encode(),
            b"",
            self.probe.path.encode(),
            b"HTTP/1.1",
            http.Headers([(k.encode(), v.encode("latin-1")) for k, v in headers]),
            b"",
            None,
            0,
            None,
        )


class KeyProbes:
    """The probes of one worker: at most one running per key (by its link's name)."""

    def __init__(self, retry: Callable[[], Retry | None], env: Callable[[], Mapping[str, str]]):
        self._retry = retry
        self._env = env
        self._running: dict[str, asyncio.Future[ProbeResult]] = {}
        self._rechecks: dict[str, asyncio.Task[None]] = {}

    async def probe(self, link: str, target: Target) -> ProbeResult:
        """The probe of ``link``'s key; the one running already when there is one."""
        running = self._running.get(link)
        if running is None:
            running = asyncio.ensure_future(self._probe(target))
            self._running[link] = running
            running.add_done_callback(lambda _: self._running.pop(link, None))
        return await asyncio.shield(running)

    async def _probe(self, target: Target) -> ProbeResult:
        try:
            keyless = await self._status(target, target.probe.keyless())
            if not needs_key(keyless):
                return probe_result(keyless, None)
            key = self._env().get(target.key_env)
            if not key:
                return ProbeResult.NO_PROOF
            keyed = await self._status(target, target.probe.keyed(key))
            return probe_result(keyless, keyed)
        except Exception as e:
            log_internal_error("cursor-bridge: key probe", e)
            return ProbeResult.NO_PROOF

    async def _status(self, target: Target, headers: tuple[tuple[str, str], ...]) -> int | None:
        """The status of one GET of the probe (its body read and dropped); None: no answer."""
        retry = self._retry()
        if retry is None:
            return None
        got = await retry.open_via(target.via, target.request(headers), target.timeout)
        if isinstance(got, NoAnswer):
            log.debug("cursor-bridge: key probe %s: %s", target.probe.label, got.detail)
            return None
        try:
            async with asyncio.timeout(target.timeout):
                read = 0
                async for chunk in got.aiter_raw():
                    read += len(chunk)
                    if read >= MAX_BODY:
                        break
        except Exception as e:  # the status came: the body does not matter
            log.debug("cursor-bridge: key probe: body cut (%s)", type(e).__name__)
        finally:
            await got.aclose()
        return got.status_code

    def recheck(
        self, link: str, delay: float, check: Callable[[], Coroutine[Any, Any, float | None]]
    ) -> None:
        """``check`` in ``delay`` seconds (the key's recheck), then again in the seconds it
        returns, until it returns None; one per key (a recheck already waiting stays)."""
        if link in self._rechecks:
            return
        task = asyncio.ensure_future(self._rechecking(delay, check))
        self._rechecks[link] = task
        task.add_done_callback(lambda _: self._rechecks.pop(link, None))

    async def _rechecking(
        self, delay: float, check: Callable[[], Coroutine[Any, Any, float | None]]
    ) -> None:
        wait: float | None = delay
        while wait is not None:
            await asyncio.sleep(wait)
            try:
                wait = await check()
            except Exception as e:
                log_internal_error("cursor-bridge: key recheck", e)
                return

    async def done(self) -> None:
        """The waiting rechecks dropped (their keys come back when their entries expire)."""
        tasks: list[asyncio.Future[Any]] = [*self._rechecks.values(), *self._running.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
