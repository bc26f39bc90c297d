"""What happens to a whole answer, step by step, decided with plain values (sans-IO).

The answers addon (``addon.shell.whole_answers``) reads the flow once into a ``Seen`` (the
answer's status, content type and body, and why the relay cut it), and asks ``whole_step``.
A step is a ``Send`` (the upstream asked again: the addon applies its ``told``, sends
``body`` and hands the answer back in ``then``) or a ``Told``: what to apply to the flow
(the client's answer, comment lines, log lines, counters, the view's copy). What each state
of a whole answer does is one row of ``STEPS``:

=========  ===================================================================================
STREAMED   the stream pipeline answered: only reported
CUT        the relay ended a broken body: a 502 in the client's dialect
REFUSED    an upstream error: asked again in stages (``addon.plan.staged``), else re-shaped
STAGED     a staged retry answered: delivered as a first answer would be, or the next stage
HELD       a stream read whole for the loop guard: through the stream pipeline
OPAQUE     not JSON on the same dialect: the client reads it itself
WHOLE      a 2xx whole answer: decoded, encoded; asked again for a missing required call
REQUIRED   the retry for a required tool call answered
ASKED      the loop guard's second request (the invoke text protocol) answered
SEARCHED   the bridge ran the model's web searches: their results fed back (a second call)
FED        the answer to the results: the client's, the searches shown in its dialect's shape
=========  ===================================================================================

Every step that reads an answer may end in asking again with the loop guard
(``_ask_or_done``); nothing here logs or touches a flow."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from addon.dialects.searches import Searched
from addon.model import Response, ToolCall, UnsupportedShape
from addon.plan import web_search as ws
from addon.plan.answer import (
    AnswerState,
    ask_again,
    client_answer,
    decode_answer,
    encode_answer,
    loop_ask_again,
    needs_retry,
)
from addon.plan.errors import (
    cut_answer,
    error_body,
    foreign_error,
    success_error,
    unreadable_answer,
    unreadable_why,
    upstream_error,
)
from addon.plan.flow_plan import FlowPlan
from addon.plan.staged import NextStage, Stop, staged_step
from addon.plan.values import CONTENT_TYPES, UpstreamError, short
from addon.report.outcome import Count

UNREADABLE = (ValueError, UnsupportedShape, RecursionError)
"""What reading an answer raises when the bridge cannot read it."""


class At(Enum):
    """The state of a whole answer: which row of ``STEPS`` reads it."""

    STREAMED = "streamed"
    CUT = "cut"
    REFUSED = "refused"
    STAGED = "staged"
    HELD = "held"
    OPAQUE = "opaque"
    WHOLE = "whole"
    REQUIRED = "required"
    ASKED = "asked"
    SEARCHED = "searched"
    FED = "fed"


@dataclass(frozen=True, slots=True)
class Seen:
    """An answer as the addon read it: the flow's own, or the one to a request sent again."""

    status: int
    content_type: str | None
    body: bytes
    cut: str | None = None
    """Why the relay ended the body (``upstream_cut`` …); None when it came whole."""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def json(self) -> bool:
        """A JSON content type (``addon.shell.headers.is_json`` on the response)."""
        ctype = (self.content_type or "").lower()
        return ctype.startswith("application/json") or "+json" in ctype


@dataclass(frozen=True, slots=True)
class Stands:
    """What the client gets when what is asked next brings nothing better."""

    raw: bytes
    """The upstream's bytes it was made from (the view's copy)."""
    answer: Response | None = None
    """Decoded, not yet encoded (while a required tool call is asked for again)."""
    body: bytes = b""
    content_type: str = ""
    calls: int = 0
    held: bool = False
    """A stream read whole for the loop guard (else a whole answer)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One whole answer's state: what a row of ``STEPS`` reads."""

    plan: FlowPlan
    """The plan that reads ``seen`` (the loop guard's second request's, when asked)."""
    first: Seen
    """The flow's own answer (an error re-shaped is this one)."""
    seen: Seen | None = None
    """The answer to a ``Send`` (None: it could not be sent, or nothing was sent yet)."""
    can_retry: bool = False
    """The bridge can send a request again (the retry addon is loaded)."""
    at: At | None = None
    """The row that reads it; None: the row is chosen by what ``first`` is (``whole_step``)."""
    stands: Stands | None = None
    stage: int = 0
    """The staged retry's stage ``seen`` answers (0: the first request)."""
    rounds: tuple[ws.Round, ...] = ()
    """The answers that called the web search tool, and what their searches found."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A new response for the client."""

    status: int
    body: bytes
    content_type: str = "application/json"


