"""How a routed flow ended, as plain values (``FlowReport``): its mark, its log line, its counters.

Sans-IO: the shell fills a report while the flow runs and, once it is over, sets the mark, logs
the line and adds the counters (``bridge.stats``). Outcomes, most telling first (``OUTCOMES``):
a flow shows the first it has. What each means: docs/observability.md."""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from addon.model import TalliedNote, Tally, Usage
from addon.redact import clean


class Outcome(StrEnum):
    """How a routed flow ended, as its log line (``outcome=``), its mark and ``bridge.stats``
    (``flows …``) write it (the value is that text). Declared by precedence, most telling
    first (``OUTCOMES``). ``NOT_REWRITTEN``: something of the flow could not be rewritten, so it
    passed through as it came or ended with an error for the client (a request or answer the
    bridge could not read, a cut stream, events skipped, no route of a chain answered)."""

    REJECTED = "rejected"
    LOOP_GUARD = "loop_guard"
    NOT_REWRITTEN = "not_rewritten"
    RETRIED = "retried"
    REPAIRED = "repaired"
    REWRITTEN = "rewritten"


OUTCOMES: tuple[Outcome, ...] = tuple(Outcome)
"""Every outcome, by precedence."""

MARKS: Mapping[Outcome, str] = {
    Outcome.REJECTED: ":no_entry:",
    Outcome.LOOP_GUARD: ":stop_sign:",
    Outcome.NOT_REWRITTEN: ":warning:",
    Outcome.RETRIED: ":repeat:",
    Outcome.REPAIRED: ":wrench:",
    Outcome.REWRITTEN: ":twisted_rightwards_arrows:",
}
"""``flow.marked`` per outcome (mitmproxy's emoji short codes), each its own."""


class Action(StrEnum):
    """What the bridge did with a flow, as ``flow.metadata["cursor-bridge"]["action"]`` says
    (the value is that text; the content view and the stream's attach read it back)."""

    REWRITTEN = "rewritten"
    REJECTED = "rejected"
    PASSTHROUGH = "passthrough"


class Count(StrEnum):
    """Every process-wide counter a hook adds to (``BridgeState.count``), as ``bridge.stats``
    names it (the value is that text). The flows by outcome and the retries by kind are made by
    ``FlowReport.counters``; ``REPAIRS``, ``RESTORES`` and ``NOT_REWRITTEN`` have their own
    place in the line, every other one goes under ``other:`` (docs/observability.md lists them)."""

    REPAIRS = "repairs"
    RESTORES = "restores"
    NOT_REWRITTEN = "not rewritten"
    REQUESTS_REWRITTEN = "requests rewritten"
    ANSWERS_REWRITTEN = "answers rewritten"
    STREAMS_REWRITTEN = "streams rewritten"
    PASSED_THROUGH = "passed through"
    STREAMS_PASSED_THROUGH = "streams passed through"
    REJECTED = "rejected"
    UPSTREAM_ERRORS_RESHAPED = "upstream errors re-shaped"
    STREAMS_ENDED_WITH_ERROR = "streams ended with an error"
    STREAM_EVENTS_SKIPPED = "stream events skipped"
    ANSWERS_NOT_TRANSLATABLE = "answers not translatable"
    ANSWERS_CUT = "answers cut by the upstream"
    """Answers (whole or streamed) whose body the upstream broke off (``FlowReport.cut``)."""
    ANSWERS_NOT_REMEMBERED = "answers not remembered"
    TOOL_CALLS_STILL_INVALID = "tool calls still invalid after repair"
    LOOP_GUARD_ANSWERS = "loop guard answers"
    STAGED_RETRIES_ANSWERED = "staged retries answered"
    FALLBACKS_ANSWERED = "fallbacks answered"
    TOKEN_COUNTS_ESTIMATED = "token counts estimated"


_PLAIN = re.compile(r"[\w.:/@+%-]+")


