"""What the real upstream services refuse in a request body, and how they answer it.

``refusal(dialect, body)`` is the real service's 400 (status and body in its own shape) for a
body that breaks one of its conversation rules, or None; ``refusal_for(method, path, body)``
picks the dialect from the path, as ``tests.e2e.harness.ScriptedUpstream`` does. The rules, their
sources and how they were checked against recordings: docs/tests.md "Strict upstream rules".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.kiro_rules import IMPROPER, kiro_refusal


@dataclass(frozen=True)
class Refusal:
    """The service's answer to a body it refuses: ``status`` and JSON ``body``; ``message`` is
    the reason in the service's words."""

    dialect: str
    status: int
    body: dict[str, Any]
    message: str


class _Refused(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def dialect_of(path: str) -> str | None:
    """The upstream dialect a request path belongs to, or None (not a generating endpoint)."""
    bare = path.split("?", 1)[0]
    if bare.endswith("/chat/completions"):
        return "openai_chat"
    if bare.endswith("/v1/messages"):
        return "anthropic"
    if bare.endswith("/responses"):
        return "openai_responses"
    if bare.endswith((":generateContent", ":streamGenerateContent")):
        return "gemini_code_assist" if "/v1internal:" in bare else "gemini"
    if bare.endswith("/generateAssistantResponse"):
        return "kiro"
    return None


def gemini_model(path: str) -> str:
    """``gemini-3-pro`` from ``/v1beta/models/gemini-3-pro:streamGenerateContent?alt=sse``."""
    bare = path.split("?", 1)[0]
    return bare.rsplit("/models/", 1)[-1].split(":", 1)[0] if "/models/" in bare else ""


def refusal_for(method: str, path: str, body: bytes) -> Refusal | None:
    """The real service's refusal of a request to ``path``, or None; only POSTs of a JSON
    object to a generating endpoint are judged (anything else is the test script's business)."""
    dialect = dialect_of(path)
    if method != "POST" or dialect is None:
        return None
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python reads
        return None
    if not isinstance(parsed, dict):
        return None
    if dialect == "gemini_code_assist":
        inner = parsed.get("request")
        model = parsed.get("model")
        if not isinstance(inner, dict):
            return None
        return refusal("gemini", inner, model=model if isinstance(model, str) else "")
    return refusal(dialect, parsed, model=gemini_model(path))


def refusal(dialect: str, body: dict[str, Any], model: str = "") -> Refusal | None:
    """The refusal of ``body`` by the ``dialect`` service, or None. ``model`` matters to Gemini
    only (its Gemini 3 models check thought signatures); it defaults to the body's ``model``."""
    try:
        if dialect == "kiro":
            why = kiro_refusal(body)
            return None if why is None else Refusal("kiro", 400, dict(IMPROPER), why)
        check, shape = _DIALECTS[dialect]
        check(body, model or str(body.get("model") or ""))
    except _Refused as e:
        return Refusal(dialect, 400, shape(e), e.message)
    except (TypeError, AttributeError, KeyError, IndexError):
        # shaped unlike the dialect (a list where an object goes, an id that is an object):
        # the service's schema check refuses that, which these rules do not model
        return None
    return None


def check_request(dialect: str, body: Any, model: str = "") -> None:
    """AssertionError with the service's message where ``body`` breaks one of its rules."""
    assert isinstance(body, dict), f"{dialect}: the body is not a JSON object"
    refused = refusal(dialect, body, model)
    assert refused is None, f"{dialect} refuses the request: {refused.message}"


# --------------------------------------------------------------------------- error shapes


def _anthropic_error(e: _Refused) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": e.message},
        "request_id": "req_scripted_strict_upstream",
    }


def _openai_error(e: _Refused) -> dict[str, Any]:
    return {
        "error": {
            "message": e.message,
            "type": "invalid_request_error",
            "param": e.param,
            "code": None,
        }
    }


def _google_error(e: _Refused) -> dict[str, Any]:
    return {"error": {"code": 400, "message": e.message, "status": "INVALID_ARGUMENT"}}


# --------------------------------------------------------------------------- anthropic


