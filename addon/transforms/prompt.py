"""Prompt surgery on unified messages: add to the system prompt, merge same-role neighbours.

Contract: pure functions over ``addon.model`` messages; return new tuples.
"""

from __future__ import annotations

import dataclasses

from addon.model import Message, Part, Text

SEPARATOR = "\n\n"


def append_system(messages: tuple[Message, ...], text: str) -> tuple[Message, ...]:
    """Append ``text`` to the first system message, or insert one at the front."""
    for i, m in enumerate(messages):
        if m.role == "system":
            parts: tuple[Part, ...] = (
                (*m.parts, Text(SEPARATOR + text)) if m.parts else (Text(text),)
            )
            return (*messages[:i], dataclasses.replace(m, parts=parts), *messages[i + 1 :])
    return (Message("system", (Text(text),), string_content=True), *messages)


def append_to_last_user(messages: tuple[Message, ...], text: str) -> tuple[Message, ...]:
    """Append ``text`` to the last user message that has text of its own.

    A user message holding only tool results (Anthropic's ``tool_result`` turns) is skipped:
    a text after a tool result reads to a model as a new request, and it starts over (a
    loop). Text inside a tool result does not count. Without such a message, unchanged.
    """
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and any(isinstance(p, Text) and p.text for p in m.parts):
            added = dataclasses.replace(m, parts=(*m.parts, Text(SEPARATOR + text)))
            return (*messages[:i], added, *messages[i + 1 :])
    return messages


def merge_same_role(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """Join consecutive user (or assistant) messages, for upstreams that need alternation."""
    out: list[Message] = []
    for m in messages:
        last = out[-1] if out else None
        if last is not None and m.role == last.role and m.role in ("user", "assistant"):
            out[-1] = dataclasses.replace(
                last,
                parts=(*last.parts, Text(SEPARATOR), *m.parts),
                string_content=last.string_content and m.string_content,
                extra={**m.extra, **last.extra},
            )
        else:
            out.append(m)
    return tuple(out)
