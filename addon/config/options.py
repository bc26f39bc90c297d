"""The bridge's options: declarations, validation and the parsed ``Settings``.

Contract: no mitmproxy here. ``OPTIONS`` lists every option (name, type, default, help text:
the help is the user's documentation); the shell registers them and calls ``parse_settings``
with a getter over mitmproxy's options. A bad value raises ``ConfigError`` naming the option
and what it accepts (mitmproxy does not enforce ``choices`` itself)."""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args
from urllib.parse import parse_qsl, unquote, urlsplit

from addon.config.client_keys import LIMITS_TTL, LIMITS_TTL_HELP
from addon.config.routes import DEFAULT_ROUTES, Route
from addon.model import SCHEMA_PROFILES, TOOL_MODES, SchemaProfile, ToolMode
from addon.stores.base import display_url

type ThinkingOutput = Literal["reasoning", "hidden"]


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class OptionSpec:
    name: str
    typespec: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None


REWRITE_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "bridge_routes",
        str,
        "",
        "Path to a TOML routes file saying which requests cursor-bridge rewrites and how (host "
        "glob, path glob, methods, client and upstream dialect, tool mode, schema profile, "
        "upstream path). Empty: the built-in default route, POST …/chat/completions on any "
        "host, POST …/v1/messages, …/responses and …/models/{model}:(stream)generateContent "
        "(Anthropic, Responses and Gemini clients), to an OpenAI-compatible upstream.",
    ),
    OptionSpec(
        "bridge_tool_mode",
        str,
        "native",
        "How tools reach the upstream on routes that do not set tool_mode: 'native' sends "
        "them as the upstream's own tool definitions; 'invoke' (a per-request trigger plus "
        "<invoke name=…>{json}</invoke>) and 'bracket' ([Calling tool: NAME] / Input: {json}) "
        "describe them in the system prompt for upstreams without tool calling, and turn the "
        "model's text back into tool calls.",
        TOOL_MODES,
    ),
    OptionSpec(
        "bridge_schema",
        str,
        "none",
        "Tool-schema profile for routes that do not set one: 'none' sends schemas as the client "
        "wrote them; 'strict' removes additionalProperties, $schema, title and default, "
        "collapses anyOf to its first non-null option and drops an empty required list, for "
        "upstreams that reject those keywords; 'gemini' keeps only what Gemini's function "
        "declarations accept: $ref/$defs inlined, null options as nullable, const as enum, "
        "non-string enums described in text, unsupported keywords and formats dropped, every "
        "change counted in the flow's notes.",
        SCHEMA_PROFILES,
    ),
    OptionSpec(
        "bridge_thinking_output",
        str,
        "reasoning",
        "What clients get of the model's reasoning: 'reasoning' sends it (reasoning_content "
        "to OpenAI clients, thinking blocks to Anthropic clients), 'hidden' drops it.",
        get_args(ThinkingOutput.__value__),
    ),
    OptionSpec(
        "bridge_tool_strict",
        bool,
        False,
        "Treat tools as required whenever a request declares any: with a text protocol, a "
        "non-streamed answer without a tool call is retried once.",
    ),
    OptionSpec(
        "bridge_tool_desc_max_chars",
        int,
        8000,
        "bracket protocol: tool descriptions longer than this are cut (with '...').",
    ),
    OptionSpec(
        "bridge_tool_param_desc_max_chars",
        int,
        4000,
        "bracket protocol: parameter descriptions longer than this are cut (with '...').",
    ),
    OptionSpec(
        "bridge_tool_repair",
        str,
        "on",
        "Tool-call arguments on routes that do not set tool_repair: 'on' repairs JSON that does "
        "not parse (trailing commas, quotes, code fences, a cut-off end), renames keys the "
        "model got almost right towards the tool's own (filePath → path, oldString → "
        "old_string, cmd → command …), normalizes todo statuses, and checks the result "
        "against the tool's schema (one log line when it still does not fit); 'off' passes "
        "the model's arguments on as they are.",
        ("on", "off"),
    ),
    OptionSpec(
        "bridge_max_event_bytes",
        int,
        16 * 1024 * 1024,
        "The largest stream line, event, JSON-array item or tool call the bridge holds while "
        "it rewrites a stream (bytes). Past it a same-dialect stream is passed on untouched "
        "and another dialect's is ended with an error event; a text-protocol call that long "
        "is sent on as text.",
    ),
    OptionSpec(
        "bridge_stream_idle_timeout",
        int,
        300,
        "Seconds a streamed answer's upstream may send nothing (an upstream's pings count) "
        "before the bridge ends the client's stream with its dialect's error (upstream_idle).",
    ),
    OptionSpec(
        "bridge_fast_path",
        bool,
        True,
        "Streams: events nobody needs to change pass as their bytes, and plain text skips the "
        "generic decoders (the same bytes to the client, faster). false sends every event the "
        "general way: for comparing, or should the shortcut ever be wrong.",
    ),
    OptionSpec(
        "bridge_store",
        str,
        "",
        "The reasoning store (thought signatures, thinking blocks, reasoning_content the "
        "client drops and the upstream needs back): empty keeps it in memory; a path "
        "(absolute, ~/…, ./… or a name ending .db, .sqlite or .sqlite3) keeps it in an SQLite "
        "file there (made 0600), so a restart mid-conversation loses nothing; "
        "redis://[user:password@]host:port/db (rediss:// for TLS; valkey:// and valkeys:// "
        "the same) or unix:///path/to/redis.sock?db=N keeps it in Redis or Valkey, shared by "
        "every worker on it with the fallbacks' cooldowns and the secret of the invoke "
        "trigger (pip install 'cursor-bridge[redis]'). Anything else is refused at start. "
        "Redis away: each worker goes on in its own memory, says so once, and shares again "
        "when Redis is back.",
    ),
    OptionSpec(
        "bridge_store_size",
        int,
        20_000,
        "The reasoning store keeps at most this many values (least recently used go first); "
        "0 turns it off.",
    ),
    OptionSpec(
        "bridge_store_ttl",
        int,
        24 * 3600,
        "Seconds a value in the reasoning store lives without being used; 0: no expiry.",
    ),
    OptionSpec(
        "bridge_thinking_budget",
        int,
        0,
        "Thinking budget (tokens) set where thinking is on without one (models that think by "
        "default: -thinking names, Claude Opus 4.5); 0 leaves the budget to the upstream.",
    ),
    OptionSpec(
        "bridge_loop_max_repeat",
        int,
        3,
        "Loop guard: when the conversation ends with this many identical tool calls that "
        "failed the same way and the model's answer makes the same call once more, that call "
        "is replaced by a message naming the tool, the count and the last error (see "
        "bridge_loop_fallback). A different call or text reaches the client untouched. 0 "
        "turns the guard off.",
    ),
    OptionSpec(
        "bridge_loop_fallback",
        bool,
        False,
        "Loop guard on a native-tools route: when the answer repeats the failing call, ask "
        "the upstream again with the tools described in the prompt (the invoke protocol) "
        "and send that answer to the client instead of the guard's message. A streamed "
        "answer on such a turn is then read whole before it is sent.",
    ),
    OptionSpec(
        "bridge_key_recheck",
        int,
        3600,
        "Seconds a key of a key pool (api_key_env as a list) is left out after the upstream "
        "said the key itself is invalid, revoked or out of credit (never for a refusal of the "
        "request: a model the key may not use, moderation). Then the key is tried again and "
        "comes back by itself if it is accepted. Shared by every worker on a Redis store.",
    ),
    OptionSpec(
        "bridge_debug",
        bool,
        False,
        "Log the details of every rewritten flow at debug level (each decision, the upstream "
        "path, what the stream processor counted); shown with --set termlog_verbosity=debug. "
        "Keys are redacted as everywhere else.",
    ),
)
"""Options of the settings addon (``addon.shell.settings``), read by the others."""

