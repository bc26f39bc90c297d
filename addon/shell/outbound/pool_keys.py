"""A pool's keys (``api_key_env`` as a list) as the relay's leg meets them: a key refused by
its own fault revoked for ``bridge_key_recheck`` and rechecked by its probe; a 401 / 403 no
table names asked of the key's probe; a refusal of the request's own answered, nothing left
out. What each error means is ``addon.plan.key_pool`` / ``key_probe``'s; this applies it."""

from __future__ import annotations

from typing import Protocol

from mitmproxy import http

from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.plan.fallback import Cooldowns, Failure, MemoryCooldowns, Reason, tried_line
from addon.plan.key_pool import KeyAction, KeyVerdict, all_cooling, is_link, link_name, revoked_mark
from addon.plan.key_probe import (
    PROBED_FOR,
    RECHECK_HOLD,
    ProbeResult,
    probe_for,
    probe_timeout,
    probed_mark,
    probed_verdict,
)
from addon.plan.values import tenths
from addon.report.outcome import Action, Count, FlowReport, Outcome
from addon.shell.flows import Attempt, Attempts
from addon.shell.notes import append_comment, log, set_meta
from addon.shell.outbound.probes import KeyProbes, Target
from addon.shell.outbound.retry import upstream_proxy
from addon.shell.reporter import Report
from addon.shell.settings import BridgeSettings


class CooldownsOwner(Protocol):
    """Whose cooldowns a pool's keys are left out in (the fallback addon's)."""

    @property
    def cooldowns(self) -> Cooldowns: ...

    local_cooldowns: MemoryCooldowns


