"""Giving the upstream back what the client dropped (unified → unified), and the seed's
signature rules for thinking blocks a client does send ("the seed": ``thinking_policy``).

Contract: pure over ``addon.model`` values plus one lookup (``ReasoningLookup``: the store's
view for this flow's scope), after the client's decoder, before the upstream's encoder;
decisions go to ``notes``; a failing lookup is "nothing known", never a stopped request."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable
from typing import Literal

from addon.model import (
    JSON,
    Message,
    Notes,
    Part,
    ReasoningStyle,
    Request,
    TalliedNote,
    Tally,
    Text,
    Thinking,
    ToolCall,
)
from addon.transforms.reasoning_record import (
    KIND_CALL,
    KIND_LATEST,
    KIND_TEXT,
    KIND_THINKING,
    BatchLookup,
    ReasoningLookup,
    Record,
    text_key,
)
from addon.transforms.thinking_policy import (
    ThinkingPolicy,
    apply_default_thinking,
    check_thinking_history,
    check_thinking_support,
    is_claude,
    thinking_on,
)

MIN_SIGNATURE = 50
"""The seed's rule: shorter signatures are not real ones (placeholders clients make up)."""
GEMINI_SIGNATURE = "thoughtSignature"
"""Where a Gemini call's signature is kept in ``ToolCall.extra`` (mirrors
``addon.dialects.gemini.parts.SIGNATURE``: transforms do not import dialects)."""
SKIP_SIGNATURE = "skip_thought_signature_validator"
"""Mirrors ``addon.dialects.gemini.parts.SKIP_SIGNATURE``."""
SKIP_NOTE = "function calls without a thought signature marked to skip the check"
"""The same words as the Gemini encoder's note for the same decision."""
_OLD_GEMINI = re.compile(r"(?:models/)?gemini-[12][.-]")
"""Gemini 1.x / 2.x check no thought signatures (the Gemini encoder's rule)."""

type SignatureFallback = Literal["none", "sentinel"]
"""What a Gemini step gets when no signature is known: nothing, or Google's skip value."""

BY_CALL = "tool-call id"
BY_TEXT = "text hash"
BY_THINKING = "thinking hash"
BY_LATEST = "latest signature"


class _Safe:
    """The lookup with failures turned into "nothing known" (and remembered for a note)."""

    def __init__(self, lookup: ReasoningLookup | None) -> None:
        self.lookup = lookup
        self.error: str | None = None
        self._records: dict[tuple[str, str], Record | None] = {}
        self._fetched: dict[tuple[str, str], JSON | None] = {}

    def prefetch(self, keys: list[tuple[str, str]]) -> None:
        """Ask a lookup that can (``BatchLookup``) for ``keys`` at once; ``get`` then answers
        them from what came back."""
        if not keys or self.error is not None or not isinstance(self.lookup, BatchLookup):
            return
        try:
            values = self.lookup.get_many(keys)
        except Exception as e:  # as in ``get``
            self.error = f"{type(e).__name__}: {e}"[:200]
            return
        self._fetched.update(zip(keys, values, strict=True))

    def get(self, kind: str, key: str) -> JSON | None:
        if self.lookup is None or self.error is not None:
            return None
        if (kind, key) in self._fetched:
            return self._fetched[(kind, key)]
        try:
            return self.lookup.get(kind, key)
        except Exception as e:  # the store is below us: whatever it raises, the request goes
            self.error = f"{type(e).__name__}: {e}"[:200]
            return None

    def record(self, kind: str, key: str) -> Record | None:
        if (kind, key) not in self._records:
            self._records[(kind, key)] = Record.from_json(self.get(kind, key))
        return self._records[(kind, key)]

    def signature(self, kind: str, key: str) -> str | None:
        value = self.get(kind, key)
        sig = value.get("signature") if value is not None else None
        return sig if isinstance(sig, str) and sig else None

    def note(self, notes: Notes) -> None:
        if self.error is not None:
            notes[f"reasoning store unavailable ({self.error})"] += 1


def _note_counts(counts: Counter[str], notes: Notes, what: str) -> None:
    for kind in (BY_CALL, BY_TEXT, BY_THINKING, BY_LATEST):
        if counts[kind]:
            notes[TalliedNote(f"{what} by {kind}", Tally.RESTORE)] += counts[kind]


# --------------------------------------------------------------------------- helpers


def _visible(parts: tuple[Part, ...] | list[Part]) -> str:
    return "".join(p.text for p in parts if isinstance(p, Text))


def _calls(m: Message) -> list[ToolCall]:
    return [p for p in m.parts if isinstance(p, ToolCall)]


