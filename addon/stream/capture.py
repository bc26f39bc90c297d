"""The reasoning store's capture: what an upstream's answer holds that a client may drop, written
to the store as it goes by (``CaptureStage``; ``capture_response`` for a whole answer).

Contract: sans-IO; events pass unchanged; ``Record``s go through a ``Sink`` chosen by the
upstream's ``ReasoningStyle``, never its name (docs/reasoning.md). A failure of its own stops
recording, never the stream: the answer matters more than what a later turn may restore."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from addon.dialects import ANTHROPIC, OPENAI_RESPONSES
from addon.dialects.gemini.response import CALL_SIGNATURE, call_signature
from addon.model import (
    JSON,
    Event,
    Finish,
    MessageStart,
    RawEvent,
    ReasoningStyle,
    Response,
    StreamEnd,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallStart,
)
from addon.stream.stages import TextLane
from addon.transforms.reasoning_record import (
    KEY_LENGTH,
    KIND_CALL,
    KIND_LATEST,
    KIND_TEXT,
    KIND_THINKING,
    Record,
    text_key,
)
from addon.transforms.restore import MIN_SIGNATURE

_SIGNED: frozenset[ReasoningStyle] = frozenset({"signed_blocks", "signed_parts"})
"""Where thinking hashes and the latest signature are kept: the upstreams whose signatures the
signature rules repair (``addon.transforms.restore.needs_signed_thinking``)."""
_GEMINI_MARK = next(iter(CALL_SIGNATURE))
"""The dialect key of the Gemini decoders' markers in ``extra``."""
_STRING_PIECES = ("text", "summary", "data", "signature")
"""``reasoning_details`` fields whose streamed pieces are joined."""
FOLD_PIECES = 256
"""A turn keeps at most this many pieces of its visible text (or of a thinking block) apart:
then they are folded (``TextKey.fold``; a thinking block's joined into one), so that a stream
of many small deltas costs O(1) objects per this many, not one each. (Measured, 8,000 text
deltas of 8 characters: 389 KiB kept as one bytes object each, 10 KiB compacted.)"""
FOLD_BYTES = 64 * 1024
"""Visible text kept before it is hashed (``TextKey``)."""


class Sink(Protocol):
    """The reasoning store, bound to this flow's scope."""

    def put(self, kind: str, key: str, value: JSON) -> None: ...


class TextKey:
    """The key of a turn's visible text (``addon.transforms.restore.text_key``: SHA-256 of the
    text with runs of whitespace made one space and the ends trimmed) in bounded memory: the
    text is kept as it comes — a plain text's JSON string appended to ``plain`` by the text
    lane (``CaptureStage.text_sink`` is ``plain.extend``: no Python call of ours per event),
    any other text to ``pieces`` — and compacted as it goes: a run of ``plain`` becomes one
    piece at the next other text, every ``FOLD_PIECES`` pieces become one, and past
    ``FOLD_BYTES`` characters what is kept is hashed (its words; whether the last one goes on
    in the next text is remembered) and let go. A turn that never needs its key (no record
    to write) never hashes less than ``FOLD_BYTES``, as before.

    A stream whose every text is plain keeps its run in ``plain`` until the turn ends: one
    object, about a byte a character (plus the quotes)."""

    __slots__ = ("_hash", "_held", "_in_word", "_words", "chunks", "pieces", "plain")

    def __init__(self) -> None:
        self.plain = bytearray()
        """The latest run of plain texts, as their JSON strings (printable ASCII without a
        backslash or a quote inside, quotes included)."""
        self.pieces: list[str] = []
        """Texts since the last compaction, in order."""
        self.chunks: list[str] = []
        """Compacted runs of pieces not yet hashed, in order."""
        self._held = 0
        """Characters in ``chunks``."""
        self._hash: Any = None
        self._words = False
        """A word was hashed: the next one is preceded by a space."""
        self._in_word = False
        """The text hashed so far ends inside a word (no whitespace after it yet)."""

    def add(self, text: str) -> None:
        """A text after the ones added so far (``CaptureStage.take_text`` inlines this)."""
        if self.plain:
            self.take_plain()
        pieces = self.pieces
        pieces.append(text)
        if len(pieces) >= FOLD_PIECES:
            self.compact()

    def take_plain(self) -> None:
        """The run of plain texts in ``plain`` becomes one piece."""
        self.pieces.append(self.plain.decode("ascii").replace('"', ""))
        self.plain.clear()

    def compact(self) -> None:
        """``pieces`` become one chunk; past ``FOLD_BYTES`` characters the chunks are hashed."""
        run = "".join(self.pieces)
        self.pieces.clear()
        self.chunks.append(run)
        self._held += len(run)
        if self._held >= FOLD_BYTES:
            self._fold()

    def _fold(self) -> None:
        text = "".join(self.chunks)
        self.chunks.clear()
        self._held = 0
        if not text:
            return
        words = text.split()
        if words:
            joined = " ".join(words)
            if self._words and not (self._in_word and not text[0].isspace()):
                joined = " " + joined
            if self._hash is None:
                self._hash = hashlib.sha256()
            self._hash.update(joined.encode("utf-8", "surrogatepass"))
            self._words = True
        self._in_word = not text[-1].isspace()

    def key(self) -> str | None:
        """The text's key; None when it is empty or only whitespace."""
        if self.plain:
            self.take_plain()
        if self.pieces:
            self.compact()
        self._fold()
        return str(self._hash.hexdigest()[:KEY_LENGTH]) if self._words else None


