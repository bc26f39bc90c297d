"""A signature that comes after the answer: kept from the client's view (unified → unified).

Contract: pure. A signature-only ``Thinking("", signature)`` after the text is not sent on to a
client of another dialect, unless a call follows it at once or it ends reasoning text. Why:
reasoning after the answer breaks the order clients read (``claude -p`` printed nothing). The
stream applies the same rule with ``addon.stream.stages.TrailingSignatureStage``."""

from __future__ import annotations

import dataclasses

from addon.model import Part, Response, Text, Thinking, ToolCall


def after_content(p: Part) -> bool:
    """A part that is visible content: text or a call."""
    return (isinstance(p, Text) and bool(p.text)) or isinstance(p, ToolCall)


def signature_only(p: Part) -> bool:
    """Reasoning that is a signature and nothing else."""
    return isinstance(p, Thinking) and not p.text and not p.redacted and bool(p.signature)


def drop_trailing_signatures(answer: Response) -> Response:
    """``answer`` without the signature-only reasoning parts the rule keeps from the client:
    Gemini 3's trailing empty text part with a ``thoughtSignature``, or a Responses reasoning
    item after the message, decoded to a ``Thinking("", signature)`` after the text. Kept when
    a call follows at once (``gemini.response.CALL_SIGNATURE``) or it ends reasoning text. The
    reasoning store has it all the same (``addon.stream.capture``,
    ``addon.transforms.restore``; docs/reasoning.md)."""
    parts: list[Part] = []
    seen = False
    for i, p in enumerate(answer.parts):
        if seen and signature_only(p):
            following = answer.parts[i + 1] if i + 1 < len(answer.parts) else None
            before = parts[-1] if parts else None
            if not isinstance(following, ToolCall) and not (
                isinstance(before, Thinking) and before.text
            ):
                continue
        seen = seen or after_content(p)
        parts.append(p)
    if len(parts) == len(answer.parts):
        return answer
    return dataclasses.replace(answer, parts=tuple(parts))