def _anthropic(body: dict[str, Any], model: str) -> None:
    """Anthropic Messages: ``max_tokens`` a positive integer; consecutive messages of one role
    merge into one turn (``system`` messages in ``messages``, as Claude Code sends, are left
    out), the first turn is the user's; no empty content or text blocks; a thinking block has a
    signature; every ``tool_use`` is answered by a ``tool_result`` in the next turn and every
    ``tool_result`` answers a ``tool_use`` of the turn before."""
    if "max_tokens" not in body:
        raise _Refused("max_tokens: Field required")
    limit = body["max_tokens"]
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise _Refused("max_tokens: Input should be a valid integer")
    if limit < 1:
        raise _Refused("max_tokens: Input should be greater than or equal to 1")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _Refused("messages: Field required")
    turns = _anthropic_turns(messages)
    if not turns:
        raise _Refused("messages: at least one message is required")
    if turns[0][0] != "user":
        raise _Refused('messages: first message must use the "user" role')
    for (role, blocks), after in zip(turns, [*turns[1:], None], strict=True):
        if role != "assistant":
            continue
        used = [(i, b["id"]) for i, _, b in blocks if b.get("type") == "tool_use"]
        answered = {b.get("tool_use_id") for _, _, b in after[1]} if after else None
        missing = [u for _, u in used if answered is not None and u not in answered]
        if missing:
            raise _Refused(
                f"messages.{used[-1][0]}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
    offered: set[str] = set()
    for role, blocks in turns:
        if role == "user":
            for i, j, b in blocks:
                if b.get("type") == "tool_result" and b.get("tool_use_id") not in offered:
                    raise _Refused(
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {b.get('tool_use_id')}. Each `tool_result` block "
                        "must have a corresponding `tool_use` block in the previous message."
                    )
        offered = {b.get("id") for _, _, b in blocks if b.get("type") == "tool_use"}


type _Turn = tuple[str, list[tuple[int, int, dict[str, Any]]]]


def _anthropic_turns(messages: list[Any]) -> list[_Turn]:
    """The turns after merging same-role neighbours: (role, [(message index, block index,
    block)]); checks each message's role, content and blocks on the way."""
    turns: list[_Turn] = []
    last = max((i for i, m in enumerate(messages) if _role(m) != "system"), default=-1)
    for i, message in enumerate(messages):
        role = _role(message)
        if role == "system":
            continue
        if role not in ("user", "assistant"):
            raise _Refused(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise _Refused(f"messages.{i}.content: Field required")
        if (not blocks or content == "") and not (i == last and role == "assistant"):
            raise _Refused(
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        for j, block in enumerate(blocks if isinstance(content, list) else ()):
            _anthropic_block(i, j, block)
        entries = [(i, j, b) for j, b in enumerate(blocks) if isinstance(b, dict)]
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(entries)
        else:
            turns.append((role, entries))
    return turns


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _anthropic_block(i: int, j: int, block: Any) -> None:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        text = block.get("text")
        if text == "":
            raise _Refused("messages: text content blocks must be non-empty")
        if isinstance(text, str) and not text.strip():
            raise _Refused("messages: text content blocks must contain non-whitespace text")
    elif kind == "thinking":
        signature = block.get("signature")
        if not isinstance(signature, str):
            raise _Refused(f"messages.{i}.content.{j}.thinking.signature: Field required")
        if not signature:
            raise _Refused(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
    elif kind == "redacted_thinking" and not isinstance(block.get("data"), str):
        raise _Refused(f"messages.{i}.content.{j}.redacted_thinking.data: Field required")


# --------------------------------------------------------------------------- openai chat


def _chat(body: dict[str, Any], model: str) -> None:
    """OpenAI chat completions: an assistant message's ``tool_calls`` are each answered by a
    ``role: "tool"`` message with that ``tool_call_id`` before the next user or assistant
    message; a tool message answers a call of the assistant message before it."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _Refused("Missing required parameter: 'messages'.", "messages")
    calls: list[str] | None = None
    pending: list[str] = []
    for i, message in enumerate(messages):
        role = _role(message)
        if role == "tool":
            call_id = message.get("tool_call_id")
            if calls is None:
                raise _Refused(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{i}].role",
                )
            if call_id not in calls:
                raise _Refused(
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                    "'tool_calls' of previous message.",
                    f"messages.[{i}].tool_call_id",
                )
            pending = [c for c in pending if c != call_id]
        elif role in ("user", "assistant"):
            if pending:
                raise _Refused(
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not "
                    f"have response messages: {', '.join(pending)}",
                    f"messages.[{i}].role",
                )
            tool_calls = message.get("tool_calls") if role == "assistant" else None
            ids = [c.get("id") for c in tool_calls or () if isinstance(c, dict)]
            calls = ids if ids else None
            pending = list(ids)


# --------------------------------------------------------------------------- responses

_RESPONSES_PAIRS = {
    "function_call": ("function_call_output", "function call"),
    "custom_tool_call": ("custom_tool_call_output", "custom tool call"),
}


def _responses(body: dict[str, Any], model: str) -> None:
    """OpenAI Responses: every ``function_call`` (``custom_tool_call``) item of ``input`` has
    its ``function_call_output`` (``custom_tool_call_output``) by ``call_id``, and every output
    its call, unless the calls may live elsewhere (``previous_response_id``, ``conversation``,
    an ``item_reference``)."""
    items = body.get("input")
    if not isinstance(items, list):
        return
    items = [i for i in items if isinstance(i, dict)]
    elsewhere = bool(body.get("previous_response_id") or body.get("conversation")) or any(
        i.get("type") == "item_reference" for i in items
    )
    for call_type, (output_type, words) in _RESPONSES_PAIRS.items():
        calls = [i.get("call_id") for i in items if i.get("type") == call_type]
        outputs = [i.get("call_id") for i in items if i.get("type") == output_type]
        for call_id in calls:
            if call_id not in outputs:
                raise _Refused(f"No tool output found for {words} {call_id}.", "input")
        for call_id in outputs:
            if call_id not in calls and not elsewhere:
                raise _Refused(
                    f"No tool call found for {words} output with call_id {call_id}.", "input"
                )


# --------------------------------------------------------------------------- gemini


def _gemini(body: dict[str, Any], model: str) -> None:
    """Gemini generateContent: roles are ``user`` or ``model``; a model turn with
    ``functionCall`` parts comes right after a user turn and is followed by a turn with as many
    ``functionResponse`` parts, which come only right after such a turn; on Gemini 3 models the
    first ``functionCall`` part of each model turn of the current turn (since the last user
    message that is not only function responses) carries its ``thoughtSignature``: any
    non-empty value (the fake cannot verify one; Google's documented dummy
    ``skip_thought_signature_validator`` passes the real check too)."""
    contents = body.get("contents")
    if not isinstance(contents, list):
        return
    contents = [c if isinstance(c, dict) else {} for c in contents]
    for content in contents:
        if content.get("role", "user") not in ("user", "model"):
            raise _Refused("Please use a valid role: user, model.")
    calls = [_parts_with(c, "functionCall") for c in contents]
    responses = [_parts_with(c, "functionResponse") for c in contents]
    for n in range(len(contents)):
        before = contents[n - 1] if n else None
        if calls[n] and (before is None or before.get("role", "user") != "user"):
            raise _Refused(
                "Please ensure that function call turn comes immediately after a user turn or "
                "after a function response turn."
            )
        if responses[n] and not (n and calls[n - 1]):
            raise _Refused(
                "Please ensure that function response turn comes immediately after a function "
                "call turn."
            )
        if n and calls[n - 1] and len(responses[n]) != len(calls[n - 1]):
            raise _Refused(
                "Please ensure that the number of function response parts is equal to the "
                "number of function call parts of the function call turn."
            )
    if "gemini-3" in model:
        _gemini_signatures(contents, calls)


def _parts_with(content: dict[str, Any], key: str) -> list[dict[str, Any]]:
    parts = content.get("parts")
    return [p for p in parts if isinstance(p, dict) and key in p] if isinstance(parts, list) else []


def _gemini_signatures(contents: list[dict[str, Any]], calls: list[list[dict[str, Any]]]) -> None:
    start = 0
    for n, content in enumerate(contents):
        parts = content.get("parts") if isinstance(content.get("parts"), list) else []
        if content.get("role", "user") == "user" and any(
            not (isinstance(p, dict) and "functionResponse" in p) for p in parts
        ):
            start = n + 1
    for n in range(start, len(contents)):
        if calls[n] and not calls[n][0].get("thoughtSignature"):
            name = (calls[n][0].get("functionCall") or {}).get("name")
            raise _Refused(
                "Function call is missing a thought_signature in functionCall parts. This is "
                "required for tools to work correctly, and missing thought_signature may lead "
                f"to degraded model performance. Additional data, function call `default_api:"
                f"{name}` , position {n + 1}. Please refer to "
                "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
            )


_DIALECTS: dict[
    str, tuple[Callable[[dict[str, Any], str], None], Callable[[_Refused], dict[str, Any]]]
] = {
    "anthropic": (_anthropic, _anthropic_error),
    "openai_chat": (_chat, _openai_error),
    "openai_responses": (_responses, _openai_error),
    "gemini": (_gemini, _google_error),
}
"""Each upstream dialect's checks and its error shape."""

DIALECTS = frozenset({*_DIALECTS, "kiro"})
"""The upstream dialects ``refusal`` judges."""