@dataclass(slots=True)
class FlowReport:
    """One routed flow, as the log line and the counters see it."""

    route: str
    """The route that took the flow (a chain's: the one that served it)."""
    outcome: Outcome = Outcome.REWRITTEN
    """The most telling of ``OUTCOMES`` seen so far (``add_outcome``)."""
    client: str = ""
    """The client's dialect; empty when the request was not rewritten."""
    upstream: str = ""
    """The upstream's dialect."""
    mode: str = ""
    """``stream`` or ``whole`` (the client's answer), empty when no answer was rewritten."""
    status: int | None = None
    """The status the client got, when known."""
    spent_ns: int = 0
    """Time spent in the bridge's hooks and stream callable for this flow (a long stream's
    reads after its first ones sampled: ``StreamProcessor.reader``)."""
    retries: Counter[str] = field(default_factory=Counter)
    """Retries by kind (``required_tool``, ``staged``)."""
    counts: dict[str, int] = field(default_factory=dict)
    """What was counted along the way (events, tool calls, skipped events …)."""
    notes: Mapping[str, int] = field(default_factory=dict)
    """The flow's decisions (``AnswerState.notes``): repairs and restores are counted from them."""
    reason: str = ""
    """Why the flow was not rewritten, was rejected or ended with an error (one line)."""
    fields: dict[str, str | int] = field(default_factory=dict)
    """Fields an outcome adds to the line (the loop guard's ``tool`` and ``failures``)."""
    comments: list[str] = field(default_factory=list)
    """Lines for the flow's comment said while it ran, written at its end (``Report.close``,
    redacted with the flow's secrets)."""
    cut: str | None = None
    """How the upstream broke the answer's body off (``upstream_cut``, ``upstream_reset``,
    ``upstream_idle``), None when it did not: the line's ``cut=``, ``answers cut``."""
    usage: Usage | None = None
    """The usage the upstream reported for the answer the client got (``AnswerState.usage``):
    its cache reads and writes go on the line (``cache_fields``); None when it reported none."""

    def add_outcome(self, outcome: Outcome) -> None:
        """Keep the most telling of the outcomes seen so far."""
        if OUTCOMES.index(outcome) < OUTCOMES.index(self.outcome):
            self.outcome = outcome

    @property
    def repairs(self) -> int:
        return tallied(self.notes, Tally.REPAIR)

    @property
    def restores(self) -> int:
        return tallied(self.notes, Tally.RESTORE)

    @property
    def final(self) -> Outcome:
        """The outcome the mark, the log line and the counters show: a rewrite that retried
        or repaired says so."""
        outcome = self.outcome
        if outcome is Outcome.REWRITTEN and self.retries:
            return Outcome.RETRIED
        if outcome is Outcome.REWRITTEN and self.repairs:
            return Outcome.REPAIRED
        return outcome

    @property
    def mark(self) -> str:
        return MARKS[self.final]

    def line(self) -> str:
        """One logfmt line (``key=value``, quoted where needed); nothing secret goes in."""
        pairs: list[tuple[str, object]] = [("route", self.route), ("outcome", self.final.value)]
        if self.client:
            pairs += [("client", self.client), ("upstream", self.upstream)]
        if self.mode:
            pairs.append(("mode", self.mode))
        if self.status is not None:
            pairs.append(("status", self.status))
        if self.cut:
            pairs.append(("cut", self.cut))
        pairs += list(self.fields.items())
        pairs += [(k, v) for k, v in self.counts.items() if v]
        pairs += cache_fields(self.usage)
        if self.repairs:
            pairs.append(("repairs", self.repairs))
        if self.restores:
            pairs.append(("restores", self.restores))
        if self.retries:
            pairs.append(("retries", sum(self.retries.values())))
        pairs.append(("bridge_ms", f"{self.spent_ns / 1e6:.2f}"))
        if self.reason:
            pairs.append(("reason", self.reason))
        return "cursor-bridge flow " + " ".join(f"{k}={_value(v)}" for k, v in pairs)

    def counters(self) -> Counter[str]:
        """What this flow adds to the process-wide counters."""
        out: Counter[str] = Counter({flows_counter(self.final): 1})
        if self.repairs:
            out[Count.REPAIRS.value] += self.repairs
        if self.restores:
            out[Count.RESTORES.value] += self.restores
        for kind, n in self.retries.items():
            out[f"{_RETRIES}{kind})"] += n
        if self.outcome is Outcome.NOT_REWRITTEN:
            out[Count.NOT_REWRITTEN.value] += 1
        if self.cut:
            out[Count.ANSWERS_CUT.value] += 1
        return out


