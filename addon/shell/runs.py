"""The per-flow run: what the shell keeps about a routed flow while it runs.

A run starts when ``request`` rewrites a flow and ends when its ``response`` or ``error``
hook has reported it. It holds the frozen plan (dropped when the flow falls back to passing
its answer on; the loop guard's second request replaces it), the ``AnswerState`` (what
changes while the answer is read), the report, and the first bytes a rewritten stream gave
its client (for the content view). Every addon reads the same ``FlowRuns``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from addon.outcome import FlowReport
from addon.plan import AnswerState, FlowPlan
from addon.state import KeptBytes

KEEP_STREAM_BYTES = 1024 * 1024
"""How much of a rewritten stream's bytes (upstream's, client's) is kept for the content view."""

MAX_TRACKED_FLOWS = 10_000
"""Flows whose answer is still awaited; the oldest are forgotten past this (a leak guard)."""


@dataclass(slots=True)
class FlowRun:
    report: FlowReport
    """What the flow's log line and mark will say."""
    plan: FlowPlan | None = None
    """What ``decide`` settled; None once the answer is passed on as it comes. The loop
    guard's second request replaces it with the plan that reads its answer."""
    answer: AnswerState = field(default_factory=AnswerState)
    """What changes while the answer is read (notes, the stream's processor and parser …)."""
    client_bytes: KeptBytes | None = None
    """A rewritten stream's first bytes as its client got them (``keep_originals``)."""


class FlowRuns:
    """The runs of the routed flows still running, by flow id (bounded)."""

    def __init__(self, limit: int = MAX_TRACKED_FLOWS) -> None:
        self._runs: OrderedDict[str, FlowRun] = OrderedDict()
        self._limit = limit

    def start(self, flow_id: str, plan: FlowPlan) -> FlowRun:
        answer = AnswerState.of(plan)
        run = self._runs[flow_id] = FlowRun(
            FlowReport(
                plan.route.name,
                "rewritten",
                client=plan.client.name,
                upstream=plan.upstream.name,
                mode="stream" if plan.stream else "whole",
                notes=answer.notes,
            ),
            plan,
            answer,
        )
        while len(self._runs) > self._limit:
            self._runs.popitem(last=False)
        return run

    def get(self, flow_id: str) -> FlowRun | None:
        return self._runs.get(flow_id)

    def plan(self, flow_id: str) -> FlowPlan | None:
        run = self._runs.get(flow_id)
        return run.plan if run is not None else None

    def pop(self, flow_id: str) -> FlowRun | None:
        return self._runs.pop(flow_id, None)

    def __contains__(self, flow_id: object) -> bool:
        return flow_id in self._runs

    def __len__(self) -> int:
        return len(self._runs)
