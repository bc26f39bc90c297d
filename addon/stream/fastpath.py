"""The fast path: a shortcut to the bytes the general path (``StreamProcessor``) would write.

Glossary. A **lane** is a way of reading that skips part of the general path: the **skip
lane** passes events nobody reads as their bytes; the **text lane** takes plain text past the
line and event decoders and past the stages that only need to see it. The **common read** is
one read (or a few whole events in one read) that a lane takes in one flat function.

What a dialect or stage offers the fast path is declared, never probed: a decoder's
``fast_path`` (``DecoderFastPath``), an encoder's (``EncoderFastPath``), a stage's
``text_lane`` (``TextLane``, or ``PASSES_TEXT``), each None when it offers nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


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
