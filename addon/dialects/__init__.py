"""Wire formats. Each dialect is a codec between its JSON and ``addon.model``."""

from addon.dialects.anthropic import DIALECT as ANTHROPIC
from addon.dialects.base import Dialect
from addon.dialects.openai_chat import DIALECT as OPENAI_CHAT

DIALECTS: dict[str, Dialect] = {d.name: d for d in (OPENAI_CHAT, ANTHROPIC)}
"""Every dialect by name, as routes refer to them."""

__all__ = ["DIALECTS", "Dialect"]
