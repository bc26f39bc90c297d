"""Gemini ``Part`` objects ↔ unified parts: shared by the request and response codecs.

Contract: plain functions over JSON and ``addon.model``; no wire envelope, no request or
answer structure (that is ``request`` / ``response`` / ``stream``). Decoding reads camelCase
and snake_case alike; encoding writes only known fields, camelCase. Details:
docs/dialects/gemini.md#module-notes."""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

from addon import jsonio
from addon.dialects import names
from addon.model import (
    JSON,
    Image,
    Opaque,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnsupportedShape,
)

NAME = names.GEMINI
"""Origin of the ``Opaque`` parts and tools of both Gemini dialects (one JSON format)."""
SIGNATURE = "thoughtSignature"
SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The value Google documents for function calls that were not produced by Gemini (a
conversation moved from another model): Gemini 3 then skips the signature check."""
RAW_ARGUMENTS = "_raw_arguments"
"""The one key of the object sent for arguments that are not a JSON object."""
CODE_ASSIST = names.GEMINI_CODE_ASSIST
"""Code Assist / Antigravity: the same JSON, the request in an envelope."""
OWN = (NAME, CODE_ASSIST)
"""Both Gemini dialects: a request from either is written back to Gemini as it came."""
SIDE = "__gemini__"
"""Key of the private table in ``Request.extra`` (never written to the wire) of what only a
Gemini round trip needs (signatures, part fields, made-up ids, the envelope), kept out of part
``extra`` because other encoders copy that onto their wire objects. Details:
docs/dialects/gemini.md#module-notes."""

_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")


def snake(name: str) -> str:
    """``inlineData`` → ``inline_data``."""
    return _SNAKE.sub("_", name).lower()


def get(obj: JSON, name: str) -> Any:
    """``obj[name]`` by its camelCase name, or by its snake_case spelling."""
    if name in obj:
        return obj[name]
    return obj.get(snake(name))


def spellings(*names: str) -> frozenset[str]:
    """Both spellings of each camelCase name, for sets of modelled keys."""
    return frozenset(names) | {snake(n) for n in names}


def rest(obj: JSON, modelled: frozenset[str]) -> JSON:
    return {k: v for k, v in obj.items() if k not in modelled}


# --------------------------------------------------------------------------- decode


@dataclass(slots=True)
class Leftover:
    """What one wire part holds beyond its unified part (``thoughtSignature``,
    ``partMetadata`` …; all plain JSON), returned beside it for the caller to keep."""

    part: JSON = field(default_factory=dict)
    """Part-level fields: ``thoughtSignature`` (except on thoughts, where it is the
    ``Thinking.signature``), ``partMetadata``, ``mediaResolution``, ``thought: false`` …"""
    inner: JSON = field(default_factory=dict)
    """Unmodelled fields of the ``functionCall`` / ``functionResponse`` / blob object."""
    mime: str | None = None
    """The ``mimeType`` of a ``fileData`` image (a URL does not say it)."""
    response: Any = None
    """A ``functionResponse``'s ``response`` as sent (the unified content is derived from it)."""
    no_id: bool = False
    """A ``functionCall`` / ``functionResponse`` that came without an ``id``."""

    def as_json(self) -> JSON:
        out: JSON = {}
        if self.part:
            out["part"] = self.part
        if self.inner:
            out["inner"] = self.inner
        if self.mime is not None:
            out["mime"] = self.mime
        if self.response is not None:
            out["response"] = self.response
        if self.no_id:
            out["no_id"] = True
        return out


_TEXT = spellings("text", "thought", "thoughtSignature")
_CALL = spellings("functionCall", "thoughtSignature")
_CALL_INNER = spellings("name", "args", "id")
_RESULT = spellings("functionResponse")
_RESULT_INNER = spellings("name", "response", "id", "parts")
_INLINE = spellings("inlineData")
_BLOB = spellings("mimeType", "data")
_FILE = spellings("fileData")
_FILE_INNER = spellings("mimeType", "fileUri")