CATALOGUE_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "bridge_models",
        str,
        "",
        "Comma-separated base models (e.g. 'claude-sonnet-4.6,gpt-5'). GET …/models then lists "
        "each of them plus a 'BASE-thinking' variant (merged with the upstream's own list when "
        "it answers); a request for BASE-thinking goes upstream as BASE with thinking on "
        "(the model is asked to reason inside <thinking> tags, which come back as reasoning).",
    ),
)
"""Options of the model catalogue addon (``addon.shell.catalogue``); the rewrite reads
``bridge_models`` too, for ``BASE-thinking`` requests."""

RETRY_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "bridge_retry_timeout",
        int,
        300,
        "Seconds the bridge waits for the upstream when it asks again itself (a required "
        "tool call that did not come).",
    ),
)
"""Options of the retry addon (``addon.shell.outbound.retry``)."""

CLIENT_KEY_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "bridge_client_keys",
        str,
        "",
        'Path to a TOML file of client names and their keys: alice = "sk-…" (the key) or '
        'bob = {env = "BOB_KEY"} (the environment variable holding it). When set, a request '
        "on a route that sends a key of the proxy's (api_key_env, a Kiro token_file) must carry "
        "one of these keys where its client sends its own (Authorization: Bearer, x-api-key, "
        "x-goog-api-key, ?key=); anything else gets a 401 in the client's dialect. Keys are "
        "kept as SHA-256 digests; the file is read again when it changes (or on the command "
        "bridge.reload_client_keys). Empty: no check.",
    ),
    OptionSpec("bridge_client_limits_ttl", int, LIMITS_TTL, LIMITS_TTL_HELP),
)
"""Options of the client keys addon (``addon.shell.client_key_gate``)."""

