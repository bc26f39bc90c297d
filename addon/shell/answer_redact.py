"""Keys in answers: every key the proxy holds is redacted by value from every answer it relays
(docs/observability.md#keys-in-answers) — its headers, its body whole or streamed, on every
route and dialect, same-dialect and passed-through answers and the relay's included.

The keys: every route's ``api_key_env`` value (a pool's every key, a fallback's), the Kiro
tokens read, and a client key of ``bridge_client_keys`` the request went upstream with. The
last addon to see an answer's headers and its whole body: a stream is wrapped whatever reads
it (the processor's fast path, the processor, or nothing: raw), a whole body redacted after
the answers addon wrote it. No key held, nothing is done: the stream callable stays as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from mitmproxy import http

from addon.config.client_keys import ClientKeys
from addon.config.options import Settings
from addon.plan.wire_request import CREDENTIAL_HEADERS, KEY_PARAMETERS
from addon.redact import KeyRedactor, StreamRedactor, clean
from addon.shell.headers import replace_headers
from addon.shell.notes import append_comment, log, log_internal_error
from addon.shell.option_checks import environment
from addon.shell.settings import BridgeSettings
from addon.stream.decompress import Decompressor, UnsupportedEncoding, make_decompressor

type StreamCallable = Callable[[bytes], Iterable[bytes] | bytes]


class AnswerRedaction:
    name = "cursor_bridge_answer_redaction"

    def __init__(
        self,
        settings: BridgeSettings,
        client_keys: Callable[[], ClientKeys | None] = lambda: None,
        kiro_tokens: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self._settings = settings
        self._client_keys = client_keys
        self._kiro_tokens = kiro_tokens
        self._names: tuple[Settings | None, tuple[str, ...]] = (None, ())
        """The settings last read, and the variables their routes name (``key_names``)."""
        self._held: tuple[tuple[str | None, ...], KeyRedactor] = ((), KeyRedactor())
        """The values last seen, and their redactor (most answers: the same values)."""

    # ------------------------------------------------------------------ the keys

    def _route_names(self) -> tuple[str, ...]:
        settings = self._settings.settings
        if self._names[0] is not settings:
            names = dict.fromkeys(n for r in settings.routes for n in r.key_names)
            self._names = (settings, tuple(names))
        return self._names[1]

    def keys(self, flow: http.HTTPFlow) -> KeyRedactor:
        """The keys the proxy holds, for this flow's answer: every route's, every Kiro token
        read, and a client key the request as sent upstream carries."""
        env = environment()
        values: tuple[str | None, ...] = (
            *(env.get(n) for n in self._route_names()),
            *self._kiro_tokens(),
        )
        listed = self._client_keys()
        client = _client_keys_sent(flow.request, listed) if listed is not None else ()
        if client:
            return KeyRedactor((*values, *client))
        if values != self._held[0]:
            self._held = (values, KeyRedactor(values))
        return self._held[1]

    # ------------------------------------------------------------------ hooks

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """A streamed answer: its head now (sent before any hook sees the body), its body
        wrapped. A whole one is left to ``response`` (its head is sent after that hook)."""
        resp = flow.response
        if resp is None or not resp.stream:
            return
        try:
            keys = self.keys(flow)
            if keys:
                self._wrap(flow, resp, keys, _head(resp, keys))
        except Exception as e:
            log_internal_error("cursor-bridge: keys in answers", e)

    def response(self, flow: http.HTTPFlow) -> None:
        """A whole body (the bridge's own answers included: set in ``request``, they never
        had a ``responseheaders``), its headers and trailers."""
        resp = flow.response
        if resp is None:
            return
        try:
            keys = self.keys(flow)
            if not keys:
                return
            found = _head(resp, keys)
            if resp.trailers is not None:
                found += _fields(resp.trailers, keys)
            if not resp.stream:
                found += _whole(resp, keys)
            if found:
                self._said(flow, found)
        except Exception as e:
            log_internal_error("cursor-bridge: keys in answers", e)

    # ------------------------------------------------------------------ streams

    def _wrap(
        self, flow: http.HTTPFlow, resp: http.Response, keys: KeyRedactor, found: int
    ) -> None:
        """The stream behind a ``StreamRedactor``: after the processor where one reads it,
        decompressed first where nothing does (a raw stream with a ``content-encoding``)."""
        inner = resp.stream
        decompressor: Decompressor | None = None
        drop = ["content-length"] if "content-length" in resp.headers else []
        if not callable(inner):
            encoding = resp.headers.get("content-encoding")
            try:
                decompressor = make_decompressor(encoding)
            except UnsupportedEncoding as e:
                # Not readable here: the stream is cut off rather than passed with a key in it.
                log.warning(
                    "cursor-bridge: a streamed answer in %s cannot be searched for the "
                    "proxy's keys: not passed on",
                    clean(str(e), 200),
                )
                resp.stream = lambda data: b""
                return
            if decompressor is not None:
                drop.append("content-encoding")
        if drop:
            put = []
            if flow.request.http_version.startswith("HTTP/1"):
                put.append(("transfer-encoding", "chunked"))
            replace_headers(resp.headers, drop, put)
        redactor = keys.stream()
        resp.stream = redacting(
            inner, redactor, decompressor, lambda: self._ended(flow, redactor, found)
        )

    def _ended(self, flow: http.HTTPFlow, redactor: StreamRedactor, found: int) -> None:
        if redactor.replaced or found:
            self._said(flow, redactor.replaced + found)

    def _said(self, flow: http.HTTPFlow, found: int) -> None:
        """One log line and a comment: an upstream echoed a key (never the key)."""
        where = f"{flow.request.method} {flow.request.pretty_host}{flow.request.path.split('?')[0]}"
        line = (
            f"cursor-bridge: the answer to {clean(where, 300)} held a key of the proxy's "
            f"{found} time(s): redacted"
        )
        log.warning("%s", line)
        append_comment(flow, line)


def redacting(
    inner: StreamCallable | bool,
    redactor: StreamRedactor,
    decompressor: Decompressor | None = None,
    ended: Callable[[], None] | None = None,
) -> Callable[[bytes], Sequence[bytes]]:
    """The ``flow.response.stream`` callable: ``inner``'s output (``True``: the bytes as they
    came, decompressed by ``decompressor``) through ``redactor``; ``b""`` ends the body and
    gives what was held back. A failure here ends the client's stream: a key is never passed
    on unsearched. (One flat function per kind of ``inner``: it runs for every read.)"""
    feed, finish = redactor.feed, redactor.finish
    broken = False

    def last(chunk: bytes) -> list[bytes]:
        out = (feed(chunk) if chunk else b"") + finish()
        if ended is not None:
            ended()
        return [out] if out else []

    def failed(e: Exception) -> list[bytes]:
        nonlocal broken
        broken = True
        log_internal_error("cursor-bridge: keys in a streamed answer (the stream ends)", e)
        return []

    if callable(inner):
        read_inner = inner

        def read(data: bytes) -> Sequence[bytes]:
            if broken:
                return []
            try:
                got = read_inner(data)
                if type(got) is not list:
                    got = [got] if isinstance(got, bytes) else list(got)
                chunk = got[0] if len(got) == 1 else b"".join(got)
                if not data:
                    return last(chunk)
                out = feed(chunk)
            except Exception as e:
                return failed(e)
            return [out] if out else []

        return read

    def raw(data: bytes) -> Sequence[bytes]:
        if broken:
            return []
        try:
            if decompressor is not None:
                chunk = decompressor.feed(data) if data else decompressor.finish()
            else:
                chunk = data
            if not data:
                return last(chunk)
            out = feed(chunk)
        except Exception as e:
            return failed(e)
        return [out] if out else []

    return raw


def _head(resp: http.Response, keys: KeyRedactor) -> int:
    """The status line's reason and the headers redacted; how many forms were found."""
    found = _fields(resp.headers, keys)
    reason = resp.reason.encode("utf-8", "surrogateescape")
    if keys.found(reason):
        found += keys.count(reason)
        resp.reason = keys.body(reason).decode("utf-8", "surrogateescape")
    return found


