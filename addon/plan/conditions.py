"""What a route's ``model`` and ``when`` ask of a request, read once (sans-IO).

``RequestView`` holds the client's body and path; per client dialect it reads the model
cheaply (``Dialect.requested_model``, no decode) and, only when a route has ``when``, the
request's facts (``RequestFacts``) from one decode that ``decide`` then reuses. How a
background call is recognized, and why: docs/routes.md."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from addon.config.routes import RequestFacts
from addon.dialects import DIALECTS
from addon.model import ClientError, Image, Notes, Request, ToolResult, UnsupportedShape
from addon.plan.token_counter import count_input
from addon.plan.values import SHAPE_ERRORS, load_json

BACKGROUND_NAMES = ("haiku",)
"""Model names (lower case) of clients' small fast models: Claude Code sends its background
calls (titles, summaries) with ``ANTHROPIC_DEFAULT_HAIKU_MODEL`` / the haiku it defaults to."""


@dataclasses.dataclass(slots=True)
class Decoded:
    """One client dialect's decode of the body (before ``Dialect.from_path``), and the notes
    it wrote."""

    request: Request
    notes: Notes


class RequestView:
    """The client's body and path, read lazily and at most once per dialect."""

    def __init__(self, body: bytes, path: str) -> None:
        self.body = body
        self.path = path
        self._models: dict[str, str | None] = {}
        self._json: Any = None
        self._json_read = False
        self._decoded: dict[str, Decoded | None] = {}
        self._facts: dict[str, RequestFacts | None] = {}

    def model(self, client: str) -> str | None:
        if client not in self._models:
            self._models[client] = DIALECTS[client].requested_model(self.body, self.path)
        return self._models[client]

    def json(self) -> Any:
        """The body as strict JSON, or None when it is not."""
        if not self._json_read:
            self._json_read = True
            try:
                self._json = load_json(self.body)
            except (ValueError, RecursionError):
                self._json = None
        return self._json

    def decoded(self, client: str, *, read: bool = True) -> Decoded | None:
        """The body decoded as ``client`` sends it (its path's fields included); None: it is
        not a request of that dialect. ``read=False``: only a decode already made."""
        if client not in self._decoded and read:
            self._decoded[client] = self._decode(client)
        return self._decoded.get(client)

    def _decode(self, client: str) -> Decoded | None:
        body = self.json()
        if not isinstance(body, dict):
            return None
        dialect, notes = DIALECTS[client], Counter[str]()
        try:
            req = dialect.decode_request(body, notes)
        except (UnsupportedShape, ClientError, RecursionError, ValueError, *SHAPE_ERRORS):
            return None  # not this dialect's request: decide says so, if it is routed
        return Decoded(req, notes)

    def facts(self, client: str) -> RequestFacts | None:
        if client not in self._facts:
            decoded = self.decoded(client)
            if decoded is None:
                self._facts[client] = None
            else:
                req, dialect = decoded.request, DIALECTS[client]
                if dialect.from_path is not None:  # Gemini's model is in its path
                    path = self.path.split("?", 1)[0]
                    req = dataclasses.replace(req, **dialect.from_path(path, ()))
                self._facts[client] = facts_of(req, self)
        return self._facts[client]


def asks_reasoning(req: Request) -> bool:
    """Whether the request asks for reasoning: the unified ``thinking`` where the client's
    dialect has one (Anthropic ``thinking``, Responses ``reasoning``, Gemini
    ``thinkingConfig``), else the fields the codecs keep as they came: Anthropic
    ``output_config.effort`` without ``thinking``, OpenAI chat ``reasoning_effort`` (not
    ``"none"``) or an OpenRouter-style ``reasoning`` object."""
    if req.thinking is not None:
        return req.thinking.enabled
    extra = req.extra
    config = extra.get("output_config")
    if (
        "thinking" not in extra
        and isinstance(config, dict)
        and isinstance(config.get("effort"), str)
    ):
        return True
    effort = extra.get("reasoning_effort")
    if isinstance(effort, str):
        return effort != "none"
    reasoning = extra.get("reasoning")
    if isinstance(reasoning, dict):
        return reasoning.get("enabled") is not False and reasoning.get("effort") != "none"
    return False


def has_images(req: Request) -> bool:
    """Whether the request holds an image: a message's own, or in a tool's result (an image a
    tool read); ``addon.plan.images`` finds the same ones."""
    return any(
        isinstance(p, Image)
        or (
            isinstance(p, ToolResult)
            and not isinstance(p.content, str)
            and any(isinstance(q, Image) for q in p.content)
        )
        for m in req.messages
        for p in m.parts
    )


def facts_of(req: Request, view: RequestView) -> RequestFacts:
    """``RequestFacts`` of a decoded request (its JSON body for the token estimate)."""
    thinking = asks_reasoning(req)
    model = req.model.lower()
    return RequestFacts(
        thinking=thinking,
        images=has_images(req),  # in a tool's result too (an image a tool read)
        input_tokens=count_input(None, req, view.json()).tokens,
        background=any(n in model for n in BACKGROUND_NAMES) or (not req.tools and not thinking),
    )
