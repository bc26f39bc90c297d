"""The call in a ``MALFORMED_FUNCTION_CALL`` finish message, read back when it can be.

Contract: ``parse_malformed(message)`` → ``(name, JSON arguments)`` or None; pure. Gemini ends
an answer with ``finishReason: MALFORMED_FUNCTION_CALL`` and a ``finishMessage`` holding the
call in its own syntax (``call:default_api:write_file{path:<ctrl46>a<ctrl46>}``); the whole
and streamed answer codecs (``response``, ``stream``) turn a readable one into a call."""

from __future__ import annotations

import json
import re
from typing import Any

from addon import jsonio
from addon.model import JSON

_CALL = re.compile(r"call:(?P<path>[^{(\s]*)\s*(?P<args>\{.*\})?\s*$", re.S)
_CTRL_QUOTED = re.compile(r"<ctrl46>(.*?)<ctrl46>", re.S)
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_$][\w$.\-]*)(\s*:)")


def parse_malformed(message: str | None) -> tuple[str, str] | None:
    """``(name, JSON arguments)`` of the call in a ``MALFORMED_FUNCTION_CALL`` finish message
    (``Malformed function call: call:default_api:write_file{…}``), or None when it cannot be
    read back without guessing."""
    if not message:
        return None
    text = message.strip()
    found = re.search(r"\bcall:(?!\s)", text)  # not the "function call: " of the preamble
    if found is None:
        return None
    m = _CALL.match(text, found.start())
    if m is None or m.group("args") is None:
        return None  # no arguments (cut short): nothing safe to call
    name = m.group("path").rstrip(":").rsplit(":", 1)[-1].strip()
    if not re.fullmatch(r"[A-Za-z_][\w.\-]*", name):
        return None
    args = _parse_args(m.group("args"))
    if args is None:
        return None
    return name, json.dumps(args, ensure_ascii=False)


def _parse_args(text: str) -> JSON | None:
    # Gemini's own syntax before json_repair: the repair would keep ``<ctrl46>`` as text.
    for parse in (_as_json, _as_gemini_syntax, _with_json_repair):
        try:
            value = parse(text)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _as_json(text: str) -> Any:
    return jsonio.loads(text)


def _with_json_repair(text: str) -> Any:
    import json_repair  # when first needed

    """Trailing commas, single quotes, unescaped newlines, a cut-off end."""
    return json_repair.loads(text)


def _as_gemini_syntax(text: str) -> Any:
    """Gemini's own call syntax: ``<ctrl46>`` around strings, bare keys
    (``{path:<ctrl46>src<ctrl46>,limit:3}``)."""
    pieces: list[str] = []
    last = 0
    for m in _CTRL_QUOTED.finditer(text):
        pieces.append(_quote_keys(text[last : m.start()]))
        pieces.append(json.dumps(m.group(1), ensure_ascii=False))
        last = m.end()
    rest = text[last:]
    if "<ctrl46>" in rest:
        raise ValueError("an unclosed <ctrl46> string")
    pieces.append(_quote_keys(rest))
    return jsonio.loads("".join(pieces))


def _quote_keys(text: str) -> str:
    """Bare keys quoted, outside JSON strings (which the ``<ctrl46>`` pass already made)."""
    out: list[str] = []
    pos = 0
    in_string = False
    i = 0
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_string = False
                out.append(text[pos : i + 1])
                pos = i + 1
        elif c == '"':
            out.append(_BARE_KEY.sub(r'\1"\2"\3', text[pos:i]))
            pos = i
            in_string = True
        i += 1
    tail = text[pos:]
    out.append(tail if in_string else _BARE_KEY.sub(r'\1"\2"\3', tail))
    return "".join(out)
