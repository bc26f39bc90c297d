"""Anthropic content blocks → unified parts, shared by every dialect that carries them.

Contract: one block (a JSON object) in, one part out, or ``None`` for a kind
this module does not handle (the caller decides). Besides the anthropic
dialect, ``openai_chat`` uses it for Cursor's requests, which put these very
blocks into OpenAI messages."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from addon.model import (
    JSON,
    CacheMark,
    CacheTTL,
    ClientError,
    Image,
    Part,
    Thinking,
    ToolCall,
    ToolResult,
)

CACHE_KEY = "cache_control"
_TTLS: dict[Any, CacheTTL | None] = {None: None, "5m": "5m", "1h": "1h"}


def cache_mark(block: JSON) -> CacheMark | None:
    """The block's ``cache_control`` as a mark, when it is one Anthropic takes
    (``{"type": "ephemeral"}``, ``ttl`` 5m or 1h); anything else is not modelled and stays
    in the block's extras (a same-dialect upstream then says what is wrong with it)."""
    raw = block.get(CACHE_KEY)
    if not isinstance(raw, dict) or raw.get("type") != "ephemeral" or set(raw) - {"type", "ttl"}:
        return None
    ttl = raw.get("ttl")
    if ttl not in _TTLS:
        return None
    return CacheMark(_TTLS[ttl])


def cache_control(mark: CacheMark) -> JSON:
    """A mark on the wire (Anthropic, and the chat shape OpenRouter and LiteLLM take)."""
    out: JSON = {"type": "ephemeral"}
    if mark.ttl is not None:
        out["ttl"] = mark.ttl
    return out


def unmodelled(
    block: JSON, modelled: frozenset[str] | tuple[str, ...], mark: CacheMark | None
) -> JSON:
    """The block's keys outside ``modelled`` (and outside ``cache_control`` when it was read
    as ``mark``)."""
    return {k: v for k, v in block.items() if k not in modelled and not (k == CACHE_KEY and mark)}


def image_source_url(source: JSON) -> str:
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    return str(source.get("url", ""))


def decode_block(where: str, block: JSON, inner: Callable[[str, Any], Part]) -> Part | None:
    """``inner`` decodes the blocks nested in a ``tool_result``'s content. A ``cache_control``
    on an image, ``tool_use`` or ``tool_result`` becomes the part's ``cache``."""
    mark = cache_mark(block)
    match block.get("type"):
        case "image" if isinstance(block.get("source"), dict):
            source = block["source"]
            if source.get("type") == "file" and isinstance(source.get("file_id"), str):
                return Image("", cache=mark, file=source["file_id"])  # the Files API's
            return Image(image_source_url(source), cache=mark)
        case "tool_use":
            name = block.get("name")
            if not isinstance(name, str) or not name:
                raise ClientError(f"{where}: a tool_use block needs a name", param=f"{where}.name")
            args = block.get("input", {})
            return ToolCall(
                str(block.get("id") or where),
                name,
                args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
                cache=mark,
            )
        case "tool_result":
            raw = block.get("content")
            content: str | tuple[Part, ...]
            if raw is None:
                content = ""
            elif isinstance(raw, str):
                content = raw
            elif isinstance(raw, list):
                content = tuple(inner(f"{where}.content[{k}]", b) for k, b in enumerate(raw))
                if any(isinstance(p, ToolCall | ToolResult) for p in content):
                    raise ClientError(
                        f"{where}: a tool_result cannot hold tool blocks", param=f"{where}.content"
                    )
            else:
                content = json.dumps(raw, ensure_ascii=False)
            return ToolResult(
                str(block.get("tool_use_id", "")),
                content,
                is_error=bool(block.get("is_error")),
                cache=mark,
            )
        case "thinking":
            return Thinking(
                str(block.get("thinking", "")), signature=block.get("signature") or None
            )
        case "redacted_thinking":
            return Thinking(str(block.get("data", "")), redacted=True)
    return None