def decode_part(part: Any, where: str) -> tuple[Part, Leftover]:
    """One wire part → ``(unified part, leftover)``.

    A ``functionCall`` / ``functionResponse`` without an ``id`` gets ``id == ""`` (and
    ``leftover.no_id``): the caller pairs calls and results and gives them ids.
    Raises ``UnsupportedShape`` for a part that is not an object or has a text that is not
    a string.
    """
    if not isinstance(part, dict):
        raise UnsupportedShape(f"{where} is not an object")
    left = Leftover()
    if "text" in part:
        text = part["text"]
        if not isinstance(text, str):
            raise UnsupportedShape(f"{where}.text is not a string")
        signature = get(part, SIGNATURE)
        if part.get("thought") is True:
            left.part = rest(part, _TEXT)
            sig = signature if isinstance(signature, str) and signature else None
            if sig is None and signature is not None:
                left.part[SIGNATURE] = signature
            return Thinking(text, signature=sig), left
        left.part = rest(part, spellings("text"))
        return Text(text), left
    call = get(part, "functionCall")
    if isinstance(call, dict):
        name = get(call, "name")
        if not isinstance(name, str) or not name:
            raise UnsupportedShape(f"{where}.functionCall has no name")
        left.part = rest(part, spellings("functionCall"))
        left.inner = rest(call, _CALL_INNER)
        call_id = get(call, "id")
        left.no_id = not (isinstance(call_id, str) and call_id)
        args = get(call, "args")
        return ToolCall(call_id if not left.no_id else "", name, args_text(args)), left
    result = get(part, "functionResponse")
    if isinstance(result, dict):
        name = get(result, "name")
        if not isinstance(name, str) or not name:
            raise UnsupportedShape(f"{where}.functionResponse has no name")
        left.part = rest(part, _RESULT)
        left.inner = rest(result, _RESULT_INNER)
        result_id = get(result, "id")
        left.no_id = not (isinstance(result_id, str) and result_id)
        response = get(result, "response")
        left.response = response
        nested = get(result, "parts")
        if nested is not None:
            left.inner["parts"] = nested
        content, is_error = decode_result_content(response, nested)
        return (
            ToolResult(result_id if not left.no_id else "", content, name=name, is_error=is_error),
            left,
        )
    blob = get(part, "inlineData")
    if isinstance(blob, dict):
        mime, data = get(blob, "mimeType"), get(blob, "data")
        if isinstance(mime, str) and mime.startswith("image/") and isinstance(data, str):
            left.part = rest(part, _INLINE)
            left.inner = rest(blob, _BLOB)
            return Image(f"data:{mime};base64,{data}"), left
        return Opaque(NAME, part), Leftover()
    ref = get(part, "fileData")
    if isinstance(ref, dict):
        mime, uri = get(ref, "mimeType"), get(ref, "fileUri")
        if isinstance(uri, str) and uri and (mime is None or str(mime).startswith("image/")):
            left.part = rest(part, _FILE)
            left.inner = rest(ref, _FILE_INNER)
            left.mime = mime if isinstance(mime, str) else None
            return Image(uri, file=uri if provider_file(uri) else None), left
        return Opaque(NAME, part), Leftover()
    # executableCode, codeExecutionResult, a PDF/audio/video blob, videoMetadata …
    return Opaque(NAME, part), Leftover()


def decode_result_content(response: Any, nested: Any = None) -> tuple[str | tuple[Part, ...], bool]:
    """A ``functionResponse``'s ``response`` (and the ``parts`` of a Gemini 3 multimodal
    response, whose images join the text) → ``(ToolResult.content, is_error)``."""
    text, is_error = result_content(response)
    images = _nested_images(nested)
    if images:
        return (Text(text), *images), is_error
    return text, is_error


