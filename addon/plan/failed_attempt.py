"""What one attempt of a chain (a ``fallback`` route, or a key of a pool) does when it fails,
decided with plain values: given the attempt's facts (the link tried, its chain, the status,
the ``Retry-After`` header, the error's body, what the key's probe said, the time), which
entries of the cooldowns table cool and for how long, whether the key is revoked and
rechecked, whether the client gets the answer or the next link is tried, and the words (the
tried line's ``Failure``, the log line). The fallback addon (``addon.shell.outbound.attempts``)
reads the facts and applies the ``Verdict``: its store calls, its notes, its relay.

Why here: the rules of a chain (``addon.plan.fallback``), of a pool's keys
(``addon.plan.key_pool``) and of a key's probe (``addon.plan.key_probe``) meet in one place,
each tested with plain values; the shell decides nothing. Rules: docs/routes.md ("Fallbacks",
"Key pools", "A key's probe")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from addon.config.routes import Route
from addon.dialects import Dialect
from addon.plan.fallback import (
    Cooldowns,
    Failure,
    Level,
    Line,
    NoAnswer,
    Reason,
    cooldown_after,
    falls_back,
    retry_after,
    tried_line,
)
from addon.plan.key_errors import Blame
from addon.plan.key_pool import (
    KeyAction,
    KeyVerdict,
    all_cooling,
    is_link,
    key_verdict,
    link_name,
    reads_error,
    revoked_mark,
)
from addon.plan.key_probe import (
    PROBED_FOR,
    RECHECK_HOLD,
    Probe,
    ProbeResult,
    probed_mark,
    probed_verdict,
)
from addon.plan.values import tenths
from addon.report.outcome import Action, FlowReport, Outcome


class Step(Enum):
    """What the attempts do after a failed one."""

    NEXT = "next"
    """The next link of the chain is tried; an error answer is kept as the last error (the
    client's when no later link answers)."""
    ANSWER = "answer"
    """The client gets this error answer as it came; nothing more is tried, nothing cools
    down (the request's own fault)."""
    PROBE = "probe"
    """A 401 / 403 of a key the table of key errors does not name: ask the key's probe (or
    read that it was asked a moment ago), then judge the answer again with what it said."""


@dataclass(frozen=True, slots=True)
class Cooling:
    """An entry of the cooldowns table set for ``seconds`` from now (``Cooldowns.cool``): a
    route, a key's link, or a key's mark (``revoked_mark``, ``probed_mark``)."""

    name: str
    seconds: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a failed attempt does: the entries to cool, whether the key's recheck (its
    probe) is scheduled, the failure the tried line names, the log line, the next step."""

    step: Step
    cool: tuple[Cooling, ...] = ()
    failure: Failure | None = None
    recheck: bool = False
    """The revoked key is rechecked by its probe after ``bridge_key_recheck``."""
    line: Line | None = None


@dataclass(frozen=True, slots=True)
class Attempted:
    """The facts of one attempt that every verdict reads."""

    route: Route
    """The link tried: a route of the chain, or one key of a pool (``key_pool.is_link``)."""
    chain: tuple[Route, ...]
    """Every link of the chain (a pool's keys reach one upstream: they cool together)."""
    revoked_already: bool = False
    """This client request revoked a key already (never more than one per request)."""
    probe: Probe | None = None
    """The key's probe (``key_probe.probe_for``); None: none known, or not a key of a pool."""
    recheck: float = 0.0
    """``bridge_key_recheck``: how long a revoked key stays out."""
    shared: bool = False
    """The cooldowns table is every worker's (a Redis store): the words of the log line."""


@dataclass(frozen=True, slots=True)
class Probed:
    """What the key's probe said: ``result``, or None when it was not sent because it was
    asked a moment ago (``probed_mark``: ``PROBED_FOR``)."""

    result: ProbeResult | None


def upstream_cooling(chain: tuple[Route, ...], route: Route, seconds: float) -> tuple[Cooling, ...]:
    """The entries that cool when ``route`` fails for its upstream's sake (no answer, a
    5xx): the route; a key of a pool, every key of that route (they reach one upstream)."""
    if not is_link(route):
        return (Cooling(route.name, seconds),)
    return tuple(
        Cooling(link_name(r), seconds) for r in chain if r.name == route.name and is_link(r)
    )


def no_answer(att: Attempted, got: NoAnswer, answered: bool) -> Verdict:
    """An attempt without an answer (unreachable, timed out) cools its route (a pool's: every
    key); a 2xx whose body ended before its first byte (``answered``) cools that link only
    (the next key may answer). The next link is tried."""
    route = att.route
    cool = cooldown_after(route, None, None)
    name, seconds = link_name(route), cool or 0
    entries = (Cooling(name, seconds),) if answered else upstream_cooling(att.chain, route, seconds)
    text = f"cursor-bridge [{route.name}]: upstream {got.detail}: falling back"
    failure = Failure(name, got.reason, got.detail, cool)
    return Verdict(Step.NEXT, entries, failure, line=Line(Level.INFO, text))


def empty_body(status: int, cause: str) -> NoAnswer:
    """A 2xx answer whose body ended (``cause``: the relay's ``BodyCut`` cause) before its
    first byte, or sent none within the route's ``timeout`` (``upstream_idle``): nothing
    reached the client, the attempt got no answer (the next route or key answers)."""
    why = f"HTTP {status}, its body ended before its first byte ({cause})"
    return NoAnswer(Reason.TIMED_OUT if cause == "upstream_idle" else Reason.UNREACHABLE, why)


def is_error(route: Route, status: int) -> bool:
    """Whether an answer of ``route`` is an error to read whole and judge (``answered``): a
    429 or 5xx (``falls_back``), or an error of a key of a pool a key's fault may come with;
    any other answer is relayed to the client as it streams."""
    return falls_back(status) or reads_error(route, status)


def answered(
    att: Attempted,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    probed: Probed | None = None,
) -> Verdict:
    """An error answer (``is_error``) judged: ``headers`` the answer's (lower-case names: its
    ``retry-after``), ``body`` its bytes without their ``Content-Encoding``, ``now`` the
    clock's epoch seconds, ``probed`` what the key's probe said (None: not asked yet).

    A key's own fault: that key revoked (``refused``); the request's own fault, or any other
    4xx: the client's answer (``Step.ANSWER``); a 401 / 403 the table does not name, with a
    probe known: ``Step.PROBE`` first; a 429 or 5xx: the route cools (``Retry-After``, else
    its ``cooldown`` for 502 / 503 / 504; a 429 only that key of a pool) and the next link is
    tried."""
    verdict = key_verdict(att.route, status, body, att.revoked_already)
    words = ""
    if verdict is not None and verdict.judgement.blame is Blame.UNKNOWN and att.probe is not None:
        if probed is None:
            return Verdict(Step.PROBE)
        verdict, words, cool = _after_probe(att, verdict, att.probe, probed)
        if cool:
            return _with_cool(_judged(att, status, verdict, words, headers, now), cool)
    return _judged(att, status, verdict, words, headers, now)


def _after_probe(
    att: Attempted, verdict: KeyVerdict, probe: Probe, probed: Probed
) -> tuple[KeyVerdict, str, tuple[Cooling, ...]]:
    """The verdict after the key's probe, the words the info line gives for what it said, and
    the probe remembered by every worker when it accepted the key or proved nothing."""
    if probed.result is None:
        return verdict, f"its probe {probe.label} was asked a moment ago", ()
    if probed.result is not ProbeResult.REFUSED:
        remembered = (Cooling(probed_mark(link_name(att.route)), PROBED_FOR),)
        return verdict, f"its probe {probe.label} {probed.result.value}", remembered
    return probed_verdict(verdict, probe, probed.result, att.revoked_already), "", ()


def _with_cool(verdict: Verdict, first: tuple[Cooling, ...]) -> Verdict:
    return Verdict(
        verdict.step, first + verdict.cool, verdict.failure, verdict.recheck, verdict.line
    )


def _judged(
    att: Attempted,
    status: int,
    verdict: KeyVerdict | None,
    probed: str,
    headers: Mapping[str, str],
    now: float,
) -> Verdict:
    if verdict is not None and verdict.action is not KeyAction.ANSWER:
        return refused(att, status, verdict)
    if verdict is not None:
        return Verdict(Step.ANSWER, line=kept(att.route, status, verdict, probed))
    if not falls_back(status):
        return Verdict(Step.ANSWER)
    return failed(att, status, retry_after(headers.get("retry-after"), now))


def failed(att: Attempted, status: int, wait: float | None) -> Verdict:
    """A 429 or 5xx that says nothing of a key: the route cools down (``wait``: the
    ``Retry-After``'s seconds) — a 429 of a key of a pool, that key only (its own limit) — and
    the next link is tried."""
    route, name = att.route, link_name(att.route)
    cool = cooldown_after(route, status, wait)
    entries: tuple[Cooling, ...] = ()
    if cool and status == 429:
        entries = (Cooling(name, cool),)
    elif cool:
        entries = upstream_cooling(att.chain, route, cool)
    failure = Failure(name, Reason.ANSWERED_FAILURE, f"HTTP {status}", cool)
    cooling = f" (cooling down {tenths(cool)} s)" if cool else ""
    text = f"cursor-bridge [{route.name}]: upstream answered HTTP {status}: falling back{cooling}"
    return Verdict(Step.NEXT, entries, failure, line=Line(Level.INFO, text))


def refused(att: Attempted, status: int, verdict: KeyVerdict) -> Verdict:
    """A key of a pool answered an error that is its own fault: revoked for
    ``bridge_key_recheck`` (its link and its ``revoked_mark``; with a probe known, the recheck
    is the probe and the key stays out until it is done: ``RECHECK_HOLD`` more), unless this
    request revoked one already (``KeyAction.PASS_ON``); the next link is tried either way."""
    route, name = att.route, link_name(att.route)
    revoke = verdict.action is KeyAction.REVOKE
    failure = Failure(name, Reason.KEY_REFUSED, verdict.detail(status, att.recheck), revoked=revoke)
    judged = verdict.judgement
    why = f"HTTP {status} {judged.why}" + (f", {judged.provider}" if judged.provider else "")
    head = f"cursor-bridge [{route.name}]: key {route.key_env} refused ({why})"
    if not revoke:
        text = f"{head}: not left out, this request left out a key already; trying the next"
        return Verdict(Step.NEXT, (), failure, line=Line(Level.WARNING, text))
    probe = att.probe
    hold = att.recheck + (RECHECK_HOLD if probe is not None else 0.0)
    who = "every worker" if att.shared else "this process"
    then = f"probed with {probe.label}" if probe is not None else "tried again"
    text = (
        f"{head}: left out for {tenths(att.recheck)} s by {who}, then {then} (bridge_key_recheck)"
    )
    cool = (Cooling(name, hold), Cooling(revoked_mark(name), hold))
    return Verdict(Step.NEXT, cool, failure, probe is not None, Line(Level.WARNING, text))


def kept(route: Route, status: int, verdict: KeyVerdict, probed: str) -> Line:
    """The line for a 401 / 403 of a key of a pool that is the request's own (or not known to
    be the key's): the client gets it, no key is left out (``probed``: what the key's probe
    said, "" none was sent)."""
    judged = verdict.judgement
    if judged.why:
        why = f"the request's own ({judged.why}, {judged.provider})"
    else:
        why = "not known to be the key's fault" + (f" ({probed})" if probed else "")
    text = (
        f"cursor-bridge [{route.name}]: key {route.key_env} answered HTTP {status}, {why}: "
        "answered, no key left out"
    )
    return Line(Level.INFO, text)


@dataclass(frozen=True, slots=True)
class Recheck:
    """What a revoked key's recheck does after its probe: the entries to cool again, or to
    clear; the log line; ``again``: the seconds until the next recheck (None: no more)."""

    cool: tuple[Cooling, ...]
    clear: tuple[str, ...]
    line: Line
    again: float | None


def rechecked(route: Route, probe: Probe, result: ProbeResult, recheck: float) -> Recheck:
    """A revoked key's probe after ``bridge_key_recheck`` (``recheck``): refused, the key is
    revoked again (probed again after as long); accepted, back at once for every worker (no
    client's request spent on it); proved nothing, back too: the next request that asks for
    it is the recheck."""
    name = link_name(route)
    label = f"cursor-bridge [{route.name}]: key {route.key_env}"
    if result is ProbeResult.REFUSED:
        hold = recheck + RECHECK_HOLD
        text = (
            f"{label} still refused by its probe {probe.label}: left out for {tenths(recheck)} s "
            "more, then probed again (bridge_key_recheck)"
        )
        cool = (Cooling(name, hold), Cooling(revoked_mark(name), hold))
        return Recheck(cool, (), Line(Level.WARNING, text), recheck)
    if result is ProbeResult.ACCEPTED:
        text = f"{label} accepted by its probe {probe.label}: back in the pool"
    else:
        text = (
            f"{label}: its probe {probe.label} proves nothing: back in the pool, the next "
            "request that asks for it is its recheck"
        )
    return Recheck((), (name, revoked_mark(name)), Line(Level.INFO, text), None)


def skipped(route: Route, cooldowns: Cooldowns) -> Failure:
    """A route or key passed over because it cools down (or, a key, was revoked): the tried
    line's words, with how long it still cools."""
    name = link_name(route)
    if is_link(route) and (left := cooldowns.left(revoked_mark(name))) > 0:
        return Failure(name, Reason.SKIPPED, f"revoked, tried again in {tenths(left)} s")
    return Failure(name, Reason.SKIPPED, cooling=cooldowns.left(name))


@dataclass(frozen=True, slots=True)
class Refusal:
    """The client's answer when every key of a pool cools down (or was revoked) and no other
    route is left, and what the flow says of it."""

    status: int
    headers: dict[str, str]
    body: bytes
    comment: str
    meta: dict[str, object]
    report: FlowReport
    """The flow's log line."""


def every_key_out(
    client: Dialect, chain: tuple[Route, ...], cooldowns: Cooldowns, failures: tuple[Failure, ...]
) -> Refusal:
    """Every key of the pool cools down and nothing else is left: the client's 429 in its
    dialect, ``Retry-After`` the earliest end of the cooldowns; every key revoked: a 503
    (``key_pool.all_cooling``)."""
    route = chain[0]
    wait = min(cooldowns.left(link_name(r)) for r in chain)
    every_revoked = all(cooldowns.cooling(revoked_mark(link_name(r))) for r in chain)
    status, headers, body = all_cooling(client, wait, every_revoked)
    tried = tried_line(failures)
    why = "every key cooling down" if status == 429 else "every key refused"
    comment = f"cursor-bridge [{route.name}]: answered {status}: {why}; tried: {tried}"
    after = f" (Retry-After {headers['retry-after']})" if headers else ""
    meta: dict[str, object] = {"route": route.name, "action": Action.REJECTED.value}
    report = FlowReport(
        route.name,
        Outcome.REJECTED,
        client=route.client,
        upstream=route.upstream,
        reason=f"answered {status}: {why}{after}",
        fields={"tried": tried},
    )
    return Refusal(status, headers, body, comment, meta, report)
