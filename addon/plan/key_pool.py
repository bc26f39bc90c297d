"""Key pools: a route whose ``api_key_env`` is a list sends one key per attempt, a
conversation's own key first. Plain values: the chain of links, their names, the order, the
client's answer when every key cools; the fallback addon (``addon.shell.fallback``) makes the
attempts through its relay, as for a ``fallback`` chain. Why: a conversation stays on one key
(and its prompt cache) while another key cools. Rules: docs/routes.md ("Key pools")."""

from __future__ import annotations

import dataclasses
import math

from addon.dialects import Dialect
from addon.model import ClientError
from addon.plan.values import error_bytes
from addon.routes import MAX_COOLDOWN, Route
from addon.transforms.conversation import derive

PURPOSE = "key pool"
"""``derive``'s purpose for a key's weight (with ``\\0`` and the key's name)."""
REVOKED_FOR = 7 * 86400.0
"""How long a key that answered 401 / 403 is left out: until the proxy restarts in one
process; on a Redis store (whose table outlives a worker) a week, or until its entry is
deleted (docs/routes.md)."""
REFUSED_KEY_STATUSES = frozenset({401, 403})
"""Answers that say the key itself is refused: the key is revoked, the next one tried."""


def is_link(route: Route) -> bool:
    """Whether ``route`` is one key's link of a pool (its ``api_key_env`` a 1-tuple)."""
    keys = route.api_key_env
    return isinstance(keys, tuple) and len(keys) == 1


def link_name(route: Route) -> str:
    """The name a chain's link goes by (cooldowns, tried line, logs): ``route#KEYNAME`` for a
    key of a pool (the variable's name, never its value), else the route's name."""
    return f"{route.name}#{route.key_env}" if is_link(route) else route.name


def key_order(keys: tuple[str, ...], secret: bytes, conversation: str) -> tuple[str, ...]:
    """The pool's keys in this conversation's order (highest weight first; ties: pool order).

    Rendezvous hashing: each key's weight is
    ``derive(secret, conversation, "key pool\\0KEYNAME")`` (the store's secret,
    so every worker on one store orders them alike; the conversation as ``conversation_of``
    names it, the identity the prompt cache uses). A conversation stays on its key while other
    keys cool down or are revoked; only the conversations of a key that left move, spread over
    the rest."""
    weights = {k: derive(secret, conversation, f"{PURPOSE}\0{k}") for k in keys}
    return tuple(sorted(keys, key=lambda k: weights[k], reverse=True))


def links(chain: tuple[Route, ...], secret: bytes, conversation: str) -> tuple[Route, ...]:
    """A fallback chain with every pool's route as its keys' links, in the conversation's order
    (routes without a pool stay as they are): the route once per key (``api_key_env`` the
    1-tuple of that key's name), before the route's ``fallback`` routes."""
    out: list[Route] = []
    for route in chain:
        pool = route.key_pool
        if not pool:
            out.append(route)
            continue
        out.extend(
            dataclasses.replace(route, api_key_env=(k,))
            for k in key_order(pool, secret, conversation)
        )
    return tuple(out)


def has_pool(chain: tuple[Route, ...]) -> bool:
    return any(r.key_pool for r in chain)


def refused_key(route: Route, status: int) -> bool:
    """A 401 / 403 from one key of a pool: that key is revoked (``REVOKED_FOR``), the next one
    tried. A 429 only cools the key (``Retry-After``, else the route's ``cooldown``)."""
    return is_link(route) and status in REFUSED_KEY_STATUSES


def revoked(left: float) -> bool:
    """Whether a link's cooldown left says it was revoked (no cooldown lasts that long)."""
    return left > MAX_COOLDOWN


def all_cooling(client: Dialect, wait: float) -> tuple[int, dict[str, str], bytes]:
    """The client's answer when every key of its route cools down and no other route is left:
    a 429 in its dialect, ``Retry-After`` the earliest end of the keys' cooldowns. Every key
    revoked (``revoked(wait)``): a 503 saying so (no wait would help; a 401 would tell the
    client its own key is wrong)."""
    if revoked(wait):
        message = "cursor-bridge: every key of the route was refused by the upstream (401/403)"
        error = ClientError(message, status=503, code="upstream_keys_refused")
        return 503, {}, error_bytes(client, error)
    seconds = max(1, math.ceil(wait))
    message = f"cursor-bridge: every key of the route is cooling down; retry in {seconds} s"
    body = error_bytes(client, ClientError(message, status=429, code="rate_limited"))
    return 429, {"retry-after": str(seconds)}, body
