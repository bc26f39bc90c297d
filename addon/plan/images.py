"""Images on a text-only route (route keys ``images`` and ``vision``; docs/routes.md#images).

Sans-IO. Every image of a decoded request is found wherever the client's dialect put it (a
message's parts, a tool result's content: OpenAI ``image_url`` parts, Anthropic ``image``
blocks, Responses ``input_image``, Gemini ``inlineData`` / ``fileData``, all decoded into
``Image`` parts), named by the SHA-256 of its bytes (a ``data:`` URL's) or of its URL
(``image_key``), and, on a route with ``images = false``, replaced by its caption as a text part
(``[image: …]``) or, without a ``vision`` route, refused with a 400 in the client's dialect;
``images = "drop"`` leaves them out and says how many. Never silently dropped."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from urllib.parse import unquote_to_bytes

from addon.config.routes import Route
from addon.model import ClientError, Image, Message, Notes, Part, Request, Text, ToolResult

type Captions = Mapping[tuple[str, str], str]
"""The captions a flow's request hook got: (vision route's name, ``image_key``) → caption."""

CAPTION_FORM = "[image: {caption}]"
"""The text part an image becomes on a text-only route."""
LEFT_OUT = "[image left out]"
"""What stands where a dropped image was the only content of a message or tool result."""


def image_key(image: Image) -> str:
    """SHA-256 (hex) of the image's bytes for a ``data:`` URL, else of its URL: the same image
    is the same key on every turn, whichever dialect carried it."""
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
    out: list[Image] = []
    for m in req.messages:
        for p in m.parts:
            if isinstance(p, Image):
                out.append(p)
            elif isinstance(p, ToolResult) and not isinstance(p.content, str):
                out.extend(q for q in p.content if isinstance(q, Image))
    return tuple(out)


def caption_text(caption: str) -> str:
    return CAPTION_FORM.format(caption=caption)


def see_images(route: Route, req: Request, captions: Captions, notes: Notes) -> Request:
    """The request as ``route`` sends it (its ``images`` key): unchanged (images sent, or none
    in it); each image replaced by its caption (``images = false`` with ``vision``); left out
    (``images = "drop"``). ``ClientError``: 400, images on a route that sends none and has no
    vision route; 502, an image with no caption (the request hook could not get it)."""
    if route.images is None or route.images is True:
        return req
    found = images_of(req)
    if not found:
        return req
    n = len(found)
    if route.images == "drop":
        notes[f"{n} image(s) left out (route: images = drop)"] += 1
        return replace_images(req, lambda image: None)
    if route.vision is None:
        raise ClientError(
            f"this request holds {n} image(s), and the bridge's route '{route.name}' sends "
            "none to its upstream (images = false) and names no vision route to caption them",
            code="images_not_supported",
        )
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
