"""Which conversation a request belongs to, and the values the bridge derives from it.

Contract: pure. ``conversation_of(req)`` names the client's conversation from what the client
sends on every turn of it (docs/caching.md#conversations); ``derive(secret, conversation,
purpose)`` is an HMAC of it under the store's secret. Why: the same on every turn of one
conversation, different between conversations and unguessable without the secret."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets

from addon.model import Message, Request, Text, ToolResult

PROCESS_SECRET = secrets.token_bytes(32)
"""The secret when the bridge runs without a reasoning store (plain-value tests, tools)."""


def conversation_of(req: Request) -> str:
    """The conversation's name, by what the client sends:

    - OpenAI ``prompt_cache_key`` (Codex sends its conversation id there);
    - a session id in Anthropic ``metadata.user_id`` (Claude Code: a JSON object with
      ``session_id``; older versions ``user_…_session_<uuid>``);
    - else the conversation's opening, which every later turn repeats: the system prompt and
      the first message after it (Cursor, OpenCode, Gemini CLI, the SDKs)."""
    if req.params.cache_key:
        return "key:" + req.params.cache_key
    session = _session(req.params.user)
    if session:
        return "session:" + session
    return "opening:" + _opening(req.messages)


def derive(secret: bytes, conversation: str, purpose: str) -> bytes:
    """32 bytes for ``purpose`` (``"invoke"``, ``"prompt_cache_key"``) in this conversation:
    the same on every turn (so an upstream's prompt cache keeps matching), unguessable without
    the secret (so an ``invoke`` trigger cannot be written into a file or web page that the
    model reads later)."""
    return hmac.new(secret, f"{purpose}\0{conversation}".encode(), hashlib.sha256).digest()


def _session(user: str | None) -> str | None:
    if not user:
        return None
    if user.startswith("{"):
        try:
            value = json.loads(user)
        except ValueError:
            return None
        session = value.get("session_id") if isinstance(value, dict) else None
        return session if isinstance(session, str) and session else None
    _, found, after = user.partition("_session_")
    return (after or None) if found else None


def _opening(messages: tuple[Message, ...]) -> str:
    """A digest of the system messages before the first other message, and that message."""
    digest = hashlib.sha256()
    for m in messages:
        digest.update(m.role.encode() + b"\0")
        for p in m.parts:
            match p:
                case Text():
                    digest.update(p.text.encode() + b"\0")
                case ToolResult() if isinstance(p.content, str):
                    digest.update(p.content.encode() + b"\0")
                case _:
                    digest.update(p.kind.encode() + b"\0")
        if m.role not in ("system", "developer"):
            break
    return digest.hexdigest()
