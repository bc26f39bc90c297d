"""Routes: which flows the bridge rewrites, and how.

Contract: what a route is and the checks every route passes (``Route``), the
built-in default routes, and the first route that fits a request's host, path
and method. No mitmproxy, no file reading here (``addon.routes_file`` reads
files and builds routes with these checks); the shell passes plain strings.

The keys of a routes file, with an example: ``addon.routes_file``, which reads such files
(this module never reads one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from addon.model import SchemaProfile, ToolMode

type DialectName = Literal[
    "openai_chat", "anthropic", "openai_responses", "gemini", "gemini_code_assist", "kiro"
]

UPSTREAM_ONLY: frozenset[str] = frozenset({"kiro"})
"""Dialects the bridge speaks to upstreams only (it does not answer their clients)."""
KIRO_KEYS: tuple[str, ...] = (
    "model_map",
    "profile_arn",
    "token_file",
    "refresh_url",
    "description_limit",
)
"""Route keys that only a ``kiro`` upstream takes."""


@dataclass(frozen=True, slots=True)
class Route:
    """One route. Built from a routes file (``addon.routes_file``: every key's type checked there,
    by pydantic, with messages that name the key) or in code; either way the checks below
    (``__post_init__``) hold. A plain dataclass: pydantic is imported only to read a file."""

    name: str
    host: str = "*"
    path: str = "*/chat/completions"
    methods: tuple[str, ...] = ("POST",)
    client: DialectName = "openai_chat"
    upstream: DialectName = "openai_chat"
    tool_mode: ToolMode | None = None
    schema_profile: SchemaProfile | None = None
    """The ``schema`` key of a routes file."""
    upstream_path: str | None = None
    api_key_env: str | None = None
    """Send the value of this environment variable as the upstream's API key (in the
    upstream dialect's header) instead of the client's key."""
    cache_control: Literal["drop", "keep"] = "drop"
    """Anthropic ``cache_control`` markers reach an upstream of another dialect only with
    ``keep``."""
    tool_repair: Literal["on", "off"] | None = None
    """Repair and normalize tool-call arguments; default: the ``bridge_tool_repair`` option."""
    project: str | None = None
    """The Google Cloud project a ``gemini_code_assist`` upstream bills (its body names it)."""
    reasoning: Literal["auto", "on", "off"] = "auto"
    """``auto``: a client's thinking request (Anthropic ``thinking`` / ``output_config.effort``,
    Responses ``reasoning``) becomes the upstream's reasoning switch, by the seed's thinking
    policy (``addon.transforms.restore``: which models think, which think by default);
    ``on``: this route's models think — by default too, whatever their name; ``off``: not
    sent."""
    signature_fallback: Literal["sentinel", "none"] = "sentinel"
    """Gemini upstreams: a replayed step whose calls have no thought signature the client kept
    or the reasoning store knows gets ``skip_thought_signature_validator`` on its first call
    (``sentinel``, what Google documents for calls it did not make) or nothing (``none``: the
    upstream may refuse it, and the staged retry takes over)."""
    model_map: tuple[tuple[str, str], ...] | None = None
    """``kiro`` upstreams: client model names → Kiro ``modelId``s, before the built-in table (a
    TOML table ``{"claude-sonnet-4-6" = "claude-sonnet-4.5"}``, kept as pairs: routes stay
    hashable)."""
    profile_arn: str | None = None
    """``kiro`` upstreams: the body's ``profileArn`` (default: the token file's, if any)."""
    token_file: str | None = None
    """``kiro`` upstreams: the Kiro IDE's token file; its ``accessToken`` is sent instead of the
    client's key, read on every request and refreshed when it has expired."""
    refresh_url: str | None = None
    """``kiro`` upstreams with ``token_file``: where to refresh the token (default: Kiro's)."""
    description_limit: int | None = None
    """``kiro`` upstreams: tool descriptions longer than this many characters are cut (with
    ``...``); default 10240, Kiro's limit (at least 16)."""

    def __post_init__(self) -> None:
        for name in ("name", "host", "path"):
            not_empty(getattr(self, name))
        path_glob(self.path)
        object.__setattr__(self, "methods", http_methods(tuple(self.methods)))
        client_side(self.client)
        absolute_path(self.upstream_path)
        env_name(self.api_key_env)
        object.__setattr__(self, "model_map", model_map_pairs(self.model_map))
        http_url(self.refresh_url)
        if self.description_limit is not None and self.description_limit < 16:
            raise ValueError("description_limit: must be at least 16")
        kiro_only(self)

    def matches(self, host: str, path: str, method: str) -> bool:
        return (
            method.upper() in self.methods
            and fnmatchcase(host.lower(), self.host.lower())
            and fnmatchcase(path.split("?", 1)[0], self.path)
        )


