"""What an upstream's error says about the key it was sent with: the table of the error types
and codes each provider uses for a key that is invalid, revoked or out of credit (``KEY``), and
for a refusal of the request itself — a model the key may not use, a moderation or permission
refusal (``REQUEST``). Plain values: the status and the body's bytes in, a ``Judgement`` out;
the key pool's rules (``addon.plan.key_pool``) decide what follows. Why: a 401 / 403 caused by
one client's request must never take a key away from every other client (issue 40).
Docs: docs/routes.md ("What a key's error means")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from addon.jsonio import loads

MAX_READ = 64 * 1024
"""Only the first this many bytes of an error body are read for the judgement."""


class Blame(Enum):
    """Whose fault an upstream's error is."""

    KEY = "the key"
    """The key itself: invalid, revoked, expired, suspended or out of credit. Every request
    with it would fail the same way."""
    REQUEST = "the request"
    """This request: the model, the input (moderation), a permission on what it asks for.
    Another request with the same key may succeed."""
    UNKNOWN = "unknown"
    """A 401 / 403 neither row of the table names."""


class Field(Enum):
    """Where in the error body a rule looks (every dialect's error shape read alike)."""

    TYPE = "type"
    """``error.type`` (OpenAI, LiteLLM, Anthropic's ``{"type":"error","error":{"type":…}}``)."""
    CODE = "code"
    """``error.code`` as text (OpenAI's ``invalid_api_key``; LiteLLM's ``"401"``)."""
    STATUS = "status"
    """``error.status`` (Google's canonical code, ``UNAUTHENTICATED``)."""
    REASON = "reason"
    """``error.details[].reason`` (Google's ``ErrorInfo``: ``API_KEY_INVALID``)."""
    MESSAGE = "message"
    """``error.message`` (or a top-level ``message`` / ``detail``), lower-cased: a rule's
    value is a piece of it."""
    MESSAGE_START = "message start"
    """The same message, lower-cased: it starts with the rule's value."""
    MODERATION = "metadata"
    """``error.metadata`` has ``reasons`` or ``flagged_input`` (OpenRouter's moderation)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the table: ``field`` holds ``value`` (``MESSAGE``: contains it; otherwise
    equal) on one of ``statuses`` → ``blame``."""

    provider: str
    """Whose error this is (for the docs and the log line)."""
    blame: Blame
    statuses: frozenset[int]
    field: Field
    value: str
    """What the field holds; also the words a log line gives for the judgement (the table's
    own words, never the upstream's text)."""


@dataclass(frozen=True, slots=True)
class Judgement:
    blame: Blame
    why: str = ""
    """The rule's value (``invalid_api_key``), or empty: no rule matched."""
    provider: str = ""


UNAUTHORIZED = frozenset({401, 403})
"""The statuses a ``REQUEST`` rule and ``UNKNOWN`` concern: what a key pool used to take as
the key refused."""
KEY_STATUSES = frozenset({400, 401, 402, 403, 429})
"""The statuses a ``KEY`` rule may match: Gemini says an invalid key with a 400, OpenAI an
exhausted quota with a 429, OpenRouter and Anthropic a lack of credit with a 402."""


def _rules(
    provider: str, blame: Blame, statuses: frozenset[int], field: Field, *values: str
) -> tuple[Rule, ...]:
    return tuple(Rule(provider, blame, statuses, field, v) for v in values)


