"""A rough input-token estimate, for ``count_tokens`` when the upstream cannot count.

Contract: pure; JSON (or a unified request) in, an integer out. It is an estimate and the flow comment says so; Claude
Code uses it only to decide when to compact the conversation."""

from __future__ import annotations

from typing import Any

from addon.model import Image, Opaque, Part, Request, Text, Thinking, Tool, ToolCall, ToolResult

CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 1_600


def estimate_input_tokens(body: Any) -> int:
    """About ``CHARS_PER_TOKEN`` characters per token over every string of the request
    (system, messages, tools), plus ``IMAGE_TOKENS`` per image."""
    chars = 0
    images = 0
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            chars += len(node)
        elif isinstance(node, dict):
            if node.get("type") == "image":
                images += 1
                continue  # base64 data is not text the model reads
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return max(1, chars // CHARS_PER_TOKEN + images * IMAGE_TOKENS)


def estimate_request(req: Request) -> int:
    """The bridge's own count of a unified request, whatever dialect it came in: about
    ``CHARS_PER_TOKEN`` characters per token over its text (messages, tool calls and results,
    thinking, tool definitions), plus ``IMAGE_TOKENS`` per image. The calibrated estimate
    scales it (``addon.plan.calibration``): the same request counts the same here whether it
    came as a ``count_tokens`` body or a chat request."""
    chars = 0
    images = 0
    parts: list[Part] = [p for m in req.messages for p in m.parts]
    while parts:
        part = parts.pop()
        if isinstance(part, Text | Thinking):
            chars += len(part.text)
        elif isinstance(part, ToolCall):
            chars += len(part.name) + len(part.arguments)
        elif isinstance(part, ToolResult):
            if isinstance(part.content, str):
                chars += len(part.content)
            else:
                parts.extend(part.content)
        elif isinstance(part, Image):
            images += 1
        elif isinstance(part, Opaque):
            chars += _chars(part.data)
    for tool in req.tools or ():
        if isinstance(tool, Tool):
            chars += len(tool.name) + len(tool.description or "") + _chars(tool.parameters)
        else:
            chars += _chars(tool.data)
    return max(1, chars // CHARS_PER_TOKEN + images * IMAGE_TOKENS)


def _chars(node: Any) -> int:
    """Characters of every string in a JSON value (keys too: a schema's names are read)."""
    chars = 0
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            chars += len(node)
        elif isinstance(node, dict):
            chars += sum(len(k) for k in node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return chars
