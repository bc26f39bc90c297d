"""Pipeline stages between the upstream decoder and the client encoder.

Contract: each stage takes unified events one at a time and returns unified
events; ``finish`` flushes and is idempotent. Sans-IO.
"""

from __future__ import annotations

from addon.model import Event, Finish, StreamEnd, TextDelta, ThinkingDelta
from addon.textproto.parser import TextProtocolParser


class TextToolStage:
    """Turns the model's text into text, thinking and tool calls with a ``TextProtocolParser``.

    The parser is flushed before the upstream's ``Finish`` (or ``StreamEnd``) goes on, and
    ``Finish`` says ``tool_calls`` when the text held at least one call.
    """

    def __init__(self, parser: TextProtocolParser) -> None:
        self.parser = parser
        self._flushed = False

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, TextDelta):
            return self.parser.feed(event.text)
        if isinstance(event, Finish):
            out = self.finish()
            if self.parser.calls and event.reason != "tool_calls":
                return [*out, Finish("tool_calls", raw="tool_calls")]
            return [*out, event]
        if isinstance(event, StreamEnd):
            return [*self.finish(), event]
        return [event]

    def finish(self) -> list[Event]:
        if self._flushed:
            return []
        self._flushed = True
        return self.parser.finish()


class HideThinkingStage:
    """Drops reasoning (``bridge_thinking_output=hidden``)."""

    def feed(self, event: Event) -> list[Event]:
        return [] if isinstance(event, ThinkingDelta) else [event]

    def finish(self) -> list[Event]:
        return []
