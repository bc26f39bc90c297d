"""Client keys (``bridge_client_keys``): who may use the routes that send a key of the proxy's.

Contract: sans-IO but for reading the one file it is given (``load_client_keys``): a TOML table
of client names to keys in, ``ClientKeys`` (SHA-256 digests and names, never a plain key) out.
What a client's key is matched against (its dialect's headers) is ``addon.plan.spending``'s.
Why digests: no error message, repr or log line can quote a key; errors name the client."""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

type Period = Literal["day", "week", "month", "total"]

LIMITS_TTL = 90
LIMITS_TTL_HELP = (
    "Seconds a client key's reservation lives unless its worker renews it (every third of "
    "this): a dead worker's reservations free after this long. From 3 to 3600."
)
"""``bridge_client_limits_ttl`` (``addon.shell.client_limits``)."""
MIN_KEY_CHARS = 16
"""The shortest client key accepted: a short key is a guessable one on a public listener."""


class ClientKeysError(ValueError):
    """A client keys file that cannot be used; the message names the file and the problem,
    never a key."""


def digest(key: str) -> bytes:
    """The SHA-256 digest a key is kept and compared as."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True, slots=True)
class Limits:
    """A client's limits (docs/deploy.md#limits-per-client-key); None: no such limit."""

    rpm: int | None = None
    """Requests in any 60 seconds."""
    tpm: int | None = None
    """Tokens (input as the bridge counts them, and output) in any 60 seconds."""
    max_parallel: int | None = None
    """Requests under way at once."""
    budget_usd: float | None = None
    """US dollars the client may spend in its ``budget_period``."""
    budget_period: Period | None = None
    """``day`` (UTC), ``week`` (from Monday, UTC), ``month`` (calendar, UTC) or ``total``."""

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.rpm, self.tpm, self.max_parallel, self.budget_usd))


@dataclass(frozen=True, slots=True)
class ClientKeys:
    """The clients of a keys file: ``(digest, name)`` pairs, in the file's order. The plain
    keys are dropped as soon as they are hashed."""

    entries: tuple[tuple[bytes, str], ...] = field(repr=False, default=())
    limits: tuple[tuple[str, Limits], ...] = ()
    """``(name, limits)`` of every client that has a limit (its own or ``[defaults]``')."""
    _digests: frozenset[bytes] = field(init=False, repr=False, compare=False)
    """Every digest, for ``holds``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_digests", frozenset(d for d, _ in self.entries))

    def limits_of(self, name: str) -> Limits:
        """The client's limits (none: ``Limits()``, false)."""
        for kept, limits in self.limits:
            if kept == name:
                return limits
        return Limits()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.entries)

    def match(self, key: str) -> str | None:
        """The name of the client whose key ``key`` is, or None. Every digest is compared,
        in constant time each, whichever matches (``hmac.compare_digest``, no early exit): the
        time taken does not say which key, or how much of one, was right."""
        wanted = digest(key)
        found: str | None = None
        for kept, name in self.entries:
            if hmac.compare_digest(kept, wanted) and found is None:
                found = name
        return found

    def holds(self, value: str) -> bool:
        """Whether ``value`` is one of the keys, whoever's (a set lookup of its digest: the
        time taken depends on the digest, never on how much of a key was right). For finding
        a client key wherever a request carries it (``addon.plan.spending.client_keys_in``)."""
        return bool(value) and digest(value) in self._digests


