"""Access to the recordings of real services in ``../shared/fixtures/real/``.

Each recording has a ``.source.txt`` saying where it comes from. ``*.sse``
files are raw SSE bytes; ``*.chunks.txt`` files hold one JSON payload per line
(the ``data:`` payloads without framing), turned into SSE here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(
    os.environ.get("CURSOR_BRIDGE_FIXTURES")
    or Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"
)
"""``../shared/fixtures/real`` beside the checkout, or ``$CURSOR_BRIDGE_FIXTURES``; tests that
replay recordings skip when it is missing."""


def fixture_names(prefix: str) -> list[str]:
    if not FIXTURES.is_dir():
        return []
    return sorted(
        p.name
        for p in FIXTURES.iterdir()
        if p.name.startswith(prefix) and not p.name.endswith(".source.txt")
    )


def read(name: str) -> bytes:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"recording {name} not available (../shared/fixtures/real)")
    return path.read_bytes()


def as_sse(name: str) -> bytes:
    """The recording as SSE bytes, ``data: [DONE]`` included for chunk files."""
    raw = read(name)
    if name.endswith(".sse"):
        return raw
    lines = [line for line in raw.decode().splitlines() if line.strip()]
    return b"".join(f"data: {line}\n\n".encode() for line in [*lines, "[DONE]"])


OPENAI_STREAMS = [n for n in fixture_names("openai-chat-") if n.endswith((".sse", ".chunks.txt"))]


def cursor_byok_body() -> dict[str, Any]:
    """Cursor's recorded BYOK request, closed into valid JSON, redacted contents filled in.

    The recording is cut right after ``"stream": true,`` and its message contents
    were replaced by ``{"_redacted": true, "type": ...}`` placeholders; both are
    undone here the least inventive way (a closing brace, short texts).
    """
    text = read(
        "cursor-byok-chat-completions-request-tool_calls-and-tool-message."
        "TencentDB-Agent-Memory.EXCERPT.json.txt"
    ).decode()
    text = text.rstrip().rstrip(",") + "\n}}"
    body: dict[str, Any] = json.loads(text)["body"]
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, dict) and content.get("_redacted"):
            placeholder = f"(redacted {content['length']} {content['type']})"
            message["content"] = (
                placeholder if content["type"] == "str" else [{"type": "text", "text": placeholder}]
            )
    return body


needs_recordings = pytest.mark.skipif(
    not OPENAI_STREAMS, reason=f"recordings not available ({FIXTURES})"
)