@dataclass(slots=True)
class _Block:
    """A thinking block of the answer, as far as it came."""

    texts: list[str] = field(default_factory=list)
    """Its deltas' texts (or folded runs of them: ``packed``)."""
    signature: str | None = None
    """Its signature, once the upstream gave it."""
    redacted: bool = False
    """A redacted block: its ``signature`` is the whole of it."""
    extra: JSON = field(default_factory=dict)
    """The upstream's wire extras for it, kept for a client of its dialect."""
    item: str | None = None
    """The Responses item id it belongs to, when known."""
    packed: int = 0
    """How many of ``texts`` are folded runs of ``FOLD_PIECES`` deltas."""

    def part(self) -> Thinking:
        return Thinking("".join(self.texts), self.signature, self.redacted, self.extra)

    def empty(self) -> bool:
        return not self.signature and not any(self.texts)


@dataclass(slots=True)
class _Call:
    """A tool call of the answer, as the reasoning store keys it."""

    id: str
    """Its id, as the client gets it (after the call-id rename)."""
    signature: str | None
    """The thought signature that goes with it (Gemini), if any."""
    extra: JSON
    """The wire extras a client may drop and the upstream needs back (``extra_content``)."""


class TurnRecorder:
    """One answer turn, from events or parts; ``flush`` writes its records and starts over."""

    def __init__(self) -> None:
        self.style: ReasoningStyle = "none"
        """The upstream's reasoning style, from the turn's start (``start``)."""
        self._reset()

    def _reset(self) -> None:
        self.blocks: list[_Block] = []
        self.open: _Block | None = None
        self.visible = TextKey()
        """The turn's visible text, as its key (``CaptureStage.text_sink`` feeds it too)."""
        self.calls: list[_Call] = []
        self.carried: str | None = None
        """Gemini: a signed thought's signature, for the next call without one."""
        self.trailing: str | None = None
        """Gemini: the signature of a text part or of the trailing empty part."""
        self.details: list[JSON] = []
        self.message_extra: JSON = {}
        self.latest: str | None = None
        self.seen = False

    @property
    def gemini(self) -> bool:
        return self.style == "signed_parts"

    # ------------------------------------------------------------------ what comes in

    def start(self, style: ReasoningStyle) -> None:
        self.style = style

    def thinking(self, text: str, signature: str | None, extra: JSON) -> None:
        """A piece of reasoning: text and/or a signature; ``extra`` already in the form the
        upstream's request encoder reads (see ``_block_extra``)."""
        if self.gemini:
            own = extra.get(_GEMINI_MARK)
            own = own if isinstance(own, dict) else {}
            if own.get("call_signature"):
                return  # the call's copy: the call itself has it
            if signature and (not text or own.get("signature_on") == "next"):
                # A text part's signature (or the trailing part's): the turn's, and the next
                # unsigned call's (the Gemini request encoder moves it there).
                self.trailing = self.carried = self.latest = signature
                self.seen = True
                if text:
                    self._text_block(text, {})
                return
            extra = {}
        item = (
            extra.get(OPENAI_RESPONSES, {}).get("id") if self.style == "reasoning_items" else None
        )
        if self.open is not None and item and self.open.item and item != self.open.item:
            self.close_block()
        if text:
            self._text_block(text, extra)
        if signature:
            if self.open is None:
                self.open = _Block(extra=extra)
            self.open.signature = signature
            if extra:  # the event that completes a block carries its whole item (Responses)
                self.open.extra = extra
            self.latest = signature
            if self.gemini:
                self.carried = signature
        if self.open is not None and item:
            self.open.item = item
        self.seen = True

    def _text_block(self, text: str, extra: JSON) -> None:
        b = self.open
        if b is None or b.signature is not None or b.redacted:
            self.close_block()
            b = self.open = _Block(extra=extra)
        texts = b.texts
        texts.append(text)
        if len(texts) >= b.packed + FOLD_PIECES:  # O(1) objects per FOLD_PIECES deltas
            texts[b.packed :] = ["".join(texts[b.packed :])]
            b.packed += 1
        if extra and not b.extra:
            b.extra = extra

    def redacted(self, data: str, extra: JSON) -> None:
        self.close_block()
        if data:
            self.blocks.append(_Block([data], redacted=True, extra=extra))
            self.seen = True

    def close_block(self) -> None:
        if self.open is not None:
            if not self.open.empty():
                self.blocks.append(self.open)
            self.open = None

    def text(self, text: str) -> None:
        if text:
            self.close_block()
            self.visible.add(text)
            self.seen = True

    def call(self, call_id: str, extra: JSON) -> None:
        self.close_block()
        sig = call_signature(extra)
        if self.gemini and sig is None and self.carried is not None:
            sig = self.carried
        if self.gemini:
            self.carried = None
        kept: JSON = {}
        if self.style == "reasoning_fields" and isinstance(extra.get("extra_content"), dict):
            kept["extra_content"] = extra["extra_content"]
        if sig:
            self.latest = sig
        self.calls.append(_Call(call_id, sig, kept))
        self.seen = True

    def reasoning_details(self, items: Any) -> None:
        if isinstance(items, list) and items:
            merge_details(self.details, items)
            self.seen = True

    # ------------------------------------------------------------------ what goes out

    def flush(self, sink: Sink) -> None:
        """Write the turn's records (nothing when it left nothing to restore); start over."""
        self.close_block()
        if not self.seen:
            self._reset()
            return
        try:
            self._write(sink)
        finally:
            self._reset()

    def _write(self, sink: Sink) -> None:
        # Gemini's thought texts are not restored (only signatures are): not kept.
        thinking = () if self.gemini else tuple(b.part() for b in self.blocks)
        message_extra = dict(self.message_extra)
        if self.details:
            message_extra["reasoning_details"] = self.details
        for c in self.calls:
            rec = Record(thinking, c.signature if self.gemini else None, c.extra, message_extra)
            if rec and c.id:
                sink.put(KIND_CALL, c.id, rec.to_json())
        if not self.calls:
            rec = Record(thinking, self.trailing, {}, message_extra)
            key = self.visible.key() if rec else None
            if key is not None:
                sink.put(KIND_TEXT, key, rec.to_json())
        if self.style in _SIGNED:
            for b in self.blocks:
                text = "".join(b.texts)
                if text and b.signature and not b.redacted:
                    sink.put(KIND_THINKING, text_key(text), {"signature": b.signature})
            if self.latest is not None and len(self.latest) >= MIN_SIGNATURE:
                sink.put(KIND_LATEST, "", {"signature": self.latest})