@dataclass(frozen=True, slots=True)
class Body:
    """The upstream's response kept (its status too), with this body and content type."""

    body: bytes
    content_type: str
    drop: tuple[str, ...] = ()
    """Headers dropped first (a stream read whole: its length and encoding)."""


@dataclass(frozen=True, slots=True)
class Kept:
    """The upstream's answer as it came, for the content view (``Report.keep_answer``)."""

    raw: bytes
    summary: str
    stream: bool


Log = tuple[int, str, tuple[object, ...]]


@dataclass(slots=True)
class Told:
    """What the addon applies to the flow, in this order: comment ``lines``, log lines,
    counters, the flow's retries and reasons, the client's answer, the metadata, the answer's
    notes (``notes``: its changes and text tool calls, with ``plan``), the view's copy, the
    sizes, the ``after`` lines; a ``streamed`` answer is only reported."""

    plan: FlowPlan
    lines: list[str] = field(default_factory=list)
    logs: list[Log] = field(default_factory=list)
    counts: list[Count] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    not_rewritten: list[str] = field(default_factory=list)
    reply: Reply | Body | None = None
    meta: dict[str, object] = field(default_factory=dict)
    notes: bool = False
    kept: Kept | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    after: list[str] = field(default_factory=list)
    streamed: bool = False

    def log(self, level: int, message: str, *args: object) -> None:
        self.logs.append((level, message, args))


@dataclass(frozen=True, slots=True)
class Send:
    """Ask the upstream again: apply ``told``, send ``body`` (None: the flow's own request
    body), noted in the view as ``attempt`` (when named), and read the answer as ``then``
    says (with ``then.plan``, which becomes the flow's plan)."""

    told: Told
    body: bytes | None
    attempt: str | None
    then: Answer


Step = Send | ws.Search["Told", "Answer"] | Told


def searched(step: ws.Search[Told, Answer], found: Sequence[Searched]) -> Answer:
    """The answer to read once a ``Search`` step's searches ran (``found``: one per call)."""
    return dataclasses.replace(step.then, rounds=(*step.then.rounds, ws.Round(step.answer, found)))


def whole_step(state: AnswerState, answer: Answer) -> Step:
    """What to do next with a whole answer (``state``: the flow's ``AnswerState``)."""
    return STEPS[answer.at or _state_of(state, answer)](state, answer)


def _state_of(state: AnswerState, answer: Answer) -> At:
    plan, first = answer.plan, answer.first
    if state.processor is not None:
        return At.STREAMED
    if first.cut:
        return At.CUT
    if not first.ok:
        return At.REFUSED
    held = not first.json or (plan.upstream_streams and plan.upstream_framing == "json_array")
    if plan.loop_held and answer.can_retry and held:
        return At.HELD
    if plan.same_dialect and not first.json:
        return At.OPAQUE
    return At.WHOLE


def broken(state: AnswerState, plan: FlowPlan, status: int, what: str) -> Told:
    """A bug on the answer's path (``what``: the exception's type): the client gets a 502 in
    its dialect, unless the answer goes on as the upstream sent it (the same dialect, or a
    stream already on its way)."""
    told = Told(plan, not_rewritten=[f"internal error ({what})"])
    if not plan.same_dialect and state.processor is None:
        _unreadable(told, status, f"internal error ({what})")
    return told


# ---------------------------------------------------------------------- the rows


def _streamed(state: AnswerState, answer: Answer) -> Step:
    return Told(answer.plan, streamed=True)


def _opaque(state: AnswerState, answer: Answer) -> Step:
    return Told(answer.plan)


def _cut(state: AnswerState, answer: Answer) -> Step:
    plan, cut = answer.plan, answer.first.cut or ""
    told = Told(plan)  # counted, and said once, by the flow's line (``Report.close``: cut=)
    told.not_rewritten.append(f"upstream answer cut ({cut})")
    told.lines.append(f"upstream answer cut ({cut}) → 502")
    told.reply = Reply(502, cut_answer(plan, cut))
    return told


def _refused(state: AnswerState, answer: Answer) -> Step:
    told = Told(answer.plan)
    if not answer.can_retry:
        return _error_stands(told, answer)
    first = answer.first
    return _next_stage(told, answer, staged_step(answer.plan, state, 0, first.status, first.body))


def _staged(state: AnswerState, answer: Answer) -> Step:
    """A staged retry's answer: a 2xx is the client's; an error asks for the next stage."""
    told, got = Told(answer.plan), answer.seen
    if got is None:
        return _error_stands(told, answer)
    if got.ok:
        return _deliver(state, answer, got, told)
    told.lines.append(f"staged retry {answer.stage} got HTTP {got.status}")
    step = staged_step(answer.plan, state, answer.stage, got.status, got.body)
    return _next_stage(told, answer, step)


