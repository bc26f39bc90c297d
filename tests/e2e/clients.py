"""What the official SDK clients got, in one shape, for end-to-end loops."""

from __future__ import annotations

from typing import Any

import openai


def chat_turn(
    client: openai.OpenAI, stream: bool, **params: Any
) -> tuple[str, str | None, list[dict[str, str]]]:
    """One chat-completions request, streamed (deltas assembled as the SDK's users do) or
    whole: ``(content, finish_reason, [{"id", "name", "arguments"}, …])``."""
    if not stream:
        done = client.chat.completions.create(**params)
        choice = done.choices[0]
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in choice.message.tool_calls or ()
            if c.type == "function"
        ]
        return choice.message.content or "", choice.finish_reason, calls
    slots: dict[int, dict[str, str]] = {}
    content, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **params):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or ():
            slot = slots.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = tc.id or slot["id"]
            if tc.function:
                slot["name"] = tc.function.name or slot["name"]
                slot["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return content, finish, [slots[i] for i in sorted(slots)]