METRICS_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "bridge_metrics",
        str,
        "",
        "HOST:PORT where Prometheus text is served at /metrics (e.g. 127.0.0.1:9464; [::1]:9464 "
        "for IPv6), on a listener of its own, never the proxy's. A host that is not loopback is "
        "allowed and said in one log line. Empty: no metrics.",
    ),
)
"""Options of the metrics addon (``addon.shell.metrics``)."""

OPTIONS: tuple[OptionSpec, ...] = (
    REWRITE_OPTIONS + CATALOGUE_OPTIONS + RETRY_OPTIONS + CLIENT_KEY_OPTIONS + METRICS_OPTIONS
)
"""Every option the bridge declares."""
DEFAULTS: dict[str, Any] = {spec.name: spec.default for spec in OPTIONS}
_BY_NAME: dict[str, OptionSpec] = {spec.name: spec for spec in OPTIONS}


def check_deferred_option(name: str, value: Any, *, from_text: bool) -> Any:
    """A ``bridge_*`` value given before the bridge declared its options, typed the way
    mitmproxy types ``--set NAME=VALUE`` (``from_text``: ``value`` is the list of strings
    given) or checked when it came typed (a config file). ``ConfigError`` names the option
    and what it takes; an unknown name gets the closest known one."""
    spec = _BY_NAME.get(name)
    if spec is None:
        # Compared without the common prefix: every name shares "bridge_".
        tails = {n.removeprefix("bridge_"): n for n in _BY_NAME}
        close = difflib.get_close_matches(name.removeprefix("bridge_"), list(tails), n=1)
        hint = f" (did you mean {tails[close[0]]}?)" if close else ""
        raise ConfigError(
            f"unknown option {name}{hint}; cursor-bridge's options are "
            f"{', '.join(sorted(_BY_NAME))}"
        )
    what = {bool: "true or false", int: "a whole number", str: "text"}[spec.typespec]
    if not from_text:
        ok = isinstance(value, spec.typespec) and (
            spec.typespec is bool or not isinstance(value, bool)
        )
        if not ok:
            raise ConfigError(f"{name} takes {what}, not {value!r}")
        return value
    values = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    if len(values) > 1:
        raise ConfigError(f"{name} was given more than once: {', '.join(map(repr, values))}")
    text = values[0] if values else None
    if spec.typespec is bool:
        if text is None or text == "true":
            return True
        if text == "false":
            return False
        if text == "toggle":
            return not spec.default
        raise ConfigError(f"{name} takes true or false, not {text!r}")
    if text is None:
        raise ConfigError(f"{name} needs a value ({name}=…): {what}")
    if spec.typespec is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{name} takes a whole number, not {text!r}") from None
    return text


@dataclass(frozen=True, slots=True)
class Settings:
    routes: tuple[Route, ...] = DEFAULT_ROUTES
    tool_mode: ToolMode = "native"
    schema: SchemaProfile = "none"
    models: tuple[str, ...] = ()
    thinking_output: ThinkingOutput = "reasoning"
    tool_strict: bool = False
    desc_limit: int = 8000
    param_limit: int = 4000
    tool_repair: Literal["on", "off"] = "on"
    loop_max_repeat: int = 3
    loop_fallback: bool = False
    max_event_bytes: int = 16 * 1024 * 1024
    stream_idle: float = 300.0
    fast_path: bool = True
    thinking_budget: int | None = None
    key_recheck: float = 3600.0
    debug: bool = False


def _choice(spec: OptionSpec, value: Any) -> str:
    assert spec.choices is not None
    if value not in spec.choices:
        raise ConfigError(f"{spec.name} must be one of {', '.join(spec.choices)}, not {value!r}")
    return str(value)


def parse_models(value: str) -> tuple[str, ...]:
    models = tuple(m.strip() for m in value.split(",") if m.strip())
    dupes = sorted({m for m in models if models.count(m) > 1})
    if dupes:
        raise ConfigError(f"bridge_models lists {', '.join(dupes)} more than once")
    return models


def _read_routes(path: str) -> tuple[Route, ...]:
    from addon.config.routes_file import RoutesError, load_routes  # pydantic, only to read a file

    try:
        return load_routes(path)
    except RoutesError as e:
        raise ConfigError(str(e)) from e


