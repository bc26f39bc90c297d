"""How much of each measurement a run does (``FULL``, ``QUICK``), and its progress lines."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    requests: int
    """Small non-streamed requests per proxy, for its memory."""
    unpaced_streams: tuple[int, ...]
    unpaced_seconds: float
    """Each unpaced window lasts about this long (its event count is set from a pilot)."""
    unpaced_min_events: int
    """Events per unpaced stream, at least."""
    paced_streams: tuple[int, ...]
    paced_events: int
    pace: float
    spread: float
    """Paced stream starts are spread over this many seconds."""
    body_sizes: tuple[int, ...]
    body_reps: int
    paced_retry: bool = False
    """A paced K past the bound (the K before within it) is measured once more."""
    paced_halvings: int = 0
    """After the grid, the K halfway between each column's last K within the bound and its
    first past it is measured, this many times over."""
    unpaced_rounds: int = 1
    """Unpaced: windows of each column, each between two of bare mitmdump's
    (``unpaced_paired``)."""
    burst_streams: tuple[int, ...] = ()
    """Unpaced again, the upstream writing ``BATCH`` events per HTTP chunk (a bursty upstream,
    or a gateway that buffers): mitmproxy's own cost per chunk is then spread over more
    events than the bridge's."""
    concurrency: int = 8
    """Keep-alive connections for the small requests."""


FULL = Plan(
    requests=10_000,
    unpaced_streams=(1, 10, 50),
    unpaced_seconds=1.0,
    unpaced_min_events=400,
    paced_streams=(25, 50, 100, 150, 200, 250, 300, 400, 500),
    paced_events=600,
    pace=100.0,
    spread=1.0,
    body_sizes=(10**6, 10**7),
    body_reps=11,
    paced_retry=True,
    paced_halvings=3,
    unpaced_rounds=5,
    burst_streams=(10,),
)
QUICK = Plan(
    requests=250,
    unpaced_streams=(1, 10, 50),
    unpaced_seconds=0.3,
    unpaced_min_events=100,
    paced_streams=(25, 100),
    paced_events=80,
    pace=100.0,
    spread=0.2,
    body_sizes=(10**6, 10**7),
    body_reps=3,
)


class Progress:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, text: str) -> None:
        print(f"[{time.monotonic() - self.start:6.1f} s] {text}", flush=True)
