"""What Kiro refuses with ``400 {"message": "Improperly formed request.", …}``, as a check
the e2e fake (``tests/e2e/test_kiro.py``) and the unit tests of the Kiro encoder share.

Kiro gives no reason; the rules are the ones public Kiro gateways found, each named with its
source in ``kiro_refusal``.
"""

from __future__ import annotations

import itertools
from typing import Any

IMPROPER = {"message": "Improperly formed request.", "reason": None}
"""Kiro's answer to a body it refuses (HTTP 400), as gateways quote it (hank9999/kiro.rs#60,
decolua/9router#1184; ``reason`` is at times ``"REQUEST_BODY_INVALID"``)."""


class Refused(Exception):
    """What the fake Kiro refuses: answered with ``IMPROPER`` (HTTP 400)."""


def _refuse(ok: object, why: str) -> None:
    if not ok:
        raise Refused(why)


def _blank(value: object) -> bool:
    return not isinstance(value, str) or not value.strip()


def kiro_refusal(body: dict[str, Any]) -> str | None:
    """Why Kiro would answer ``Improperly formed request`` to ``body``, or None. The rules
    public Kiro gateways found (each names its source):

    - every ``userInputMessage.content`` (current and history) must be a non-blank string, even
      when the turn carries only tool results or images (mikeyobrien/pi-provider-kiro#106;
      jwadow/kiro-gateway converters_core ``build_kiro_history``);
    - an ``assistantResponseMessage.content`` may be blank only when the turn made tool calls
      (the Kiro IDE 0.11 itself sends ``""`` with ``toolUses``:
      ../shared/fixtures/real/kiro-generateAssistantResponse-request-vibe-23tools-history…);
    - history alternates user / assistant, starting with the user, and each ``toolUses`` is
      answered, in order, by the ``toolResults`` of the next user message; each result has a
      ``status`` and non-blank ``content`` texts (kiro-gateway: ``(empty result)``);
    - a tool used in the history must be among the current message's tools (hank9999/kiro.rs
      ``create_placeholder_tool``; kiro-gateway strips tool content when there are no tools);
    - each tool has a name, a non-blank description and an ``inputSchema.json`` object of type
      ``object`` (kiro-gateway ``convert_tools_to_kiro_format``; kiro.rs
      ``normalize_json_schema``)."""
    try:
        _check(body)
    except Refused as e:
        return str(e)
    return None


def _check(body: dict[str, Any]) -> None:
    state = body.get("conversationState")
    _refuse(isinstance(state, dict), "no conversationState")
    current = state["currentMessage"]["userInputMessage"]
    history = state.get("history") or []
    entries = [*history, state["currentMessage"]]
    kinds = [next(iter(e)) for e in entries]
    _refuse(kinds[0] == "userInputMessage", f"history starts with {kinds[0]}")
    for a, b in itertools.pairwise(kinds):
        _refuse(a != b, f"roles must alternate: {kinds}")
    for i, e in enumerate(entries):
        where = f"history[{i}]" if i < len(history) else "currentMessage"
        if "userInputMessage" in e:
            m = e["userInputMessage"]
            _refuse(not _blank(m.get("content")), f"{where}.userInputMessage.content is blank")
        else:
            m = e["assistantResponseMessage"]
            _refuse(
                isinstance(m.get("content"), str) and (m["content"].strip() or m.get("toolUses")),
                f"{where}.assistantResponseMessage.content is blank and it made no calls",
            )
    used: set[str] = set()
    for before, after in itertools.pairwise(entries):
        if "assistantResponseMessage" not in before:
            continue
        uses = before["assistantResponseMessage"].get("toolUses") or ()
        used.update(u["name"].lower() for u in uses)
        context = after["userInputMessage"].get("userInputMessageContext") or {}
        results = context.get("toolResults") or []
        _refuse(
            [r["toolUseId"] for r in results] == [u["toolUseId"] for u in uses],
            "toolResults must match toolUses",
        )
        for r in results:
            _refuse(r.get("status") in ("success", "error"), "a tool result without a status")
            content = r.get("content")
            _refuse(
                isinstance(content, list)
                and content
                and all(not _blank(c.get("text")) for c in content),
                f"tool result {r['toolUseId']} has blank content",
            )
    tools = (current.get("userInputMessageContext") or {}).get("tools") or []
    names = set()
    for t in tools:
        spec = t["toolSpecification"]
        _refuse(not _blank(spec.get("name")), "a tool without a name")
        _refuse(not _blank(spec.get("description")), f"tool {spec['name']} has a blank description")
        schema = (spec.get("inputSchema") or {}).get("json")
        _refuse(
            isinstance(schema, dict) and schema.get("type") == "object",
            f"tool {spec['name']} has no object input schema",
        )
        names.add(spec["name"].lower())
    _refuse(used <= names, f"tools used in the history are not declared: {sorted(used - names)}")