def _next_stage(told: Told, answer: Answer, step: NextStage | Stop) -> Step:
    """What ``staged_step`` said after an upstream error: send the next stage's request, or
    stop (the upstream's error stands)."""
    plan = answer.plan
    if step.stage is not None:
        told.retried.append(f"staged retry {step.stage}")
        told.log(
            logging.INFO,
            "%s: upstream refused the reasoning (HTTP %d: %s): staged retry %d",
            plan.label,
            answer.first.status,
            short(step.message),
            step.stage,
        )
    if isinstance(step, Stop):
        if step.stage is not None:
            told.log(
                logging.WARNING,
                "%s: staged retry %d not possible: %s",
                plan.label,
                step.stage,
                step.reason,
            )
        return _error_stands(told, answer)
    then = dataclasses.replace(answer, at=At.STAGED, seen=None, stage=step.stage)
    return Send(told, step.body, f"staged retry {step.stage}", then)


def _deliver(state: AnswerState, answer: Answer, got: Seen, told: Told) -> Step:
    """A staged retry's 2xx answer, rewritten for the client as a first answer would be."""
    plan, stage = answer.plan, answer.stage
    ctype = got.content_type or ""
    streamed = plan.stream and not ctype.lower().startswith("application/json")
    try:
        body, content_type = client_answer(plan, state, got.body, ctype)
    except UNREADABLE as e:
        told.reply = Reply(got.status, got.body, ctype)
        told.lines.append(f"staged retry {stage} answered")
        if not plan.same_dialect:
            _unreadable(told, got.status, unreadable_why(e))
        return told
    told.kept = Kept(got.body, f"staged retry {stage} answered", streamed)
    told.reply = Reply(200, body, content_type)
    told.counts.append(Count.STAGED_RETRIES_ANSWERED)
    told.lines.append(
        f"upstream refused the reasoning: staged retry {stage} answered "
        f"({'thinking off, thinking as text' if stage == 1 else 'tool calls as text too'})"
    )
    told.meta["staged_retry"] = stage
    told.notes = True
    return told


def _error_stands(told: Told, answer: Answer) -> Told:
    """No stage answered: the upstream's own error, re-shaped for a client of another
    dialect (or of another shape than its dialect writes); its status kept."""
    plan, first = answer.plan, answer.first
    if plan.same_dialect and not foreign_error(plan, first.body):
        return told
    body, message = error_body(plan, first.status, first.body)
    told.reply = Body(body, "application/json")
    told.lines.append(f"upstream error {first.status} → {plan.client.name} shape")
    told.log(
        logging.INFO, "%s: upstream answered HTTP %d: %s", plan.label, first.status, short(message)
    )
    return told


def _held(state: AnswerState, answer: Answer) -> Step:
    """A stream read whole because the loop guard may ask again (``FlowPlan.loop_held``):
    through the stream pipeline; the client gets it as one body in its stream framing."""
    first = answer.first
    body, ctype = client_answer(answer.plan, state, first.body, first.content_type or "")
    stands = Stands(first.body, body=body, content_type=ctype, held=True)
    return _ask_or_done(state, answer, stands, Told(answer.plan))


def _whole(state: AnswerState, answer: Answer) -> Step:
    plan, first, told = answer.plan, answer.first, Told(answer.plan)
    try:
        decoded = decode_answer(
            plan, state, first.body, status=first.status, content_type=first.content_type
        )
        if plan.search is not None and answer.can_retry and ws.search_calls(plan.search, decoded):
            return _search(answer, decoded, told)
        if needs_retry(plan, state, decoded) and answer.can_retry:
            stands = Stands(first.body, answer=decoded)
            then = dataclasses.replace(answer, at=At.REQUIRED, seen=None, stands=stands)
            return Send(told, None, "retry for a required tool call", then)
        return _encoded(state, answer, decoded, first.body, told)
    except UpstreamError as e:
        return _upstream_error(told, plan, e)
    except UNREADABLE as e:
        return _unread(told, answer, first.body, e)