def parse_settings(read: Callable[[str], Any], env: Mapping[str, str]) -> Settings:
    """``read(name)`` reads an option (one no loaded addon declares reads as its default);
    ``env`` is the environment, for routes that take their key from it."""
    by_name = {s.name: s for s in OPTIONS}

    def get(name: str) -> Any:
        try:
            return read(name)
        except (AttributeError, KeyError):
            return DEFAULTS[name]

    routes_path = get("bridge_routes")
    routes = _read_routes(routes_path) if routes_path else DEFAULT_ROUTES
    for route in routes:
        for name in route.key_names:
            if name not in env:
                raise ConfigError(
                    f"route '{route.name}': api_key_env names the environment variable "
                    f"{name}, which is not set"
                )
    limits = {}
    for name in ("bridge_tool_desc_max_chars", "bridge_tool_param_desc_max_chars"):
        value = get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{name} takes a whole number, not {value!r}")
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, not {value}")
        limits[name] = value
    strict = _flag(get, "bridge_tool_strict")
    repeat = _at_least(get, "bridge_loop_max_repeat", 0, "a whole number")
    max_event = _at_least(get, "bridge_max_event_bytes", 1024, "a whole number of bytes")
    budget = _at_least(get, "bridge_thinking_budget", 0, "a whole number")
    recheck = _at_least(get, "bridge_key_recheck", 1, "a whole number of seconds")
    idle = _at_least(get, "bridge_stream_idle_timeout", 1, "a whole number of seconds")
    fallback, debug = _flag(get, "bridge_loop_fallback"), _flag(get, "bridge_debug")
    fast_path = _flag(get, "bridge_fast_path")
    return Settings(
        routes=routes,
        tool_mode=cast(ToolMode, _choice(by_name["bridge_tool_mode"], get("bridge_tool_mode"))),
        schema=cast(SchemaProfile, _choice(by_name["bridge_schema"], get("bridge_schema"))),
        models=parse_models(get("bridge_models")),
        thinking_output=cast(
            ThinkingOutput,
            _choice(by_name["bridge_thinking_output"], get("bridge_thinking_output")),
        ),
        tool_strict=strict,
        desc_limit=limits["bridge_tool_desc_max_chars"],
        param_limit=limits["bridge_tool_param_desc_max_chars"],
        tool_repair=cast(
            Literal["on", "off"], _choice(by_name["bridge_tool_repair"], get("bridge_tool_repair"))
        ),
        loop_max_repeat=repeat,
        loop_fallback=fallback,
        max_event_bytes=max_event,
        stream_idle=float(idle),
        fast_path=fast_path,
        thinking_budget=budget or None,
        key_recheck=float(recheck),
        debug=debug,
    )


def _at_least(get: Callable[[str], Any], name: str, least: int, what: str) -> int:
    value = get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ConfigError(f"{name} takes {what} >= {least}, not {value!r}")
    return value


def _flag(get: Callable[[str], Any], name: str) -> bool:
    value = get(name)
    if not isinstance(value, bool):
        raise ConfigError(f"{name} takes true or false, not {value!r}")
    return value


type StoreKind = Literal["memory", "sqlite", "redis"]

STORE_FORMS = (
    "a path (absolute, ~/…, ./… or a name ending .db, .sqlite or .sqlite3), "
    "redis://HOST:PORT/DB, rediss:// (TLS), valkey:// or valkeys:// (the same), "
    "unix:///PATH/TO/SOCKET?db=N (Redis over a socket), or nothing (memory)"
)
"""What ``bridge_store`` accepts, as an error line says it."""
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_REDIS_SCHEMES = {"redis": "redis", "rediss": "rediss", "valkey": "redis", "valkeys": "rediss"}
"""A store URL's scheme → the one redis-py reads (Valkey speaks Redis's protocol)."""
_HOST_PORT = re.compile(r"[A-Za-z0-9.\-]+:\d+(/\d*)?")


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """Where ``bridge_store`` says the store is (``parse_store_url``)."""

    kind: StoreKind
    target: str = ""
    """memory: empty; sqlite: the file's path (``~`` expanded); redis: the URL redis-py reads
    (``valkey://`` as ``redis://``, ``valkeys://`` as ``rediss://``)."""
    shown: str = ""
    """The value as written, its password and query left out: for a line."""

    @property
    def shared(self) -> bool:
        """Redis: every worker on it shares the store (memory and SQLite: one machine's)."""
        return self.kind == "redis"