def parse_client_keys(text: str, env: Mapping[str, str], where: str = "") -> ClientKeys:
    """The clients of a keys file's text; ``env`` holds the variables a client may name. Each
    value is the key itself, or a table with the key (``key``) or the environment variable
    holding it (``env``), and the client's limits (``LIMIT_KEYS``); a ``[defaults]`` table
    holds the limits of every client that does not set its own::

        alice = "sk-alice-0123456789abcdef"                 # the key itself
        bob = { env = "BOB_CLIENT_KEY", rpm = 60 }          # its variable, and a limit
        carol = { key = "sk-carol-0123456789abcdef", budget_usd = 5.0, budget_period = "day" }
        [defaults]
        rpm = 120


    ``ClientKeysError`` (prefixed with ``where``, naming the client, the key and its line):
    TOML that does not parse, a value that is neither a string nor such a table, a variable
    that is not set, an empty or short key, two clients with the same key, a limit that is
    not a positive number, a ``[defaults]`` table holding anything but limits (a client
    written after its header lands there), no client at all."""
    at = f"{where}: " if where else ""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # tomllib names the line and column, never the text there; a duplicate name is one
        # of its errors ("Cannot overwrite a value").
        raise ClientKeysError(f"{at}not valid TOML ({e})") from None
    lines = _Lines(text)
    defaults = _defaults(table.pop(DEFAULTS, None), lines, at)
    entries: list[tuple[bytes, str]] = []
    limits: list[tuple[str, Limits]] = []
    seen: dict[bytes, str] = {}
    for name, value in table.items():
        key = _key_of(name, value, env, at + lines.where(name))
        if len(key) < MIN_KEY_CHARS:
            raise ClientKeysError(
                f"{at}{lines.where(name)}client {name!r}: the key is shorter than "
                f"{MIN_KEY_CHARS} characters"
            )
        d = digest(key)
        if d in seen:
            raise ClientKeysError(f"{at}clients {seen[d]!r} and {name!r} have the same key")
        seen[d] = name
        entries.append((d, name))
        own = (
            _limits_of(value, f"{at}{lines.where(name)}client {name!r}")
            if isinstance(value, dict)
            else {}
        )
        merged = _merged(defaults, own, f"{at}{lines.where(name)}client {name!r}")
        if merged:
            limits.append((name, merged))
    if not entries:
        raise ClientKeysError(f'{at}no client keys (write name = "key" lines)')
    return ClientKeys(tuple(entries), tuple(limits))


DEFAULTS = "defaults"
"""The table of limits every client that does not set its own has; no client's name."""
PERIODS: tuple[Period, ...] = ("day", "week", "month", "total")
LIMIT_KEYS = ("rpm", "tpm", "max_parallel", "budget_usd", "budget_period")
"""What a client's table (or ``[defaults]``) may set besides its key."""
_INT_LIMITS = ("rpm", "tpm", "max_parallel")
MAX_BUDGET_USD = 1e9
"""The largest budget accepted (what the stores count in nano-dollars stays exact)."""


class _Lines:
    """Where a name is defined in the file's text, for messages (tomllib says no line)."""

    def __init__(self, text: str) -> None:
        self._lines = text.splitlines()
        self._defaults = next(
            (i for i, line in enumerate(self._lines) if _DEFAULTS_HEADER.match(line)), None
        )

    def where(self, name: str, *, in_defaults: bool = False) -> str:
        """``line N: `` of the first line that defines ``name`` (at the top, or inside
        ``[defaults]``), or ``""`` when none is found."""
        if in_defaults and self._defaults is None:  # an inline table: its own line
            return self.where(DEFAULTS)
        start = self._defaults + 1 if in_defaults and self._defaults is not None else 0
        wanted = re.compile(
            r"^\s*(?:\[\s*)?(?:"
            + re.escape(name)
            + r"|\""
            + re.escape(name)
            + r"\"|'"
            + re.escape(name)
            + r"')\s*(?:=|\]|\.)"
        )
        for i in range(start, len(self._lines)):
            if wanted.match(self._lines[i]):
                return f"line {i + 1}: "
        return ""


_DEFAULTS_HEADER = re.compile(r"^\s*\[\s*(?:defaults|\"defaults\"|'defaults')\s*\]")