def call_signature(call: ToolCall) -> str | None:
    """A signature kept on a unified call (ours, or Google's OpenAI-compatible
    ``extra_content.google.thought_signature``): the Gemini encoder's ``signature_of``."""
    sig = call.extra.get(GEMINI_SIGNATURE)
    if isinstance(sig, str) and sig:
        return sig
    content = call.extra.get("extra_content")
    google = content.get("google") if isinstance(content, dict) else None
    sig = google.get("thought_signature") if isinstance(google, dict) else None
    return sig if isinstance(sig, str) and sig else None


def _replace_parts(m: Message, parts: list[Part] | tuple[Part, ...]) -> Message:
    return dataclasses.replace(m, parts=tuple(parts))


# --------------------------------------------------------------------------- restore


def restore_reasoning(
    req: Request,
    lookup: ReasoningLookup | None,
    upstream: ReasoningStyle,
    notes: Notes,
    *,
    signature_fallback: SignatureFallback = "none",
    origin: ReasoningStyle = "none",
) -> Request:
    """What the client dropped, back from the store, for an upstream of that reasoning style
    (``ReasoningStyle``, from the plan), never by its name: docs/reasoning.md ("How the store
    captures and restores"). ``origin``: the style of the dialect the request was written
    in (a request written for Gemini carries its own signatures)."""
    safe = _Safe(lookup)
    counts: Counter[str] = Counter()
    if upstream != "none" and not (upstream == "signed_blocks" and not thinking_on(req)):
        # Every call id of the history in one go (one round trip to a Redis store).
        safe.prefetch(
            [(KIND_CALL, c.id) for m in req.messages if m.role == "assistant" for c in _calls(m)]
        )
    if upstream == "signed_parts":
        messages = (
            req.messages
            if origin == "signed_parts"
            else _restore_gemini(req, safe, counts, signature_fallback, notes)
        )
    elif upstream == "signed_blocks":
        messages = (
            _restore_blocks(req.messages, safe, counts, _anthropic_block, text_turns=True)
            if thinking_on(req)
            else req.messages
        )
    elif upstream == "reasoning_items":
        messages = _restore_blocks(req.messages, safe, counts, _responses_item, text_turns=False)
    elif upstream == "reasoning_fields":
        messages = _restore_chat(req.messages, safe, counts)
    else:
        return req
    _note_counts(counts, notes, "reasoning restored from the store")
    safe.note(notes)
    if messages is req.messages:
        return req
    return dataclasses.replace(req, messages=messages)


def _anthropic_block(t: Thinking) -> bool:
    return bool(t.text) if t.redacted else t.signature is not None


def _responses_item(t: Thinking) -> bool:
    return not t.redacted and t.signature is not None


def _turn_record(
    m: Message, safe: _Safe, usable: Callable[[Thinking], bool], *, text_turns: bool
) -> tuple[tuple[Thinking, ...], str] | None:
    """The stored blocks of the turn ``m`` replays (those ``usable`` keeps), and the key kind
    that found them: by any of its call ids, else (a turn without calls) by its text."""
    calls = _calls(m)
    for call in calls:
        rec = safe.record(KIND_CALL, call.id)
        blocks = tuple(t for t in rec.thinking if usable(t)) if rec else ()
        if blocks:
            return blocks, BY_CALL
    if not calls and text_turns:
        text = _visible(m.parts)
        if text.strip():
            rec = safe.record(KIND_TEXT, text_key(text))
            blocks = tuple(t for t in rec.thinking if usable(t)) if rec else ()
            if blocks:
                return blocks, BY_TEXT
    return None


def _restore_blocks(
    messages: tuple[Message, ...],
    safe: _Safe,
    counts: Counter[str],
    usable: Callable[[Thinking], bool],
    *,
    text_turns: bool,
) -> tuple[Message, ...]:
    out: list[Message] = []
    changed = False
    for m in messages:
        if m.role == "assistant" and not any(isinstance(p, Thinking) for p in m.parts):
            found = _turn_record(m, safe, usable, text_turns=text_turns)
            if found is not None:
                blocks, kind = found
                m = _replace_parts(m, (*blocks, *m.parts))
                counts[kind] += 1
                changed = True
        out.append(m)
    return tuple(out) if changed else messages


