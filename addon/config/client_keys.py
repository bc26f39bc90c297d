"""Client keys (``bridge_client_keys``): who may use the routes that send a key of the proxy's.

Contract: sans-IO but for reading the one file it is given (``load_client_keys``): a TOML table
of client names to keys in, ``ClientKeys`` (SHA-256 digests and names, never a plain key) out.
What a client's key is matched against (its dialect's headers) is ``addon.plan.spending``'s.
Why digests: no error message, repr or log line can quote a key; errors name the client."""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field

MIN_KEY_CHARS = 16
"""The shortest client key accepted: a short key is a guessable one on a public listener."""


class ClientKeysError(ValueError):
    """A client keys file that cannot be used; the message names the file and the problem,
    never a key."""


def digest(key: str) -> bytes:
    """The SHA-256 digest a key is kept and compared as."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True, slots=True)
class ClientKeys:
    """The clients of a keys file: ``(digest, name)`` pairs, in the file's order. The plain
    keys are dropped as soon as they are hashed."""

    entries: tuple[tuple[bytes, str], ...] = field(repr=False, default=())
    _digests: frozenset[bytes] = field(init=False, repr=False, compare=False)
    """Every digest, for ``holds``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_digests", frozenset(d for d, _ in self.entries))

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
    value is either the key itself or a table naming the environment variable that holds it::

        alice = "sk-alice-0123456789abcdef"   # a string: the key itself
        bob = { env = "BOB_CLIENT_KEY" }      # a table with `env`: the variable holding the key


    ``ClientKeysError`` (prefixed with ``where``): TOML that does not parse, a value that is
    neither a string nor ``{env = "NAME"}``, a variable that is not set, an empty or short
    key, two clients with the same key, no client at all."""
    at = f"{where}: " if where else ""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # tomllib names the line and column, never the text there; a duplicate name is one
        # of its errors ("Cannot overwrite a value").
        raise ClientKeysError(f"{at}not valid TOML ({e})") from None
    entries: list[tuple[bytes, str]] = []
    seen: dict[bytes, str] = {}
    for name, value in table.items():
        key = _key_of(name, value, env, at)
        if len(key) < MIN_KEY_CHARS:
            raise ClientKeysError(
                f"{at}client {name!r}: the key is shorter than {MIN_KEY_CHARS} characters"
            )
        d = digest(key)
        if d in seen:
            raise ClientKeysError(f"{at}clients {seen[d]!r} and {name!r} have the same key")
        seen[d] = name
        entries.append((d, name))
    if not entries:
        raise ClientKeysError(f'{at}no client keys (write name = "key" lines)')
    return ClientKeys(tuple(entries))


def _key_of(name: str, value: object, env: Mapping[str, str], at: str) -> str:
    """A client's key: the string, or the value of the variable ``{env = "NAME"}`` names."""
    if not name.strip():
        raise ClientKeysError(f"{at}a client's name is empty")
    if isinstance(value, str):
        key = value.strip()
        if not key:
            raise ClientKeysError(f"{at}client {name!r}: the key is empty")
        return key
    if isinstance(value, dict) and set(value) == {"env"} and isinstance(value["env"], str):
        var = value["env"]
        key = env.get(var, "").strip()
        if not key:
            raise ClientKeysError(
                f"{at}client {name!r}: the environment variable {var!r} is not set or empty"
            )
        return key
    if isinstance(value, dict):
        raise ClientKeysError(
            f'{at}client {name!r}: a table must be {{env = "VARIABLE"}} and nothing else'
        )
    raise ClientKeysError(
        f'{at}client {name!r}: the value must be the key ("…") or {{env = "VARIABLE"}}, '
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