# ----------------------------------------------------------------------------- checks
# One place for what a route must be: ``Route`` runs them, and so does the routes file's
# model (``addon.routes_file``), each on its key.


def env_name(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
        raise ValueError("must be an environment variable name (letters, digits, _)")
    return v


def http_methods(v: tuple[str, ...]) -> tuple[str, ...]:
    if not v:
        raise ValueError('must list at least one HTTP method (e.g. ["POST"])')
    for m in v:
        if not isinstance(m, str) or not re.fullmatch(r"[A-Za-z]+", m):
            raise ValueError(f'{m!r} is not an HTTP method (letters only, e.g. "POST")')
    return tuple(m.upper() for m in v)


def not_empty(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be empty")
    return v


def path_glob(v: str) -> str:
    if v[0] not in "/*?[":
        raise ValueError("must be a glob over the path, starting with '/' or '*'")
    return v


def absolute_path(v: str | None) -> str | None:
    if v is not None and not v.startswith("/"):
        raise ValueError("must start with '/'")
    return v


def client_side(v: str) -> str:
    if v in UPSTREAM_ONLY:
        raise ValueError(
            f"{v} is an upstream-only dialect: the bridge does not answer {v} clients "
            f'(use it as upstream = "{v}")'
        )
    return v


def model_map_pairs(v: object) -> tuple[tuple[str, str], ...] | None:
    """A table (or pairs) of client model → Kiro ``modelId``, as pairs."""
    if isinstance(v, dict):
        for name, target in v.items():
            if not isinstance(target, str) or not target.strip():
                raise ValueError(f"{name!r}: the Kiro modelId must be a non-empty string")
        return tuple(v.items())
    if v is not None and not isinstance(v, tuple):
        raise ValueError('must be a table of model names, e.g. {"claude-sonnet-4-6" = "…"}')
    return v


def http_url(v: str | None) -> str | None:
    if v is not None and not re.match(r"https?://[^/\s]+", v):
        raise ValueError("must be an http:// or https:// URL")
    return v


def kiro_only(route: Route) -> None:
    if route.upstream != "kiro":
        given = [k for k in KIRO_KEYS if getattr(route, k) is not None]
        if given:
            raise ValueError(
                f'{", ".join(given)}: only for upstream = "kiro" '
                f"(this route's upstream is {route.upstream})"
            )
    elif route.refresh_url is not None and route.token_file is None:
        raise ValueError("refresh_url: only with token_file")


DEFAULT_ROUTES: tuple[Route, ...] = (
    Route(name="default"),
    Route(name="messages", path="*/v1/messages", client="anthropic", upstream="openai_chat"),
    Route(name="responses", path="*/responses", client="openai_responses", upstream="openai_chat"),
    Route(
        name="gemini", path="*/models/*:*enerateContent", client="gemini", upstream="openai_chat"
    ),
)
"""POST …/chat/completions (OpenAI client), POST …/v1/messages (Anthropic client, e.g.
Claude Code), POST …/responses (OpenAI Responses client, e.g. Codex CLI) and POST
…/models/{model}:generateContent / :streamGenerateContent (Gemini client, e.g. Gemini CLI)
on any host, all to an OpenAI-compatible upstream."""


def match(routes: tuple[Route, ...], host: str, path: str, method: str) -> Route | None:
    for route in routes:
        if route.matches(host, path, method):
            return route
    return None
