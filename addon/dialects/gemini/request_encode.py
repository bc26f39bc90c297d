"""``addon.model.Request`` → a Gemini request (``GenerateContentRequest``): the encoder.

Contract: ``Request`` in, JSON body out, for a Gemini upstream (the model goes in the path or
in Code Assist's envelope: ``placement``). A request that came from a Gemini client is written
back as it came, from the private table the decoder kept (``request``). Raises ``ClientError``
for what Gemini cannot be sent (a tool result naming no function)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from addon.dialects.base import unsupported_tool
from addon.model import (
    JSON,
    ClientError,
    Image,
    Message,
    Notes,
    Opaque,
    OpaqueTool,
    Part,
    Request,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolResult,
)

from .parts import (
    NAME,
    OWN,
    SIDE,
    SIGNATURE,
    args_object,
    decode_result_content,
    digest,
    encode_image,
    result_response,
    signature_of,
)
from .placement import bare_model
from .request import FC_CONFIG, GENERATION, decode_choice, decode_thinking, json_schema

SYSTEM_TAG = "system"
"""Mid-conversation system messages are sent as ``<system>…</system>`` user text."""
MAX_STOP_SEQUENCES = 5
"""Gemini takes at most five stop sequences."""
_LEVEL_OUT: dict[str, str] = {
    "minimal": "LOW",
    "low": "LOW",
    "medium": "HIGH",
    "high": "HIGH",
    "xhigh": "HIGH",
}
_EFFORT_BUDGET: dict[str, int] = {
    "minimal": 512,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 24576,
}
"""Thinking budgets for an effort on models that take no level (Gemini 2.5 Flash's maximum is
24576; Flash-Lite's minimum 512)."""
_OLD_MODEL = re.compile(r"(?:models/)?gemini-[12][.-]")
"""Gemini 1.x / 2.x: thinking budgets only, and no thought-signature check."""


def runs_tool(t: OpaqueTool) -> bool:
    """What a Gemini upstream runs of the tool kinds only some dialects have: Gemini's own
    (``googleSearch``, ``codeExecution`` …), from either wrapper."""
    return t.origin in OWN


def encode_request(req: Request, notes: Notes) -> JSON:
    """The ``GenerateContentRequest`` body for a Gemini upstream (the model goes in the path,
    or in Code Assist's envelope). Only signed thinking is sent; later system messages stay
    in place as ``<system>`` text. Details: docs/dialects/gemini.md#module-notes."""
    enc = _Encoder(req, notes)
    system, contents = enc.contents()
    body: JSON = {}
    if enc.own and "body_model" in enc.side:
        raw = enc.side["body_model"]
        body["model"] = raw if bare_model(raw) == req.model else req.model
    body["contents"] = contents
    if system:
        instruction: JSON = {"parts": system}
        instruction.update(enc.side.get("system") or {})
        body["systemInstruction"] = instruction
    if req.tools is not None:
        tools = enc.tools(req.tools)
        if tools or enc.own:
            body["tools"] = tools
    tool_config = enc.tool_config(body.get("tools") or [])
    if tool_config is not None:
        body["toolConfig"] = tool_config
    generation = enc.generation()
    if generation:
        body["generationConfig"] = generation
    if enc.own:
        body.update((k, v) for k, v in req.extra.items() if k not in (SIDE, "generationConfig"))
    return body


class _PartEncoder:
    """One unified part → one Gemini part, with what the decoder kept of it (``take``)."""

    def __init__(self, req: Request, notes: Notes, own: bool, side: JSON) -> None:
        self.notes = notes
        self.own = own
        table = side.get("parts") or {}
        self.table: dict[str, list[JSON]] = {k: list(v) for k, v in table.items()}
        self.names = {
            p.id: p.name for m in req.messages for p in m.parts if isinstance(p, ToolCall)
        }

    def take(self, kind: str, value: str) -> JSON:
        """The next leftover of a part of this kind with this id (call/result) or content
        (text, thought, image), in decode order; ``{}`` when there is none."""
        if not self.table:
            return {}
        key = f"{kind}:{value}" if kind in ("c", "r") else f"{kind}:{digest(value)}"
        entries = self.table.get(key)
        return entries.pop(0) if entries else {}

    def text(self, p: Text) -> JSON | None:
        left = self.take("t", p.text)
        part: JSON = {"text": p.text}
        part.update(left.get("part") or {})
        signature = signature_of(p)
        if signature and SIGNATURE not in part:
            part[SIGNATURE] = signature
        if not p.text and not self.own and SIGNATURE not in part:
            self.notes["empty text parts dropped (Gemini refuses them)"] += 1
            return None
        return part

    def thought(self, p: Thinking) -> JSON:
        left = self.take("h", p.text)
        part: JSON = {"text": p.text, "thought": True}
        if p.signature:
            part[SIGNATURE] = p.signature
        part.update(left.get("part") or {})
        return part

    def image(self, p: Image) -> JSON:
        left = self.take("i", p.url)
        mime = left.get("mime")
        part = encode_image(p, mime or None)
        blob = part.get("inlineData") or part["fileData"]
        if mime == "":  # a fileData image that came without a mimeType
            blob.pop("mimeType", None)
        blob.update(left.get("inner") or {})
        part.update(left.get("part") or {})
        return part

    def opaque(self, p: Opaque) -> JSON:
        if p.origin == NAME:
            return p.data
        self.notes[f"{p.origin} part sent as JSON text"] += 1
        return {"text": json.dumps(p.data, ensure_ascii=False)}

    def call(self, p: ToolCall, carried: str | None) -> JSON:
        left = self.take("c", p.id)
        args, wrapped = args_object(p.arguments, p.custom)
        if wrapped:
            self.notes["unparsable tool arguments kept as _raw_arguments"] += 1
        call: JSON = {"name": p.name, "args": args}
        if not left.get("no_id") and p.id:
            call["id"] = p.id
        call.update(left.get("inner") or {})
        part: JSON = {"functionCall": call}
        part.update(left.get("part") or {})
        signature = carried or signature_of(p)
        if signature and SIGNATURE not in part:
            part[SIGNATURE] = signature
        return part

    def result(self, p: ToolResult, after: list[JSON]) -> JSON:
        name = p.name or self.names.get(p.tool_call_id)
        if not name:
            raise ClientError(
                f"the tool result for call id '{p.tool_call_id}' names no function and answers "
                "no tool call of this conversation; Gemini needs the function's name",
                param="messages",
                code="unknown_tool_call",
            )
        left = self.take("r", p.tool_call_id)
        inner: JSON = dict(left.get("inner") or {})
        response: JSON = {"name": name}
        if not left.get("no_id") and p.tool_call_id:
            response["id"] = p.tool_call_id
        if "response" in left and _same_result(left["response"], inner.get("parts"), p):
            response["response"] = left["response"]
        else:
            inner.pop("parts", None)
            text, images = self.flatten(p.content)
            response["response"] = result_response(text, p.is_error)
            after.extend(self.image(i) for i in images)
        response.update(inner)
        part: JSON = {"functionResponse": response}
        part.update(left.get("part") or {})
        return part

    def flatten(self, content: str | tuple[Part, ...]) -> tuple[str, list[Image]]:
        if isinstance(content, str):
            return content, []
        texts: list[str] = []
        images: list[Image] = []
        for q in content:
            match q:
                case Text() | Thinking():
                    if q.text:
                        texts.append(q.text)
                case Image():
                    images.append(q)
                case Opaque():
                    texts.append(json.dumps(q.data, ensure_ascii=False))
                case ToolCall() | ToolResult():
                    texts.append(json.dumps({"kind": q.kind}, ensure_ascii=False))
        if images:
            self.notes["images of tool results sent as parts beside them"] += 1
        return "\n".join(texts), images


class _Encoder:
    """Turns and request fields; each part is written by ``_PartEncoder``."""

    def __init__(self, req: Request, notes: Notes) -> None:
        self.req = req
        self.notes = notes
        self.own = req.origin in OWN
        side = req.extra.get(SIDE) if self.own else None
        self.side: JSON = side if isinstance(side, dict) else {}
        self.part = _PartEncoder(req, notes, self.own, self.side)

    # ------------------------------------------------------------------ contents

    def contents(self) -> tuple[list[JSON], list[JSON]]:
        system: list[JSON] = []
        turns: list[JSON] = []
        for m in self.req.messages:
            role: Literal["user", "model"]
            if m.role in ("system", "developer"):
                if not turns:
                    system.extend(self.system_parts(m))
                    continue
                role, parts = "user", self.mid_system(m)
            elif m.role == "assistant":
                role, parts = "model", self.model_parts(m)
            else:
                role, parts = "user", self.user_parts(m)
            if not parts:
                self.notes["empty message dropped" if not m.parts else "message left empty"] += 1
                continue
            if turns and turns[-1]["role"] == role and not self.own:
                turns[-1]["parts"].extend(parts)  # Gemini wants the roles to alternate
            else:
                turns.append({"role": role, "parts": parts})
        if not self.own:
            self.order_results(turns)
        return system, turns

    def system_parts(self, m: Message) -> list[JSON]:
        out: list[JSON] = []
        for p in m.parts:
            if isinstance(p, Text):
                part = self.part.text(p)
                if part is not None:
                    out.append(part)
            else:
                self.notes[f"{p.kind} part of a system message dropped (Gemini takes text)"] += 1
        return out

    def mid_system(self, m: Message) -> list[JSON]:
        text = "\n\n".join(p.text for p in m.parts if isinstance(p, Text) and p.text)
        if any(not isinstance(p, Text) for p in m.parts):
            self.notes["non-text parts of a system message dropped (Gemini takes text)"] += 1
        if not text:
            return []
        self.notes["system message after the first turn sent as user text"] += 1
        return [{"text": f"<{SYSTEM_TAG}>\n{text}\n</{SYSTEM_TAG}>"}]

    def user_parts(self, m: Message) -> list[JSON]:
        out: list[JSON] = []
        after: list[JSON] = []
        for p in m.parts:
            match p:
                case Text():
                    part = self.part.text(p)
                    if part is not None:
                        out.append(part)
                case Image():
                    out.append(self.part.image(p))
                case ToolResult():
                    out.append(self.part.result(p, after))
                case Thinking():
                    if p.text and not p.redacted:
                        out.append({"text": p.text})
                case ToolCall():
                    self.notes[f"tool call in a {m.role} message sent as text"] += 1
                    text = json.dumps({"tool_call": p.name, "arguments": p.arguments})
                    out.append({"text": text})
                case Opaque():
                    out.append(self.part.opaque(p))
        return out + after

    def model_parts(self, m: Message) -> list[JSON]:
        out: list[JSON] = []
        carried: str | None = None
        parts = m.parts
        for k, p in enumerate(parts):
            match p:
                case Thinking():
                    if self.own:
                        out.append(self.part.thought(p))
                        continue
                    if p.redacted or not p.signature:
                        self.notes["unsigned reasoning dropped (Gemini takes only its own)"] += 1
                        continue
                    call = next((q for q in parts[k + 1 :] if isinstance(q, ToolCall)), None)
                    if call is not None and signature_of(call) is None:
                        # Gemini signs the first call of a step, not its thoughts: put it back.
                        carried = p.signature
                        continue
                    out.append({"text": p.text, "thought": True, SIGNATURE: p.signature})
                case ToolCall():
                    out.append(self.part.call(p, carried))
                    carried = None
                case Text():
                    part = self.part.text(p)
                    if part is not None:
                        out.append(part)
                case Image():
                    out.append(self.part.image(p))
                case Opaque():
                    out.append(self.part.opaque(p))
                case ToolResult():
                    self.notes["tool result in an assistant message dropped"] += 1
        return out

    def order_results(self, turns: list[JSON]) -> None:
        """In each user turn the function responses first, in the order of the calls of the
        model turn before it; the other parts after them, in their order."""
        calls: dict[str, int] = {}
        for turn in turns:
            parts: list[JSON] = turn["parts"]
            if turn["role"] == "model":
                ids = (p["functionCall"].get("id") for p in parts if "functionCall" in p)
                calls = {cid: k for k, cid in enumerate(ids) if cid}
                continue
            last = len(calls)

            def key(part: JSON, calls: dict[str, int] = calls, last: int = last) -> tuple[int, int]:
                response = part.get("functionResponse")
                if response is None:
                    return (1, 0)
                return (0, calls.get(response.get("id", ""), last))

            parts.sort(key=key)

    # ------------------------------------------------------------------ tools

    def tools(self, tools: tuple[Tool | OpaqueTool, ...]) -> list[JSON]:
        entries: list[JSON] = []
        declarations: list[JSON] = []
        for i, t in enumerate(tools):
            if isinstance(t, OpaqueTool):
                if not runs_tool(t):  # left out before (addon.transforms.tools.leave_out_tools)
                    raise unsupported_tool(t, i, "a Gemini upstream")
                entries.append(t.data)
                continue
            if not declarations:
                entries.append({"functionDeclarations": declarations})
            declarations.append(self.declaration(t))
        return entries

    def declaration(self, t: Tool) -> JSON:
        own: JSON = t.extra.get(NAME) or {}
        out: JSON = {"name": t.name}
        if t.description is not None:
            out["description"] = t.description
        key = own.get("_schema")
        if key is not None:
            raw = own.get("_raw_schema")
            unchanged = raw is not None and (
                (json_schema(raw) if key == "parameters" else raw) == t.parameters
            )
            out[key] = raw if unchanged else t.parameters
        elif not _empty_object(t.parameters):
            out["parameters"] = t.parameters
        out.update((k, v) for k, v in own.items() if not k.startswith("_"))
        return out

    def tool_config(self, tools: list[JSON]) -> JSON | None:
        choice = self.req.tool_choice
        raw = self.side.get("tool_config")
        if isinstance(raw, dict) and decode_choice(raw) == choice:
            return raw
        kept: JSON = (
            {k: v for k, v in raw.items() if k not in FC_CONFIG} if isinstance(raw, dict) else {}
        )
        if choice is None:
            return kept or None
        if not any("functionDeclarations" in t for t in tools):
            self.notes["tool_choice dropped (no function tools for Gemini)"] += 1
            return None
        if choice.disable_parallel:
            self.notes["parallel tool calls cannot be turned off for Gemini"] += 1
        config: JSON = {"mode": _MODES[choice.mode]}
        if choice.mode == "tool" and choice.name:
            config["allowedFunctionNames"] = [choice.name]
        kept["functionCallingConfig"] = config
        return kept

    # ------------------------------------------------------------------ generationConfig

    def generation(self) -> JSON:
        req, p = self.req, self.req.params
        base = req.extra.get("generationConfig") if self.own else None
        out: JSON = dict(base) if isinstance(base, dict) else {}
        raw: JSON = self.side.get("generation") or {}
        for key, field in GENERATION.items():
            value = getattr(p, field)
            if value is None:
                continue
            out[key] = raw[key] if key in raw and raw[key] == value else value
        if p.stop is not None:
            stops = list(p.stop)
            if raw.get("stopSequences") == stops:
                out["stopSequences"] = raw["stopSequences"]
            elif stops or self.own:
                if len(stops) > MAX_STOP_SEQUENCES:
                    self.notes[f"stop sequences cut to {MAX_STOP_SEQUENCES} (Gemini's limit)"] += 1
                    stops = stops[:MAX_STOP_SEQUENCES]
                out["stopSequences"] = stops
        if not self.own:
            if p.user is not None:
                self.notes["user dropped (Gemini has no end-user field)"] += 1
            out.setdefault("candidateCount", 1)
        thinking = self.thinking()
        if thinking is not None:
            out["thinkingConfig"] = thinking
        return out

    def thinking(self) -> JSON | None:
        t = self.req.thinking
        raw = self.side.get("thinking")
        if self.own and raw is not None and decode_thinking(raw) == t:
            return raw if isinstance(raw, dict) else None
        if t is None or not t.enabled:
            return None
        out: JSON = dict(raw) if isinstance(raw, dict) else {"includeThoughts": True}
        for key in ("thinkingBudget", "thinkingLevel", "thinking_budget", "thinking_level"):
            out.pop(key, None)
        if t.budget_tokens is not None:
            out["thinkingBudget"] = t.budget_tokens
        elif t.effort is not None:
            if _OLD_MODEL.match(self.req.model):
                out["thinkingBudget"] = _EFFORT_BUDGET[t.effort]
            else:
                out["thinkingLevel"] = _LEVEL_OUT[t.effort]
        return out


_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE", "tool": "ANY"}


def _same_result(response: Any, nested: Any, p: ToolResult) -> bool:
    """Whether a result still says what its wire ``response`` (and nested parts) said."""
    return decode_result_content(response, nested) == (p.content, p.is_error)


def _empty_object(schema: JSON) -> bool:
    """An object schema without properties: Gemini refuses it as ``parameters``; no parameters
    say the same."""
    if schema.get("properties") or any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref")):
        return False
    return bool(schema.get("type", "object") == "object")
