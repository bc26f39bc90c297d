"""The reasoning store's record format: what an answer turn left, and the keys it is found by.

Contract: plain values and JSON, no store and no I/O. ``addon.stream.capture`` writes records
as answers go by; ``addon.transforms.restore`` reads them back through a ``ReasoningLookup``.
Why one module: the writer and the reader agree on the format without knowing each other."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from addon.model import JSON, Thinking

KIND_CALL = "call"
"""A tool-call id the client sends back → the ``Record`` of the turn that made the call (its
thinking blocks, the call's own signature and extras, the turn's message extras)."""
KIND_TEXT = "text"
"""``text_key`` of the visible text of a turn without calls → its ``Record``."""
KIND_THINKING = "thinking"
"""``text_key`` of one signed thinking block's text → ``{"signature": …}``."""
KIND_LATEST = "latest"
"""``""`` → ``{"signature": …}``, the scope's latest valid signature (the seed's process-wide
fallback; "the seed": ``addon.transforms.thinking_policy``)."""


class ReasoningLookup(Protocol):
    """The reasoning store, bound to this flow's scope."""

    def get(self, kind: str, key: str) -> JSON | None: ...


@runtime_checkable
class BatchLookup(ReasoningLookup, Protocol):
    """A lookup that answers many keys at once (the store: one round trip to Redis for all
    of a request's call ids, where one ``get`` each would cost one round trip each)."""

    def get_many(self, keys: Sequence[tuple[str, str]]) -> list[JSON | None]:
        """The value of each ``(kind, key)``, in order: what ``get`` would give."""
        ...


KEY_LENGTH = 32
"""Hex digits of a text's key."""


def text_key(text: str) -> str:
    """The key of a text: SHA-256 of it with runs of whitespace made one space and the ends
    trimmed (clients re-flow and trim what they send back). ``addon.stream.capture.TextKey``
    computes the same key as a stream's text goes by."""
    norm = " ".join(text.split())
    return hashlib.sha256(norm.encode("utf-8", "surrogatepass")).hexdigest()[:KEY_LENGTH]


@dataclass(frozen=True, slots=True)
class Record:
    """What one answer turn left that its client may drop (JSON in the store)."""

    thinking: tuple[Thinking, ...] = ()
    """The turn's reasoning, in order: Anthropic thinking/redacted blocks, Responses reasoning
    items (signature = ``encrypted_content``, the item in ``extra``), reasoning_content."""
    signature: str | None = None
    """Gemini: the call's own ``thoughtSignature`` (or the trailing one of a text turn)."""
    call_extra: JSON = field(default_factory=dict)
    """Fields of the call a client drops (``extra_content`` of Google's OpenAI-compatible API)."""
    message_extra: JSON = field(default_factory=dict)
    """Fields of the assistant message a client drops (``reasoning_details``)."""

    def __bool__(self) -> bool:
        return bool(self.thinking or self.signature or self.call_extra or self.message_extra)

    def to_json(self) -> JSON:
        out: JSON = {}
        if self.thinking:
            out["thinking"] = [_thinking_json(t) for t in self.thinking]
        if self.signature:
            out["signature"] = self.signature
        if self.call_extra:
            out["call_extra"] = self.call_extra
        if self.message_extra:
            out["message_extra"] = self.message_extra
        return out

    @classmethod
    def from_json(cls, data: Any) -> Record | None:
        """Lenient: a value of another shape (an older version's) is None, not an error."""
        if not isinstance(data, dict):
            return None
        thinking: list[Thinking] = []
        for t in data.get("thinking") or ():
            if not isinstance(t, dict) or not isinstance(t.get("text"), str):
                continue
            sig, extra = t.get("signature"), t.get("extra")
            thinking.append(
                Thinking(
                    t["text"],
                    sig if isinstance(sig, str) and sig else None,
                    redacted=t.get("redacted") is True,
                    extra=extra if isinstance(extra, dict) else {},
                )
            )
        sig = data.get("signature")
        call_extra, message_extra = data.get("call_extra"), data.get("message_extra")
        return cls(
            tuple(thinking),
            sig if isinstance(sig, str) and sig else None,
            call_extra if isinstance(call_extra, dict) else {},
            message_extra if isinstance(message_extra, dict) else {},
        )


def _thinking_json(t: Thinking) -> JSON:
    out: JSON = {"text": t.text}
    if t.signature:
        out["signature"] = t.signature
    if t.redacted:
        out["redacted"] = True
    if t.extra:
        out["extra"] = t.extra
    return out