def merge_details(acc: list[JSON], items: list[Any]) -> None:
    """OpenRouter's streamed ``reasoning_details``: a piece with the ``index`` and ``type`` of
    one already seen continues it (its string fields joined, others replaced when not null);
    any other piece is a new detail."""
    for item in items:
        if not isinstance(item, dict):
            continue
        index, kind = item.get("index"), item.get("type")
        target = next(
            (
                a
                for a in acc
                if index is not None and a.get("index") == index and a.get("type") == kind
            ),
            None,
        )
        if target is None:
            acc.append(dict(item))
            continue
        for k, v in item.items():
            old = target.get(k)
            if k in _STRING_PIECES and isinstance(v, str) and isinstance(old, str):
                target[k] = old + v
            elif v is not None:
                target[k] = v


# --------------------------------------------------------------------------- streams


def _stream_extra(style: ReasoningStyle, extra: JSON) -> JSON:
    """A ``ThinkingDelta``'s extra → what the upstream's request encoder reads on a
    ``Thinking``: Anthropic's unknown block fields flat; Responses' item without
    ``encrypted_content``; the OpenAI field name; Gemini's markers (read, then dropped)."""
    match style:
        case "signed_blocks":
            own = extra.get(ANTHROPIC)
            block = own.get("block") if isinstance(own, dict) else None
            return dict(block) if isinstance(block, dict) else {}
        case "reasoning_items":
            own = extra.get(OPENAI_RESPONSES)
            own = own if isinstance(own, dict) else {}
            item = own.get("item")
            if isinstance(item, dict):
                return {
                    OPENAI_RESPONSES: {k: v for k, v in item.items() if k != "encrypted_content"}
                }
            item_id = own.get("item_id")
            return {OPENAI_RESPONSES: {"id": item_id}} if isinstance(item_id, str) else {}
        case "reasoning_fields":
            field_name = extra.get("field")
            return {"field": field_name} if isinstance(field_name, str) else {}
        case _:
            own = extra.get(_GEMINI_MARK)
            return {_GEMINI_MARK: own} if isinstance(own, dict) else {}


