"""The bridge's addons, wired together: what ``addon/main.py`` hands to mitmproxy."""

from __future__ import annotations

from dataclasses import dataclass

from addon.shell.catalogue import ModelCatalogue
from addon.shell.count_tokens import CountTokens
from addon.shell.kiro_auth import KiroAuth
from addon.shell.memory import MemoryTrim
from addon.shell.retry import Retry
from addon.shell.rewrite import RewriteAddon
from addon.state import BridgeState


@dataclass(frozen=True, slots=True)
class Addons:
    state: BridgeState
    retry: Retry
    catalogue: ModelCatalogue
    count_tokens: CountTokens
    rewrite: RewriteAddon
    kiro: KiroAuth
    memory: MemoryTrim

    @property
    def all(self) -> list[object]:
        """In hook order: the catalogue's options load before the rewrite reads them; the Kiro
        token file is read (``request``, async) before the rewrite uses it; memory is handed
        back after the rewrite is done with a flow."""
        return [
            self.retry,
            self.catalogue,
            self.count_tokens,
            self.kiro,
            self.rewrite,
            self.memory,
        ]


def make_addons() -> Addons:
    state = BridgeState()
    retry = Retry()
    rewrite = RewriteAddon(state, retry)
    kiro = KiroAuth(lambda: rewrite.settings)
    rewrite.kiro = kiro
    return Addons(
        state,
        retry,
        ModelCatalogue(lambda: rewrite.settings),
        CountTokens(lambda: rewrite.settings, state),
        rewrite,
        kiro,
        MemoryTrim(),
    )
