"""No key in mitmproxy's own flow line (docs/observability.md#what-mitmdump-prints).

mitmdump's ``Dumper`` prints each flow with ``print``, not logging, so the bridge's redaction
never sees it: at ``response``, ``error`` and ``http_connect_error`` it writes the request's
URL (``flow_detail`` 1: cut to the terminal's width; 2 and up: whole, with every header). A
script's addons are children of mitmproxy's ``ScriptLoader``, which comes before the
``Dumper`` in mitmdump's chain, so this addon's hooks run before it prints, for every hook.

- ``request`` (the last of the bridge's, after the rewrite): a Gemini request's ``?key=`` —
  the client's, or one the bridge passes on without rewriting — goes to the upstream in
  ``x-goog-api-key`` (which Gemini's API reads as it reads ``?key=``) and leaves the URL. A
  request is Gemini's when its host is Google's API (``*.googleapis.com``) or its path is
  Gemini's (``/v1beta/…``, ``/v1alpha/…``, ``…/models/NAME:METHOD``). The route's own key
  never is in the URL: ``addon.plan.wire_request`` puts it in the upstream dialect's header.
- ``response`` / ``error``: any key-named query parameter still in the flow (another API's
  ``?api_key=``, a Gemini request that also had another key in its header) is shown as
  ``redacted`` in the flow the Dumper then prints (and mitmweb shows, ``-w`` saves); the
  upstream got it as it was sent.

What mitmproxy prints at ``flow_detail`` 2 and up (headers: the key the upstream got) is its
own; docs/observability.md says what shows.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

from mitmproxy import http

from addon.dialects import DIALECTS, GEMINI
from addon.plan.wire_request import KEY_PARAMETERS

GEMINI_KEY_QUERY = DIALECTS[GEMINI].key_query or "key"
"""The query parameter a Gemini client may send its key in."""
GEMINI_KEY_HEADER = DIALECTS[GEMINI].auth_header
"""Where Gemini's API reads the same key from a header (``x-goog-api-key``)."""
SHOWN = "redacted"
"""What a key-named query parameter's value becomes in the flow once it has been sent."""
_GEMINI_PATH = re.compile(r"/v1(?:alpha|beta)\d*(?:/|$)|/models/[^/]+:[A-Za-z]+$")
_GOOGLE_API = ".googleapis.com"


def is_gemini_request(host: str, path: str) -> bool:
    """Whether a request goes to Gemini's API (which reads ``x-goog-api-key``): Google's API
    host, or a path of Gemini's (another API never names ``v1beta`` nor ``models/M:method``)."""
    host = host.lower().rstrip(".")
    return host.endswith(_GOOGLE_API) or bool(_GEMINI_PATH.search(path.partition("?")[0]))


def query_keys(path: str, names: frozenset[str], shown: str | None) -> tuple[str, list[str]]:
    """``path`` with each query parameter named in ``names`` (case-insensitive, non-empty)
    dropped (``shown`` None) or its value replaced by ``shown``, every other byte as it was;
    and the values found, decoded."""
    base, sep, query = path.partition("?")
    if not sep:
        return path, []
    kept, found = [], []
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        if eq and value and unquote_plus(name).lower() in names:
            found.append(unquote_plus(value))
            if shown is None:
                continue
            part = f"{name}={shown}"
        kept.append(part)
    if not found:
        return path, []
    return base + ("?" + "&".join(kept) if kept else ""), found


class KeysOutOfFlowLine:
    """Last of the bridge's addons: a key leaves the URL before mitmproxy prints it."""

    name = "cursor_bridge_flow_line"

    def request(self, flow: http.HTTPFlow) -> None:
        """A Gemini request's ``?key=`` moved to ``x-goog-api-key`` on its way upstream."""
        req = flow.request
        if flow.response is not None or flow.error is not None or not flow.live:
            return
        if "?" not in req.path or not is_gemini_request(req.host, req.path):
            return
        path, found = query_keys(req.path, frozenset({GEMINI_KEY_QUERY}), None)
        if not found:
            return
        header = req.headers.get(GEMINI_KEY_HEADER)
        if len(set(found)) > 1 or (header is not None and header != found[0]):
            return  # two different keys: which one the upstream takes is not ours to change
        req.path = path
        if header is None:
            req.headers[GEMINI_KEY_HEADER] = found[0]

    def response(self, flow: http.HTTPFlow) -> None:
        self._hide(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._hide(flow)

    @staticmethod
    def _hide(flow: http.HTTPFlow) -> None:
        """Key-named query parameters shown as ``redacted`` (the request has been sent)."""
        req = flow.request
        if "?" in req.path:
            path, found = query_keys(req.path, KEY_PARAMETERS, SHOWN)
            if found:
                req.path = path
