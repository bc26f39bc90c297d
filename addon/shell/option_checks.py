"""What the bridge reads from its process — its ``bridge_*`` options and the environment's
keys — and how a bad option value is reported.

mitmproxy drops a misspelt ``--set`` silently and stops loading a script on a malformed one;
here each is one error line naming the option, or a refused change once mitmproxy runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from mitmproxy import exceptions

from addon.config.options import ConfigError, OptionSpec, check_deferred_option
from addon.redact import clean
from addon.shell.notes import log


def environment() -> Mapping[str, str]:
    return os.environ


def options_error(message: str) -> exceptions.OptionsError:
    return exceptions.OptionsError(message)  # type: ignore[no-untyped-call]


class OptionChecks:
    """How an addon reports a bad option value.

    While mitmproxy starts (before ``running``), one error line naming the option: mitmdump
    then exits non-zero ("Error logged during startup") instead of a chained traceback.
    Later (``--set`` in mitmweb or the console), an ``OptionsError``: mitmproxy refuses the
    change and keeps the previous value."""

    _running = False

    def running(self) -> None:
        self._running = True
        _REFUSED.clear()

    def refuse(self, message: str) -> None:
        if self._running:
            raise options_error(message) from None
        if message not in _REFUSED:  # two addons may read the same option: said once
            _REFUSED.add(message)
            log.error("cursor-bridge: %s", clean(message, 2000))


_REFUSED: set[str] = set()


def check_deferred_options(options: Any) -> None:
    """``--set bridge_…=…`` given before the bridge declared its options waits in mitmproxy's
    ``deferred``; mitmproxy would later drop a misspelt name silently and, on a malformed
    value, stop loading the whole script without a word. Check them first: a bad one is
    one error line naming it (mitmdump then exits), a good one is handed over typed."""
    deferred = getattr(options, "deferred", None)
    if not isinstance(deferred, dict):
        return
    for name in [n for n in deferred if isinstance(n, str) and n.startswith("bridge_")]:
        value = deferred[name]
        raw = getattr(value, "val", None)
        try:
            deferred[name] = check_deferred_option(
                name, raw if isinstance(raw, list) else value, from_text=isinstance(raw, list)
            )
        except ConfigError as e:
            del deferred[name]
            log.error("cursor-bridge: %s", clean(e, 2000))


def add_options(loader: Any, specs: Sequence[OptionSpec]) -> None:
    for spec in specs:
        loader.add_option(
            name=spec.name,
            typespec=spec.typespec,
            default=spec.default,
            help=spec.help,
            choices=list(spec.choices) if spec.choices else None,
        )
