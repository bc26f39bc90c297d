"""Every addon's ``running`` hook called as mitmproxy does once it is up, for tests that
drive hooks without an event loop: an async ``running`` (the relay's start) is not run —
these tests' flows go by mitmproxy's own call, as they do when the relay cannot start."""

from __future__ import annotations

import inspect
from collections.abc import Iterable


def started(addons: Iterable[object]) -> None:
    for addon in addons:
        running = getattr(addon, "running", None)
        if running is None:
            continue
        result = running()
        if inspect.iscoroutine(result):
            result.close()