def _restore_chat(
    messages: tuple[Message, ...], safe: _Safe, counts: Counter[str]
) -> tuple[Message, ...]:
    out: list[Message] = []
    changed = False
    for m in messages:
        calls = _calls(m) if m.role == "assistant" else []
        records = [r for c in calls if (r := safe.record(KIND_CALL, c.id))]
        if not records:
            out.append(m)
            continue
        parts = list(m.parts)
        restored = 0
        for k, p in enumerate(parts):  # each call's own extras (extra_content)
            rec = safe.record(KIND_CALL, p.id) if isinstance(p, ToolCall) else None
            if isinstance(p, ToolCall) and rec is not None:
                missing = {key: v for key, v in rec.call_extra.items() if key not in p.extra}
                if missing:
                    parts[k] = dataclasses.replace(p, extra={**p.extra, **missing})
                    restored += 1
        turn = False  # the turn's reasoning and message extras: one restore of the message
        if not any(isinstance(p, Thinking) and p.text for p in parts):
            blocks = next(
                (b for r in records if (b := [t for t in r.thinking if t.text and not t.redacted])),
                [],
            )
            if blocks:
                parts = [*blocks, *(p for p in parts if not isinstance(p, Thinking))]
                turn = True
        extra = m.extra
        message_extra = next((r.message_extra for r in records if r.message_extra), {})
        missing = {k: v for k, v in message_extra.items() if k not in extra}
        if missing:
            extra = {**extra, **missing}
            turn = True
        restored += turn
        if restored:
            counts[BY_CALL] += restored
            m = dataclasses.replace(m, parts=tuple(parts), extra=extra)
            changed = True
        out.append(m)
    return tuple(out) if changed else messages


def _steps(messages: list[Message]) -> list[list[int]]:
    """Runs of consecutive assistant messages: one Gemini model turn each."""
    steps: list[list[int]] = []
    run: list[int] = []
    for i, m in enumerate(messages):
        if m.role == "assistant":
            run.append(i)
        elif run:
            steps.append(run)
            run = []
    if run:
        steps.append(run)
    return steps


def _step_signed(messages: list[Message], step: list[int]) -> bool:
    """A call of the step carries a signature, or a signed thinking part comes before a call of
    its message (the Gemini encoder moves it onto that call)."""
    for i in step:
        seen_signed_thought = False
        for p in messages[i].parts:
            if isinstance(p, Thinking) and p.signature and not p.redacted:
                seen_signed_thought = True
            elif isinstance(p, ToolCall) and (seen_signed_thought or call_signature(p)):
                return True
    return False


def _text_signed(messages: list[Message], step: list[int]) -> bool:
    return any(
        (isinstance(p, Text) and isinstance(p.extra.get(GEMINI_SIGNATURE), str))
        or (isinstance(p, Thinking) and p.signature and not p.redacted)
        for i in step
        for p in messages[i].parts
    )


def _restore_gemini(
    req: Request,
    safe: _Safe,
    counts: Counter[str],
    fallback: SignatureFallback,
    notes: Notes,
) -> tuple[Message, ...]:
    sentinel = fallback == "sentinel" and not _OLD_GEMINI.match(req.model)
    messages = list(req.messages)
    changed = False
    for step in _steps(messages):
        calls = [
            (i, k, p)
            for i in step
            for k, p in enumerate(messages[i].parts)
            if isinstance(p, ToolCall)
        ]
        if not calls:
            if _text_signed(messages, step):
                continue
            text = "".join(_visible(messages[i].parts) for i in step)
            rec = safe.record(KIND_TEXT, text_key(text)) if text.strip() else None
            if rec is not None and rec.signature:
                last = messages[step[-1]]
                trailing = Text("", extra={GEMINI_SIGNATURE: rec.signature})
                messages[step[-1]] = _replace_parts(last, (*last.parts, trailing))
                counts[BY_TEXT] += 1
                changed = True
            continue
        if _step_signed(messages, step):
            continue
        restored = 0
        for i, k, call in calls:
            rec = safe.record(KIND_CALL, call.id)
            if rec is not None and rec.signature:
                signed = dataclasses.replace(
                    call, extra={**call.extra, GEMINI_SIGNATURE: rec.signature}
                )
                messages[i] = _replace_parts(
                    messages[i], (*messages[i].parts[:k], signed, *messages[i].parts[k + 1 :])
                )
                restored += 1
        if restored:
            counts[BY_CALL] += restored
            changed = True
        elif sentinel:
            i, k, call = calls[0]
            marked = dataclasses.replace(
                call, extra={**call.extra, GEMINI_SIGNATURE: SKIP_SIGNATURE}
            )
            messages[i] = _replace_parts(
                messages[i], (*messages[i].parts[:k], marked, *messages[i].parts[k + 1 :])
            )
            notes[SKIP_NOTE] += 1
            changed = True
    return tuple(messages) if changed else req.messages


# --------------------------------------------------------------------------- signature rules


def signature_valid(t: Thinking) -> bool:
    """The seed's rule for a thinking block's signature ("the seed": ``thinking_policy``)."""
    if t.redacted:
        return bool(t.text)
    if not t.text:
        return t.signature is not None
    return t.signature is not None and len(t.signature) >= MIN_SIGNATURE