def _nested_images(nested: Any) -> tuple[Image, ...]:
    out: list[Image] = []
    for p in nested if isinstance(nested, list) else ():
        blob = get(p, "inlineData") if isinstance(p, dict) else None
        if isinstance(blob, dict):
            mime, data = get(blob, "mimeType"), get(blob, "data")
            if isinstance(mime, str) and mime.startswith("image/") and isinstance(data, str):
                out.append(Image(f"data:{mime};base64,{data}"))
        ref = get(p, "fileData") if isinstance(p, dict) else None
        if isinstance(ref, dict):
            mime, uri = get(ref, "mimeType"), get(ref, "fileUri")
            if isinstance(uri, str) and uri and (mime is None or str(mime).startswith("image/")):
                out.append(Image(uri, file=uri if provider_file(uri) else None))
    return tuple(out)


def provider_file(uri: str) -> bool:
    """Whether a ``fileUri`` names a file only Google reads with the client's key (the Files
    API's ``…/files/…``, a ``gs://`` object), not a URL anyone may fetch."""
    lowered = uri.lower()
    if lowered.startswith("gs://"):
        return True
    return lowered.startswith("https://generativelanguage.googleapis.com/") and "/files/" in lowered


def args_text(args: Any) -> str:
    """A call's ``args`` as the unified arguments JSON text (absent → ``{}``)."""
    if args is None:
        return "{}"
    return json.dumps(args, ensure_ascii=False)


def result_content(response: Any) -> tuple[str, bool]:
    """``functionResponse.response`` → ``(content text, is_error)``."""
    if isinstance(response, dict):
        if set(response) == {"output"} and isinstance(response["output"], str):
            return response["output"], False
        if set(response) == {"error"} and isinstance(response["error"], str):
            return response["error"], True
        return json.dumps(response, ensure_ascii=False), "error" in response and (
            "output" not in response
        )
    if response is None:
        return "", False
    return json.dumps(response, ensure_ascii=False), False


# --------------------------------------------------------------------------- encode


def args_object(arguments: str, custom: bool = False) -> tuple[JSON, bool]:
    """Unified arguments → ``(args object, wrapped)``; ``wrapped`` when they were not a JSON
    object and are sent as ``{"_raw_arguments": text}``. A custom (freeform) call's raw input
    is ``{"input": text}``, as ``addon.transforms.custom_tools`` wraps it."""
    if custom:
        return {"input": arguments}, False
    if not arguments.strip():
        return {}, False
    try:
        args = jsonio.loads(arguments)
    except ValueError:
        args = None
    if isinstance(args, dict):
        return args, False
    return {RAW_ARGUMENTS: arguments}, True


def result_response(text: str, is_error: bool) -> JSON:
    return {"error": text} if is_error else {"output": text}


def encode_image(img: Image, mime: str | None = None) -> JSON:
    """``data:`` URL → ``inlineData``; any other URL → ``fileData`` (``mime``, else guessed
    from the URL's extension, else ``image/jpeg``)."""
    url = img.url
    if url.startswith("data:"):
        head, _, payload = url[5:].partition(",")
        media, _, params = head.partition(";")
        if params.split(";")[-1] == "base64":
            data = payload
        else:  # data:image/svg+xml,%3Csvg… : percent-encoded bytes
            data = base64.b64encode(unquote_to_bytes(payload)).decode()
        return {"inlineData": {"mimeType": media or mime or "image/png", "data": data}}
    guessed = mimetypes.guess_type(url.split("?", 1)[0])[0]
    return {"fileData": {"mimeType": mime or guessed or "image/jpeg", "fileUri": url}}


def signature_of(p: Text | ToolCall) -> str | None:
    """A thought signature another codec kept on a unified text or call."""
    sig = p.extra.get(SIGNATURE)
    if isinstance(sig, str) and sig:
        return sig
    content = p.extra.get("extra_content")
    google = content.get("google") if isinstance(content, dict) else None
    sig = google.get("thought_signature") if isinstance(google, dict) else None
    return sig if isinstance(sig, str) and sig else None


def digest(text: str) -> str:
    """A short stable key of ``text``: of all of it, or for a long one (a pasted file) of its
    length, start and end — without hashing megabytes on every request."""
    if len(text) > 8192:
        text = f"{len(text)}\x02{text[:4096]}\x02{text[-4096:]}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
