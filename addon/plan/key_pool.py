"""Key pools: a route whose ``api_key_env`` is a list sends one key per attempt, a
conversation's own key first. Plain values: the chain of links, their names, the order, the
client's answer when every key cools; the fallback addon (``addon.shell.outbound.attempts``) makes the
attempts through its relay, as for a ``fallback`` chain. Why: a conversation stays on one key
(and its prompt cache) while another key cools. A key is left out only for what the key did
(``key_verdict`` on ``addon.plan.key_errors``'s table), at most one per client request, for
``bridge_key_recheck``. Rules: docs/routes.md ("Key pools")."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum

from addon.config.routes import Route
from addon.dialects import Dialect
from addon.model import ClientError
from addon.plan.key_errors import KEY_STATUSES, Blame, Judgement, judge
from addon.plan.values import error_bytes, tenths
from addon.transforms.conversation import derive

PURPOSE = "key pool"
"""``derive``'s purpose for a key's weight (with ``\\0`` and the key's name)."""
_REVOKED = "revoked:"


def revoked_mark(link: str) -> str:
    """The cooldowns table's entry saying a link's key was revoked (beside the link's own
    entry, which keeps it out): ``revoked:route#KEYNAME``, as long as the revocation lasts."""
    return _REVOKED + link


class KeyAction(Enum):
    """What an error answer of one key of a pool does (``key_verdict``)."""

    REVOKE = "revoked"
    """The key's own fault: left out by every worker for ``bridge_key_recheck``, then tried
    again (it comes back by itself when that use succeeds); the next link tried."""
    PASS_ON = "not revoked: one key per request"
    """The key's own fault, but this request already revoked a key: nothing is left out, the
    next link tried (never more than one key revoked per client request)."""
    ANSWER = "answered"
    """The request's own fault, or a 401 / 403 the table does not name: the client gets the
    answer, no key cools."""


@dataclass(frozen=True, slots=True)
class KeyVerdict:
    action: KeyAction
    judgement: Judgement

    def detail(self, status: int, recheck: float) -> str:
        """The tried line's words: ``HTTP 401 invalid_api_key, revoked for 3600 s``."""
        why = f"HTTP {status} {self.judgement.why}".rstrip()
        if self.action is KeyAction.REVOKE:
            return f"{why}, revoked for {tenths(recheck)} s"
        if self.action is KeyAction.PASS_ON:
            return f"{why}, {self.action.value}"
        return why


def reads_error(route: Route, status: int) -> bool:
    """Whether an answer of ``route`` is read whole to be judged (``key_verdict``): an error
    of one key of a pool whose status a key's fault may come with."""
    return is_link(route) and status in KEY_STATUSES


def key_verdict(route: Route, status: int, body: bytes, revoked_already: bool) -> KeyVerdict | None:
    """What an error answer of one key of a pool does (``addon.plan.key_errors`` judges
    whose fault it is). None: not a key of a pool, or the answer says nothing of the key —
    the fallback rules apply (a 429 cools the key, a 5xx falls back, another 4xx is
    answered). ``revoked_already``: this client request revoked a key already."""
    if not is_link(route):
        return None
    judgement = judge(status, body)
    if judgement is None:
        return None
    if judgement.blame is Blame.KEY:
        action = KeyAction.PASS_ON if revoked_already else KeyAction.REVOKE
        return KeyVerdict(action, judgement)
    return KeyVerdict(KeyAction.ANSWER, judgement)


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


def all_cooling(
    client: Dialect, wait: float, every_revoked: bool
) -> tuple[int, dict[str, str], bytes]:
    """The client's answer when every key of its route cools down and no other route is left:
    a 429 in its dialect, ``Retry-After`` the earliest end of the keys' cooldowns. Every key
    revoked: a 503 saying so (a 401 would tell the client its own key is wrong)."""
    if every_revoked:
        message = "cursor-bridge: every key of the route was refused by the upstream"
        error = ClientError(message, status=503, code="upstream_keys_refused")
        return 503, {}, error_bytes(client, error)
    seconds = max(1, math.ceil(wait))
    message = f"cursor-bridge: every key of the route is cooling down; retry in {seconds} s"
    body = error_bytes(client, ClientError(message, status=429, code="rate_limited"))
    return 429, {"retry-after": str(seconds)}, body