def apply_signature_rules(req: Request, lookup: ReasoningLookup | None, notes: Notes) -> Request:
    """Thinking blocks the client sent with a missing or invalid signature: repaired from the
    store, else sent as text; empty ones dropped (the seed's rules)."""
    safe = _Safe(lookup)
    counts: Counter[str] = Counter()
    out: list[Message] = []
    changed = False
    for m in req.messages:
        if m.role == "assistant" and any(
            isinstance(p, Thinking) and not signature_valid(p) for p in m.parts
        ):
            m = _repair(m, safe, counts, notes)
            changed = True
        out.append(m)
    _note_counts(counts, notes, "thinking signature repaired from the store")
    safe.note(notes)
    return dataclasses.replace(req, messages=tuple(out)) if changed else req


def _repair(m: Message, safe: _Safe, counts: Counter[str], notes: Notes) -> Message:
    parts: list[Part] = []
    for p in m.parts:
        if isinstance(p, Thinking) and not p.text and not signature_valid(p):
            notes["empty thinking block without a signature dropped"] += 1
            continue
        parts.append(p)
    if all(signature_valid(p) for p in parts if isinstance(p, Thinking)):
        return _replace_parts(m, parts)
    # The turn's own blocks, by tool-call id (or by its text for a turn without calls).
    found = _turn_record(_replace_parts(m, parts), safe, _anthropic_block, text_turns=False)
    if found is not None:
        blocks, kind = found
        counts[kind] += 1
        return _replace_parts(m, _swap_thinking(parts, blocks))
    fixed: list[Part] = []
    for p in parts:
        if not isinstance(p, Thinking) or signature_valid(p):
            fixed.append(p)
            continue
        sig = safe.signature(KIND_THINKING, text_key(p.text))
        if sig is not None:
            counts[BY_THINKING] += 1
            fixed.append(dataclasses.replace(p, signature=sig))
            continue
        if not _calls(m):
            text = _visible(parts)
            rec = safe.record(KIND_TEXT, text_key(text)) if text.strip() else None
            blocks = tuple(t for t in rec.thinking if _anthropic_block(t)) if rec else ()
            if blocks:
                counts[BY_TEXT] += 1
                return _replace_parts(m, _swap_thinking(parts, blocks))
        sig = safe.signature(KIND_LATEST, "")
        if sig is not None:
            counts[BY_LATEST] += 1
            fixed.append(dataclasses.replace(p, signature=sig, redacted=False))
            continue
        notes["thinking without a valid signature sent as text"] += 1
        fixed.append(Text(p.text))
    return _replace_parts(m, fixed)


def _swap_thinking(parts: list[Part], blocks: tuple[Thinking, ...]) -> list[Part]:
    """``parts`` with their thinking replaced by ``blocks``, where the first thinking was."""
    at = next((k for k, p in enumerate(parts) if isinstance(p, Thinking)), 0)
    rest = [p for p in parts if not isinstance(p, Thinking)]
    at = min(at, len(rest))
    return [*rest[:at], *blocks, *rest[at:]]


def needs_signed_thinking(upstream: ReasoningStyle, model: str) -> bool:
    """Upstreams that check thinking signatures and want a tool turn to start with thinking:
    Anthropic's (signed blocks), and Claude models behind a Gemini dialect (Code Assist /
    Antigravity: signed parts)."""
    return upstream == "signed_blocks" or (upstream == "signed_parts" and is_claude(model))


# --------------------------------------------------------------------------- all of it


def restore_request(
    req: Request,
    lookup: ReasoningLookup | None,
    upstream: ReasoningStyle,
    notes: Notes,
    *,
    signature_fallback: SignatureFallback = "none",
    origin: ReasoningStyle = "none",
    thinking_budget: int | None = None,
    default_thinking: bool = True,
    policy: ThinkingPolicy = "auto",
) -> Request:
    """Default thinking (unless ``default_thinking`` is False, e.g. a route with
    ``reasoning = "off"``), restore from the store, the signature rules and the history check
    (the last two where ``needs_signed_thinking``). ``lookup`` None: no store (the sentinel and
    the rules still apply, without repairs)."""
    if default_thinking:
        req = apply_default_thinking(req, notes, budget=thinking_budget, policy=policy)
    req = restore_reasoning(
        req, lookup, upstream, notes, signature_fallback=signature_fallback, origin=origin
    )
    if needs_signed_thinking(upstream, req.model):
        if policy == "auto":
            req = check_thinking_support(req, notes)
        req = apply_signature_rules(req, lookup, notes)
        req = check_thinking_history(req, notes)
    return req
