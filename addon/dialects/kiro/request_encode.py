"""Unified ``Request`` → the body of Kiro's ``POST /generateAssistantResponse``.

Contract: ``encode_request`` turns a unified request (from any client dialect) into the body
the Kiro IDE sends (its shape: ``request``); no I/O. Runs after ``placement.prepare``. Every
change Kiro's rules force is noted. Details: docs/dialects/kiro.md#module-notes."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Literal

from addon import jsonio
from addon.dialects.base import unsupported_tool
from addon.model import (
    JSON,
    Image,
    Message,
    Notes,
    Opaque,
    OpaqueTool,
    Request,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)

from .request import NAME, SIDE, decode_result_content

ORIGIN = "AI_EDITOR"
TRIGGER = "MANUAL"
TASK_TYPE = "vibe"
ACK = "I will follow these instructions."
"""The assistant's answer to the system prompt turn, as the Kiro IDE writes it."""
CONTINUE = "Continue."
EMPTY = "(empty)"
RESULTS_ONLY = "(tool results)"
"""The text of a user turn that holds only tool results: Kiro refuses blank content."""
IMAGES_ONLY = "(image)"
"""The text of a user turn that holds only images."""
EMPTY_RESULT = "(empty result)"
HISTORY_TOOL = "A tool used earlier in this conversation."
"""The description of a tool the history called that the request no longer offers (Kiro
refuses a history that uses a tool its current message does not declare)."""
NO_RESULT = "(no result: the client sent none for this call)"
RAW_ARGUMENTS = "_raw_arguments"
SYSTEM_TAG = "system"
_NAMESPACE = uuid.UUID("5c1d6b0e-6a35-4f4e-9a7e-6b1f0c2d3e4f")
"""Namespace of the conversation ids the bridge derives (uuid5)."""
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_SESSION = re.compile(rf"session_({_UUID})")
_SESSION_ID = re.compile(_UUID)


@dataclass(slots=True)
class _Turn:
    role: Literal["user", "assistant"]
    texts: list[str] = field(default_factory=list)
    images: list[JSON] = field(default_factory=list)
    results: list[JSON] = field(default_factory=list)
    uses: list[JSON] = field(default_factory=list)
    own: JSON = field(default_factory=dict)
    """A Kiro client's unmodelled fields of this message (same dialect only)."""


def encode_request(req: Request, notes: Notes) -> JSON:
    """The conversation folded into alternating turns (``history`` + ``currentMessage``), tools
    in the current message only, and every blank content Kiro refuses filled in."""
    return _Encoder(req, notes).encode()


