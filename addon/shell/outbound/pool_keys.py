"""A pool's keys (``api_key_env`` as a list) as the relay's leg meets them: where a key's probe
goes (``target``), an error answer judged and the probe asked when the verdict wants it
(``judged``: at most one probe per key at a time on this worker),
and the recheck of a key the leg revoked, after ``bridge_key_recheck``, applied as
``addon.plan.failed_attempt.rechecked`` decides. What each error and each probe's answer mean
is ``addon.plan``'s (``failed_attempt``, ``key_pool``, ``key_probe``); this applies it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from mitmproxy import http

from addon.config.routes import Route
from addon.plan.failed_attempt import Attempted, Probed, Step, Verdict, answered, rechecked
from addon.plan.fallback import Cooldowns, Level
from addon.plan.key_pool import is_link, link_name
from addon.plan.key_probe import probe_for, probe_timeout, probed_mark
from addon.shell.flows import Attempt
from addon.shell.notes import log
from addon.shell.outbound.probes import KeyProbes, Target
from addon.shell.outbound.retry import upstream_proxy
from addon.shell.settings import BridgeSettings

LEVELS = {Level.INFO: logging.INFO, Level.WARNING: logging.WARNING}
"""A plan's log line's level as ``logging``'s."""


class CooldownsOwner(Protocol):
    """Whose cooldowns a pool's keys are left out in (the fallback addon's)."""

    @property
    def cooldowns(self) -> Cooldowns: ...


class PoolKeys:
    """The probes and rechecks of the keys of pools on this worker."""

    def __init__(self, settings: BridgeSettings, probes: KeyProbes, owner: CooldownsOwner) -> None:
        self._settings = settings
        self._probes = probes
        """One probe per key at a time, and the rechecks of the keys this worker revoked."""
        self._owner = owner

    @property
    def cooldowns(self) -> Cooldowns:
        return self._owner.cooldowns

    async def done(self) -> None:
        """The rechecks this worker owes dropped (their keys come back when they expire)."""
        await self._probes.done()

    def target(self, flow: http.HTTPFlow, attempt: Attempt) -> Target | None:
        """Where the probe of ``attempt``'s key goes (the origin its request went to), or
        None: no probe known for its route, or not a key of a pool."""
        route, sent = attempt.route, attempt.request
        probe = probe_for(route, sent.path, sent.host) if is_link(route) else None
        if probe is None or route.key_env is None:
            return None
        via = upstream_proxy(flow)
        timeout = probe_timeout(route)
        return Target(probe, sent.scheme, sent.host, sent.port, via, route.key_env, timeout)

    async def judged(
        self,
        facts: Attempted,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        now: float,
        target: Target | None,
    ) -> Verdict:
        """An error answer's verdict (``answered``); the key's probe asked first when the
        verdict wants it, unless every worker remembers it was asked a moment ago
        (``probed_mark``): one probe per key at a time on this worker."""
        verdict = answered(facts, status, headers, body, now)
        if verdict.step is Step.PROBE and target is not None:
            name = link_name(facts.route)
            lately = self.cooldowns.cooling(probed_mark(name))
            said = None if lately else await self._probes.probe(name, target)
            verdict = answered(facts, status, headers, body, now, Probed(said))
        return verdict

    def recheck(self, route: Route, target: Target) -> None:
        """The revoked key's recheck after ``bridge_key_recheck``: its probe, then what
        ``rechecked`` says (back at once, or revoked again until the next recheck)."""

        async def check() -> float | None:
            result = await self._probes.probe(link_name(route), target)
            again = rechecked(route, target.probe, result, self._settings.settings.key_recheck)
            for entry in again.cool:
                self.cooldowns.cool(entry.name, entry.seconds)
            for name in again.clear:
                self.cooldowns.clear(name)
            log.log(LEVELS[again.line.level], "%s", again.line.text)
            return again.again

        self._probes.recheck(link_name(route), self._settings.settings.key_recheck, check)
