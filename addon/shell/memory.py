"""Memory the proxy freed goes back to the system.

glibc keeps the heap memory a process frees for later use: a proxy that rewrote a 10 MB body,
or served thousands of requests of varying sizes (a text-protocol route renders a large
system prompt for each), stays at its high-water mark although Python holds none of it. Now and
then, after flows end, the addon looks at the process's resident size; when it grew by
``GROWTH`` since the last time (or a large body passed), it asks glibc to return its free
pages (``malloc_trim(0)``: a few ms on the event loop, at most once per ``MIN_INTERVAL_S``).
Without glibc (musl, macOS) it does nothing.

Once the proxy runs, what it loaded (mitmproxy, the bridge, their modules: most of the
process's objects) is moved out of the garbage collector's way (``gc.freeze``). Finished flows
sit in reference cycles until a full collection finds them, and CPython runs one only when
the objects waiting amount to a quarter of all long-lived ones: without the freeze that
lets some 250 finished flows (and their request bodies: a text-protocol route's are ~30 KB)
wait; with it, full collections come sooner and scan only what came after the start.
"""

from __future__ import annotations

import ctypes
import gc
import os
import time
from collections.abc import Callable

from mitmproxy import http

CHECK_AFTER_FLOWS = 50
"""The resident size is looked at after this many flows end (or after a large body)…"""
GROWTH = 2 << 20
"""…and memory handed back once it grew by this many bytes since the last time…"""
MIN_INTERVAL_S = 1.0
"""…at most once per this many seconds."""
BIG_BODY = 1 << 20
"""A body (request or answer) at least this large: look at once."""


def libc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # no such symbol; no process handle (Windows)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def resident_bytes() -> int:
    """This process's resident size (Linux ``/proc``; 0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class MemoryTrim:
    name = "cursor_bridge_memory"

    def __init__(
        self,
        trim: Callable[[int], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rss: Callable[[], int] = resident_bytes,
    ) -> None:
        self._trim = trim if trim is not None else libc_trim()
        self._clock = clock
        self._rss = rss
        self._last = float("-inf")
        self._floor = rss()
        """The resident size right after the last trim (or at start)."""
        self._flows = 0
        self._big = False
        self.trims = 0
        """How many times memory was handed back."""

    def running(self) -> None:
        gc.collect()  # what the start left behind goes first: frozen garbage would stay
        gc.freeze()
        self._floor = self._rss()

    def response(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    def _ended(self, flow: http.HTTPFlow) -> None:
        if self._trim is None:
            return
        self._flows += 1
        for message in (flow.request, flow.response):
            if message is not None and len(message.raw_content or b"") >= BIG_BODY:
                self._big = True
        if self._flows < CHECK_AFTER_FLOWS and not self._big:
            return
        now = self._clock()
        if now - self._last < MIN_INTERVAL_S:
            return
        self._flows = 0
        big, self._big = self._big, False
        if not big and self._rss() - self._floor < GROWTH:
            return
        self._last = now
        self.trims += 1
        try:
            self._trim(0)
        except Exception:  # never let housekeeping break a flow
            self._trim = None
        self._floor = self._rss()
