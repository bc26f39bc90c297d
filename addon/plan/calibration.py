"""The calibrated estimate (docs/dialects/anthropic.md#the-calibrated-estimate): per route and
model as sent upstream, the upstream's real prompt tokens of its recent answers (what the usage
ledger books) against the bridge's own count of the same requests
(``addon.transforms.tokens.estimate_request``); the median of those ratios scales the own count
of the next request on that route and model, rounded up.

Glossary: *own count* is ``estimate_request`` of the unified request; *real* is the answer's
``Usage.prompt_tokens`` (cached tokens included: the model read them all); *a lesson* is one
answer's ratio real / own.

Contract: plain values, no I/O. ``Calibration``: this process's ratios, in memory (all there is
with a store in memory; used on the event loop only, not thread-safe); bounded: ``WINDOW``
ratios per route and model, ``MAX_KEYS`` routes and models (the one answered longest ago goes
first). With a store that does I/O (SQLite, Redis) every lesson also goes to the store, shared
by every worker on it and kept across restarts (``addon.stores.ratios``), and a count reads the
store's ratios where its request's prefetch read them (``Shared``)."""

from __future__ import annotations

import json
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Final, Protocol

from addon.stores.base import RATIOS_KEPT

WINDOW: Final = RATIOS_KEPT
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


class Scales(Protocol):
    """What a count is scaled by: this process's ``Calibration``, or ``Shared``."""

    def scale(self, route: str, model: str, own: int) -> Calibrated | None: ...


def store_key(route: str, model: str) -> str:
    """The one string a route and model's ratios are kept under in a store (a JSON array:
    unambiguous whatever the names hold)."""
    return json.dumps([route, model], separators=(",", ":"))


def ratio_of(own: int, real: int) -> float | None:
    """One answer's lesson: ``real / own``; None: no count of the same request."""
    if own <= 0 or real <= 0:
        return None
    ratio = real / own
    return ratio if RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1] else None


def scaled(ratios: Sequence[float], own: int, window: int = WINDOW) -> Calibrated | None:
    """``own`` scaled by the median of the last ``window`` ``ratios``, rounded up; None: none."""
    recent = list(ratios)[-window:]
    if not recent:
        return None
    return Calibrated(max(1, math.ceil(own * median(recent))), len(recent))


class Calibration:
    """The ratios real / own by ``(route name, model as sent upstream)``, this process's."""

    def __init__(self, window: int = WINDOW, max_keys: int = MAX_KEYS) -> None:
        self._window = window
        self._max_keys = max_keys
        self._ratios: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def learn(self, route: str, model: str, own: int, real: int) -> float | None:
        """One answer: the upstream counted ``real`` prompt tokens where the bridge's own
        count of the same request was ``own``. Returns the ratio learned (None: left out)."""
        ratio = ratio_of(own, real)
        if ratio is None:
            return None
        key = (route, model)
        ratios = self._ratios.get(key)
        if ratios is None:
            ratios = self._ratios[key] = deque(maxlen=self._window)
            while len(self._ratios) > self._max_keys:
                self._ratios.popitem(last=False)
        else:
            self._ratios.move_to_end(key)
        ratios.append(ratio)
        return ratio

    def scale(self, route: str, model: str, own: int) -> Calibrated | None:
        """``own`` scaled by the median ratio of ``route`` and ``model``, rounded up; None:
        no answer of theirs yet."""
        return scaled(self._ratios.get((route, model), ()), own, self._window)


class Shared:
    """The ratios of a store that does I/O, as one request's prefetch read them (``read``:
    ``store_key`` → the store's ratios, oldest first; a key not read: the store did not
    answer, and this process's ``local`` ones count), with this process's lessons not yet
    written (``pending``) after them."""

    __slots__ = ("_local", "_pending", "_read")

    def __init__(
        self,
        local: Calibration,
        read: Mapping[str, Sequence[float]],
        pending: Callable[[str], Sequence[float]],
    ) -> None:
        self._local, self._read, self._pending = local, read, pending

    def scale(self, route: str, model: str, own: int) -> Calibrated | None:
        key = store_key(route, model)
        stored = self._read.get(key)
        if stored is None:
            return self._local.scale(route, model, own)
        return scaled([*stored, *self._pending(key)], own)