K, R = Blame.KEY, Blame.REQUEST
RULES: tuple[Rule, ...] = (
    # The request's own: checked first (LiteLLM's refusals carry "401" codes and
    # ``authentication_error`` types that are about something else than our key).
    *_rules(
        # ProxyErrorTypes of litellm/proxy/_types.py: the key exists, the model is not its.
        # {"error":{"message":"key not allowed to access model. This key can only access
        #  models=[…]. Tried to access …","type":"key_model_access_denied","param":"model",
        #  "code":"401"}}
        "LiteLLM",
        R,
        UNAUTHORIZED,
        Field.TYPE,
        "key_model_access_denied",
        "team_model_access_denied",
        "user_model_access_denied",
        "org_model_access_denied",
        "team_member_permission_error",
    ),
    # LiteLLM passes on the error of the deployment behind it, prefixed with the exception's
    # name: "litellm.AuthenticationError: AuthenticationError: OpenAIException - Invalid API
    # Key … model group 'x' failed" (tests/fixtures/litellm/gemini_error_bad_key.json) is
    # LiteLLM's key for that model, not ours: our key passed LiteLLM's own check.
    *_rules("LiteLLM", R, UNAUTHORIZED, Field.MESSAGE_START, "litellm."),
    # OpenAI: a project without that model ("Project `proj_…` does not have access to model
    # `…`", 403), a country it does not serve (every key alike: nothing to revoke).
    *_rules(
        "OpenAI",
        R,
        UNAUTHORIZED,
        Field.CODE,
        "model_not_found",
        "unsupported_country_region_territory",
        "content_policy_violation",
    ),
    # Anthropic: "Your API key does not have permission to use the specified resource."
    *_rules("Anthropic", R, UNAUTHORIZED, Field.TYPE, "permission_error"),
    # OpenRouter's moderation 403: {"error":{"code":403,"message":"… requires moderation …",
    # "metadata":{"reasons":[…],"flagged_input":"…","provider_name":…,"model_slug":…}}}
    *_rules("OpenRouter", R, UNAUTHORIZED, Field.MODERATION, "moderation"),
    *_rules("OpenRouter", R, UNAUTHORIZED, Field.MESSAGE, "requires moderation"),
    *_rules("Azure OpenAI", R, UNAUTHORIZED, Field.CODE, "content_filter"),
    # The key's own.
    # OpenAI: 401 "Incorrect API key provided: sk-…abcd.", a deactivated account; 429 a quota
    # spent or billing off (the documented error codes; insufficient_quota is no rate limit:
    # waiting does not help).
    *_rules(
        "OpenAI",
        K,
        KEY_STATUSES,
        Field.CODE,
        "invalid_api_key",
        "account_deactivated",
        "insufficient_quota",
        "billing_not_active",
    ),
    # Anthropic: 401 authentication_error ("invalid x-api-key"), 402 billing_error; a 400
    # "Your credit balance is too low to access the Anthropic API".
    *_rules("Anthropic", K, KEY_STATUSES, Field.TYPE, "authentication_error", "billing_error"),
    *_rules("Anthropic", K, KEY_STATUSES, Field.MESSAGE, "credit balance is too low"),
    # Gemini (Google APIs): 400 INVALID_ARGUMENT "API key not valid. Please pass a valid API
    # key." with ErrorInfo reason API_KEY_INVALID; 401 UNAUTHENTICATED; 403 for a key suspended,
    # restricted away from this API / address, or its project's API off.
    *_rules(
        "Gemini",
        K,
        KEY_STATUSES,
        Field.REASON,
        "API_KEY_INVALID",
        "API_KEY_EXPIRED",
        "CONSUMER_SUSPENDED",
        "API_KEY_SERVICE_BLOCKED",
        "API_KEY_IP_ADDRESS_BLOCKED",
        "API_KEY_HTTP_REFERRER_BLOCKED",
        "SERVICE_DISABLED",
    ),
    *_rules("Gemini", K, KEY_STATUSES, Field.STATUS, "UNAUTHENTICATED"),
    *_rules("Gemini", K, KEY_STATUSES, Field.MESSAGE, "api key not valid", "api key expired"),
    # OpenRouter: 401 {"error":{"message":"User not found.","code":401}} (a deleted or unknown
    # key), "No auth credentials found"; 402 "Insufficient credits…"; 403 "Key limit exceeded".
    *_rules(
        "OpenRouter",
        K,
        KEY_STATUSES,
        Field.MESSAGE,
        "user not found",
        "no auth credentials found",
        "insufficient credits",
        "key limit exceeded",
    ),
    # LiteLLM's own check of a virtual key: 401 auth_error "Authentication Error, Invalid
    # proxy server token passed…", 400 expired_key, budget_exceeded (the key's budget).
    *_rules("LiteLLM", K, KEY_STATUSES, Field.TYPE, "auth_error", "expired_key", "budget_exceeded"),
    *_rules("LiteLLM", K, KEY_STATUSES, Field.MESSAGE, "invalid proxy server token"),
    # Azure OpenAI: {"error":{"code":"401","message":"Access denied due to invalid subscription
    # key or wrong API endpoint…"}}
    *_rules("Azure OpenAI", K, KEY_STATUSES, Field.MESSAGE, "invalid subscription key"),
)
"""The table, first match wins: every ``REQUEST`` row before every ``KEY`` row."""
del K, R


@dataclass(frozen=True, slots=True)
class _Facts:
    """The error body's fields the rules read."""

    type: frozenset[str]
    code: frozenset[str]
    status: frozenset[str]
    reason: frozenset[str]
    message: str
    moderation: bool

    def holds(self, rule: Rule) -> bool:
        match rule.field:
            case Field.TYPE:
                return rule.value in self.type
            case Field.CODE:
                return rule.value in self.code
            case Field.STATUS:
                return rule.value in self.status
            case Field.REASON:
                return rule.value in self.reason
            case Field.MESSAGE:
                return rule.value in self.message
            case Field.MESSAGE_START:
                return self.message.startswith(rule.value)
            case Field.MODERATION:
                return self.moderation


def judge(status: int, body: bytes) -> Judgement | None:
    """Whose fault an upstream's error answer is. None: not a question of the key (a status
    outside ``KEY_STATUSES``, or one of 400 / 402 / 429 no ``KEY`` row names: the usual rules
    apply). ``UNKNOWN``: a 401 / 403 no row names."""
    if status not in KEY_STATUSES:
        return None
    facts = _facts(body)
    if facts is not None:
        for rule in RULES:
            if status in rule.statuses and facts.holds(rule):
                return Judgement(rule.blame, rule.value, rule.provider)
    return Judgement(Blame.UNKNOWN) if status in UNAUTHORIZED else None


def _facts(body: bytes) -> _Facts | None:
    try:
        doc = loads(body[:MAX_READ])
    except (ValueError, RecursionError):
        return None
    if isinstance(doc, list) and doc:  # a Gemini stream's JSON array: its first item
        doc = doc[0]
    if not isinstance(doc, dict):
        return None
    error = doc.get("error")
    inner: dict[str, object] = error if isinstance(error, dict) else {}
    types = {_text(inner.get("type"))}
    if isinstance(error, str):  # {"error": "..."}
        message = error
    else:
        message = _text(inner.get("message")) or _text(doc.get("message"))
        message = message or _text(doc.get("detail"))
    metadata = inner.get("metadata")
    moderation = isinstance(metadata, dict) and (
        "reasons" in metadata or "flagged_input" in metadata
    )
    return _Facts(
        type=frozenset(types - {""}),
        code=frozenset({_text(inner.get("code"))} - {""}),
        status=frozenset({_text(inner.get("status"))} - {""}),
        reason=frozenset(_reasons(inner.get("details"))),
        message=message.lower(),
        moderation=moderation,
    )


def _reasons(details: object) -> Iterator[str]:
    if isinstance(details, list):
        for item in details:
            if isinstance(item, dict) and isinstance(item.get("reason"), str):
                yield item["reason"]


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""
