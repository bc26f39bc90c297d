"""Cursor's hybrid bodies: Responses-shaped requests posted to ``/chat/completions``.

Contract: ``decode_chat_hybrid`` turns such a body into a ``Request`` of origin
``openai_responses`` (its items decoded by ``openai_responses.request``), merged with the chat
``messages`` it may carry (decoded by the chat decoder it is given). The chat decoder calls it
for a body with an ``input`` key; the answer goes back as Chat Completions."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from addon.dialects.openai_responses.request import ITEMS, decode_request
from addon.model import JSON, Image, Message, Notes, Request, Text, ToolCall, ToolResult

_HYBRID_NOTE = "Responses-shaped body (Cursor agent mode) decoded"


def decode_chat_hybrid(
    body: JSON, notes: Notes, decode_chat: Callable[[JSON, Notes], Request]
) -> Request:
    """A ``/chat/completions`` body with an ``input`` key: Cursor's agent mode for GPT-named
    models sends Responses requests there and expects Chat Completions back.

    The body is decoded as a Responses request (origin ``NAME``, so that the chat encoder
    does not copy Responses-only fields into a chat body). Chat-only fields it may carry
    are translated (``max_tokens`` / ``max_completion_tokens`` → ``max_output_tokens``,
    ``reasoning_effort`` → ``reasoning.effort``) or dropped (``stream_options``, which the
    Responses API refuses; the chat encoder asks for usage itself). Tool lists may mix
    nested chat function tools with flat Responses custom tools (Ask mode).

    Cursor sometimes sends ``messages`` as well. Gateways that serve Cursor report that
    the ``input`` array can lack the tool results that ``messages`` holds (the Bifrost
    Cursor integration then uses ``messages``; LiteLLM and codex-lb use ``input`` when
    present). Decided here: both are decoded; the one that holds the conversation's tool
    results is the base (``input`` when both or neither do), and the other's messages
    that the base does not already hold (by text, call id, result id, image) are kept:
    missing ``messages`` entries go before ``input`` (they are older context, e.g. a
    system prompt); missing ``input`` entries go after ``messages`` (the newest turn).
    """
    view = {k: v for k, v in body.items() if k not in ("messages", "stream_options")}
    if "stream_options" in body:
        notes["stream_options dropped (not a Responses field)"] += 1
    for key in ("max_completion_tokens", "max_tokens"):
        value = view.pop(key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            view.setdefault("max_output_tokens", value)
    effort = view.pop("reasoning_effort", None)
    if isinstance(effort, str) and not isinstance(view.get("reasoning"), dict):
        view["reasoning"] = {"effort": effort}
    req = decode_request(view, notes)
    notes[_HYBRID_NOTE] += 1
    chat_messages = body.get("messages")
    if not isinstance(chat_messages, list) or not chat_messages:
        return req
    chat = decode_chat({"model": req.model, "messages": chat_messages}, notes).messages
    side = req.extra.get(ITEMS, {})
    head = req.messages[:1] if side.get("instructions") else ()
    given = req.messages[len(head) :]
    if not given:
        merged = chat
    elif _has_results(chat) and not _has_results(given):
        notes["chat messages used: they hold the tool results input lacks"] += 1
        merged = chat + _missing(given, (*head, *chat), notes)
    else:
        merged = _missing(chat, (*head, *given), notes) + given
    return dataclasses.replace(req, messages=(*head, *merged))


def _has_results(messages: tuple[Message, ...]) -> bool:
    return any(isinstance(p, ToolResult) for m in messages for p in m.parts)


def _keys(m: Message) -> set[tuple[str, str]]:
    role = "system" if m.role in ("system", "developer") else m.role
    keys: set[tuple[str, str]] = set()
    for p in m.parts:
        match p:
            case Text() if p.text.strip():
                keys.add((role, p.text.strip()))
            case ToolCall():
                keys.add(("call", p.id))
            case ToolResult():
                keys.add(("result", p.tool_call_id))
            case Image():
                keys.add(("image", p.url))
    return keys


def _missing(
    candidates: tuple[Message, ...], base: tuple[Message, ...], notes: Notes
) -> tuple[Message, ...]:
    held: set[tuple[str, str]] = set()
    for m in base:
        held |= _keys(m)
    out = tuple(m for m in candidates if not _keys(m) <= held)
    if out:
        notes["messages merged from both input and messages"] += len(out)
    return out
