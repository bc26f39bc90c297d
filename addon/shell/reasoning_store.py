"""The reasoning store's life: ``bridge_store*`` opens it, new bounds rebound it, the end
of mitmproxy closes it. Flows read ``ReasoningStoreLife.store`` (None: off). A Redis store's
notices (Redis lost: one warning; back: one line) are logged here."""

from __future__ import annotations

import logging

from mitmproxy import ctx

from addon.config.options import ConfigError, StoreSettings, parse_store
from addon.plan import short
from addon.redact import clean
from addon.shell.notes import log
from addon.shell.option_checks import OptionChecks
from addon.stores.reasoning import Notice, ReasoningStore, StoreError


class ReasoningStoreLife(OptionChecks):
    name = "cursor_bridge_store"

    def __init__(self) -> None:
        self.store: ReasoningStore | None = None
        """The reasoning store (``bridge_store*``), shared by every flow; None: off."""
        self._wanted: StoreSettings | None = None

    def configure(self, updated: set[str]) -> None:
        if not any(name.startswith("bridge_store") for name in updated):
            return
        try:
            self._open(parse_store(lambda name: getattr(ctx.options, name)))
        except ConfigError as e:
            self.refuse(str(e))

    def done(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            try:
                store.close()
            except Exception as e:
                log.warning("cursor-bridge: closing the reasoning store: %s", short(e))

    def _open(self, wanted: StoreSettings) -> None:
        """Open the reasoning store the options ask for (once per change of them)."""
        if wanted == self._wanted:
            return
        old = self._wanted
        if (
            self.store is not None
            and old is not None
            and wanted.size > 0
            and old.path == wanted.path
        ):
            # Same place, new bounds: keep what is remembered (an in-memory store would
            # otherwise forget every conversation).
            try:
                self.store.rebound(wanted.size, wanted.ttl)
            except (StoreError, ValueError) as e:
                raise ConfigError(f"bridge_store: {clean(e, 300)}") from None
            self._wanted = wanted
            return
        store = None
        if wanted.size > 0:
            try:
                store = ReasoningStore(
                    wanted.path, max_entries=wanted.size, ttl=wanted.ttl, notify=_log_notice
                )
            except (StoreError, ValueError) as e:
                raise ConfigError(f"bridge_store: {clean(e, 300)}") from None
        self.done()
        self.store, self._wanted = store, wanted
        if store is not None and wanted.path:  # in memory is the default: nothing to say
            log.info("cursor-bridge: %s", clean(store.describe(), 500))


def _log_notice(notice: Notice) -> None:
    """What a Redis store says when Redis is lost (a warning, once) or back (no traceback)."""
    level = logging.WARNING if notice.warning else logging.INFO
    log.log(level, "cursor-bridge: %s", clean(notice.text, 500))
