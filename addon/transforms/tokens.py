"""A rough input-token estimate, for ``count_tokens`` when the upstream cannot count.

Contract: pure; JSON in, an integer out. It is an estimate and the flow comment says so; Claude
Code uses it only to decide when to compact the conversation."""

from __future__ import annotations

from typing import Any

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
