"""A request's input tokens, counted the best way the bridge has for its route
(docs/dialects/anthropic.md#count_tokens): a tokenizer's own tables where the route names
them (``count_tokens = "o200k" | "cl100k"``) or the model's family is known
(``addon.transforms.tokenizers``), else the estimate (``addon.transforms.tokens``). The
upstream's own counter, where it has one, is the caller's (``addon.plan.count_tokens``).

Contract: plain values; never raises on a request it cannot render (the estimate answers)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from addon.config.routes import Route
from addon.dialects import DIALECTS, OPENAI_CHAT
from addon.model import ClientError, Request, UnsupportedShape
from addon.transforms.tokenizers import TokenizerName, count_chat, tokenizer_for
from addon.transforms.tokens import estimate_input_tokens


@dataclass(frozen=True, slots=True)
class Counted:
    tokens: int
    how: str
    """The tables counted with (``o200k``, ``cl100k``), or ``estimate``."""

    @property
    def estimated(self) -> bool:
        return self.how == "estimate"


def tables_for(route: Route | None, model: str | None) -> TokenizerName | None:
    """The tables ``route`` counts with: its ``count_tokens`` when it names tables, none when
    it says ``estimate``, else the family of the model it sends upstream (its ``model_map``'s
    name for ``model``, else ``model``)."""
    how = route.count_tokens if route is not None else None
    if how == "o200k" or how == "cl100k":
        return how
    if how == "estimate" or model is None:
        return None
    mapped = route.mapped_model(model) if route is not None else None
    return tokenizer_for(mapped or model)


def count_input(route: Route | None, req: Request | None, body: Any) -> Counted:
    """``req``'s input tokens (``body``: its JSON as the client sent it, for the estimate)."""
    name = tables_for(route, req.model if req is not None else None)
    if name is not None and req is not None:
        try:
            chat = DIALECTS[OPENAI_CHAT].encode_request(req, Counter())
        except (ClientError, UnsupportedShape, ValueError, TypeError, KeyError):
            chat = None
        n = count_chat(name, chat)
        if n is not None:
            return Counted(n, name)
    return Counted(estimate_input_tokens(body), "estimate")
