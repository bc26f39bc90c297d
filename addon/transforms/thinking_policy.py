"""The thinking policy: which models think, which think by default, when thinking is not sent.

Contract: pure over ``addon.model`` requests; decisions go to ``notes``. Run by
``addon.transforms.restore.restore_request`` before the store's restore. *The seed*: the
earlier proxies the bridge's first issues took their rules from; a rule or list called "the
seed's" is kept as they had it (model names, lengths), not derived from a provider's docs."""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

from addon.model import Message, Notes, Request, Thinking, ThinkingConfig, ToolCall

_CLAUDE = re.compile(r"(?:^|[/.:])claude-")
_OPUS_45 = re.compile(r"opus-4[-.]5(?![\d])|4[-.]5-opus")


def _name(model: str) -> str:
    return model.strip().lower()


def is_claude(model: str) -> bool:
    """``claude-…``, also behind a provider prefix (``anthropic/claude-…``,
    ``us.anthropic.claude-…``)."""
    return _CLAUDE.search(_name(model)) is not None


def model_supports_thinking(model: str) -> bool:
    """The seed's list: ``-thinking`` in the name, ``gemini-3-pro``, ``claude-*``."""
    name = _name(model)
    return "-thinking" in name or "gemini-3-pro" in name or is_claude(model)


def thinking_on_by_default(model: str) -> bool:
    """The seed's list of models that think unless told otherwise: ``-thinking`` names and
    Claude Opus 4.5 (a route overrides the lists with ``reasoning = "on"``)."""
    name = _name(model)
    return "-thinking" in name or (is_claude(model) and _OPUS_45.search(name) is not None)


def thinking_on(req: Request) -> bool:
    return req.thinking is not None and req.thinking.enabled


ThinkingPolicy = Literal["auto", "on"]
"""``auto``: the seed's lists decide which models think; ``on``: every model of the route does
(a route's ``reasoning = "on"``)."""


def apply_default_thinking(
    req: Request, notes: Notes, *, budget: int | None = None, policy: ThinkingPolicy = "auto"
) -> Request:
    """Thinking on for models that think by default (when the client said nothing), and the
    ``budget`` where thinking is on without one (not for adaptive thinking)."""
    if req.thinking is None:
        if policy != "on" and not thinking_on_by_default(req.model):
            return req
        notes[f"thinking on by default for {req.model}"] += 1
        return dataclasses.replace(req, thinking=ThinkingConfig(True, budget))
    t = req.thinking
    if budget is not None and t.enabled and t.budget_tokens is None and not t.adaptive:
        notes[f"thinking budget {budget} set"] += 1
        return dataclasses.replace(req, thinking=dataclasses.replace(t, budget_tokens=budget))
    return req


def check_thinking_support(req: Request, notes: Notes) -> Request:
    """Thinking not sent for a model the seed's list does not know to think
    (``model_supports_thinking``), on an upstream that checks thinking: it would be refused
    there. A route's ``reasoning = "on"`` skips this check."""
    if not thinking_on(req) or model_supports_thinking(req.model):
        return req
    notes[f"thinking not sent: {req.model} is not known to think"] += 1
    return dataclasses.replace(req, thinking=None)


def check_thinking_history(req: Request, notes: Notes) -> Request:
    """Thinking off for this request when the last assistant turn (the last run of assistant
    messages) called tools without any thinking: the upstream would refuse it."""
    if not thinking_on(req):
        return req
    turn: list[Message] = []
    for m in reversed(req.messages):
        if m.role == "assistant":
            turn.append(m)
        elif turn:
            break
    parts = [p for m in turn for p in m.parts]
    if any(isinstance(p, ToolCall) for p in parts) and not any(
        isinstance(p, Thinking) for p in parts
    ):
        notes["thinking off: the last assistant turn used tools without thinking"] += 1
        return dataclasses.replace(req, thinking=None)
    return req