class _Encoder:
    def __init__(self, req: Request, notes: Notes) -> None:
        self.req = req
        self.notes = notes
        side = req.extra.get(SIDE)
        self.side: JSON = side if isinstance(side, dict) else {}
        self.own = req.origin == NAME

    def encode(self) -> JSON:
        req = self.req
        system, turns = self.turns()
        if turns and turns[-1].role == "assistant":
            turns.append(_Turn("user", texts=[CONTINUE]))
            self.notes["conversation ending with the assistant: Kiro asked to continue"] += 1
        if not turns:
            turns.append(_Turn("user"))
        self.pair_results(turns)
        history: list[JSON] = []
        if system:
            history.append({"userInputMessage": self.user_message(_Turn("user", [system]))})
            history.append({"assistantResponseMessage": {"content": ACK, "toolUses": []}})
        current = turns[-1]
        for turn in turns[:-1]:
            if turn.role == "user":
                history.append({"userInputMessage": self.user_message(turn)})
            else:
                history.append({"assistantResponseMessage": self.assistant_message(turn)})
        message = self.user_message(current)
        # The IDE sends the context on the current message, empty when there is nothing.
        context: JSON = message.pop("userInputMessageContext", {})
        specs = self.tools(turns)
        if specs:
            context["tools"] = specs
        message["userInputMessageContext"] = context
        if req.tool_choice is not None and req.tool_choice.mode != "auto":
            self.notes[f"tool_choice {req.tool_choice.mode} dropped (Kiro has none)"] += 1
        conversation_id = self.conversation_id(turns)
        state: JSON = {
            "agentContinuationId": str(uuid.uuid5(_NAMESPACE, f"continuation:{conversation_id}")),
            "agentTaskType": TASK_TYPE,
            "chatTriggerType": TRIGGER,
            "conversationId": conversation_id,
            "currentMessage": {"userInputMessage": message},
            "history": history,
        }
        if self.own:  # a Kiro client's own fields (agentContinuationId …) win
            state.update(self.side.get("state") or {})
        body: JSON = {"conversationState": state}
        arn = self.side.get("profile_arn")
        if isinstance(arn, str) and arn:
            body["profileArn"] = arn
        if self.own:
            for key, value in (self.side.get("top") or {}).items():
                body.setdefault(key, value)
        return body

    # ------------------------------------------------------------------ turns

    def turns(self) -> tuple[str, list[_Turn]]:
        system: list[str] = []
        turns: list[_Turn] = []
        leading = True
        for m in self.req.messages:
            if m.role in ("system", "developer"):
                text = "\n\n".join(p.text for p in m.parts if isinstance(p, Text) and p.text)
                if any(not isinstance(p, Text) for p in m.parts):
                    self.notes["non-text parts of a system message dropped (Kiro takes text)"] += 1
                if leading:
                    if text:
                        system.append(text)
                    continue
                if text:
                    self.notes["system message after the first turn sent as user text"] += 1
                    self.turn(turns, "user").texts.append(
                        f"<{SYSTEM_TAG}>\n{text}\n</{SYSTEM_TAG}>"
                    )
                continue
            leading = False
            turn = self.turn(turns, "assistant" if m.role == "assistant" else "user")
            if m.role == "assistant":
                self.assistant_parts(m, turn)
            else:
                self.user_parts(m, turn)
            own = m.extra.get(NAME)
            if self.own and isinstance(own, dict):
                turn.own |= own
        if turns and turns[0].role == "assistant":
            turns.insert(0, _Turn("user", texts=[CONTINUE]))
            self.notes["conversation starting with the assistant: a user turn put before"] += 1
        return "\n\n".join(system), turns

    @staticmethod
    def turn(turns: list[_Turn], role: Literal["user", "assistant"]) -> _Turn:
        if turns and turns[-1].role == role:
            return turns[-1]  # Kiro wants the roles to alternate: merged
        turns.append(_Turn(role))
        return turns[-1]

    def user_parts(self, m: Message, turn: _Turn) -> None:
        for p in m.parts:
            match p:
                case Text():
                    if p.text:
                        turn.texts.append(p.text)
                case Image():
                    self.image(p, turn)
                case ToolResult():
                    turn.results.append(self.result(p, turn))
                case Thinking():
                    if p.text and not p.redacted:
                        turn.texts.append(p.text)
                case ToolCall():
                    self.notes[f"tool call in a {m.role} message sent as text"] += 1
                    turn.texts.append(json.dumps({"tool_call": p.name, "arguments": p.arguments}))
                case Opaque():
                    turn.texts.append(self.opaque(p))

    def assistant_parts(self, m: Message, turn: _Turn) -> None:
        for p in m.parts:
            match p:
                case Text():
                    if p.text:
                        turn.texts.append(p.text)
                case ToolCall():
                    args = _args_object(p.arguments, p.custom)
                    if RAW_ARGUMENTS in args and not p.custom:
                        self.notes["unparsable tool arguments kept as _raw_arguments"] += 1
                    turn.uses.append({"toolUseId": p.id, "name": p.name, "input": args})
                case Thinking():
                    self.notes["reasoning in the history dropped (Kiro takes none back)"] += 1
                case Image():
                    self.notes["image in an assistant message dropped"] += 1
                case ToolResult():
                    self.notes["tool result in an assistant message dropped"] += 1
                case Opaque():
                    turn.texts.append(self.opaque(p))

    def image(self, p: Image, turn: _Turn) -> None:
        m = re.match(r"data:image/([A-Za-z0-9.+-]+);base64,", p.url)
        if m is None:
            self.notes["image URLs sent as text (Kiro takes image bytes only)"] += 1
            turn.texts.append(f"[image: {p.url}]")
            return
        fmt = {"jpg": "jpeg", "svg+xml": "svg"}.get(m[1].lower(), m[1].lower())
        turn.images.append({"format": fmt, "source": {"bytes": p.url[m.end() :]}})

    def opaque(self, p: Opaque) -> str:
        self.notes[f"{p.origin} part sent as JSON text"] += 1
        return json.dumps(p.data, ensure_ascii=False)

    def result(self, p: ToolResult, turn: _Turn) -> JSON:
        own = p.extra.get(NAME)
        if self.own and isinstance(own, dict) and _same_result(own, p):
            return own  # a Kiro client's result, as it was
        shaped = _kiro_shaped(p.content)
        if shaped is not None:
            self.notes["tool results already in Kiro's shape kept"] += 1
            return {**shaped, "toolUseId": p.tool_call_id}
        texts: list[str] = []
        if isinstance(p.content, str):
            texts.append(p.content)
        else:
            for q in p.content:
                match q:
                    case Text() | Thinking():
                        texts.append(q.text)
                    case Image():
                        self.image(q, turn)
                        self.notes["images of tool results sent with their message"] += 1
                    case Opaque():
                        texts.append(json.dumps(q.data, ensure_ascii=False))
                    case ToolCall() | ToolResult():
                        texts.append(json.dumps({"kind": q.kind}))
        content = [{"text": t} for t in texts if t.strip()]
        if not content:
            content = [{"text": EMPTY_RESULT}]
        return {
            "content": content,
            "status": "error" if p.is_error else "success",
            "toolUseId": p.tool_call_id,
        }

    def pair_results(self, turns: list[_Turn]) -> None:
        """Each user turn answers exactly the calls of the assistant turn before it, in their
        order: stray results go as text, unanswered calls get an error result."""
        calls: list[str] = []
        for turn in turns:
            if turn.role == "assistant":
                calls = [u["toolUseId"] for u in turn.uses]
                continue
            by_id: dict[str, JSON] = {}
            stray: list[JSON] = []
            for r in turn.results:
                rid = r.get("toolUseId")
                if rid in calls and rid not in by_id:
                    by_id[rid] = r
                else:
                    stray.append(r)
            ordered: list[JSON] = []
            for cid in calls:
                if cid in by_id:
                    ordered.append(by_id[cid])
                else:
                    self.notes["tool calls without a result answered with an error result"] += 1
                    ordered.append(
                        {"content": [{"text": NO_RESULT}], "status": "error", "toolUseId": cid}
                    )
            if stray:
                self.notes["tool results answering no call of the turn before sent as text"] += len(
                    stray
                )
                turn.texts[:0] = [_result_text(r) for r in stray]
            turn.results = ordered
            calls = []

    def user_message(self, turn: _Turn) -> JSON:
        content = "\n\n".join(turn.texts)
        if not content.strip():
            # Kiro refuses blank content, also beside tool results or images
            # (mikeyobrien/pi-provider-kiro#106; the Kiro IDE never sends it blank).
            if turn.results:
                self.notes[f"user turn of tool results only sent with the text {RESULTS_ONLY}"] += 1
                content = RESULTS_ONLY
            elif turn.images:
                self.notes[f"user turn of images only sent with the text {IMAGES_ONLY}"] += 1
                content = IMAGES_ONLY
            else:
                self.notes["empty user message sent as (empty)"] += 1
                content = EMPTY
        message: JSON = {"content": content, "modelId": self.req.model, "origin": ORIGIN}
        if turn.images:
            message["images"] = turn.images
        if turn.results:
            message["userInputMessageContext"] = {"toolResults": turn.results}
        if turn.own:  # a Kiro client's message: its own fields as they were
            message |= turn.own.get("message") or {}
            context = turn.own.get("context")
            if isinstance(context, dict):
                message["userInputMessageContext"] = context | message.get(
                    "userInputMessageContext", {}
                )
        return message

    def assistant_message(self, turn: _Turn) -> JSON:
        content = "\n\n".join(turn.texts)
        # Blank beside calls is how the Kiro IDE itself writes a turn of calls only.
        if not content.strip() and not turn.uses:
            self.notes["empty assistant message sent as (empty)"] += 1
            content = EMPTY
        message: JSON = {"content": content}
        if turn.uses or turn.own.get("empty_uses"):
            message["toolUses"] = turn.uses
        if turn.own:
            message |= turn.own.get("message") or {}
        return message

    def tools(self, turns: list[_Turn]) -> list[JSON]:
        specs: list[JSON] = []
        for i, t in enumerate(self.req.tools or ()):
            if isinstance(t, OpaqueTool):
                if t.origin != NAME:  # left out before (addon.transforms.tools.leave_out_tools)
                    raise unsupported_tool(t, i, "a Kiro upstream")
                specs.append(t.data)
                continue
            description = t.description
            if not description or not description.strip():
                self.notes["tools without a description described by their name"] += 1
                description = t.name
            specs.append(_spec(t.name, description, t.parameters))
        # Kiro refuses a history that calls a tool the current message does not declare
        # (hank9999/kiro.rs declares such tools; Kiro matches names case-insensitively).
        declared = {_spec_name(s).lower() for s in specs}
        for turn in turns:
            for use in turn.uses:
                name = use["name"]
                if name.lower() not in declared:
                    declared.add(name.lower())
                    self.notes["tools the history used but the request lacks declared"] += 1
                    specs.append(_spec(name, HISTORY_TOOL, None))
        return specs

    def conversation_id(self, turns: list[_Turn]) -> str:
        own = self.side.get("conversation_id")
        if isinstance(own, str) and own:
            return own
        session = session_id(self.req.params.user)
        if session is not None:
            return session
        first = next((m for m in self.req.messages if m.role == "user"), None)
        seed = "\n".join(p.text for p in first.parts if isinstance(p, Text)) if first else ""
        if not seed and turns:
            seed = "\n".join(turns[0].texts)
        digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()
        return str(uuid.uuid5(_NAMESPACE, digest))


