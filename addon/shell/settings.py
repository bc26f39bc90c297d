"""The settings addon: the bridge's options, parsed once in ``configure``.

The other addons read ``BridgeSettings.settings`` (routes, tool mode, thinking
policy …) and ``keep_originals`` at each flow; none of them parses these options
again. A bad value is refused (``OptionChecks``): the previous settings stay.
"""

from __future__ import annotations

from typing import Any

from mitmproxy import ctx
from mitmproxy.tools.dump import DumpMaster

from addon.config.options import REWRITE_OPTIONS, ConfigError, Settings, parse_settings
from addon.dialects import DIALECTS
from addon.redact import clean
from addon.shell.notes import log, log_internal_error
from addon.shell.option_checks import OptionChecks, add_options, check_deferred_options, environment
from addon.stream import eventstream
from addon.transforms import repair


class BridgeSettings(OptionChecks):
    name = "cursor_bridge"

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.keep_originals = True
        """Keep what the content view shows (originals, the first MiB of each stream): not in
        a mitmdump that never renders bodies (``flow_detail`` < 3)."""

    def load(self, loader: Any) -> None:
        add_options(loader, REWRITE_OPTIONS)
        # The last of the bridge's option owners to load: every bridge option is declared now.
        check_deferred_options(getattr(getattr(loader, "master", None), "options", None))

    def running(self) -> None:
        super().running()
        # Start-up work, not the first flow's (its ``bridge_ms``): what the routes will need
        # and would otherwise import on first use.
        s = self.settings
        try:
            if any((route.tool_repair or s.tool_repair) == "on" for route in s.routes):
                repair.preload()
            if any(DIALECTS[r.upstream].framing_for(()) == "aws_eventstream" for r in s.routes):
                eventstream.preload()
        except Exception as e:
            log_internal_error("cursor-bridge: loading what the routes need", e)

    def configure(self, updated: set[str]) -> None:
        if "flow_detail" in updated:
            self.keep_originals = views_shown()
        if not any(name.startswith("bridge_") for name in updated):
            return
        try:
            self.settings = parse_settings(lambda name: getattr(ctx.options, name), environment())
        except ConfigError as e:
            self.refuse(str(e))
            return
        if "bridge_routes" in updated and ctx.options.bridge_routes:
            log.info(
                "cursor-bridge: %d route(s) from %s",
                len(self.settings.routes),
                clean(ctx.options.bridge_routes, 1000),
            )


def views_shown() -> bool:
    """Whether anything renders the content view: mitmweb and the console do, mitmdump only
    at ``flow_detail`` 3 and up."""
    try:
        master, detail = ctx.master, ctx.options.flow_detail
    except (AttributeError, KeyError):
        return True
    return not isinstance(master, DumpMaster) or detail >= 3
