"""Anthropic content blocks → unified parts, shared by every dialect that carries them.

Contract: one block (a JSON object) in, one part out, or ``None`` for a kind
this module does not handle (the caller decides). Besides the anthropic
dialect, ``openai_chat`` uses it for Cursor's requests, which put these very
blocks into OpenAI messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from addon.model import JSON, ClientError, Image, Part, Thinking, ToolCall, ToolResult


def image_source_url(source: JSON) -> str:
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    return str(source.get("url", ""))


def decode_block(where: str, block: JSON, inner: Callable[[str, Any], Part]) -> Part | None:
    """``inner`` decodes the blocks nested in a ``tool_result``'s content."""
    match block.get("type"):
        case "image" if isinstance(block.get("source"), dict):
            return Image(image_source_url(block["source"]))
        case "tool_use":
            name = block.get("name")
            if not isinstance(name, str) or not name:
                raise ClientError(f"{where}: a tool_use block needs a name", param=f"{where}.name")
            args = block.get("input", {})
            return ToolCall(
                str(block.get("id") or where),
                name,
                args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
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
                str(block.get("tool_use_id", "")), content, is_error=bool(block.get("is_error"))
            )
        case "thinking":
            return Thinking(
                str(block.get("thinking", "")), signature=block.get("signature") or None
            )
        case "redacted_thinking":
            return Thinking(str(block.get("data", "")), redacted=True)
    return None
