"""Every dialect's name, defined once: routes, the registry (``addon.dialects.DIALECTS``) and
every module outside ``addon/dialects/`` refer to a dialect by these, never by its text."""

from __future__ import annotations

from typing import Final, Literal

type DialectName = Literal[
    "openai_chat", "anthropic", "openai_responses", "gemini", "gemini_code_assist", "kiro"
]
"""What a route's ``client`` and ``upstream`` may name (``DIALECTS`` has one of each)."""

OPENAI_CHAT: Final = "openai_chat"
ANTHROPIC: Final = "anthropic"
OPENAI_RESPONSES: Final = "openai_responses"
GEMINI: Final = "gemini"
GEMINI_CODE_ASSIST: Final = "gemini_code_assist"
KIRO: Final = "kiro"

UPSTREAM_ONLY: frozenset[DialectName] = frozenset({KIRO})
"""Dialects the bridge speaks to upstreams only (it does not answer their clients)."""
