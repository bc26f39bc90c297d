"""A request's input tokens, counted the best way the bridge has for its route
(docs/dialects/anthropic.md#count_tokens): a tokenizer's own tables where the route names
them (``count_tokens = "o200k" | "cl100k"``) or the model's family is known
(``addon.transforms.tokenizers``), else the estimate (``addon.transforms.tokens``), calibrated
per route and model where answers have been seen (``addon.plan.calibration``). The upstream's
own counter, where it has one, is the caller's (``addon.plan.count_tokens``).

Contract: plain values; never raises on a request it cannot render (the estimate answers)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from addon.config.routes import Route
from addon.dialects import DIALECTS, OPENAI_CHAT
from addon.model import ClientError, Request, UnsupportedShape
from addon.plan.calibration import Calibration, Scales, store_key
from addon.transforms.tokenizers import TokenizerName, count_chat, tokenizer_for
from addon.transforms.tokens import estimate_input_tokens, estimate_request


@dataclass(frozen=True, slots=True)
class Counted:
    tokens: int
    how: str
    """The tables counted with (``o200k``, ``cl100k``), or ``estimate``."""
    calibrated: int = 0
    """An estimate scaled by this many answers of the route and model (0: not calibrated)."""

    @property
    def estimated(self) -> bool:
        return self.how == "estimate"

    @property
    def said(self) -> str:
        """How the flow comment names it: ``1234`` or ``1234, calibrated on 5 answers``."""
        if not self.calibrated:
            return str(self.tokens)
        answers = "answer" if self.calibrated == 1 else "answers"
        return f"{self.tokens}, calibrated on {self.calibrated} {answers}"


def tables_for(route: Route | None, model: str | None) -> TokenizerName | None:
    """The tables ``route`` counts with: its ``count_tokens`` when it names tables, none when
    it says ``estimate`` or ``llama`` (a server's own count, else the estimate), else the family of the model it sends upstream (its ``model_map``'s
    name for ``model``, else ``model``)."""
    how = route.count_tokens if route is not None else None
    if how == "o200k" or how == "cl100k":
        return how
    if how == "estimate" or how == "llama" or model is None:
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


def count_calibrated(
    route: Route, req: Request | None, body: Any, calibration: Scales | None
) -> Counted:
    """``count_input``, its estimate calibrated where ``calibration`` has answers of
    ``route`` and the model it sends upstream (``addon.plan.calibration``)."""
    counted = count_input(route, req, body)
    if not counted.estimated or calibration is None or req is None:
        return counted
    model = route.mapped_model(req.model) or req.model
    scaled = calibration.scale(route.name, model, estimate_request(req))
    return counted if scaled is None else Counted(scaled.tokens, "estimate", scaled.answers)


def calibrates(route: Route, model: str) -> bool:
    """Whether ``route``'s count of ``model`` (as sent upstream) may be the estimate: not
    where a tokenizer's tables count it (``tables_for``)."""
    return tables_for(route, model) is None


def learn_answer(
    calibration: Calibration, route: Route, req: Request, prompt_tokens: int | None
) -> tuple[str, float] | None:
    """An answered flow's prompt tokens learned against the bridge's own count of ``req`` as
    it went upstream (its model as sent), where the route may count by the estimate. Returns
    the lesson for a store that does I/O: its ``store_key`` and ratio (None: nothing learned)."""
    if prompt_tokens is None or not calibrates(route, req.model):
        return None
    ratio = calibration.learn(route.name, req.model, estimate_request(req), prompt_tokens)
    return None if ratio is None else (store_key(route.name, req.model), ratio)


def calibration_key(route: Route, model: str | None) -> str | None:
    """The ``store_key`` a count of ``model`` on ``route`` is scaled by (the model as sent
    upstream: its ``model_map``'s name); None: the route does not count it by the estimate."""
    if model is None:
        return None
    sent = route.mapped_model(model) or model
    return store_key(route.name, sent) if calibrates(route, sent) else None
