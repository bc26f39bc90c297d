"""Pipeline stages between the upstream decoder and the client encoder.

Contract: each stage takes unified events one at a time and returns unified
events; ``finish`` flushes and is idempotent. Sans-IO.
"""

from __future__ import annotations

import dataclasses

from addon.model import (
    Event,
    Finish,
    StreamEnd,
    StreamError,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from addon.redact import Secrets
from addon.textproto.parser import TextProtocolParser


class TextToolStage:
    """Turns the model's text into text, thinking and tool calls with a ``TextProtocolParser``.

    The parser is flushed before the upstream's ``Finish`` (or ``StreamEnd``) goes on, and
    ``Finish`` says ``tool_calls`` when the text held at least one call.

    Calls the upstream made natively (Kiro keeps its tools and may still write text calls) pass
    through beside the parsed ones; the two are numbered apart (``_renumber``: one sequence in
    the order the calls start, which leaves either kind alone unchanged), so that a client never
    sees two calls under one index.
    """

    def __init__(self, parser: TextProtocolParser) -> None:
        self.parser = parser
        self.take_text = parser.take_text
        """Plain text the parser passes on as it is (``TextProtocolParser.take_text``)."""
        self.keeper = parser
        """Where the text lane finds this stage's ``text_sink`` (``Stage``)."""
        self._flushed = False
        self._indexes: dict[tuple[bool, int], int] = {}
        """(parsed, index as it came) → the index the client sees."""

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, TextDelta):
            return self._renumber(self.parser.feed(event.text), parsed=True)
        if isinstance(event, Finish):
            out = self.finish()
            if self.parser.calls and event.reason != "tool_calls":
                return [*out, Finish("tool_calls", raw="tool_calls")]
            return [*out, event]
        if isinstance(event, StreamEnd):
            return [*self.finish(), event]
        if isinstance(event, ToolCallStart | ToolCallArgsDelta | ToolCallEnd):
            return self._renumber([event], parsed=False)
        return [event]

    def finish(self) -> list[Event]:
        if self._flushed:
            return []
        self._flushed = True
        return self._renumber(self.parser.finish(), parsed=True)

    def _renumber(self, events: list[Event], parsed: bool) -> list[Event]:
        out: list[Event] = []
        for e in events:
            if isinstance(e, ToolCallStart | ToolCallArgsDelta | ToolCallEnd):
                key = (parsed, e.index)
                index = self._indexes.get(key)
                if index is None:
                    index = self._indexes[key] = len(self._indexes)
                if index != e.index:
                    e = dataclasses.replace(e, index=index)
            out.append(e)
        return out


class HideThinkingStage:
    """Drops reasoning (``bridge_thinking_output=hidden``)."""

    passes_text = True

    def feed(self, event: Event) -> list[Event]:
        return [] if isinstance(event, ThinkingDelta) else [event]

    def finish(self) -> list[Event]:
        return []


class RedactErrorStage:
    """The message of an error that ends the stream, with the flow's credential values
    redacted (an upstream that echoes the client's key): the client of another dialect gets
    an error event the bridge writes. Only that event is touched; text passes as it is."""

    passes_text = True

    def __init__(self, secrets: Secrets) -> None:
        self._secrets = secrets

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, StreamError):
            message = self._secrets(event.message)
            if message != event.message:
                return [dataclasses.replace(event, message=message)]
        return [event]

    def finish(self) -> list[Event]:
        return []