def _required(state: AnswerState, answer: Answer) -> Step:
    """The answer to the request sent once more because a required tool call was missing:
    the client's when it is a 2xx that reads, else the first answer stands."""
    plan, got, told = answer.plan, answer.seen, Told(answer.plan)
    stands = answer.stands
    assert stands is not None and stands.answer is not None
    decoded, raw = stands.answer, stands.raw
    try:
        if got is not None and not got.ok:
            told.log(logging.WARNING, "%s: retry got HTTP %d", plan.label, got.status)
            told.lines.append(f"retry got HTTP {got.status}")
        elif got is not None:
            decoded, raw = decode_answer(plan, state, got.body), got.body
            told.retried.append("required tool call")
            again = "got one" if not needs_retry(plan, state, decoded) else "still none"
            told.lines.append(f"no tool call although one was required: retried once → {again}")
        return _encoded(state, answer, decoded, raw, told)
    except UpstreamError as e:
        return _upstream_error(told, plan, e)
    except UNREADABLE as e:  # ``raw``: the first answer's, or the retry's once it decoded
        return _unread(told, answer, raw, e)


def _encoded(state: AnswerState, answer: Answer, decoded: Response, raw: bytes, told: Told) -> Step:
    body = encode_answer(answer.plan, decoded)
    calls = sum(isinstance(p, ToolCall) for p in decoded.parts)
    return _ask_or_done(state, answer, Stands(raw, body=body, calls=calls), told)


def _asked(state: AnswerState, answer: Answer) -> Step:
    """The loop guard's second request answered (``answer.plan`` is its plan): a 2xx that
    reads is the client's, else the first answer stands."""
    plan, got, told = answer.plan, answer.seen, Told(answer.plan)
    stands = answer.stands
    assert stands is not None
    told.retried.append("loop guard")
    if got is None:
        return _done(state, plan, stands, told)
    if not got.ok:
        told.log(
            logging.WARNING, "%s: loop guard: asked again, got HTTP %d", plan.label, got.status
        )
        told.lines.append(f"loop guard: asked again, got HTTP {got.status}")
        return _done(state, plan, stands, told)
    try:
        body, ctype = client_answer(plan, state, got.body, got.content_type or "")
    except UNREADABLE as e:
        why = unreadable_why(e)
        told.log(
            logging.WARNING,
            "%s: loop guard: the second answer could not be read: %s",
            plan.label,
            why,
        )
        told.lines.append(f"loop guard: the second answer could not be read ({why})")
        return _done(state, plan, stands, told)
    told.lines.append("loop guard: asked again with the invoke text protocol → answered")
    calls = state.parser.calls if state.parser is not None else 0
    second = dataclasses.replace(stands, raw=got.body, body=body, content_type=ctype, calls=calls)
    return _done(state, plan, second, told)


def _search(answer: Answer, decoded: Response, told: Told) -> ws.Search[Told, Answer]:
    """The answer called the web search tool: its searches run, then ``SEARCHED``."""
    then = dataclasses.replace(answer, at=At.SEARCHED, seen=None)
    return ws.Search.of(answer.plan.search, decoded, answer.rounds, told, then)


def _searched(state: AnswerState, answer: Answer) -> Step:
    """The searches ran: the conversation with their results, sent to the upstream."""
    plan = answer.plan
    assert plan.unified is not None and plan.encode_stage is not None
    # A live search whose upstream answered whole (it ignored ``stream``): whole calls on.
    fed = dataclasses.replace(ws.fed_back(plan.unified, answer.rounds), stream=False)
    body = plan.encode_stage(fed)
    then = dataclasses.replace(answer, at=At.FED, seen=None)
    return Send(Told(plan), body, "web search: results fed back", then)


def _fed(state: AnswerState, answer: Answer) -> Step:
    """The answer to the searches' results: searches again (``MAX_ROUNDS``), else the client's."""
    plan, got, told = answer.plan, answer.seen, Told(answer.plan)
    if got is None or not got.ok:  # the first answer is no answer: the bridge's 502
        return _unreadable(told, got.status if got else 502, "web search: results refused")
    try:
        decoded = decode_answer(plan, state, got.body)
        final = ws.after(plan.client.web_search, plan.search, decoded, answer.rounds)
        if final is None:
            return _search(answer, decoded, told)
        ran = state.searched(final, ws.searches_run(answer.rounds))
        told.lines.append(f"web search: {ran} run by the bridge")
        return _encoded(state, answer, final, got.body, told)
    except UpstreamError as e:
        return _upstream_error(told, plan, e)
    except UNREADABLE as e:
        return _unread(told, answer, got.body, e)


STEPS: dict[At, Callable[[AnswerState, Answer], Step]] = {
    At.STREAMED: _streamed,
    At.CUT: _cut,
    At.REFUSED: _refused,
    At.STAGED: _staged,
    At.HELD: _held,
    At.OPAQUE: _opaque,
    At.WHOLE: _whole,
    At.REQUIRED: _required,
    At.ASKED: _asked,
    At.SEARCHED: _searched,
    At.FED: _fed,
}
"""The state of a whole answer → the step that reads it."""