def session_id(user: str | None) -> str | None:
    """The session UUID Claude Code puts in ``metadata.user_id`` (lower case), in either of its
    forms: a JSON object's ``session_id`` (Claude Code 2.1: ``{"device_id", "account_uuid",
    "session_id"}``, ../shared/fixtures/real/clients/claude-code-2.1.197-*) or the older
    ``user_<hash>_account_<uuid>_session_<uuid>``; None when it holds neither."""
    if not user:
        return None
    if user.lstrip().startswith("{"):
        try:
            value = jsonio.loads(user)
        except (ValueError, RecursionError):
            value = None
        found = value.get("session_id") if isinstance(value, dict) else None
        if isinstance(found, str) and _SESSION_ID.fullmatch(found):
            return found.lower()
    m = _SESSION.search(user)
    return m[1].lower() if m else None


def _spec(name: str, description: str, parameters: JSON | None) -> JSON:
    """A ``toolSpecification``; its schema an object schema, as Kiro requires (an empty one, or
    one without a ``type``, becomes ``{"type": "object", …}``)."""
    schema: JSON = {"type": "object", **(parameters or {})}
    if not isinstance(schema.get("type"), str) or not schema["type"]:
        schema["type"] = "object"
    return {
        "toolSpecification": {
            "name": name,
            "description": description,
            "inputSchema": {"json": schema},
        }
    }


