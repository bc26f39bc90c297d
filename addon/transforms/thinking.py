"""Thinking policy for upstreams reached through a ``-thinking`` model name (unified → unified).

Contract: pure. When thinking is on for a model that has no reasoning switch of its own, the
system prompt gets the thinking rule and the last user message with text of its own a short
hint; the answer's ``<thinking>`` / ``<think>`` blocks are turned into reasoning by
``addon.textproto.parser``."""

from __future__ import annotations

import dataclasses

from addon.model import ClientError, Notes, Request
from addon.transforms.prompt import append_system, append_to_last_user

THINKING_SUFFIX = "-thinking"
THINKING_RULE = (
    "Before answering, you may reason privately inside <thinking>...</thinking> at the start of "
    "your reply. Everything outside the tags is your visible answer."
)
THINKING_HINT = (
    "Use <thinking>...</thinking> for hidden reasoning when it helps. "
    "Keep your final visible answer outside the thinking tags."
)


def resolve_model(model: str, catalogue: tuple[str, ...]) -> tuple[str, bool]:
    """``BASE-thinking`` → ``(BASE, True)`` for a base model in the catalogue.

    Raises ``ClientError`` for ``X-thinking-thinking`` and for a derived name whose base is
    not in the catalogue. Without a catalogue every name passes unchanged (a real upstream
    model may well end in ``-thinking``).
    """
    if not catalogue or not model.endswith(THINKING_SUFFIX):
        return model, False
    base = model[: -len(THINKING_SUFFIX)]
    if base.endswith(THINKING_SUFFIX):
        raise ClientError(
            f"model '{model}' does not exist: thinking variants are named BASE-thinking, once",
            param="model",
            code="model_not_found",
            status=400,
        )
    if base in catalogue:
        return base, True
    if model in catalogue:
        return model, False
    raise ClientError(
        f"model '{model}' does not exist: '{base}' is not one of the configured models "
        f"({', '.join(catalogue)})",
        param="model",
        code="model_not_found",
    )


def catalogue_models(catalogue: tuple[str, ...]) -> list[str]:
    """Every base model and its ``-thinking`` variant, in catalogue order."""
    out: list[str] = []
    for base in catalogue:
        out.append(base)
        if not base.endswith(THINKING_SUFFIX):
            out.append(base + THINKING_SUFFIX)
    return out


def apply_thinking_prompt(req: Request, notes: Notes) -> Request:
    """The thinking rule on the system prompt, the hint on the last user message with text of
    its own (``prompt.append_to_last_user``): never a message of tool results only, where a
    new text part reads as a new request and makes the model start over, and once per
    request, not on every turn of the history."""
    notes["thinking prompt added"] += 1
    messages = append_to_last_user(append_system(req.messages, THINKING_RULE), THINKING_HINT)
    # The prompt takes the place of a reasoning switch the model does not have: none is sent.
    return dataclasses.replace(req, messages=messages, thinking=None)