def _defaults(value: object, lines: _Lines, at: str) -> dict[str, Any]:
    """The ``[defaults]`` table's limits. Anything else in it — a client written after the
    header, which TOML puts inside it — is refused naming its line; so is a client named
    ``defaults``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ClientKeysError(
            f"{at}{lines.where(DEFAULTS)}no client may be called {DEFAULTS!r}: "
            f"[{DEFAULTS}] is the table of limits every client has unless it sets its own"
        )
    for name in value:
        if name not in LIMIT_KEYS:
            raise ClientKeysError(
                f"{at}{lines.where(name, in_defaults=True)}[{DEFAULTS}] holds only limits "
                f"({', '.join(LIMIT_KEYS)}), not {name!r}: a client written after the "
                f"[{DEFAULTS}] header is inside it (write clients before it), and no client "
                f"may be called {DEFAULTS!r}"
            )
    return _limits_of(value, f"{at}[{DEFAULTS}]")


def _limits_of(value: dict[str, Any], who: str) -> dict[str, Any]:
    """A table's limit keys, each checked (a positive whole number; ``budget_usd`` a number
    of at least 0; ``budget_period`` one of ``PERIODS``)."""
    out: dict[str, Any] = {}
    for name in LIMIT_KEYS:
        if name not in value:
            continue
        v = value[name]
        if name in _INT_LIMITS:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ClientKeysError(f"{who}: {name} must be a whole number of at least 1")
        elif name == "budget_usd":
            if (
                isinstance(v, bool)
                or not isinstance(v, int | float)
                or not math.isfinite(v)
                or not 0 <= v <= MAX_BUDGET_USD
            ):
                raise ClientKeysError(
                    f"{who}: budget_usd must be a number of US dollars from 0 to {MAX_BUDGET_USD:g}"
                )
            v = float(v)
        elif v not in PERIODS:
            raise ClientKeysError(
                f"{who}: budget_period must be one of {', '.join(PERIODS)} (got {v!r})"
            )
        out[name] = v
    return out


def _merged(defaults: dict[str, Any], own: dict[str, Any], who: str) -> Limits | None:
    """A client's limits: its own, else the defaults'; None when it has none."""
    merged = {**defaults, **own}
    if not merged:
        return None
    if "budget_usd" in merged and "budget_period" not in merged:
        raise ClientKeysError(
            f"{who}: budget_usd needs budget_period ({', '.join(PERIODS)}), here or in [{DEFAULTS}]"
        )
    if "budget_period" in own and "budget_usd" not in merged:
        raise ClientKeysError(f"{who}: budget_period without budget_usd")
    if "budget_usd" not in merged:
        merged.pop("budget_period", None)
    limits = Limits(**merged)
    return limits if limits else None


def _key_of(name: str, value: object, env: Mapping[str, str], at: str) -> str:
    """A client's key: the string, or the table's ``key``, or the value of the variable its
    ``env`` names."""
    if not name.strip():
        raise ClientKeysError(f"{at}a client's name is empty")
    if isinstance(value, str):
        key = value.strip()
        if not key:
            raise ClientKeysError(f"{at}client {name!r}: the key is empty")
        return key
    if isinstance(value, dict):
        unknown = [k for k in value if k not in ("key", "env", *LIMIT_KEYS)]
        if unknown:
            raise ClientKeysError(
                f"{at}client {name!r}: unknown key {unknown[0]!r} (a client's table takes "
                f"key or env, and {', '.join(LIMIT_KEYS)})"
            )
        if ("key" in value) == ("env" in value):
            raise ClientKeysError(
                f'{at}client {name!r}: a table needs key = "…" or env = "VARIABLE" (one of them)'
            )
        if "key" in value:
            key = value["key"]
            if not isinstance(key, str) or not key.strip():
                raise ClientKeysError(f"{at}client {name!r}: key must be a non-empty string")
            return key.strip()
        var = value["env"]
        if not isinstance(var, str):
            raise ClientKeysError(f"{at}client {name!r}: env must be a variable's name")
        key = env.get(var, "").strip()
        if not key:
            raise ClientKeysError(
                f"{at}client {name!r}: the environment variable {var!r} is not set or empty"
            )
        return key
    raise ClientKeysError(
        f'{at}client {name!r}: the value must be the key ("…") or a table with key or env, '
        f"not {type(value).__name__}"
    )


def load_client_keys(path: str, env: Mapping[str, str]) -> ClientKeys:
    """The clients of the keys file at ``path`` (``parse_client_keys``); a file that cannot
    be read is a ``ClientKeysError`` too."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ClientKeysError(f"bridge_client_keys: cannot read {path} ({e.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ClientKeysError(f"bridge_client_keys: {path} is not UTF-8") from None
    return parse_client_keys(text, env, f"bridge_client_keys: {path}")