def flows_counter(outcome: Outcome) -> str:
    """The counter of the flows that ended with ``outcome`` (``flows rewritten``)."""
    return f"{_FLOWS}{outcome.value}"


_FLOWS = "flows "
_RETRIES = "retries ("


def tallied(notes: Mapping[str, int], tally: Tally) -> int:
    """How many of ``notes`` count as ``tally``: read from the typed notes (``TalliedNote``),
    never from a note's text."""
    return sum(
        n for note, n in notes.items() if isinstance(note, TalliedNote) and note.tally is tally
    )


def cache_fields(usage: Usage | None) -> list[tuple[str, str | int]]:
    """The prompt cache's part of an answer's usage, as the log line and the content view
    write it: ``cache_read`` and ``cache_write`` where the upstream reported them (a reported
    0 is written, it says the cache missed; a count it did not report is left out, never
    written as 0), and ``cache_share``, the read tokens' part of the request's whole input
    (uncached + read + written) in whole percent, rounded half up, when the reads and that
    input are known. Nothing for an answer without usage."""
    if usage is None:
        return []
    read, written = usage.cache_read_tokens, usage.cache_write_tokens
    out: list[tuple[str, str | int]] = []
    if read is not None:
        out.append(("cache_read", read))
    if written is not None:
        out.append(("cache_write", written))
    prompt = usage.prompt_tokens
    if read is not None and prompt:
        out.append(("cache_share", f"{(200 * read + prompt) // (2 * prompt)}%"))
    return out


def _value(v: object) -> str:
    if type(v) is int:  # counts, the status: nothing to clean or quote
        return str(v)
    return _text_value(clean(v, 300))


@functools.lru_cache(maxsize=1024)
def _text_value(text: str) -> str:
    if _PLAIN.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def stats_text(counters: Mapping[str, int], uptime_s: float) -> str:
    """The counters as ``bridge.stats`` and the shutdown line show them (one line)."""
    flows = [
        f"{counters[flows_counter(o)]} {o.value}"
        for o in OUTCOMES
        if counters.get(flows_counter(o))
    ]
    kinds = sorted(
        (k[len(_RETRIES) : -1], n) for k, n in counters.items() if k.startswith(_RETRIES) and n
    )
    retries = f"retries: {sum(n for _, n in kinds)}"
    if kinds:  # said once, by kind: "retries: 3 (required tool call: 1, staged retry 1: 2)"
        retries += " (" + ", ".join(f"{kind}: {n}" for kind, n in kinds) + ")"
    parts = [
        "flows: " + (", ".join(flows) if flows else "none"),
        f"repairs: {counters.get(Count.REPAIRS, 0)}",
        f"restores: {counters.get(Count.RESTORES, 0)}",
        retries,
        f"not rewritten: {counters.get(Count.NOT_REWRITTEN, 0)}",
    ]
    grouped = (_FLOWS, _RETRIES, Count.REPAIRS, Count.RESTORES, Count.NOT_REWRITTEN)
    other = sorted((k, n) for k, n in counters.items() if not k.startswith(grouped))
    if other:
        parts.append("other: " + ", ".join(f"{n} {k}" for k, n in other))
    hours, rest = divmod(int(uptime_s), 3600)
    parts.append(f"up {hours}:{rest // 60:02d}:{rest % 60:02d}")
    return "; ".join(parts)