def _wire_details(extra: JSON) -> Any:
    wire = extra.get("wire")
    delta = wire.get("delta") if isinstance(wire, dict) else None
    return delta.get("reasoning_details") if isinstance(delta, dict) else None


class CaptureStage:
    """A stream stage: every event through, unchanged; the turn recorded through ``sink``.
    It comes right after the call-id rename (``CallIdStage``): calls are recorded under the ids
    the client gets. A failure of its own stops recording (``error``), for the shell to log."""

    def __init__(self, sink: Sink, style: ReasoningStyle) -> None:
        self.sink = sink
        self.style = style
        """The upstream's reasoning style (``Dialect.reasoning``): what its events carry."""
        self.turn = TurnRecorder()
        self.error: str | None = None
        """Why recording stopped (the stream itself is never touched)."""
        self.text_sink: Callable[[bytes], None] | None = None
        """While text follows text: where the next plain text goes, as its JSON string
        (``TextLane``): the turn's ``TextKey.plain``."""
        self.text_lane: TextLane | None = self
        """Its own ``take_text`` and ``text_sink``."""
        self.changes_bytes = False  # records, never changes

    def feed(self, event: Event) -> list[Event]:
        self.text_sink = None
        if self.error is None:
            try:
                self._see(event)
            except Exception as e:  # never break a stream over what we only remember
                self.error = f"{type(e).__name__}: {e}"[:300]
        return [event]

    def take_text(self, text: str) -> bool:
        """A plain text delta (the text lane, ``Stage``): recorded as ``feed`` would."""
        turn = self.turn
        if self.error is None:
            if turn.open is None:  # text after text (``TurnRecorder.text``, inlined)
                visible = turn.visible  # ``TextKey.add``, inlined
                if visible.plain:
                    visible.take_plain()
                pieces = visible.pieces
                pieces.append(text)
                if len(pieces) >= FOLD_PIECES:
                    visible.compact()
                turn.seen = True
            else:
                try:
                    turn.text(text)
                except Exception as e:  # never break a stream over what we only remember
                    self.error = f"{type(e).__name__}: {e}"[:300]
                    return True
            if self.text_sink is None:
                self.text_sink = turn.visible.plain.extend
        return True

    def finish(self) -> list[Event]:
        self.text_sink = None
        if self.error is None:
            try:
                self.turn.flush(self.sink)
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"[:300]
        return []

    def _see(self, event: Event) -> None:
        turn = self.turn
        if isinstance(event, MessageStart):
            if turn.seen:
                turn.flush(self.sink)
            turn.start(self.style)
        extra = getattr(event, "extra", None)
        if turn.style == "reasoning_fields" and isinstance(extra, dict) and "wire" in extra:
            turn.reasoning_details(_wire_details(extra))
        match event:
            case ThinkingDelta():
                turn.thinking(event.text, event.signature, _stream_extra(turn.style, event.extra))
            case TextDelta():
                turn.text(event.text)
            case ToolCallStart():
                turn.call(event.id, event.extra)
            case RawEvent():
                self._raw(event)
            case Finish() | StreamEnd():
                turn.flush(self.sink)
            case _:
                pass

    def _raw(self, event: RawEvent) -> None:
        data = event.data
        if self.style == "signed_blocks":
            kind = data.get("type")
            block = data.get("content_block")
            if kind == "content_block_start" and isinstance(block, dict):
                if block.get("type") == "redacted_thinking" and isinstance(block.get("data"), str):
                    rest = {k: v for k, v in block.items() if k not in ("type", "data")}
                    self.turn.redacted(block["data"], rest)
                else:
                    self.turn.close_block()
            elif kind == "content_block_stop":
                self.turn.close_block()
        elif self.style == "reasoning_fields":
            choices = data.get("choices")
            first = choices[0] if isinstance(choices, list) and choices else None
            delta = first.get("delta") if isinstance(first, dict) else None
            if isinstance(delta, dict):
                self.turn.reasoning_details(delta.get("reasoning_details"))


