"""The fast path's door: what a dialect or stage offers it, and what one stream may take.

Glossary. A **lane** is a way of reading that skips part of the general path: the **skip
lane** passes events nobody reads as their bytes; the **text lane** takes plain text past the
line and event decoders and past the stages that only need to see it (``addon.stream.lanes``
holds them). What a decoder, an encoder or a stage offers is declared, never probed: its
``fast_path`` (``DecoderFastPath``, ``EncoderFastPath``) or ``text_lane`` (``TextLane``, or
``PASSES_TEXT``), None when it offers nothing; ``FastPath.of`` gathers one stream's, once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from addon.dialects.base import DecoderFastPath, EncoderFastPath


class TextLane(Protocol):
    """What a stage offers the text lane.

    ``take_text(text) -> bool``: True when the stage took a plain text delta as ``feed``
    would and passes it on unchanged, False (nothing done) when it must be fed the event.
    ``text_sink``: None, or a function that takes a plain text as its JSON string (printable
    ASCII without a backslash, quotes included) as ``take_text`` would (False: not taken,
    nothing done); it stays valid until the stage's next ``feed``, ``take_text`` or
    ``finish``, which sets it anew."""

    def take_text(self, text: str) -> bool: ...
    @property
    def text_sink(self) -> Callable[[bytes], bool | None] | None: ...


class _PassesText:
    """The lane of a stage whose ``feed`` returns a plain ``TextDelta`` unchanged and records
    nothing: it need not see plain text at all."""

    text_sink: None = None

    def take_text(self, text: str) -> bool:
        return True


PASSES_TEXT: TextLane = _PassesText()
"""A stage's ``text_lane`` when plain text passes it untouched (the lane leaves it out)."""


def _no_text_sink(quoted: bytes) -> None:
    pass


class _Nobody:
    """No stage must see a plain text: nothing to record it in (a ``text_sink`` that takes
    every text)."""

    text_sink = staticmethod(_no_text_sink)

    def take_text(self, text: str) -> bool:
        return True


NOBODY: TextLane = _Nobody()
"""The keeper of a text lane no stage must see: it takes every text and records nothing."""

type LaneStages = tuple[tuple[int, Callable[[str], bool], TextLane], ...]
"""(stage index, ``take_text``, lane) of each stage a plain text delta must be shown to."""


def lane_stages(offers: Sequence[TextLane | None]) -> LaneStages | None:
    """The stages a plain text delta must be shown to (from each stage's ``text_lane``), or
    None: some stage must be fed every event."""
    lane: list[tuple[int, Callable[[str], bool], TextLane]] = []
    for i, offer in enumerate(offers):
        if offer is None:
            return None
        if offer is not PASSES_TEXT:
            lane.append((i, offer.take_text, offer))
    return tuple(lane)


@dataclass(frozen=True, slots=True)
class FastPath:
    """What one stream's fast path may take, fixed when the stream starts (``FastPath.of``).

    ``skippable``: an event nobody reads goes out as the upstream's bytes (``raw_ok``: same
    dialect, SSE both ways, no stage changes events; the general path uses it too).
    ``skip_run`` / ``text_run``: a read of whole events nobody reads (how many) / of plain text
    (joined, how many; with ``coalesce``). ``decoder``: the decoder's offer when one of them is
    set; ``stages``: who must see a plain text (None: some stage sees every event);
    ``encoder`` / ``text_sse``: the encoder's offer (SSE out). ``track``: reads of one whole
    event may skip the line and event decoders (no decompressor, and a lane to take)."""

    skippable: Callable[[str], bool] | None = None
    skip_run: Callable[[bytes], int] | None = None
    text_run: Callable[[bytes], tuple[str, int] | None] | None = None
    decoder: DecoderFastPath | None = None
    stages: LaneStages | None = None
    encoder: EncoderFastPath | None = None
    text_sse: Callable[[str | None, bytes | None], bytes | None] | None = None
    track: bool = False

    @classmethod
    def of(
        cls,
        decoder: DecoderFastPath | None,
        encoder: EncoderFastPath | None,
        stages: Sequence[TextLane | None],
        *,
        fast: bool,
        raw_ok: bool,
        coalesce: bool,
        sse_in: bool,
        sse_out: bool,
        raw_bytes: bool,
    ) -> FastPath:
        """From what the decoder, the encoder and each stage (its ``text_lane``) offer; with
        ``fast`` False only what the general path uses (``skippable``). ``raw_ok``: the plan's,
        on a same-dialect stream; ``raw_bytes``: no decompressor."""
        skippable = (
            decoder.skippable if decoder is not None and raw_ok and sse_in and sse_out else None
        )
        if not fast:
            return cls(skippable=skippable)
        skip_run = decoder.skippable_run if decoder is not None and skippable is not None else None
        text_run = (
            decoder.text_run
            if decoder is not None and skippable is None and sse_in and coalesce
            else None
        )
        offer = encoder if sse_out else None
        runs = skip_run is not None or text_run is not None
        return cls(
            skippable,
            skip_run,
            text_run,
            decoder if runs else None,
            lane_stages(stages),
            offer,
            offer.text_sse if offer is not None else None,
            runs and raw_bytes,
        )
