"""A key's probe: a cheap authenticated GET that says whether the upstream takes one key of a
pool, for a 401 / 403 the table of key errors does not name (``addon.plan.key_errors``) and
for the recheck of a revoked key after ``bridge_key_recheck``. Plain values: which URL (the
route's ``key_probe``, else one known per upstream), which headers carry the key, what the two
answers (without the key, then with it) mean; the fallback addon (``addon.shell.outbound.attempts``)
sends it through the relay's client. Why: a probe that needs the key is evidence about the key
(issue 40); a model list that answers without a key proves nothing. Rules: docs/routes.md
("A key's probe")."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from addon.config.routes import Route
from addon.dialects import ANTHROPIC, DIALECTS, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES
from addon.plan.key_errors import UNAUTHORIZED, Blame, Judgement
from addon.plan.key_pool import KeyAction, KeyVerdict
from addon.plan.wire_request import auth_value

PROBE_TIMEOUT = 5.0
"""Seconds a probe's answer may take (at most the route's ``timeout``): to its head, then its
body."""
RECHECK_HOLD = 2 * PROBE_TIMEOUT + 1.0
"""A key revoked on a route with a probe stays out this much past ``bridge_key_recheck``: the
time its recheck probe (two requests) may take; a worker gone before its recheck leaves the
key to the next request after that."""
PROBED_FOR = 60.0
"""Seconds a probe that accepted a key (or proved nothing) is remembered by every worker: a
401 / 403 of that key the table does not name is answered without probing again."""
OPENROUTER_KEY = "/api/v1/key"
"""OpenRouter's "current API key" endpoint: 401 without a key or with one it does not know."""
_PROBED = "probed:"

_KEYED_PATHS = (
    # The upstream dialect, and the end of the path its requests are sent at → the model list
    # beside it (a gateway's prefix kept: ``/api/v1/chat/completions`` → ``/api/v1/models``).
    (OPENAI_CHAT, "/chat/completions"),
    (OPENAI_RESPONSES, "/responses"),
    (ANTHROPIC, "/messages"),
)


class ProbeResult(Enum):
    """What a probe says about the key."""

    REFUSED = "refused the key"
    """The URL refuses a request without a key, and refused this key too (401 / 403)."""
    ACCEPTED = "accepted the key"
    """The URL refuses a request without a key, and answered this key (2xx)."""
    NO_PROOF = "proves nothing"
    """The URL answers without a key, or gave another answer, or none: nothing is known."""


@dataclass(frozen=True, slots=True)
class Probe:
    """A GET on the upstream's origin (the scheme, host and port the key's requests go to)."""

    path: str
    """Absolute, no query (no key ever goes in a URL: Gemini's goes in ``x-goog-api-key``)."""
    key_header: str
    """The header the key goes in, the upstream dialect's (``authorization``, ``x-api-key``,
    ``x-goog-api-key``)."""
    fixed: tuple[tuple[str, str], ...] = ()
    """Headers both requests carry (Anthropic's ``anthropic-version``)."""

    def keyless(self) -> tuple[tuple[str, str], ...]:
        """The first request's headers: no key."""
        return (("accept", "application/json"), *self.fixed)

    def keyed(self, key: str) -> tuple[tuple[str, str], ...]:
        """The second request's headers: the key in the upstream dialect's header."""
        value = f"Bearer {key}" if self.key_header == "authorization" else key
        return (*self.keyless(), (self.key_header, value))

    @property
    def label(self) -> str:
        """The words a log line and the tried line give for it: ``GET /api/v1/key``."""
        return f"GET {self.path}"


def probed_mark(link: str) -> str:
    """The cooldowns table's entry saying a probe of the link's key accepted it or proved
    nothing a moment ago (``PROBED_FOR``): ``probed:route#KEYNAME``."""
    return _PROBED + link


def probe_for(route: Route, sent_path: str, host: str) -> Probe | None:
    """The probe of ``route``'s key, its requests going to ``host`` at ``sent_path`` (the path
    the key's attempt was sent at, query included or not). None: no probe known (a Kiro or
    Code Assist upstream, a path the rules below do not read).

    In order: the route's ``key_probe``; OpenRouter (``openrouter.ai``): ``/api/v1/key``; an
    OpenAI chat, Responses or Anthropic upstream: the model list beside the path its requests
    go to (``…/models``); Gemini: ``…/models`` of ``…/models/M:generateContent``."""
    dialect = DIALECTS[route.upstream]
    name, _ = auth_value(dialect, "")
    fixed = dialect.fixed_headers if route.upstream == ANTHROPIC else ()
    if route.key_probe is not None:
        return Probe(route.key_probe, name, fixed)
    bare = host.lower().rstrip(".")
    if bare == "openrouter.ai" or bare.endswith(".openrouter.ai"):
        return Probe(OPENROUTER_KEY, name, fixed)
    path = sent_path.split("?", 1)[0]
    for upstream, end in _KEYED_PATHS:
        if route.upstream == upstream and path.endswith(end):
            return Probe(path.removesuffix(end) + "/models", name, fixed)
    if route.upstream == GEMINI:
        prefix, models, _ = path.partition("/models/")
        if models:
            return Probe(prefix + "/models", name, fixed)
    return None


def needs_key(keyless: int | None) -> bool:
    """Whether the probe's URL refused the request without a key (its status; None: no
    answer): only then does its answer to the key say something, and the key is sent."""
    return keyless in UNAUTHORIZED


def probe_result(keyless: int | None, keyed: int | None) -> ProbeResult:
    """What the two answers mean (each a status, None: no answer in time or not asked)."""
    if not needs_key(keyless) or keyed is None:
        return ProbeResult.NO_PROOF
    if keyed in UNAUTHORIZED:
        return ProbeResult.REFUSED
    if 200 <= keyed <= 299:
        return ProbeResult.ACCEPTED
    return ProbeResult.NO_PROOF


def probed_verdict(
    verdict: KeyVerdict, probe: Probe, result: ProbeResult, revoked_already: bool
) -> KeyVerdict:
    """A 401 / 403 the table does not name (``verdict``: answered), after the key's probe:
    refused → the key's own fault (revoked, or passed on when this request revoked a key
    already: never more than one per client request); else still answered."""
    if result is not ProbeResult.REFUSED:
        return verdict
    why = f"and its probe {probe.label} refused the key"
    action = KeyAction.PASS_ON if revoked_already else KeyAction.REVOKE
    return KeyVerdict(action, Judgement(Blame.KEY, why))


def probe_timeout(route: Route) -> float:
    return min(route.timeout, PROBE_TIMEOUT)
