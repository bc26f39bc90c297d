"""Memory the proxy freed goes back to the system (glibc only; elsewhere it does nothing).

Contract: an addon over flows' ends; when the resident size grew, glibc is asked to return its
free pages (``malloc_trim(0)``), and while large bodies keep coming their memory is kept for the
next one (the constants below say when), because memory fresh from the system costs a page
fault per 4 KiB on first touch. Why and what it measured: docs/speed.md ("Memory")."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import time
from collections.abc import Callable
from typing import Any

from mitmproxy import http

CHECK_AFTER_FLOWS = 50
"""The resident size is looked at after this many flows end (or after a large body)…"""
GROWTH = 2 << 20
"""…and memory handed back once it grew by this many bytes since the last time…"""
MIN_INTERVAL_S = 1.0
"""…at most once per this many seconds."""
BIG_BODY = 1 << 20
"""A body (request or answer) at least this large: its memory is kept for the next one…"""
QUIET_S = 30.0
"""…until no such body came for this many seconds."""
HEAP_BLOCKS = 32 << 20
"""glibc serves blocks up to this size from its heap (``M_MMAP_THRESHOLD``; glibc's most)…"""
HEAP_KEEP = 256 << 20
"""…and hands free heap back by itself only past this much (``M_TRIM_THRESHOLD``)."""
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def _libc(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):  # no such symbol; no process handle (Windows)
        return None


def libc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    trim = _libc("malloc_trim")
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    fn: Callable[[int], int] = trim
    return fn


def keep_large_blocks() -> bool:
    """Large blocks from glibc's heap, kept when freed (``HEAP_BLOCKS``, ``HEAP_KEEP``): no page
    faults on the next large body. False where glibc is not there or says no."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    try:
        return bool(mallopt(M_MMAP_THRESHOLD, HEAP_BLOCKS) and mallopt(M_TRIM_THRESHOLD, HEAP_KEEP))
    except Exception:
        return False


def call_later(delay: float, fn: Callable[[], None]) -> None:
    """``fn`` on the running event loop after ``delay`` seconds (``RuntimeError`` without
    one)."""
    asyncio.get_running_loop().call_later(delay, fn)


def call_soon(fn: Callable[[], None]) -> None:
    """``fn`` on the running event loop's next turn (``RuntimeError`` without one)."""
    asyncio.get_running_loop().call_soon(fn)


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
        later: Callable[[float, Callable[[], None]], None] = call_later,
        keep: Callable[[], bool] = keep_large_blocks,
        soon: Callable[[Callable[[], None]], None] = call_soon,
        collect: Callable[[], int] = gc.collect,
    ) -> None:
        self._trim = trim if trim is not None else libc_trim()
        self._clock = clock
        self._rss = rss
        self._later = later
        self._keep = keep
        self._soon = soon
        self._collect = collect
        self._collecting = False
        """A collection is scheduled (``_collect_soon``)."""
        self.collections = 0
        """How many times a flow with a large body was collected."""
        self._big_at = float("-inf")
        """When the last large body ended."""
        self._waiting = False
        """A look after the quiet time is scheduled."""
        self._last = float("-inf")
        self._floor = rss()
        """The resident size right after the last trim (or at start)."""
        self._flows = 0
        self.trims = 0
        """How many times memory was handed back."""

    def running(self) -> None:
        """What the start loaded is frozen out of the collector's way (``gc.freeze``)."""
        gc.collect()  # what the start left behind goes first: frozen garbage would stay
        gc.freeze()
        if self._trim is not None:
            self._keep()
        self._floor = self._rss()

    def response(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    def _ended(self, flow: http.HTTPFlow) -> None:
        """A flow with a large body is collected as soon as its hooks are done; free pages
        go back (at most once per ``MIN_INTERVAL_S``) when the resident size grew by
        ``GROWTH``, and after ``QUIET_S`` quiet seconds when large bodies came."""
        big = any(
            m is not None and len(m.raw_content or b"") >= BIG_BODY
            for m in (flow.request, flow.response)
        )
        if big:
            self._collect_soon()
        if self._trim is None:
            return
        self._flows += 1
        if big:
            self._big_at = self._clock()
            if not self._waiting:
                try:
                    self._later(QUIET_S, self._quiet)
                    self._waiting = True
                except RuntimeError:  # no running event loop: nothing to keep it for
                    self._hand_back(self._big_at)
        if self._flows < CHECK_AFTER_FLOWS:
            return
        now = self._clock()
        if now - self._last < MIN_INTERVAL_S or now - self._big_at < QUIET_S:
            return
        self._flows = 0
        if self._rss() - self._floor >= GROWTH:
            self._hand_back(now)

    def _collect_soon(self) -> None:
        """A full collection once the flow's hooks are done (at once without an event loop)."""
        if self._collecting:
            return
        self._collecting = True
        try:
            self._soon(self._collect_now)
        except RuntimeError:
            self._collect_now()

    def _collect_now(self) -> None:
        self._collecting = False
        self.collections += 1
        with contextlib.suppress(Exception):  # never let housekeeping break a flow
            self._collect()

    def _quiet(self) -> None:
        """After a large body: hand its memory back if none came since, else look again
        when the last one is ``QUIET_S`` old."""
        left = self._big_at + QUIET_S - self._clock()
        if left > 0:
            self._later(left, self._quiet)
            return
        self._waiting = False
        if self._trim is not None:
            self._hand_back(self._clock())

    def _hand_back(self, now: float) -> None:
        self._last = now
        self.trims += 1
        try:
            self._trim(0)  # type: ignore[misc]
        except Exception:  # never let housekeeping break a flow
            self._trim = None
        self._floor = self._rss()