class PoolKeys:
    """What the leg does with a key of a pool that answered 401 / 403 (or out of credit)."""

    def __init__(self, settings: BridgeSettings, probes: KeyProbes, owner: CooldownsOwner) -> None:
        self._settings = settings
        self._probes = probes
        """One probe per key at a time, and the rechecks of the keys this worker revoked."""
        self._owner = owner

    @property
    def cooldowns(self) -> Cooldowns:
        return self._owner.cooldowns

    def all_cooling(
        self,
        report: Report,
        flow: http.HTTPFlow,
        chain: tuple[Route, ...],
        failures: list[Failure],
    ) -> None:
        """Every key of the pool cools down (or was revoked) and no other route is left: the
        client's 429 in its dialect, ``Retry-After`` the earliest end of the cooldowns."""
        route = chain[0]
        wait = min(self.cooldowns.left(link_name(r)) for r in chain)
        every_revoked = all(self.cooldowns.cooling(revoked_mark(link_name(r))) for r in chain)
        status, headers, body = all_cooling(DIALECTS[route.client], wait, every_revoked)
        flow.response = http.Response.make(
            status, body, {"content-type": "application/json", **headers}
        )
        tried = tried_line(failures)
        label = f"cursor-bridge [{route.name}]"
        why = "every key cooling down" if status == 429 else "every key refused"
        append_comment(flow, f"{label}: answered {status}: {why}; tried: {tried}")
        set_meta(flow, {"route": route.name, "action": Action.REJECTED.value})
        report.state.count(Count.REJECTED)
        line = FlowReport(
            route.name,
            Outcome.REJECTED,
            client=route.client,
            upstream=route.upstream,
            reason=f"answered {status}: {why}"
            + (f" (Retry-After {headers['retry-after']})" if headers else ""),
            fields={"tried": tried},
        )
        report.close(flow, line, line=True)

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

    async def probed(
        self, flow: http.HTTPFlow, attempt: Attempt, verdict: KeyVerdict, revoked: bool
    ) -> tuple[KeyVerdict, str]:
        """A 401 / 403 of a key the table does not name: the key's probe says whether it is
        the key's (revoked, as for a key's error) or not (answered); and the words the info
        line gives for what the probe said ("" none sent). A probe that accepted the key or
        proved nothing is remembered by every worker for ``PROBED_FOR``: not sent again."""
        target = self.target(flow, attempt)
        if target is None:
            return verdict, ""
        name = link_name(attempt.route)
        label = target.probe.label
        if self.cooldowns.cooling(probed_mark(name)):
            return verdict, f"its probe {label} was asked a moment ago"
        result = await self._probes.probe(name, target)
        if result is not ProbeResult.REFUSED:
            self.cooldowns.cool(probed_mark(name), PROBED_FOR)
            return verdict, f"its probe {label} {result.value}"
        return probed_verdict(verdict, target.probe, result, revoked), ""

    def _recheck(self, route: Route, target: Target) -> None:
        """The revoked key's recheck after ``bridge_key_recheck``: its probe. Accepted: back
        at once for every worker (no client's request spent on it); refused: revoked again;
        proved nothing: back, the next request that asks for it is the recheck."""
        name, recheck = link_name(route), self._settings.settings.key_recheck

        async def check() -> float | None:
            result = await self._probes.probe(name, target)
            label = f"cursor-bridge [{route.name}]: key {route.key_env}"
            if result is ProbeResult.REFUSED:
                again = self._settings.settings.key_recheck
                self.cooldowns.cool(name, again + RECHECK_HOLD)
                self.cooldowns.cool(revoked_mark(name), again + RECHECK_HOLD)
                log.warning(
                    "%s still refused by its probe %s: left out for %s s more, then probed "
                    "again (bridge_key_recheck)",
                    label,
                    target.probe.label,
                    tenths(again),
                )
                return again
            self.cooldowns.clear(name)
            self.cooldowns.clear(revoked_mark(name))
            if result is ProbeResult.ACCEPTED:
                log.info("%s accepted by its probe %s: back in the pool", label, target.probe.label)
            else:
                log.info(
                    "%s: its probe %s proves nothing: back in the pool, the next request that "
                    "asks for it is its recheck",
                    label,
                    target.probe.label,
                )
            return None

        self._probes.recheck(name, recheck, check)

    def refused(
        self,
        chain: Attempts,
        route: Route,
        status: int,
        verdict: KeyVerdict,
        target: Target | None,
    ) -> None:
        """A key of a pool answered an error that is its own fault: revoked for
        ``bridge_key_recheck`` (every worker on a Redis store), unless this request revoked
        one already; the next link is tried either way. With a probe known (``target``) the
        recheck is the probe, made by this worker; the key stays out until it is done."""
        recheck = self._settings.settings.key_recheck
        name = link_name(route)
        revoke = verdict.action is KeyAction.REVOKE
        if revoke:
            hold = recheck + (RECHECK_HOLD if target is not None else 0.0)
            self.cooldowns.cool(name, hold)
            self.cooldowns.cool(revoked_mark(name), hold)
            if target is not None:
                self._recheck(route, target)
        detail = verdict.detail(status, recheck)
        chain.failures.append(Failure(name, Reason.KEY_REFUSED, detail, revoked=revoke))
        judged = verdict.judgement
        why = f"HTTP {status} {judged.why}" + (f", {judged.provider}" if judged.provider else "")
        if not revoke:
            log.warning(
                "cursor-bridge [%s]: key %s refused (%s): not left out, this request left out "
                "a key already; trying the next",
                route.name,
                route.key_env,
                why,
            )
            return
        shared = self._owner.cooldowns is not self._owner.local_cooldowns  # a Redis store's table
        then = f"probed with {target.probe.label}" if target is not None else "tried again"
        log.warning(
            "cursor-bridge [%s]: key %s refused (%s): left out for %s s by %s, then %s "
            "(bridge_key_recheck)",
            route.name,
            route.key_env,
            why,
            tenths(recheck),
            "every worker" if shared else "this process",
            then,
        )


def kept(route: Route, status: int, verdict: KeyVerdict, probed: str) -> None:
    """A 401 / 403 of a key of a pool that is the request's own (or not known to be the
    key's): the client gets it, no key is left out; one line says so (``probed``: what the
    key's probe said, "" none was sent)."""
    judged = verdict.judgement
    if judged.why:
        why = f"the request's own ({judged.why}, {judged.provider})"
    else:
        why = "not known to be the key's fault" + (f" ({probed})" if probed else "")
    log.info(
        "cursor-bridge [%s]: key %s answered HTTP %d, %s: answered, no key left out",
        route.name,
        route.key_env,
        status,
        why,
    )