# ---------------------------------------------------------------------- endings


def _ask_or_done(state: AnswerState, answer: Answer, stands: Stands, told: Told) -> Step:
    """The answer repeated a call the history shows failing (the loop guard) and the route
    asks again: the same conversation with the tools as ``invoke`` text, read by the plan
    that reads that protocol (``ask_again``); else the answer is done."""
    plan = answer.plan
    if not (answer.can_retry and loop_ask_again(plan, state)):
        return _done(state, plan, stands, told)
    asked = ask_again(plan, state)
    if asked is None:
        told.log(
            logging.WARNING, "%s: loop guard: the invoke request could not be written", plan.label
        )
        told.lines.append("loop guard: could not ask again (invoke request not written)")
        return _done(state, plan, stands, told)
    second, body = asked
    then = dataclasses.replace(answer, plan=second, at=At.ASKED, seen=None, stands=stands)
    return Send(told, body, None, then)


def _done(state: AnswerState, plan: FlowPlan, stands: Stands, told: Told) -> Told:
    """The client's answer: the body in place of the upstream's, the answer's notes, the
    view's copy and the flow's sizes."""
    told.plan, told.notes = plan, True
    told.counts.append(Count.ANSWERS_REWRITTEN)
    sizes = {"bytes_in": len(stands.raw), "bytes_out": len(stands.body)}
    if stands.held:
        told.kept = Kept(stands.raw, "stream read whole (loop guard)", True)
        told.reply = Body(
            stands.body,
            stands.content_type,
            ("content-length", "content-encoding", "transfer-encoding"),
        )
        told.after.append(
            "stream read whole before it was sent (loop guard, bridge_loop_fallback on)"
        )
        told.sizes = sizes
        return told
    told.kept = Kept(stands.raw, "whole answer re-encoded", False)
    told.sizes = {**sizes, "tool_calls": stands.calls}
    if plan.stream:
        told.reply = Body(stands.body, CONTENT_TYPES[plan.client_framing])
        told.after.append("whole answer sent as a stream (client asked for one)")
    else:
        told.reply = Body(stands.body, "application/json")
    return told


def _upstream_error(told: Told, plan: FlowPlan, e: UpstreamError) -> Told:
    """An error inside the upstream's answer framing (a Kiro exception frame)."""
    told.counts.append(Count.UPSTREAM_ERRORS_RESHAPED)
    told.log(logging.INFO, "%s: upstream answered an error: %s", plan.label, short(e.message))
    told.lines.append(f"upstream error in its stream → {plan.client.name} shape")
    told.reply = Reply(e.status, upstream_error(plan, e))
    return told


def _unread(told: Told, answer: Answer, raw: bytes, e: BaseException) -> Told:
    """An answer the bridge cannot read: an upstream error in a 2xx body is answered with
    the status its type names (``success_error``); else a client of another dialect gets a
    502, one of the same dialect the answer as it came."""
    plan, status = answer.plan, answer.first.status
    failed = success_error(plan, raw)
    if failed is not None:
        named, body, message = failed
        told.reply = Reply(named, body)
        told.lines.append(
            f"upstream error in a {status} answer → {named}, {plan.client.name} shape"
        )
        told.counts.append(Count.UPSTREAM_ERRORS_RESHAPED)
        told.log(
            logging.INFO,
            "%s: upstream answered an error with HTTP %d: %s",
            plan.label,
            status,
            short(message),
        )
        return told
    why = unreadable_why(e)
    if not plan.same_dialect:
        return _unreadable(told, status, why)
    told.log(logging.INFO, "%s: answer passed through unchanged: %s", plan.label, why)
    told.lines.append(f"answer not rewritten ({why})")
    told.not_rewritten.append(f"answer not rewritten ({why})")
    return told


def _unreadable(told: Told, status: int, why: str) -> Told:
    """An answer (HTTP ``status``) that cannot reach a client of another dialect: a 502 in
    its dialect."""
    plan = told.plan
    told.counts.append(Count.ANSWERS_NOT_TRANSLATABLE)
    told.log(
        logging.WARNING,
        "%s: upstream answer (HTTP %d) not translatable: %s",
        plan.label,
        status,
        why,
    )
    told.not_rewritten.append(f"upstream answer not translatable: {why}")
    told.lines.append(f"upstream answer (HTTP {status}) not translatable: {why} → 502")
    told.reply = Reply(502, unreadable_answer(plan, why))
    return told
