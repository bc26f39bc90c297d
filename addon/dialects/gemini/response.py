"""Gemini whole answers (``GenerateContentResponse``) ↔ ``addon.model.Response``; errors.

Contract: JSON in, ``Response`` out and back; no I/O. Only candidate 0 is read; Code Assist's
``{"response": …}`` is unwrapped. The stream codec (``stream.py``, ``stream_encode.py``) shares
the helpers here, so that a streamed and a whole answer read and write the same way. Details:
docs/dialects/gemini.md#module-notes."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from addon import jsonio
from addon.dialects.base import count_at
from addon.model import (
    JSON,
    ClientError,
    FinishReason,
    Image,
    Opaque,
    Part,
    Response,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnsupportedShape,
    Usage,
)

from .errors import error_body, status_of
from .malformed import parse_malformed as parse_malformed
from .parts import NAME
from .web_search import GROUNDING

SIGNATURE = "thoughtSignature"
"""The wire name of a part's signature, also the key of a call's signature in its ``extra``."""

_TOP_KNOWN = frozenset({"candidates", "usageMetadata", "modelVersion", "responseId"})
_CANDIDATE_KNOWN = frozenset({"content", "finishReason", "index"})
ENVELOPE = ("responseId", "modelVersion", "createTime")
"""Fields every chunk of a Gemini stream repeats."""

_FINISH: dict[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
}
MALFORMED = "MALFORMED_FUNCTION_CALL"
_EXPLAINED = {
    MALFORMED: "a malformed function call",
    "UNEXPECTED_TOOL_CALL": "a call of a tool it was not given",
    "TOO_MANY_TOOL_CALLS": "too many tool calls",
    "MISSING_THOUGHT_SIGNATURE": "a missing thought signature in the request",
}
"""Finish reasons that end an answer in failure: the client is told in a text."""

_TO_GEMINI: dict[FinishReason, str] = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
    "error": "OTHER",
    "other": "OTHER",
}


# --------------------------------------------------------------------------- shared helpers


def unwrap(body: JSON) -> tuple[JSON, JSON]:
    """``(GenerateContentResponse, Code Assist wrapper fields)``: Code Assist sends
    ``{"response": {…}, "traceId", "metadata"}``, the public API the inner object itself."""
    inner = body.get("response")
    if isinstance(inner, dict) and "candidates" not in body:
        return inner, {k: v for k, v in body.items() if k != "response"}
    return body, {}


def error_of(body: Any) -> JSON | None:
    """The ``error`` object of a Google error body (or of the first item of an array of them)."""
    if isinstance(body, list) and body:
        body = body[0]
    if isinstance(body, dict):
        if isinstance(body.get("error"), dict):
            err: JSON = body["error"]
            return err
        inner = body.get("response")
        if isinstance(inner, dict) and isinstance(inner.get("error"), dict):
            wrapped: JSON = inner["error"]
            return wrapped
    return None


def first_candidate(body: JSON) -> JSON | None:
    """Candidate 0 (``n > 1`` is not modelled: the others are not read)."""
    candidates = body.get("candidates")
    if candidates is None:
        return None
    if not isinstance(candidates, list):
        raise UnsupportedShape("Gemini candidates is not a list")
    for c in candidates:
        if isinstance(c, dict) and c.get("index", 0) == 0:
            return c
    return None


def signature_of(part: JSON) -> str | None:
    sig = part.get(SIGNATURE)
    return sig if isinstance(sig, str) and sig else None


def decode_usage(raw: JSON) -> Usage:
    """Gemini writes proto3 JSON, which leaves out counts that are 0: a missing count is 0.
    ``promptTokenCount`` counts the cached tokens too (``cachedContentTokenCount``), the
    model's ``Usage`` keeps them apart; the thoughts are output tokens (``thoughtsTokenCount``
    apart from ``candidatesTokenCount``)."""

    def count(key: str) -> int:
        return count_at(raw, key) or 0

    prompt, cached = count("promptTokenCount"), count("cachedContentTokenCount")
    thoughts = count("thoughtsTokenCount")
    output = count("candidatesTokenCount") + thoughts
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=output,
        total_tokens=count("totalTokenCount") or prompt + output,
        origin=NAME,
        raw=raw,
        cache_read_tokens=cached,
        reasoning_tokens=thoughts,
    )


def has_counts(raw: JSON) -> bool:
    """Vertex sends ``usageMetadata: {"trafficType": …}`` on chunks before the last: no counts."""
    return any(k.endswith("TokenCount") for k in raw)


def encode_usage(u: Usage | None) -> JSON | None:
    """Another dialect's counts as ``usageMetadata``; a count the upstream never gave is left
    out (the SDK reads an absent count as None, a written 0 as a count), the total too when
    it cannot be known."""
    if u is None:
        return None
    if u.origin == NAME and u.raw:
        return dict(u.raw)
    out: JSON = {}
    prompt, total = u.prompt_tokens, u.total
    if prompt is not None:
        out["promptTokenCount"] = prompt
    if u.output_tokens is not None:
        out["candidatesTokenCount"] = max(u.output_tokens - (u.reasoning_tokens or 0), 0)
    if total is not None:
        out["totalTokenCount"] = total
    if u.cache_read_tokens:
        out["cachedContentTokenCount"] = u.cache_read_tokens
    if u.reasoning_tokens:
        out["thoughtsTokenCount"] = u.reasoning_tokens
    return out


def finish_reason(raw: str, calls: bool) -> FinishReason:
    if raw == "STOP":
        return "tool_calls" if calls else "stop"
    if raw in _EXPLAINED:
        return "error"
    return _FINISH.get(raw, "other")


def gemini_finish(reason: FinishReason | None, raw: str | None, same: bool, extra: JSON) -> str:
    """The ``finishReason`` for a Gemini client: the upstream's own on a Gemini route (unless the
    bridge *recovered* a malformed call: read it back from ``finishMessage``), else mapped."""
    if same and raw and not extra.get(NAME, {}).get("recovered"):
        return raw
    return _TO_GEMINI[reason or "stop"]


def made_call_id(response_id: str | None, n: int, name: str, arguments: str) -> str:
    """An id for a call the upstream gave none: from the answer's id and the call's position,
    or (no ``responseId``) from the call itself."""
    if response_id:
        return f"call_{response_id}_{n}"
    digest = hashlib.sha256(f"{name}\0{arguments}".encode()).hexdigest()[:16]
    return f"call_{digest}_{n}"


def failure_text(raw: str, message: str | None) -> str:
    what = _EXPLAINED.get(raw, raw)
    text = f"[cursor-bridge] Gemini stopped with {raw}: the model produced {what}"
    if raw == MALFORMED:
        text += " that could not be read back into a tool call"
    if message:
        text += f". Upstream message: {message}"
    return text + ". Please try again."


def blocked_text(feedback: JSON) -> str:
    reason = feedback.get("blockReason")
    text = f"[cursor-bridge] Gemini blocked the prompt ({reason})"
    message = feedback.get("blockReasonMessage")
    if isinstance(message, str) and message:
        text += f": {message}"
    return text + "."


CALL_SIGNATURE: JSON = {NAME: {"call_signature": True}}
"""Marks the *call signature*: the copy of a call's ``thoughtSignature`` given as a
signature-only ``Thinking`` part just before the call; the Gemini encoders skip it."""


def synthetic() -> JSON:
    """Marks a *synthetic* text: one the bridge wrote (a malformed or blocked answer explained)."""
    return {NAME: {"synthetic": True}}


# --------------------------------------------------------------------------- encoding parts


def call_args(arguments: str) -> JSON:
    """The ``args`` object of a ``functionCall``; broken arguments kept as ``_raw_arguments``."""
    try:
        parsed = jsonio.loads(arguments or "{}")
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_raw_arguments": arguments}


def call_signature(extra: JSON) -> str | None:
    """A call's signature: ours (``extra["thoughtSignature"]``), or the one Gemini's
    OpenAI-compatible endpoint sends (``extra_content.google.thought_signature``)."""
    sig = extra.get(SIGNATURE)
    if isinstance(sig, str) and sig:
        return sig
    google = extra.get("extra_content")
    google = google.get("google") if isinstance(google, dict) else None
    sig = google.get("thought_signature") if isinstance(google, dict) else None
    return sig if isinstance(sig, str) and sig else None


def function_call_part(
    call_id: str, name: str, arguments: str, extra: JSON, same: bool, signature: str | None
) -> JSON:
    own: JSON = extra.get(NAME, {}) if same else {}
    fc: JSON = {"name": name, "args": call_args(arguments)}
    if call_id and not own.get("made_id"):
        fc["id"] = call_id
    fc.update(own.get("call", {}))
    part: JSON = {"functionCall": fc}
    sig = call_signature(extra) or signature
    if sig:
        part[SIGNATURE] = sig
    part.update(own.get("part", {}))
    return part


class PartWriter:
    """Unified content → Gemini parts, keeping signatures where Gemini wants them.

    A signature without text (``Thinking("", sig)`` / ``ThinkingDelta("", sig)``, or a thinking
    signature marked ``signature_on: next``) is held and put on the next text or call part
    (Gemini signs the first part after the reasoning); with nothing after it, it ends the answer
    as ``{"text": "", "thoughtSignature": …}``, the way Gemini 3 ends its own turns."""

    __slots__ = ("pending", "same")

    def __init__(self, same: bool) -> None:
        self.same = same
        self.pending: str | None = None

    def thinking(self, text: str, signature: str | None, extra: JSON) -> list[JSON]:
        out: list[JSON] = []
        own: JSON = extra.get(NAME, {}) if self.same else {}
        if own.get("call_signature"):
            return []  # the call it copies carries it
        # Another dialect's signature goes on the next part: Gemini CLI keeps no thought parts.
        later = not self.same or own.get("signature_on") == "next" or not text
        if signature and later:
            out += self.flush()
            self.pending = signature
        if text:
            part: JSON = {"text": text, "thought": True}
            if signature and not later:
                part[SIGNATURE] = signature
            part.update(own.get("part", {}))
            out.append(part)
        return out

    def text(self, text: str, extra: JSON) -> list[JSON]:
        own: JSON = extra.get(NAME, {}) if self.same else {}
        if not text or (self.same and own.get("synthetic")):
            return []
        part: JSON = {"text": text}
        if self.pending:
            part[SIGNATURE] = self.pending
            self.pending = None
        part.update(own.get("part", {}))
        return [part]

    def call(self, call_id: str, name: str, arguments: str, extra: JSON) -> list[JSON]:
        out: list[JSON] = []
        sig = None
        if self.pending and not call_signature(extra):
            sig, self.pending = self.pending, None
        else:
            out += self.flush()
        out.append(function_call_part(call_id, name, arguments, extra, self.same, sig))
        return out

    def flush(self) -> list[JSON]:
        """The held signature as the trailing empty text part, if one is held."""
        if not self.pending:
            return []
        part: JSON = {"text": "", SIGNATURE: self.pending}
        self.pending = None
        return [part]


# --------------------------------------------------------------------------- whole answers


def decode_response(body: JSON) -> Response:
    """A ``generateContent`` answer, public or Code Assist-wrapped (``{"response": …}``)."""
    inner, wrapper = unwrap(body)
    if error_of(inner) is not None and "candidates" not in inner:
        raise UnsupportedShape("a Gemini error body, not an answer")
    if "candidates" not in inner and "promptFeedback" not in inner:
        raise UnsupportedShape("not a Gemini GenerateContentResponse")
    response_id = inner.get("responseId") if isinstance(inner.get("responseId"), str) else None
    model = inner.get("modelVersion") if isinstance(inner.get("modelVersion"), str) else None
    candidate = first_candidate(inner)
    parts: list[Part] = []
    seen: set[str] = set()
    calls = 0
    content = candidate.get("content") if candidate else None
    wire_parts = content.get("parts") if isinstance(content, dict) else None
    for wire in wire_parts if isinstance(wire_parts, list) else []:
        if not isinstance(wire, dict):
            continue
        sig = signature_of(wire)
        fc = wire.get("functionCall")
        if isinstance(fc, dict):
            if sig:
                parts.append(Thinking("", sig, extra=CALL_SIGNATURE))
            parts.append(_whole_call(fc, sig, wire, response_id, calls, seen))
            calls += 1
        elif wire.get("thought") is True and isinstance(wire.get("text"), str):
            rest = {k: v for k, v in wire.items() if k not in ("text", "thought", SIGNATURE)}
            parts.append(Thinking(wire["text"], sig, extra={NAME: {"part": rest}} if rest else {}))
        elif isinstance(wire.get("text"), str):
            if sig:
                _sign_reasoning(parts, sig)
            rest = {k: v for k, v in wire.items() if k not in ("text", SIGNATURE)}
            if wire["text"] or rest:
                parts.append(Text(wire["text"], extra={NAME: {"part": rest}} if rest else {}))
        else:
            parts.append(Opaque(NAME, wire))
    finish: FinishReason | None = None
    finish_raw: str | None = None
    cand_extra: JSON = {}
    recovered = False
    if candidate is not None:
        cand_extra = {k: v for k, v in candidate.items() if k not in _CANDIDATE_KNOWN}
        raw = candidate.get("finishReason")
        if isinstance(raw, str):
            finish_raw = raw
            message = candidate.get("finishMessage")
            message = message if isinstance(message, str) else None
            call = parse_malformed(message) if raw == MALFORMED else None
            if call is not None:
                name, args = call
                call_id = made_call_id(response_id, calls, name, args)
                parts.append(ToolCall(call_id, name, args, extra={NAME: {"made_id": True}}))
                calls += 1
                finish, recovered = "tool_calls", True
            else:
                if raw in _EXPLAINED:
                    parts.append(Text(failure_text(raw, message), extra=synthetic()))
                finish = finish_reason(raw, calls > 0)
    feedback = inner.get("promptFeedback")
    if candidate is None and isinstance(feedback, dict) and feedback.get("blockReason"):
        parts.append(Text(blocked_text(feedback), extra=synthetic()))
        finish = "content_filter"
    usage = inner.get("usageMetadata")
    extra: JSON = {
        "top": {k: v for k, v in inner.items() if k not in _TOP_KNOWN},
        "candidate": cand_extra,
        "wrapper": wrapper,
    }
    if recovered:
        extra["recovered"] = True
    return Response(
        origin=NAME,
        id=response_id,
        model=model,
        parts=tuple(parts),
        finish=finish,
        finish_raw=finish_raw,
        usage=decode_usage(usage) if isinstance(usage, dict) else None,
        extra=extra,
    )


def _whole_call(
    fc: JSON, sig: str | None, wire: JSON, response_id: str | None, n: int, seen: set[str]
) -> ToolCall:
    name = str(fc.get("name") or "")
    args = fc.get("args")
    arguments = json.dumps(args if isinstance(args, dict) else {}, ensure_ascii=False)
    call_id = fc.get("id")
    own: JSON = {}
    if not isinstance(call_id, str) or not call_id or call_id in seen:
        call_id = made_call_id(response_id, n, name, arguments)
        own["made_id"] = True
    seen.add(call_id)
    rest_call = {k: v for k, v in fc.items() if k not in ("name", "args", "id")}
    rest_part = {k: v for k, v in wire.items() if k not in ("functionCall", SIGNATURE)}
    if rest_call:
        own["call"] = rest_call
    if rest_part:
        own["part"] = rest_part
    extra: JSON = {}
    if sig:
        extra[SIGNATURE] = sig
    if own:
        extra[NAME] = own
    return ToolCall(call_id, name, arguments, extra=extra)


def _sign_reasoning(parts: list[Part], sig: str) -> None:
    """A text part's signature: onto the unsigned reasoning just before it, else its own
    ``Thinking("")``."""
    last = parts[-1] if parts else None
    if isinstance(last, Thinking) and not last.signature and not last.redacted and last.text:
        own = {**last.extra.get(NAME, {}), "signature_on": "next"}
        parts[-1] = Thinking(last.text, sig, extra={**last.extra, NAME: own})
    else:
        parts.append(Thinking("", sig))


def encode_response(r: Response) -> JSON:
    """A ``generateContent`` answer for a public-API Gemini client."""
    same = r.origin == NAME
    writer = PartWriter(same)
    parts: list[JSON] = []
    grounding: JSON | None = None
    for p in r.parts:
        match p:
            case Thinking(redacted=True):
                continue  # Anthropic's encrypted reasoning: nothing Gemini can carry
            case Thinking():
                parts += writer.thinking(p.text, p.signature, p.extra)
            case Text():
                parts += writer.text(p.text, p.extra)
            case ToolCall():
                parts += writer.call(p.id, p.name, p.arguments, p.extra)
            case Opaque() if p.origin == NAME and GROUNDING in p.data:
                grounding = p.data[GROUNDING]  # the bridge's searches: the candidate's
            case Opaque():
                if p.origin == NAME:
                    parts += writer.flush()
                    parts.append(p.data)
            case Image() | ToolResult():
                continue
    parts += writer.flush()
    candidate: JSON = {"content": {"role": "model", "parts": parts}}
    if grounding is not None:
        candidate[GROUNDING] = grounding
    extra = r.extra if same else {}
    flags = {NAME: {"recovered": True}} if extra.get("recovered") else {}
    candidate["finishReason"] = gemini_finish(r.finish, r.finish_raw, same, flags)
    candidate["index"] = 0
    if same:
        candidate.update(extra.get("candidate", {}))
        if extra.get("recovered"):
            candidate.pop("finishMessage", None)
    body: JSON = {"candidates": [candidate]}
    usage = encode_usage(r.usage)
    if usage is not None:
        body["usageMetadata"] = usage
    if r.model:
        body["modelVersion"] = r.model
    if r.id:
        body["responseId"] = r.id
    if same:
        body.update(extra.get("top", {}))
    return body


def encode_code_assist_response(r: Response) -> JSON:
    """The same, wrapped as Code Assist answers (``{"response": {…}}``)."""
    wrapper = r.extra.get("wrapper", {}) if r.origin == NAME else {}
    return {"response": encode_response(r), **wrapper}


def encode_error(err: ClientError) -> JSON:
    """``{"error": {"code", "message", "status"}}``, the status name from the code (``errors``)."""
    return error_body(err.message, err.status, err.type)


def error_status(body: Any) -> int | None:
    """The HTTP status a Google error body names (its ``code``, else its ``status``)."""
    return status_of(error_of(body))


def error_message(body: Any) -> str | None:
    """The message of a Google error body — ``{"error": {…}}``, or an array holding one (a
    streamed answer without ``alt=sse``) — if it is one."""
    err = error_of(body)
    if err is None:
        return None
    message = err.get("message")
    return message if isinstance(message, str) and message else None
