"""Gemini streamed answers (one ``GenerateContentResponse`` per event) ↔ unified events.

Being written (issue 9): see the contract in ``__init__``.
"""

from __future__ import annotations

from addon.model import Event


class GeminiStreamDecoder:
    """Public and Code Assist-wrapped chunks (``{"response": {…}, "traceId"}``) alike."""

    def feed(self, data: str, event: str | None) -> list[Event]:
        raise NotImplementedError

    def finish(self) -> list[Event]:
        raise NotImplementedError


class GeminiStreamEncoder:
    """Chunks for a public-API Gemini client."""

    def feed(self, event: Event) -> list[tuple[str | None, str]]:
        raise NotImplementedError

    def finish(self) -> list[tuple[str | None, str]]:
        raise NotImplementedError


class CodeAssistStreamEncoder(GeminiStreamEncoder):
    """Chunks wrapped as Code Assist sends them (``{"response": {…}}``)."""
