"""Wire formats. Each dialect is a codec between its JSON and ``addon.model``."""

from addon.dialects import anthropic, gemini, kiro, openai_chat, openai_responses
from addon.dialects.base import Dialect
from addon.dialects.names import (
    ANTHROPIC,
    GEMINI,
    GEMINI_CODE_ASSIST,
    KIRO,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    UPSTREAM_ONLY,
    DialectName,
)

DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        openai_chat.DIALECT,
        anthropic.DIALECT,
        openai_responses.DIALECT,
        gemini.DIALECT,
        gemini.CODE_ASSIST_DIALECT,
        kiro.DIALECT,
    )
}
"""Every dialect by name, as routes refer to them."""

__all__ = [
    "ANTHROPIC",
    "DIALECTS",
    "GEMINI",
    "GEMINI_CODE_ASSIST",
    "KIRO",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "UPSTREAM_ONLY",
    "Dialect",
    "DialectName",
]