def _fields(headers: http.Headers, keys: KeyRedactor) -> int:
    found = 0
    fields = headers.fields
    for name, value in fields:
        found += keys.count(name) + keys.count(value)
    if found:
        headers.fields = tuple((keys.body(n), keys.body(v)) for n, v in fields)
    return found


def _whole(resp: http.Response, keys: KeyRedactor) -> int:
    """A whole body redacted, decoded first when it is content-encoded (and encoded again)."""
    raw = resp.raw_content
    if not raw:
        return 0
    try:
        body = resp.get_content(strict=True)
    except ValueError:
        body = None  # an encoding mitmproxy cannot undo: searched as it is
    if body is None:
        found = keys.count(raw)
        if found:
            resp.raw_content = keys.body(raw)
            if "content-length" in resp.headers:
                resp.headers["content-length"] = str(len(resp.raw_content))
        return found
    found = keys.count(body)
    if found:
        resp.content = keys.body(body)
    return found


def _client_keys_sent(request: http.Request, listed: ClientKeys) -> tuple[str, ...]:
    """The listed client keys the request as sent upstream carries (a header's value, a
    scheme's token, a key-named query parameter)."""
    values: list[str] = []
    for name in CREDENTIAL_HEADERS:
        for value in request.headers.get_all(name):
            value = value.strip()
            scheme, _, token = value.partition(" ")
            values.append(value)
            if token.strip() and scheme.lower() in ("bearer", "basic", "token"):
                values.append(token.strip())
    values += [v for k, v in request.query.items(multi=True) if k.lower() in KEY_PARAMETERS]
    return tuple(v for v in dict.fromkeys(values) if v and listed.match(v) is not None)
