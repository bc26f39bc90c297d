"""What the shell's addons share: the metadata key, flow comments, logging, headers, the
proxy's own host filters, and how option errors are reported.

Everything the bridge writes about a flow (log lines, comments, metadata) goes
through ``addon.redact``: credentials redacted, surrogates and control characters
escaped, so writing it can never raise and never shows a key.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from mitmproxy import ctx, exceptions, http

from addon.config import ConfigError, OptionSpec, check_deferred_option
from addon.redact import SecretRegistry, clean, clean_data
from addon.shell.host_filter import proxy_excludes

if TYPE_CHECKING:
    from addon.dialects.base import WireRequest
    from addon.plan import Incoming, Rewrite

log = logging.getLogger("cursor_bridge")

SECRETS = SecretRegistry()
"""The exact credential values of the routed flows still running (``addon.redact.Secrets``):
the rewrite addon adds a flow's when its request arrives and drops them when it is over."""


class _SecretFilter(logging.Filter):
    """Every line the bridge logs, redacted with the secrets of every flow still running: an
    upstream that echoes a key that has no key's shape ("Incorrect API key provided:
    SECRETKEY456") is caught wherever the line quotes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if len(SECRETS):
            try:
                message = record.getMessage()
            except Exception:  # a bad format is the handler's to report
                return True
            clean_message = SECRETS.redact(message)
            if clean_message != message:
                record.msg, record.args = clean_message, None
        return True


log.addFilter(_SecretFilter())

META_KEY = "cursor_bridge"
"""``flow.metadata`` key holding what the bridge did (plain JSON data, no secrets)."""
MAX_COMMENT_LINE = 2000


def append_comment(flow: http.HTTPFlow, line: str) -> None:
    line = SECRETS.get(flow.id)(clean(line, MAX_COMMENT_LINE))
    flow.comment = f"{flow.comment}\n{line}" if flow.comment else line


def set_meta(flow: http.HTTPFlow, meta: Mapping[str, Any]) -> None:
    """``flow.metadata[META_KEY]``: plain data, every string cleaned (see ``addon.redact``)."""
    flow.metadata[META_KEY] = SECRETS.get(flow.id).data(clean_data(dict(meta)))


def seal_flow(flow: http.HTTPFlow) -> None:
    """The flow is over: its comment and metadata redacted once more with its secrets (for
    what was written into the metadata directly), and the secrets forgotten."""
    secrets = SECRETS.get(flow.id)
    if secrets:
        flow.comment = secrets(flow.comment)
        meta = flow.metadata.get(META_KEY)
        if isinstance(meta, dict):
            flow.metadata[META_KEY] = secrets.data(meta)
    SECRETS.drop(flow.id)


def internal_error(where: str, e: BaseException) -> None:
    """One log line for an exception nobody expected (a bug): never a traceback."""
    log.error("%s: internal error (%s: %s)", clean(where, 200), type(e).__name__, clean(e, 300))


def outside_proxy_hosts(flow: http.HTTPFlow) -> bool:
    """True when mitmproxy's ``allow_hosts`` / ``ignore_hosts`` leave this flow alone.

    mitmproxy applies them to connections (TLS interception, reverse targets), but a
    plain-HTTP request through a regular proxy reaches addons whatever they say; the
    bridge applies them itself, matched the way mitmproxy matches (``next_layer``: a
    regex searched, case-insensitively, in ``host:port`` of the request's host, its
    Host header and the server's address)."""
    try:
        allow, ignore = ctx.options.allow_hosts, ctx.options.ignore_hosts
    except (AttributeError, KeyError):
        return False
    if not allow and not ignore:
        return False
    req = flow.request
    names = [f"{req.host}:{req.port}"]
    host_header = req.host_header
    if host_header:
        names.append(host_header if _has_port(host_header) else f"{host_header}:{req.port}")
    address = flow.server_conn.peername or flow.server_conn.address
    if address:
        names.append(f"{address[0]}:{address[1]}")
    return proxy_excludes(names, tuple(allow), tuple(ignore))


def _has_port(host: str) -> bool:
    head, sep, port = host.rpartition(":")
    return bool(sep) and port.isdigit() and not head.endswith(":")


def replace_headers(
    headers: http.Headers, drop: Iterable[str], put: Iterable[tuple[str, str]]
) -> None:
    """Every header named in ``drop`` or ``put`` removed, then ``put``'s added (a name put
    twice: the last value), in one pass over the fields (``pop`` and ``[]=`` each search all
    of them)."""
    new = {name.lower(): (name, value) for name, value in put}
    gone = {name.lower() for name in drop} | new.keys()
    kept = [(k, v) for k, v in headers.fields if _native(k).lower() not in gone]
    kept += [(_raw(name), _raw(value)) for name, value in new.values()]
    headers.fields = tuple(kept)


def _native(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _raw(s: str) -> bytes:
    """A header name or value as mitmproxy stores it."""
    return s.encode("utf-8", "surrogateescape")


def header_map(headers: http.Headers) -> dict[str, str]:
    """Names lower-cased; repeated headers joined with ", " (the values may be secrets)."""
    out: dict[str, str] = {}
    for k, v in headers.fields:
        name, value = _native(k).lower(), _native(v)
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def environment() -> Mapping[str, str]:
    return os.environ


def options_error(message: str) -> exceptions.OptionsError:
    return exceptions.OptionsError(message)  # type: ignore[no-untyped-call]


def is_json(resp: http.Response) -> bool:
    ctype = resp.headers.get("content-type", "").lower()
    return ctype.startswith("application/json") or "+json" in ctype


def json_response(status: int, body: bytes) -> http.Response:
    return http.Response.make(status, body, {"content-type": "application/json"})


class OptionChecks:
    """How an addon reports a bad option value.

    While mitmproxy starts (before ``running``), one error line naming the option: mitmdump
    then exits non-zero ("Error logged during startup") instead of a chained traceback.
    Later (``--set`` in mitmweb or the console), an ``OptionsError``: mitmproxy refuses the
    change and keeps the previous value."""

    _running = False

    def running(self) -> None:
        self._running = True
        _REFUSED.clear()

    def refuse(self, message: str) -> None:
        if self._running:
            raise options_error(message) from None
        if message not in _REFUSED:  # two addons may read the same option: said once
            _REFUSED.add(message)
            log.error("cursor-bridge: %s", clean(message, 2000))


_REFUSED: set[str] = set()


def check_deferred_options(options: Any) -> None:
    """``--set bridge_…=…`` given before the bridge declared its options waits in mitmproxy's
    ``deferred``; mitmproxy would later drop a misspelt name silently and, on a malformed
    value, stop loading the whole script without a word. Check them first: a bad one is
    one error line naming it (mitmdump then exits), a good one is handed over typed."""
    deferred = getattr(options, "deferred", None)
    if not isinstance(deferred, dict):
        return
    for name in [n for n in deferred if isinstance(n, str) and n.startswith("bridge_")]:
        value = deferred[name]
        raw = getattr(value, "val", None)
        try:
            deferred[name] = check_deferred_option(
                name, raw if isinstance(raw, list) else value, from_text=isinstance(raw, list)
            )
        except ConfigError as e:
            del deferred[name]
            log.error("cursor-bridge: %s", clean(e, 2000))


def add_options(loader: Any, specs: Sequence[OptionSpec]) -> None:
    for spec in specs:
        loader.add_option(
            name=spec.name,
            typespec=spec.typespec,
            default=spec.default,
            help=spec.help,
            choices=list(spec.choices) if spec.choices else None,
        )


def apply_rewrite(req: http.Request, incoming: Incoming, d: Rewrite) -> None:
    """The decision's upstream request set on ``req`` (the client's request as it came): body,
    path and query, address (a route's ``upstream_url``), headers."""
    if d.body is not incoming.body:  # else the client's bytes go on as they came
        req.content = d.body
    place(req, incoming, d.wire, ("accept-encoding", "identity"))


def origin(request: http.Request) -> str:
    """``scheme://host:port`` of a request (no path: a path may carry a key)."""
    host = f"[{request.host}]" if ":" in request.host else request.host
    return f"{request.scheme}://{host}:{request.port}"


def place(
    req: http.Request, incoming: Incoming, wire: WireRequest, *extra: tuple[str, str]
) -> None:
    """The upstream request's path, query, address and headers, as ``wire`` says (a request
    passed through untouched gets this too: its route's ``upstream_url`` and key rules)."""
    if (wire.path, wire.query) != (incoming.bare_path, incoming.query):
        # surrogateescape: bytes of the client's query that are not UTF-8 go back as sent
        query = urlencode(wire.query, encoding="utf-8", errors="surrogateescape")
        req.path = wire.path + (f"?{query}" if wire.query else "")
    if wire.origin is not None:
        # A route's upstream_url: mitmproxy connects there (TLS verified as for any
        # upstream, SNI the new host) and the Host header / :authority follow the host.
        req.scheme, req.host, req.port = wire.origin
    replace_headers(req.headers, wire.drop_headers, (*wire.set_headers, *extra))