def _spec_name(spec: JSON) -> str:
    inner = spec.get("toolSpecification")
    name = inner.get("name") if isinstance(inner, dict) else None
    return name if isinstance(name, str) else ""


def _args_object(arguments: str, custom: bool) -> JSON:
    if custom:
        return {"input": arguments}
    if not arguments.strip():
        return {}
    try:
        args = jsonio.loads(arguments)
    except ValueError:
        args = None
    return args if isinstance(args, dict) else {RAW_ARGUMENTS: arguments}


def _kiro_shaped(content: object) -> JSON | None:
    """A result the client already wrote in Kiro's shape (``{"content": [{"text"}…],
    "status"}`` as JSON text, as some gateways' clients send it): its content and status."""
    if not isinstance(content, str) or not content.lstrip().startswith("{"):
        return None
    try:
        value = jsonio.loads(content)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("status") not in ("success", "error"):
        return None
    items = value.get("content")
    if not isinstance(items, list) or not items:
        return None
    if not all(isinstance(i, dict) and isinstance(i.get("text"), str) for i in items):
        return None
    texts = [{"text": i["text"] if i["text"].strip() else EMPTY_RESULT} for i in items]
    return {"content": texts, "status": value["status"]}


def _result_text(r: JSON) -> str:
    texts = [c.get("text", "") for c in r.get("content") or () if isinstance(c, dict)]
    return f"[Tool result for {r.get('toolUseId')}]\n" + "\n".join(t for t in texts if t)


def _same_result(own: JSON, p: ToolResult) -> bool:
    content, is_error = decode_result_content(own)
    return (content, is_error) == (p.content, p.is_error)
