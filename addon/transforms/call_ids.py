"""Call ids the client has not seen yet (unified → unified).

Contract: pure. A call id in the upstream's answer that the client's conversation already
holds (``history_call_ids``), or that an earlier call of the same answer had, reaches the client
renamed: unique in the conversation as the client sees it, and the same for the same request and
answer, whole or streamed (``addon.stream.stages.CallIdStage``). Why: docs/tools.md ("Call ids")."""

from __future__ import annotations

import dataclasses

from addon.model import Message, Part, Response, ToolCall, ToolResult

RENAMED_NOTE = "tool call id already used: renamed"


def history_call_ids(messages: tuple[Message, ...]) -> frozenset[str]:
    """Every call id the conversation holds: its calls' and its results'."""
    ids: set[str] = set()
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCall) and part.id:
                ids.add(part.id)
            elif isinstance(part, ToolResult) and part.tool_call_id:
                ids.add(part.tool_call_id)
    return frozenset(ids)


class CallIds:
    """One answer's renamer: the history's ids, then each id it handed out."""

    __slots__ = ("_taken",)

    def __init__(self, history: frozenset[str]) -> None:
        self._taken = set(history)

    def fresh(self, call_id: str) -> str:
        """``call_id``, or its new name when it is taken (an empty id stays empty: the
        client's encoder makes one)."""
        if not call_id:
            return call_id
        new = call_id
        k = 2
        while new in self._taken:
            new = f"{call_id}_{k}"
            k += 1
        self._taken.add(new)
        return new


def fresh_call_ids(answer: Response, history: frozenset[str]) -> tuple[Response, int]:
    """``answer`` with its calls' ids fresh (a taken id renamed ``<id>_<k>`` with the smallest
    ``k >= 2`` not taken), and how many were
    renamed. The same object when none was."""
    ids = CallIds(history)
    parts: list[Part] = []
    renamed = 0
    for p in answer.parts:
        if isinstance(p, ToolCall):
            new = ids.fresh(p.id)
            if new != p.id:
                p = dataclasses.replace(p, id=new)
                renamed += 1
        parts.append(p)
    if not renamed:
        return answer, 0
    return dataclasses.replace(answer, parts=tuple(parts)), renamed
