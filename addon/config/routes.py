"""Routes: which flows the bridge rewrites, and how.

Contract: what a route is and the checks every route passes (``Route``), the built-in default
routes, and the first route that fits a request's host, path and method (``match``). No
mitmproxy, no file reading here (``addon.config.routes_file`` reads files, whose keys docs/routes.md
lists, and builds routes with these checks); the shell passes plain strings."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from addon.config.expose import Exposure, check_route, expose_value, exposed_pairs
from addon.config.images import image_keys
from addon.config.search_backend import SearchBackend
from addon.config.upstream_url import UpstreamURL, http_url, parse_upstream_url, upstream_url
from addon.dialects import (
    ANTHROPIC,
    DIALECTS,
    GEMINI,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    UPSTREAM_ONLY,
    DialectName,
)
from addon.model import CachePolicy, CacheTTL, SchemaProfile, ToolMode

DIALECT_KEYS: tuple[str, ...] = ("profile_arn", "token_file", "refresh_url", "description_limit")
"""Route keys that only some upstream dialects take (``Dialect.route_keys`` says which)."""

type TokenCounting = Literal["upstream", "o200k", "cl100k", "estimate"]
"""A route's ``count_tokens``: how its input tokens are counted."""


@dataclass(frozen=True, slots=True)
class When:
    """A route's conditions beyond host, path, method and model: each one set must hold
    (``RequestFacts``); none set: the route takes any request."""

    thinking: bool | None = None
    """The request asks for reasoning (true) or does not (false)."""
    images: bool | None = None
    """The request holds an image input (true) or none (false)."""
    min_input_tokens: int | None = None
    """The bridge's estimate of the request's input tokens is at least this."""
    background: bool | None = None
    """The request is a client's background call (true) or not (false): docs/routes.md."""

    def __post_init__(self) -> None:
        if self.min_input_tokens is not None and self.min_input_tokens < 0:
            raise ValueError("when.min_input_tokens: must be at least 0")

    def holds(self, facts: RequestFacts | None) -> bool:
        """Whether every condition set holds (``facts`` None: the request could not be read,
        only a ``When`` of no conditions holds)."""
        if facts is None:
            return self == When()
        return (
            (self.thinking is None or self.thinking == facts.thinking)
            and (self.images is None or self.images == facts.images)
            and (self.background is None or self.background == facts.background)
            and (self.min_input_tokens is None or facts.input_tokens >= self.min_input_tokens)
        )


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What ``When`` asks of a request, read from it as a client of one dialect sent it."""

    thinking: bool = False
    images: bool = False
    input_tokens: int = 0
    background: bool = False


@dataclass(frozen=True, slots=True)
class TokenPrice:
    """A route's ``price``: US dollars per million tokens, for a model the price table
    (genai-prices) does not know, where a client key's budget must price it
    (docs/deploy.md#limits-per-client-key). A cache price not given is the input's."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_read", "cache_write"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not 0 <= v < 1e6 or v != v):
                raise ValueError(f"price.{name}: US dollars per million tokens, at least 0")

    def usd(self, prompt: int, cache_read: int, cache_write: int, output: int) -> float:
        """The cost of these tokens (``prompt``: uncached input only)."""
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        total = prompt * self.input + cache_read * read + cache_write * write
        return (total + output * self.output) / 1e6


DEFAULT_RESERVE_MAX_OUTPUT = 4096
"""Output tokens a client key's reservation counts at most for one request."""
MAX_RESERVE_OUTPUT = 10_000_000
DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 3600.0
DEFAULT_COOLDOWN = 30.0
MAX_COOLDOWN = 86400.0


@dataclass(frozen=True, slots=True)
class Route:
    """One route. Built from a routes file (``addon.config.routes_file``: every key's type checked there,
    by pydantic, with messages that name the key) or in code; either way the checks below
    (``__post_init__``) hold. A plain dataclass: pydantic is imported only to read a file."""

    name: str
    host: str = "*"
    path: str = "*/chat/completions"
    methods: tuple[str, ...] = ("POST",)
    client: DialectName = OPENAI_CHAT
    upstream: DialectName = OPENAI_CHAT
    tool_mode: ToolMode | None = None
    schema_profile: SchemaProfile | None = None
    """The ``schema`` key of a routes file."""
    upstream_path: str | None = None
    api_key_env: str | tuple[str, ...] | None = None
    """Send the value of this environment variable as the upstream's API key (in the
    upstream dialect's header) instead of the client's key. A tuple is a key pool
    (``addon.plan.key_pool``): one attempt per key, a conversation's own key first; a fallback
    chain's link for one key of a pool is the route with a tuple of that one name."""
    cache_control: CachePolicy | None = None
    """Prompt-cache breakpoints sent upstream (docs/caching.md): ``keep`` the client's,
    ``auto`` the client's and the bridge's own where the client placed none, ``drop`` none;
    ``None``: the upstream dialect's default (Anthropic ``auto``; another dialect ``keep``
    from a client of its own dialect, else ``drop``)."""
    cache_ttl: CacheTTL = "5m"
    """The lifetime of the breakpoints the bridge places (``5m`` or ``1h``)."""
    prompt_cache_key: bool | None = None
    """Send OpenAI's ``prompt_cache_key`` (the client's, else one derived from its
    conversation) to a chat or Responses upstream; ``None``: on for ``api.openai.com``."""
    strip_client_noise: bool | None = None
    """Leave out the lines a client writes for its own vendor (Claude Code's billing line:
    docs/caching.md#client-noise); ``None``: everywhere but Anthropic's own API."""
    count_tokens: TokenCounting | None = None
    """How input tokens are counted for ``count_tokens`` and ``when.min_input_tokens``
    (docs/dialects/anthropic.md#count_tokens): the upstream's own counter (``upstream``), a
    tokenizer's tables (``o200k``, ``cl100k``), or the estimate; ``None``: the upstream's
    counter where its dialect has one, else the tables of the model's family where known, else
    the estimate."""
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
    """The model sent upstream: client model globs → upstream model names, the first pair whose
    glob takes the model wins (a TOML table ``{"claude-*" = "deepseek-chat"}``, kept as pairs:
    routes stay hashable). Kiro: a mapped name is sent as it is, else its built-in table."""
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
    model: tuple[str, ...] | None = None
    """Globs over the model the client asked for (a string in a file is a list of one); the
    route takes only those. ``None``: any model, and a request whose model cannot be read."""
    upstream_url: str | None = None
    """``http(s)://host[:port][/prefix]``: where this route's requests go whatever the proxy's
    mode (``UpstreamURL``); ``None``: where the client sent them."""
    client_key: bool = False
    """With an ``upstream_url`` to another host than the client addressed: send the client's
    key there all the same. Without it (and without ``api_key_env``) no key goes there."""
    when: When | None = None
    """Conditions on the request beyond its model (``When``); None: any request."""
    fallback: tuple[str, ...] = ()
    """Names of other routes tried in order when this one's upstream cannot be reached, times
    out before its first byte, or answers 429 or 5xx (``addon.plan.fallback``;
    ``check_fallbacks`` holds the names to routes of the same client dialect, without cycles)."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds to the connection and to the first byte of the answer, for every attempt of a
    chain (the relay makes them: ``addon.shell.outbound.relay``)."""
    cooldown: float = DEFAULT_COOLDOWN
    """Seconds this route is skipped after a refused connection, a timeout or a 429 / 5xx
    without ``Retry-After`` (a 429's ``Retry-After`` says how long instead)."""
    price: TokenPrice | None = None
    """US dollars per million tokens for a model the price table does not know (a client
    key's budget prices its requests with it; none: such a request is refused)."""
    reserve_max_output: int = DEFAULT_RESERVE_MAX_OUTPUT
    """Output tokens a client key's reservation counts at most (the request's own cap when
    lower): a 64k ``max_tokens`` does not refuse an agent at $0 spent. An answer longer than
    this is settled in full."""
    expose_as: Exposure | None = None
    """Names the models this route serves (``model_map``'s upstream names, literal ``model``
    names) appear under in a client's model list, a rule (``"claude-{model}"``) or a list; a
    request naming one takes this route and goes upstream as the model it stands for
    (``addon.config.expose``)."""
    key_probe: str | None = None
    """A key pool's probe (``addon.plan.key_probe``): the path, on the upstream's origin, of a
    GET that refuses a request without a key and answers a good key (OpenRouter's
    ``/api/v1/key``); None: the one known for the upstream."""
    # Issue 44 point 1 (web search): the backend the bridge runs a client's search tool on.
    search: SearchBackend | None = None
    """Where the bridge runs a client's web search tool when the upstream cannot
    (``addon.config.search_backend``, docs/tools.md#web-search); None: such tools are left out."""
    images: bool | Literal["drop"] | None = None
    """A request's images on this route (docs/routes.md#images): sent (``None``, true); none
    (false): each replaced by the ``vision`` route's caption, or without one the request
    refused (400); ``"drop"``: left out, the flow's comment says how many."""
    vision: str | None = None
    """With ``images = false``: the route that captions each image (``check_vision``)."""

    def __post_init__(self) -> None:
        for name in ("name", "host", "path"):
            not_empty(getattr(self, name))
        path_glob(self.path)
        object.__setattr__(self, "methods", http_methods(tuple(self.methods)))
        client_side(self.client)
        absolute_path(self.upstream_path)
        object.__setattr__(self, "api_key_env", env_names(self.api_key_env))
        object.__setattr__(self, "model_map", model_map_pairs(self.model_map))
        http_url(self.refresh_url)
        if self.description_limit is not None and self.description_limit < 16:
            raise ValueError("description_limit: must be at least 16")
        object.__setattr__(self, "model", model_globs(self.model))
        upstream_url(self.upstream_url)
        dialect_keys(self)
        object.__setattr__(self, "fallback", fallback_names(self.fallback))
        seconds(self.timeout, "timeout", MAX_TIMEOUT, zero=False)
        seconds(self.cooldown, "cooldown", MAX_COOLDOWN, zero=True)
        probe_path(self.key_probe)
        reserve_output(self.reserve_max_output)
        object.__setattr__(self, "expose_as", expose_value(self.expose_as))
        check_route(self)
        image_keys(self.images, self.vision)

    @property
    def key_env(self) -> str | None:
        """The environment variable whose value is sent: ``api_key_env``'s name, a pool's first
        (a chain's link for one key of a pool: that key)."""
        keys = self.api_key_env
        return keys[0] if isinstance(keys, tuple) else keys

    @property
    def key_pool(self) -> tuple[str, ...]:
        """The names of a key pool (``api_key_env`` given as a list); empty: no pool."""
        keys = self.api_key_env
        return keys if isinstance(keys, tuple) else ()

    @property
    def key_names(self) -> tuple[str, ...]:
        """Every environment variable the route may send (one, a pool's, or none)."""
        keys = self.api_key_env
        return keys if isinstance(keys, tuple) else (keys,) if keys is not None else ()

    def matches(self, host: str, path: str, method: str) -> bool:
        return (
            method.upper() in self.methods
            and fnmatchcase(host.lower(), self.host.lower())
            and fnmatchcase(path.split("?", 1)[0], self.path)
        )

    def mapped_model(self, model: str) -> str | None:
        """The model sent upstream for the client's ``model``: the one an ``expose_as`` name
        stands for, else ``model_map``'s, else None."""
        for name, served in exposed_pairs(self.expose_as, self.model_map, self.model):
            if name == model:
                return served
        for glob, target in self.model_map or ():
            if fnmatchcase(model, glob):
                return target
        return None

    def exposes(self, model: str | None) -> bool:
        """Whether ``model`` is one of the names ``expose_as`` gives."""
        pairs = exposed_pairs(self.expose_as, self.model_map, self.model)
        return any(name == model for name, _ in pairs)

    def takes_model(self, model: str | None) -> bool:
        """Whether the route's ``model`` globs take this model (None: it could not be read)."""
        if self.model is None:
            return True
        return model is not None and any(fnmatchcase(model, glob) for glob in self.model)

    @property
    def target(self) -> UpstreamURL | None:
        """The parsed ``upstream_url``."""
        return None if self.upstream_url is None else parse_upstream_url(self.upstream_url)


# ----------------------------------------------------------------------------- checks
# One place for what a route must be: ``Route`` runs them, and so does the routes file's
# model (``addon.config.routes_file``), each on its key.


def env_name(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
        raise ValueError("must be an environment variable name (letters, digits, _)")
    return v


def env_names(v: object) -> str | tuple[str, ...] | None:
    """``api_key_env``: one environment variable name, or a key pool's list of them (not
    empty, each once)."""
    if v is None or isinstance(v, str):
        return env_name(v)
    if not isinstance(v, tuple | list):
        raise ValueError('must be an environment variable name or a list of them, e.g. ["A", "B"]')
    if not v:
        raise ValueError("a key pool names at least one environment variable")
    for name in v:
        if not isinstance(name, str):
            raise ValueError("must be environment variable names (letters, digits, _)")
        env_name(name)
    dupes = sorted({n for n in v if v.count(n) > 1})
    if dupes:
        raise ValueError(f"names a variable twice: {', '.join(dupes)}")
    return tuple(v)


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


def probe_path(v: str | None) -> str | None:
    """``key_probe``: an absolute path, no query (a key never goes in a URL), no space."""
    if v is None:
        return v
    if not v.startswith("/") or v.startswith("//"):
        raise ValueError("must be a path starting with '/' (on the upstream's origin)")
    if any(c in v for c in "?#") or any(not c.isprintable() or c.isspace() for c in v):
        raise ValueError("must be a plain path: no query, fragment, space or control character")
    return v


def client_side(v: str) -> str:
    if v in UPSTREAM_ONLY:
        raise ValueError(
            f"{v} is an upstream-only dialect: the bridge does not answer {v} clients "
            f'(use it as upstream = "{v}")'
        )
    return v


def model_map_pairs(v: object) -> tuple[tuple[str, str], ...] | None:
    """A table (or pairs) of client model globs → upstream model names, as pairs."""
    if isinstance(v, dict):
        v = tuple(v.items())
    if v is None:
        return None
    if not isinstance(v, tuple):
        raise ValueError('must be a table of model names, e.g. {"claude-*" = "deepseek-chat"}')
    for pair in v:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise ValueError('must be a table of model names, e.g. {"claude-*" = "deepseek-chat"}')
        name, target = pair
        if not isinstance(name, str) or not name.strip():
            raise ValueError("model globs must be non-empty strings")
        if not isinstance(target, str) or not target.strip():
            raise ValueError(f"{name!r}: the upstream model must be a non-empty string")
    return v


def model_globs(v: object) -> tuple[str, ...] | None:
    """A glob or a list of globs over model names, as a tuple."""
    if v is None:
        return None
    globs = (v,) if isinstance(v, str) else v
    if not isinstance(globs, tuple | list) or not globs:
        raise ValueError('must be a model name glob or a list of them, e.g. ["claude-*"]')
    for glob in globs:
        if not isinstance(glob, str) or not glob.strip():
            raise ValueError("model globs must be non-empty strings")
    return tuple(globs)


def fallback_names(v: object) -> tuple[str, ...]:
    """A route name or a list of them, as a tuple (each once)."""
    names = (v,) if isinstance(v, str) else v
    if not isinstance(names, tuple | list):
        raise ValueError('must be a list of route names, e.g. ["second", "third"]')
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("route names must be non-empty strings")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"names a route twice: {', '.join(dupes)}")
    return tuple(names)


def seconds(v: float, key: str, most: float, *, zero: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        raise ValueError(f"{key}: must be a number of seconds")
    if v < 0 or (v == 0 and not zero) or v > most:
        low = "0" if zero else "more than 0"
        raise ValueError(f"{key}: must be {low} and at most {most:g} seconds (got {v!r})")
    return float(v)


def reserve_output(v: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_RESERVE_OUTPUT:
        raise ValueError(f"reserve_max_output: a whole number from 1 to {MAX_RESERVE_OUTPUT}")
    return v


def check_fallbacks(routes: tuple[Route, ...]) -> None:
    """Every ``fallback`` names another route of the same client dialect (the client's request
    is read once, in the matched route's dialect), none backs itself, directly or through
    others, and none reads a Kiro token file (the bridge's own attempts carry no token).
    ``ValueError`` naming the route and the key."""
    by_name = {r.name: r for r in routes}
    for route in routes:
        for name in route.fallback:
            other = by_name.get(name)
            where = f"route {route.name!r}: fallback"
            if other is None:
                raise ValueError(f"{where}: no route is named {name!r}")
            if other is route:
                raise ValueError(f"{where}: a route cannot fall back to itself")
            if other.client != route.client:
                raise ValueError(
                    f"{where}: route {name!r} takes {other.client} clients, this route "
                    f"{route.client} (a fallback answers the same client)"
                )
            if other.token_file is not None:
                raise ValueError(
                    f"{where}: route {name!r} reads a Kiro token_file; a fallback cannot "
                    "(use api_key_env)"
                )
    for route in routes:
        cycle = _cycle(route, by_name, (route.name,))
        if cycle:
            raise ValueError(f"route {route.name!r}: fallback: a cycle ({' -> '.join(cycle)})")


def _cycle(route: Route, by_name: dict[str, Route], path: tuple[str, ...]) -> tuple[str, ...]:
    for name in route.fallback:
        if name in path:
            return (*path, name)
        found = _cycle(by_name[name], by_name, (*path, name))
        if found:
            return found
    return ()


def fallback_chain(route: Route, routes: tuple[Route, ...]) -> tuple[Route, ...]:
    """The route, then its ``fallback`` routes in order (the names checked at start)."""
    by_name = {r.name: r for r in routes}
    return (route, *(by_name[n] for n in route.fallback if n in by_name))


def dialect_keys(route: Route) -> None:
    """The ``DIALECT_KEYS`` a route gives must be its upstream dialect's (``route_keys``)."""
    takes = DIALECTS[route.upstream].route_keys
    given = [k for k in DIALECT_KEYS if getattr(route, k) is not None and k not in takes]
    if given:
        only = sorted(n for n, d in DIALECTS.items() if set(given) <= d.route_keys)
        where = " or ".join(f'upstream = "{n}"' for n in only) or "another upstream"
        raise ValueError(
            f"{', '.join(given)}: only for {where} (this route's upstream is {route.upstream})"
        )
    if route.refresh_url is not None and route.token_file is None:
        raise ValueError("refresh_url: only with token_file")


DEFAULT_ROUTES: tuple[Route, ...] = (
    Route(name="default"),
    Route(name="messages", path="*/v1/messages", client=ANTHROPIC, upstream=OPENAI_CHAT),
    Route(name="responses", path="*/responses", client=OPENAI_RESPONSES, upstream=OPENAI_CHAT),
    Route(name="gemini", path="*/models/*:*enerateContent", client=GEMINI, upstream=OPENAI_CHAT),
)
"""POST …/chat/completions (OpenAI client), POST …/v1/messages (Anthropic client, e.g.
Claude Code), POST …/responses (OpenAI Responses client, e.g. Codex CLI) and POST
…/models/{model}:generateContent / :streamGenerateContent (Gemini client, e.g. Gemini CLI)
on any host, all to an OpenAI-compatible upstream."""


def withholds_key(route: Route, host: str, port: int | None) -> bool:
    """Whether the client's key must not go upstream: the route's ``upstream_url`` is another
    host (or port) than the one the client addressed (``port`` None: not known, the host
    alone says), and the route neither sends a key of its own (``api_key_env``, Kiro's
    ``token_file``) nor says ``client_key = true``. Keys never cross hosts."""
    target = route.target
    if target is None or route.client_key or route.api_key_env or route.token_file:
        return False
    if target.host != host.lower().strip("[]"):
        return True
    return port is not None and target.port != port


type ModelOf = Callable[[DialectName], str | None]
"""The model a request asks for, read as a client of that dialect sends it (None: unreadable)."""


type FactsOf = Callable[[DialectName], RequestFacts | None]
"""What ``When`` asks of a request, read as a client of that dialect sends it (None: the body
cannot be read so)."""


def match(
    routes: tuple[Route, ...],
    host: str,
    path: str,
    method: str,
    model_of: ModelOf | None = None,
    facts_of: FactsOf | None = None,
) -> Route | None:
    """The first route whose host, path and method fit, then its ``model`` globs, then its
    ``when`` (asked of ``model_of`` / ``facts_of`` only for a route that has them; without
    them such a route never fits: the caller knows nothing of the body). A model one route
    exposes (``expose_as``) takes that route first, where its host, path and method fit."""
    for route in routes:
        if route.expose_as is None or model_of is None or not route.matches(host, path, method):
            continue
        if route.exposes(model_of(route.client)):
            return route
    for route in routes:
        if not route.matches(host, path, method):
            continue
        if route.model is not None and (
            model_of is None or not route.takes_model(model_of(route.client))
        ):
            continue
        if route.when is not None and (
            facts_of is None or not route.when.holds(facts_of(route.client))
        ):
            continue
        return route
    return None


GLOB_CHARS = "*?["
"""A model name holding one of these is a glob, not a name a client can pick from a list."""


def listed_models(routes: tuple[Route, ...], host: str, paths: tuple[str, ...]) -> tuple[str, ...]:
    """The model names the routes that take ``POST`` on one of ``paths`` at ``host`` name
    literally, in file order: their ``model`` names without glob characters, and the
    ``model_map`` keys without any that the route takes (what a client's model list shows)."""
    out: dict[str, None] = {}
    for route in routes:
        if not any(route.matches(host, path, "POST") for path in paths):
            continue
        keys = (k for k, _ in route.model_map or () if route.takes_model(k))
        for name in (*(route.model or ()), *keys):
            if not any(c in name for c in GLOB_CHARS):
                out[name] = None
    return tuple(out)
