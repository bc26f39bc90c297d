"""Text the bridge writes (log lines, flow comments, metadata, the content view): safe and secret-free.

Contract: sans-IO, plain strings in and out, never raises on any ``str``. ``redact`` is the one
redaction function (``clean`` and ``clean_data`` call it); ``clean`` is what goes into a log
line or a comment. What each replaces: docs/observability.md#what-redact-replaces."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[REDACTED]"

_CREDENTIAL_WORD = (
    r"(?:api[_-]?key|apikey|key|access[_-]?token|refresh[_-]?token|id[_-]?token|token"
    r"|secret|client[_-]?secret|password|passwd|pwd|auth|authorization|credentials?"
    r"|signature|sig|jwt)"
)
_NAME = rf"(?:[A-Za-z0-9]+[_-])*{_CREDENTIAL_WORD}"
"""A credential-like parameter name: ``key``, ``api_key``, ``x-goog-api-key``,
``access_token``, ``X-Amz-Signature`` … (the last ``_``/``-`` word decides)."""

_PARAM = re.compile(
    rf"(?<![A-Za-z0-9_.-])({_NAME})(=)([^&\s#\"'<>;,]+)",
    re.IGNORECASE,
)
"""``name=value`` (query strings, forms, messages quoting them)."""
_QUOTED = re.compile(
    rf"([\"']{_NAME}[\"']\s*:\s*[\"'])((?:\\.|[^\"'\\])*)([\"'])",
    re.IGNORECASE,
)
"""``"name": "value"`` / ``'name': 'value'`` (JSON, Python reprs)."""
_SCHEME = re.compile(r"\b(Bearer|Basic|Token)(\s+)[A-Za-z0-9._~+/=\-]{4,}", re.IGNORECASE)
_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{8,}"  # OpenAI, Anthropic (sk-ant-), OpenRouter (sk-or-) …
    r"|\bAIza[0-9A-Za-z_\-]{20,}"  # Google API keys
    r"|\bya29\.[0-9A-Za-z_\-.]{10,}"  # Google OAuth access tokens
    r"|\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"  # GitHub
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"  # JWT
)
_TOKEN = re.compile(r"(?<![A-Za-z0-9+_\-])[A-Za-z0-9+_\-]{32,}={0,2}(?![A-Za-z0-9+_\-])")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

SLACK = 1000
"""Characters read past ``limit`` before redacting, so a key cut at the limit is still
recognised (and then cut away)."""


_CREDENTIAL_PARTS = ("key", "token", "secret", "pass", "pwd", "auth", "credential", "sig", "jwt")
"""Every credential word holds one of these (after ``_fold``)…"""
_SCHEME_PARTS = ("bearer", "basic", "token")
_SHAPE_PARTS = ("sk-", "AIza", "ya29.", "gh", "github", "AKIA", "ASIA", "xox", "eyJ")
"""…and every key shape starts with one of these (case as written): a text without any is
not searched for them. Python's ``re`` tries a pattern at every position, ~0.05 µs a
character each; most text the bridge writes has no secret in it, and a substring test is
a hundred times cheaper."""


def _fold(text: str) -> str:
    """``text`` in the case ``re.IGNORECASE`` compares: ``casefold`` maps every character
    that matches an ASCII letter to that letter, except two that match ``i``: U+0130 (capital
    I with a dot) folds to ``i`` and a combining dot, U+0131 (dotless i) to itself."""
    if text.isascii():
        return text.lower()
    return text.casefold().replace("\u0307", "").replace("\u0131", "i")


def _holds(text: str, parts: tuple[str, ...]) -> bool:
    for part in parts:  # noqa: SIM110  (a loop: any() over a generator costs 3 times as much)
        if part in text:
            return True
    return False


_RUNS = bytes(
    ord("a") if chr(i).isascii() and (chr(i).isalnum() or chr(i) in "+_-") else ord(" ")
    for i in range(256)
)
"""Token characters (``_TOKEN``) → ``a``, every other byte → a space."""
_RUN = b"a" * 32


def _has_run(text: str) -> bool:
    """Whether ``text`` holds 32 token characters in a row (what ``_TOKEN`` needs)."""
    return _RUN in text.encode("utf-8", "surrogatepass").translate(_RUNS)


def redact(text: str, *, tokens: bool = True) -> str:
    """``text`` with the values of credential-named parameters, key-shaped strings and
    (``tokens=True``) long random-looking tokens replaced by ``[REDACTED]``.
    (A replacement cannot make a new match: ``[REDACTED]`` holds no part above, and its
    brackets end any word or token next to it. So the parts are looked for once.)"""
    if not text:
        return text
    fold = _fold(text)
    if _holds(fold, _CREDENTIAL_PARTS):
        if "'" in text or '"' in text:
            text = _QUOTED.sub(lambda m: f"{m[1]}{REDACTED}{m[3]}", text)
        if "=" in text:
            text = _PARAM.sub(lambda m: f"{m[1]}={REDACTED}", text)
    if _holds(fold, _SCHEME_PARTS):
        text = _SCHEME.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)
    if _holds(text, _SHAPE_PARTS):
        text = _SHAPES.sub(REDACTED, text)
    if tokens and _has_run(text):
        text = _TOKEN.sub(_token, text)
    return text


def _token(m: re.Match[str]) -> str:
    s = m[0].rstrip("=")
    if _HEX.fullmatch(s):
        return REDACTED
    mixed = (
        any(c.islower() for c in s) and any(c.isupper() for c in s) and any(c.isdigit() for c in s)
    )
    return REDACTED if mixed else s


def escape(text: str) -> str:
    """Lone surrogates and control characters as backslash escapes (one printable line)."""
    if text.isprintable():  # none of them is printable: nothing to escape
        return text
    return _UNSAFE.sub(_escape_char, text)


def _escape_char(m: re.Match[str]) -> str:
    c = m[0]
    if c in _ESCAPES:
        return _ESCAPES[c]
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: object, limit: int | None = None) -> str:
    """``text`` fit for a log line, a comment or a metadata value: redacted, lone surrogates
    and control characters escaped, one line, and cut to ``limit`` characters (ending ``...``
    when cut). Never raises."""
    try:
        s = text if isinstance(text, str) else str(text)
    except Exception:  # a __str__ that fails: say what it was
        s = f"<{type(text).__name__}>"
    if len(s) <= MEMO_CHARS:
        return _clean_short(s, limit)
    return _clean(s, limit)


MEMO_CHARS = 256
"""Texts up to this long are cleaned once per process (``_clean_short``): most of what a flow
writes (route and dialect names, outcomes, decisions, counts) is the same for every flow."""


@functools.lru_cache(maxsize=2048)
def _clean_short(s: str, limit: int | None) -> str:
    return _clean(s, limit)


def _clean(s: str, limit: int | None) -> str:
    if limit is not None and len(s) > limit + SLACK:
        s = s[: limit + SLACK]
    s = escape(redact(s))
    if limit is not None and len(s) > limit:
        s = s[: max(0, limit - 3)] + "..."
    return s


def clean_data(value: Any, limit: int = 2000, _depth: int = 0) -> Any:
    """Plain JSON-like data (``flow.metadata``) with every string ``clean``; keys too.
    Deeper than 20 levels (never the bridge's own data) becomes a placeholder."""
    if isinstance(value, str):
        return clean(value, limit)
    if isinstance(value, bool | int | float) or value is None:
        return value
    if _depth >= 20:
        return "(nested too deeply)"
    if isinstance(value, dict):
        return {clean(k, 200): clean_data(v, limit, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_data(v, limit, _depth + 1) for v in value]
    return clean(value, limit)


# --------------------------------------------------------------------------- a flow's own secrets

MIN_SECRET = 8
"""Credential values shorter than this are not searched for: a placeholder key (``"x"``,
``"none"``, ``"ollama"``) would otherwise blank out every word it is part of."""
MIN_FRAGMENT = 6
"""A text cut inside a secret (a quote cut at its limit) loses the cut start of it too, from
this many characters on."""


def _forms(value: str) -> set[str]:
    """How a value may appear in text the bridge writes: as it is, JSON-escaped (with and
    without ASCII escapes, ``/`` as ``\\/`` too), URL-encoded."""
    import json
    from urllib.parse import quote, quote_plus

    escaped = json.dumps(value)[1:-1]
    forms = {
        value,
        escaped,
        json.dumps(value, ensure_ascii=False)[1:-1],
        escaped.replace("/", "\\/"),
        quote(value, safe=""),
        quote_plus(value, safe=""),
    }
    return {f for f in forms if len(f) >= MIN_SECRET}


class Secrets:
    """The exact credential values of one flow (the client's key, the route's, a Kiro token),
    and the forms they take in text: ``secrets(text)`` has each replaced by ``[REDACTED]``,
    also the cut start of one at the end of a text. Never shown (no ``repr`` of the values);
    kept in memory only, never in ``flow.metadata``."""

    __slots__ = ("_bytes", "_forms")

    def __init__(self, values: Iterable[str | None] = ()) -> None:
        forms: set[str] = set()
        for v in values:
            if v and len(v.strip()) >= MIN_SECRET:
                forms |= _forms(v.strip())
        self._forms = tuple(sorted(forms, key=len, reverse=True))
        self._bytes = tuple(f.encode("utf-8", "surrogatepass") for f in self._forms)

    def __repr__(self) -> str:
        return f"Secrets({len(self._forms)} forms)"

    def __bool__(self) -> bool:
        return bool(self._forms)

    @property
    def forms(self) -> tuple[str, ...]:
        return self._forms

    def __call__(self, text: str) -> str:
        return redact_exact(text, self._forms)

    def bytes(self, raw: bytes) -> bytes:
        for form in self._bytes:
            if form in raw:
                raw = raw.replace(form, REDACTED.encode())
        return raw

    def data(self, value: Any, _depth: int = 0) -> Any:
        """Plain JSON-like data with every string (keys too) redacted."""
        if isinstance(value, str):
            return self(value)
        if _depth >= 20 or not self._forms:
            return value
        if isinstance(value, dict):
            return {self(k) if isinstance(k, str) else k: self.data(v, _depth + 1)
                    for k, v in value.items()}  # fmt: skip
        if isinstance(value, list | tuple):
            return [self.data(v, _depth + 1) for v in value]
        return value


def redact_exact(text: str, forms: Iterable[str]) -> str:
    """``text`` with each of ``forms`` replaced, and a trailing cut start of one (at least
    ``MIN_FRAGMENT`` characters, before a closing ``...`` or at the very end)."""
    for form in forms:
        if form in text:
            text = text.replace(form, REDACTED)
        text = _cut_start(text, form)
    return text


def _cut_start(text: str, form: str) -> str:
    """The longest start of ``form`` that ends ``text`` (before a closing ``...``), replaced:
    looked for only where ``form``'s first characters occur in the last ``len(form)``
    characters (one ``find`` when none does, which is almost always)."""
    end = len(text) - 3 if text.endswith("...") else len(text)
    probe = form[:MIN_FRAGMENT]
    at = text.find(probe, max(0, end - len(form) + 1), end)
    while at != -1:
        if form.startswith(text[at:end]):
            return text[:at] + REDACTED + text[end:]
        at = text.find(probe, at + 1, end)
    return text


class SecretForms:
    """The forms of the secrets of several flows, counted (most flows share one key: a few
    forms in all): ``redact`` replaces every form of every secret added and not yet removed.
    The shell's flow table keeps one, so every line it logs is redacted with the secrets of
    every flow still running."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        """How many added secrets have each form."""
        self._forms: tuple[str, ...] = ()

    def add(self, secrets: Secrets) -> None:
        new = False
        for form in secrets.forms:
            new = new or form not in self._counts
            self._counts[form] = self._counts.get(form, 0) + 1
        if new:
            self._update()

    def remove(self, secrets: Secrets) -> None:
        """``secrets``, added before, no longer redacted unless another added them too."""
        gone = False
        for form in secrets.forms:
            left = self._counts[form] - 1
            if left:
                self._counts[form] = left
            else:
                del self._counts[form]
                gone = True
        if gone:
            self._update()

    def redact(self, text: str) -> str:
        """``text`` redacted with every form counted."""
        return redact_exact(text, self._forms) if self._forms else text

    def _update(self) -> None:
        self._forms = tuple(sorted(self._counts, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._forms)


NO_SECRETS = Secrets()
"""A flow without credentials of its own."""


# --------------------------------------------------------------------------- keys in answers

REDACTED_BYTES = REDACTED.encode()


class KeyRedactor:
    """The keys the proxy holds (docs/observability.md#keys-in-answers), searched by value in
    the bytes of an answer: each key as sent and in the forms a body may quote it in (JSON-
    escaped, ``/`` as ``\\/``, URL-encoded: ``_forms``) is replaced by ``[REDACTED]``, the
    leftmost first and the longest form where two start at one place. A masked echo
    (``sk-…abcd``, ``sk-proj-****abcd``) is no form of a key and stays. ``body`` redacts a
    whole body, ``stream()`` one streamed body read by read. The values are never shown (no
    ``repr`` of them) and live in memory only."""

    __slots__ = ("_bytes", "_chars", "_forms", "_pattern", "longest")

    def __init__(self, values: Iterable[str | None] = ()) -> None:
        forms: set[bytes] = set()
        for v in values:
            if v and len(v.strip()) >= MIN_SECRET:
                forms |= {f.encode("utf-8", "surrogatepass") for f in _forms(v.strip())}
        self._forms = tuple(sorted(forms, key=len, reverse=True))
        # One search for every form: ``re`` looks for the literal start the forms share (the
        # key up to its first character a form writes otherwise), faster than one ``in``
        # per form.
        self._pattern = re.compile(b"|".join(re.escape(f) for f in self._forms))
        self._chars = bytes(sorted({b for f in self._forms for b in f}))
        """Every byte of a form: an end of a read made of others cannot start a key."""
        self._bytes = frozenset(self._chars)
        self.longest = len(self._forms[0]) if self._forms else 0
        """The longest form's length: a stream holds back fewer bytes than this."""

    def __repr__(self) -> str:
        return f"KeyRedactor({len(self._forms)} forms)"

    def __bool__(self) -> bool:
        return bool(self._forms)

    def found(self, raw: bytes) -> bool:
        """Whether ``raw`` holds a form of a key (most bodies hold none)."""
        return bool(self._forms) and self._pattern.search(raw) is not None

    def body(self, raw: bytes) -> bytes:
        """``raw`` with every form of every key replaced (``raw`` itself when it holds none)."""
        if not self.found(raw):
            return raw
        return self._pattern.sub(REDACTED_BYTES, raw)

    def count(self, raw: bytes) -> int:
        """How many forms ``raw`` holds (for a log line)."""
        return sum(1 for _ in self._pattern.finditer(raw)) if self.found(raw) else 0

    def stream(self) -> StreamRedactor:
        return StreamRedactor(self)

    def _replace(self, buf: bytes, *, streamed: bool = False) -> tuple[bytes, int, int]:
        """``buf`` redacted, where the bytes after the last replacement start, and how many
        replacements. ``streamed``: a form found at the end of a read that a longer form may
        still grow from (a key, then the ``\\`` of its JSON-escaped form in the next read) is
        left for the next read, as the whole body would have the longer one replaced."""
        parts: list[bytes] = []
        last = n = 0
        for m in self._pattern.finditer(buf):
            if streamed and len(buf) - m.start() < self.longest and self._grows(buf[m.start() :]):
                parts.append(buf[last : m.start()])
                last = m.start()
                break
            parts += (buf[last : m.start()], REDACTED_BYTES)
            last = m.end()
            n += 1
        parts.append(buf[last:])
        out = b"".join(parts)
        return out, len(out) - (len(buf) - last), n

    def _grows(self, rest: bytes) -> bool:
        """Whether ``rest`` is the start of a form longer than itself."""
        return any(len(f) > len(rest) and f.startswith(rest) for f in self._forms)

    def _tail(self, buf: bytes, start: int) -> int:
        """Where the longest end of ``buf`` (from ``start`` on) that is the start of a form
        begins: the bytes a stream holds back until the next read says whether a key
        follows. ``len(buf)`` when no end of it is (an SSE event's ``\\n\\n``: almost always)."""
        n = len(buf)
        if not n or buf[-1] not in self._bytes:  # an event's "\n\n", mostly: nothing held
            return n
        # Only an end made of the forms' bytes can be the start of one.
        end = buf[max(start, n - self.longest + 1) :]
        start = n - (len(end) - len(end.rstrip(self._chars)))
        cut = n
        for form in self._forms:
            first = form[:1]
            at = buf.find(first, max(start, n - len(form) + 1))
            while at != -1 and at < cut:
                if form.startswith(buf[at:]):
                    cut = at
                    break
                at = buf.find(first, at + 1)
        return cut


class StreamRedactor:
    """One streamed body redacted as it comes (``KeyRedactor.stream``): ``feed`` returns the
    bytes that can go now, ``finish`` the rest. A key cut across reads is still found: the end
    of a read that could be the start of a form (never as long as the longest form) is held
    back until the next read completes it or rules it out, and given at ``finish``. What the
    reads give, joined, is ``KeyRedactor.body`` of the whole body, however it is cut (for keys
    whose forms do not overlap one another)."""

    __slots__ = ("_bytes", "_held", "_keys", "_search", "replaced")

    def __init__(self, keys: KeyRedactor) -> None:
        self._keys = keys
        self._search = keys._pattern.search
        self._bytes = keys._bytes
        self._held = b""
        self.replaced = 0
        """How many forms were replaced so far."""

    def feed(self, data: bytes) -> bytes:
        held = self._held
        buf = held + data if held else data
        if self._search(buf) is None:
            # The common read: no key, and it ends with a byte no key has (an event's "\n").
            if not buf or buf[-1] not in self._bytes:
                if held:
                    self._held = b""
                return buf
            start = 0
        else:
            buf, start, n = self._keys._replace(buf, streamed=True)
            self.replaced += n
        cut = self._keys._tail(buf, start)
        if cut == len(buf):
            self._held = b""
            return buf
        self._held = buf[cut:]
        return buf[:cut]

    def finish(self) -> bytes:
        """The bytes held back, redacted (a key a longer form could have grown from)."""
        held, self._held = self._held, b""
        if not self._keys.found(held):
            return held
        out, _, n = self._keys._replace(held)
        self.replaced += n
        return out