# --------------------------------------------------------------------------- whole answers


def capture_response(answer: Response, sink: Sink, style: ReasoningStyle) -> None:
    """The same records from a whole answer (``addon.plan.answer.decode_answer``'s, before
    filters) of an upstream of that reasoning ``style``. Raises what the sink raises
    (``StoreError``): the caller logs it and goes on."""
    turn = TurnRecorder()
    turn.start(style)
    for p in answer.parts:
        match p:
            case Thinking(redacted=True):
                turn.redacted(p.text, dict(p.extra))
            case Thinking():
                turn.thinking(p.text, p.signature, _whole_extra(style, p.extra))
                if style != "signed_parts":
                    turn.close_block()  # each part is one whole block / item
            case Text():
                turn.text(p.text)
            case ToolCall():
                turn.call(p.id, p.extra)
            case _:
                pass
    if style == "reasoning_fields":
        message = answer.extra.get("message")
        message = message if isinstance(message, dict) else {}
        reasoning = message.get("reasoning")
        # The whole-answer decoder reads only ``reasoning_content`` into a part.
        if (
            isinstance(reasoning, str)
            and reasoning
            and not any(isinstance(p, Thinking) for p in answer.parts)
        ):
            turn.thinking(reasoning, None, {"field": "reasoning"})
        turn.reasoning_details(message.get("reasoning_details"))
    turn.flush(sink)


def _whole_extra(style: ReasoningStyle, extra: JSON) -> JSON:
    """A whole answer's ``Thinking.extra`` is already what the request encoders read, except
    Gemini's markers (kept for ``TurnRecorder.thinking`` to read)."""
    if style == "signed_parts":
        own = extra.get(_GEMINI_MARK)
        return {_GEMINI_MARK: own} if isinstance(own, dict) else {}
    return dict(extra)
