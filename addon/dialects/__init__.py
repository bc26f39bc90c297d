"""Wire formats. Each dialect is a codec between its JSON and ``addon.model``."""

from addon.dialects.anthropic import DIALECT as ANTHROPIC
from addon.dialects.base import Dialect
from addon.dialects.gemini import CODE_ASSIST_DIALECT as GEMINI_CODE_ASSIST
from addon.dialects.gemini import DIALECT as GEMINI
from addon.dialects.kiro import DIALECT as KIRO
from addon.dialects.openai_chat import DIALECT as OPENAI_CHAT
from addon.dialects.openai_responses import DIALECT as OPENAI_RESPONSES

DIALECTS: dict[str, Dialect] = {
    d.name: d for d in (OPENAI_CHAT, ANTHROPIC, OPENAI_RESPONSES, GEMINI, GEMINI_CODE_ASSIST, KIRO)
}
"""Every dialect by name, as routes refer to them."""

__all__ = ["DIALECTS", "Dialect"]