def parse_store_url(value: str) -> StoreLocation:
    """``bridge_store`` (and ``scripts/usage --store``, ``scripts/gateway``) read: the one
    parser of a store's place. Raises ``ConfigError`` naming the value (password left out)
    and what is accepted: no scheme a store may have (``127.0.0.1:6379`` is no file name),
    a scheme that is not Redis's, a db number that is not a whole number >= 0, a port that
    is not a number, a ``unix://`` without a socket path."""
    text = value.strip()
    if not text:
        return StoreLocation("memory")
    if m := _SCHEME.match(text):
        return _redis_location(text, m.group(1).lower())
    if text.startswith(("/", "~", "./", "../")) or text.lower().endswith(SQLITE_SUFFIXES):
        return StoreLocation("sqlite", str(Path(text).expanduser()), text)
    hint = ""
    if _HOST_PORT.fullmatch(text):
        where, _, db = text.partition("/")
        hint = f" (a Redis address is written redis://{where}/{db or 0})"
    raise ConfigError(
        f"bridge_store {_shown(text)!r} is neither a path nor a store URL{hint}: give {STORE_FORMS}"
    )


def _redis_location(text: str, scheme: str) -> StoreLocation:
    shown = _shown(text)
    if scheme != "unix" and scheme not in _REDIS_SCHEMES:
        raise ConfigError(
            f"bridge_store {shown!r}: {scheme}:// is not a store this bridge opens: "
            f"give {STORE_FORMS}"
        )
    rest = text[len(scheme) + 3 :]
    target = f"{_REDIS_SCHEMES.get(scheme, scheme)}://{rest}"
    try:
        parts = urlsplit(target)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as e:
        raise ConfigError(f"bridge_store {shown!r} is not a URL a store reads: {e}") from None
    dbs = [v for k, v in query if k == "db"]
    if scheme == "unix":
        if not parts.path or parts.path == "/":
            raise ConfigError(
                f"bridge_store {shown!r}: unix:// takes the socket's path, "
                "unix:///PATH/TO/redis.sock?db=N"
            )
    elif parts.path not in ("", "/"):
        dbs.insert(0, unquote(parts.path[1:]))
    for db in dbs:
        if not (db.isascii() and db.isdigit()):
            raise ConfigError(
                f"bridge_store {shown!r}: the db number must be a whole number >= 0, not {db!r}"
            )
    return StoreLocation("redis", target, shown)


def _shown(text: str) -> str:
    """A store value fit for a line: a URL's password and query left out; a path as it is."""
    return display_url(text) if "://" in text else text


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """The reasoning store's options (the store itself lives in the shell)."""

    path: str = ""
    size: int = 20_000
    ttl: int = 24 * 3600
    location: StoreLocation = field(default=StoreLocation("memory"), compare=False)
    """Where ``path`` says the store is (``parse_store_url``)."""


def parse_store(read: Callable[[str], Any]) -> StoreSettings:
    """``bridge_store*`` checked: one ``ConfigError`` line naming the option."""
    path = read("bridge_store")
    if not isinstance(path, str):
        raise ConfigError(f"bridge_store takes {STORE_FORMS}, not {type(path).__name__}")
    location = parse_store_url(path)
    numbers = {}
    for name in ("bridge_store_size", "bridge_store_ttl"):
        value = read(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{name} takes a whole number >= 0, not {value!r}")
        numbers[name] = value
    return StoreSettings(
        path.strip(), numbers["bridge_store_size"], numbers["bridge_store_ttl"], location
    )


def parse_retry_timeout(value: Any) -> float:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(
            f"bridge_retry_timeout must be a whole number of seconds >= 1, not {value!r}"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class MetricsAddress:
    """Where ``bridge_metrics`` serves ``/metrics``."""

    host: str
    port: int
    loopback: bool
    """The host is a loopback address (or ``localhost``): only this machine can scrape."""


def parse_metrics_address(value: str) -> MetricsAddress | None:
    """``bridge_metrics``: ``HOST:PORT`` (an IPv6 host in brackets), port 0-65535 (0: any free
    port); None when empty. ``ConfigError`` names the value and what is accepted."""
    text = value.strip()
    if not text:
        return None
    accepted = "give HOST:PORT, e.g. 127.0.0.1:9464 or [::1]:9464"
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        sep = ""
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"bridge_metrics {_shown(text)!r} is not HOST:PORT: {accepted}")
    if any(c.isspace() or c in "/@[]" for c in host):
        raise ConfigError(f"bridge_metrics {_shown(text)!r} has no valid host: {accepted}")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host.lower() == "localhost"
    return MetricsAddress(host, int(port_text), loopback)
