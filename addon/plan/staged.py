"""The staged retry, decided with plain values: after an upstream error, ``staged_step`` says
whether to ask again and with which body (``NextStage``), or to stop and why (``Stop``). The
stages and when each is called for: ``addon.transforms.staged_retry``; the shell only sends
``NextStage.body`` and asks again with the answer's status and body."""

from __future__ import annotations

from dataclasses import dataclass

from addon.model import UnsupportedShape
from addon.plan.answer import AnswerState, stage_body
from addon.plan.errors import error_message
from addon.plan.flow_plan import FlowPlan
from addon.plan.values import short
from addon.transforms.staged_retry import Stage, next_stage


@dataclass(frozen=True, slots=True)
class NextStage:
    """Send ``body`` upstream: the request of ``stage``."""

    stage: Stage
    body: bytes
    message: str
    """The upstream error's message that called for it."""


@dataclass(frozen=True, slots=True)
class Stop:
    """No (further) stage: the client gets the upstream's error."""

    reason: str
    stage: Stage | None = None
    """A stage that was called for but cannot be written (``reason`` says why)."""
    message: str = ""


def staged_step(
    plan: FlowPlan, state: AnswerState, done: int, status: int, raw: bytes
) -> NextStage | Stop:
    """What follows an upstream error (``status``, body ``raw``) to the request of stage
    ``done`` (0: the first request). The stage's request is noted in ``state.notes``."""
    if plan.unified is None:
        return Stop("no request to retry")
    message = error_message(plan, raw)
    stage = next_stage(done, status, message)
    if stage is None:
        return Stop("not a signature error" if done == 0 else f"after stage {done}")
    try:
        body = stage_body(plan, state, stage)
    except (ValueError, UnsupportedShape, RecursionError) as e:
        return Stop(short(e), stage, message)
    return NextStage(stage, body, message)
