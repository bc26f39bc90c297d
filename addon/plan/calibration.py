"""The calibrated estimate (docs/dialects/anthropic.md#the-calibrated-estimate): per route and
model as sent upstream, the upstream's real prompt tokens of its recent answers (what the usage
ledger books) against the bridge's own count of the same requests
(``addon.transforms.tokens.estimate_request``); the median of those ratios scales the own count
of the next request on that route and model, rounded up.

Glossary: *own count* is ``estimate_request`` of the unified request; *real* is the answer's
``Usage.prompt_tokens`` (cached tokens included: the model read them all).

Contract: plain values, in memory, per process (each worker learns from the answers it
relays); bounded: ``WINDOW`` ratios per route and model, ``MAX_KEYS`` routes and models (the
one answered longest ago goes first). Used on the event loop only (not thread-safe)."""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass
from statistics import median
from typing import Final

WINDOW: Final = 16
"""The recent answers a ratio is the median of: one odd answer (a cache, a tool-heavy turn)
moves it little, a new system prompt moves it within a few answers."""
MAX_KEYS: Final = 1024
RATIO_BOUNDS: Final = (0.05, 20.0)
"""A ratio outside these is not a count of the same request (an answer whose usage is of
something else): it is left out."""


@dataclass(frozen=True, slots=True)
class Calibrated:
    tokens: int
    answers: int
    """How many answers the ratio is the median of."""


class Calibration:
    """The ratios real / own by ``(route name, model as sent upstream)``."""

    def __init__(self, window: int = WINDOW, max_keys: int = MAX_KEYS) -> None:
        self._window = window
        self._max_keys = max_keys
        self._ratios: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def learn(self, route: str, model: str, own: int, real: int) -> None:
        """One answer: the upstream counted ``real`` prompt tokens where the bridge's own
        count of the same request was ``own``."""
        if own <= 0 or real <= 0:
            return
        ratio = real / own
        if not RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1]:
            return
        key = (route, model)
        ratios = self._ratios.get(key)
        if ratios is None:
            ratios = self._ratios[key] = deque(maxlen=self._window)
            while len(self._ratios) > self._max_keys:
                self._ratios.popitem(last=False)
        else:
            self._ratios.move_to_end(key)
        ratios.append(ratio)

    def scale(self, route: str, model: str, own: int) -> Calibrated | None:
        """``own`` scaled by the median ratio of ``route`` and ``model``, rounded up; None:
        no answer of theirs yet."""
        ratios = self._ratios.get((route, model))
        if not ratios:
            return None
        return Calibrated(max(1, math.ceil(own * median(ratios))), len(ratios))
