"""Images on a text-only route (route keys ``images`` and ``vision``; docs/routes.md#images).

Sans-IO. Every image of a decoded request is found wherever the client's dialect put it (a
message's parts, a tool result's content: OpenAI ``image_url`` parts, Anthropic ``image``
blocks, Responses ``input_image``, Gemini ``inlineData`` / ``fileData``, all decoded into
``Image`` parts), named by the SHA-256 of its bytes (a ``data:`` URL's), of its URL or of its
file id (``image_key``), and, on a route with ``images = false``, replaced by its caption as a
text part (``[image: …]``) or refused with a 400 in the client's dialect (``refusal``): no
``vision`` route; an image the bridge holds no bytes of and that no vision route can read — a
file the client uploaded to its provider (``Image.file``), or a URL where the vision route's
upstream takes image bytes only (the bridge never fetches a URL itself: a request must not make
it reach hosts of the client's choosing). ``images = "drop"`` leaves them out and says how many.
Never silently dropped."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Literal
from urllib.parse import unquote_to_bytes

from addon.config.routes import Route
from addon.dialects import ANTHROPIC, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES
from addon.model import ClientError, Image, Message, Notes, Part, Request, Text, ToolResult
from addon.redact import clean

type Captions = Mapping[tuple[str, str], str]
"""The captions a flow's request hook got: (vision route's name, ``image_key``) → caption."""

CAPTION_FORM = "[image: {caption}]"
"""The text part an image becomes on a text-only route."""
LEFT_OUT = "[image left out]"
"""What stands where a dropped image was the only content of a message or tool result."""
TAKES_URLS = frozenset({OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC, GEMINI})
"""The upstream dialects whose requests take an image by its ``http(s)`` URL (the service
fetches it: OpenAI's ``image_url``, Anthropic's ``url`` source, Gemini's ``fileData``); a
vision route of another (Kiro, Code Assist) is sent image bytes only."""

type Source = Literal["bytes", "url", "file"]
"""What the bridge holds of an image: its bytes (a ``data:`` URL), a URL a vision upstream may
fetch (``http(s)``), or neither (a provider's file, or no URL it can pass)."""


def source_of(image: Image) -> Source:
    if image.file is not None:
        return "file"
    if image.url.startswith("data:"):
        return "bytes"
    return "url" if image.url.lower().startswith(("http://", "https://")) else "file"


def described(image: Image) -> str:
    """An image without bytes as a 400 names it (a URL without its query: it may be signed)."""
    if image.file is not None:
        return f"a file the client uploaded to its provider ({clean(image.file, 80)!r})"
    if source_of(image) == "url":
        return f"an image given by URL ({clean(image.url.split('?', 1)[0], 120)!r})"
    return f"an image given by neither bytes nor an http(s) URL ({clean(image.url, 40)!r})"


def refusal(route: Route, vision: Route | None, req: Request) -> ClientError | None:
    """Why ``route`` (``images = false``) cannot send ``req``'s images as captions (a 400 in
    the client's dialect naming the image and where it is); None: it can (or holds none)."""
    found = located(req)
    if not found:
        return None
    n = len(found)
    for k, (image, where) in enumerate(found, 1):
        held = source_of(image)
        if held == "bytes" or (
            held == "url" and vision is not None and vision.upstream in TAKES_URLS
        ):
            continue
        if held == "url" and vision is not None:
            why = (
                f"its vision route '{vision.name}' is sent image bytes only "
                f"({vision.upstream}), and the bridge does not fetch URLs itself"
            )
        elif held == "url":
            why = "it names no vision route to caption it"
        else:
            why = "the bridge has no bytes of it to caption, and no other upstream can read it"
        return ClientError(
            f"image {k} of {n} in this request ({where}) is {described(image)}: the bridge's "
            f"route '{route.name}' sends no images to its upstream (images = false) and {why}; "
            "send the image's bytes instead (a data: URL or base64)",
            code="images_not_supported",
        )
    if vision is None:
        return ClientError(
            f"this request holds {n} image(s), and the bridge's route '{route.name}' sends "
            "none to its upstream (images = false) and names no vision route to caption them",
            code="images_not_supported",
        )
    return None


def image_key(image: Image) -> str:
    """SHA-256 (hex) of the image's bytes for a ``data:`` URL, else of its file id, else of its
    URL: the same image is the same key on every turn, whichever dialect carried it."""
    if image.file is not None:
        return hashlib.sha256(f"file:{image.file}".encode("utf-8", "surrogatepass")).hexdigest()
    url = image.url
    if url.startswith("data:"):
        head, sep, data = url.partition(",")
        if sep and head.endswith(";base64"):
            try:
                return hashlib.sha256(base64.b64decode(data)).hexdigest()
            except (binascii.Error, ValueError):
                pass
        elif sep:
            return hashlib.sha256(unquote_to_bytes(data)).hexdigest()
    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()


def images_of(req: Request) -> tuple[Image, ...]:
    """Every image of the request, in order: in messages' parts and in tool results."""
    return tuple(image for image, _ in located(req))


def located(req: Request) -> list[tuple[Image, str]]:
    """Every image of the request with where it is (message k, or a call's tool result)."""
    out: list[tuple[Image, str]] = []
    for k, m in enumerate(req.messages, 1):
        for p in m.parts:
            if isinstance(p, Image):
                out.append((p, f"message {k}"))
            elif isinstance(p, ToolResult) and not isinstance(p.content, str):
                where = f"the result of tool call {clean(p.tool_call_id, 60)!r} in message {k}"
                out.extend((q, where) for q in p.content if isinstance(q, Image))
    return out


def caption_text(caption: str) -> str:
    return CAPTION_FORM.format(caption=caption)


def foreign_files(req: Request, route: Route, client: str) -> None:
    """``ClientError`` (400 in the client's dialect): an image given as a file the client
    uploaded to its own provider (``Image.file``: a Responses ``file_id``, an Anthropic
    ``file`` source, a Gemini Files API URI) on its way to another dialect's upstream, which
    cannot read another provider's files (its encoder would send an empty image); the same
    dialect's upstream reads it as sent."""
    upstream = route.upstream
    if client == upstream:
        return
    found = located(req)
    for k, (image, where) in enumerate(found, 1):
        if image.file is None:
            continue
        raise ClientError(
            f"image {k} of {len(found)} in this request ({where}) is {described(image)}: "
            f"the bridge's route '{route.name}' sends it to a {upstream} upstream, which cannot "
            f"read a file kept by the client's provider ({client}); send the image's bytes instead (a data: URL or "
            "base64), or set images = false with a vision route to caption it",
            code="images_not_supported",
        )


def vision_of(route: Route, routes: Sequence[Route]) -> Route | None:
    """The route that captions ``route``'s images (its ``vision``), None: none."""
    return next((r for r in routes if r.name == route.vision), None) if route.vision else None


def see_images(
    route: Route, req: Request, captions: Captions, notes: Notes, routes: Sequence[Route] = ()
) -> Request:
    """The request as ``route`` sends it (its ``images`` key): unchanged (images sent, or none
    in it); each image replaced by its caption (``images = false`` with ``vision``, one of
    ``routes``); left out (``images = "drop"``). ``ClientError``: 400, images on a route that
    sends none and cannot caption them (``refusal``); 502, an image with no caption (the
    request hook could not get it)."""
    if route.images is None or route.images is True:
        return req
    found = images_of(req)
    if not found:
        return req
    n = len(found)
    if route.images == "drop":
        notes[f"{n} image(s) left out (route: images = drop)"] += 1
        files = sum(source_of(image) == "file" for image in found)
        if files:
            notes[f"{files} of them a file the client uploaded to its provider (no bytes)"] += 1
        return replace_images(req, lambda image: None)
    refused = refusal(route, vision_of(route, routes), req)
    if refused is not None:
        raise refused
    assert route.vision is not None  # refusal says so otherwise
    vision = route.vision

    def caption(image: Image) -> Part:
        text = captions.get((vision, image_key(image)))
        if text is None:
            raise ClientError(
                f"the bridge's vision route '{vision}' gave no caption for an image of this "
                f"request (route '{route.name}' sends text only)",
                status=502,
                code="vision_failed",
            )
        return Text(caption_text(text), cache=image.cache)

    notes[f"{n} image(s) captioned by the vision route '{vision}'"] += 1
    return replace_images(req, caption)


def replace_images(req: Request, by: Callable[[Image], Part | None]) -> Request:
    """Each image replaced by what ``by`` gives (None: left out; a message or tool result left
    with nothing gets ``LEFT_OUT``)."""

    def parts_of(parts: tuple[Part, ...]) -> tuple[Part, ...]:
        out: list[Part] = []
        for p in parts:
            if isinstance(p, Image):
                new = by(p)
                if new is not None:
                    out.append(new)
            elif isinstance(p, ToolResult) and not isinstance(p.content, str):
                content = parts_of(p.content) if p.content else p.content
                out.append(dataclasses.replace(p, content=content) if content != p.content else p)
            else:
                out.append(p)
        return tuple(out) if out or not parts else (Text(LEFT_OUT),)

    messages: list[Message] = []
    for m in req.messages:
        parts = parts_of(m.parts)
        messages.append(m if parts == m.parts else dataclasses.replace(m, parts=parts))
    return dataclasses.replace(req, messages=tuple(messages))
