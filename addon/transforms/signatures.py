"""A signature that comes after the answer: kept from the client's view (unified → unified).

Contract: pure. Gemini 3 ends a turn with an empty text part that carries a
``thoughtSignature`` (``gemini-api-stream-text-trailing-thoughtSignature-gemini3``); a
Responses upstream may send an encrypted reasoning item after its message. Decoded, that is a
signature-only ``Thinking("", signature)`` after the text. A client of another dialect would
get it as a reasoning block after its answer (Anthropic: thinking, text, thinking), out of the
order those APIs write (reasoning before what it led to): ``claude -p`` then prints an empty
result. The rule, for every client dialect other than the upstream's:

- a signature-only reasoning part after visible content (text or a call) is not sent on,
  unless a call follows it at once (a call's signature goes just before its call:
  ``gemini.response.CALL_SIGNATURE``) or it ends reasoning text (an Anthropic upstream's
  interleaved thinking block ends with its ``signature_delta``);
- the reasoning store has it all the same: it captures the upstream's answer before this
  (``addon.stream.capture``), and gives the signature back by the text's hash when the
  client sends that answer back (``addon.transforms.restore``).

The stream applies the same rule with ``addon.stream.stages.TrailingSignatureStage``.
"""

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
    """``answer`` without the signature-only reasoning parts the rule keeps from the client."""
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
