"""The count_tokens addon: Anthropic ``POST …/messages/count_tokens`` when the upstream has
no such endpoint.

Claude Code calls it to decide when to compact a conversation. The request goes
upstream as it is; only when the upstream lacks the endpoint (404, 405, 501) does
the bridge answer ``{"input_tokens": N}`` with an estimate (about four characters a
token), and say so in the flow comment. An auth, rate-limit or server error is the
client's to see. Only paths whose ``…/messages`` a route takes from Anthropic clients
are touched.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

from mitmproxy import http

from addon.config import Settings
from addon.dialects import DIALECTS
from addon.plan import dump
from addon.routes import match
from addon.shell.common import append_comment, environment, header_map, json_response
from addon.state import BridgeState
from addon.transforms.tokens import estimate_input_tokens
from addon.wire import credentials

SUFFIX = "/count_tokens"
MISSING_ENDPOINT = frozenset({404, 405, 501})


class CountTokens:
    name = "cursor_bridge_count_tokens"

    def __init__(self, settings: Callable[[], Settings], state: BridgeState) -> None:
        self._settings = settings
        self._state = state
        self._estimates: dict[str, int] = {}

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or not flow.live:
            return
        req = flow.request
        path = req.path.split("?", 1)[0]
        if req.method != "POST" or not path.endswith("/messages" + SUFFIX):
            return
        route = match(self._settings().routes, req.host, path[: -len(SUFFIX)], "POST")
        if route is None or route.client != "anthropic":
            return
        try:
            body = json.loads(req.get_content(strict=False) or b"")
        except (ValueError, RecursionError):
            return  # not ours to judge: the upstream answers
        self._estimates[flow.id] = estimate_input_tokens(body)
        # The key follows the upstream's dialect here too (a Bearer gateway would say 401).
        env_key = environment().get(route.api_key_env) if route.api_key_env else None
        set_headers, drop = credentials(
            DIALECTS[route.client], DIALECTS[route.upstream], header_map(req.headers),
            env_key or None, Counter(),
        )  # fmt: skip
        for name in drop:
            req.headers.pop(name, None)
        for name, value in set_headers:
            req.headers[name] = value

    def response(self, flow: http.HTTPFlow) -> None:
        estimate = self._estimates.pop(flow.id, None)
        resp = flow.response
        if estimate is None or resp is None or resp.status_code not in MISSING_ENDPOINT:
            return
        status = resp.status_code
        flow.response = json_response(200, dump({"input_tokens": estimate}))
        append_comment(
            flow,
            f"cursor-bridge: count_tokens estimated ({estimate}; the upstream has no such "
            f"endpoint: HTTP {status})",
        )
        self._state.count("token counts estimated")

    def error(self, flow: http.HTTPFlow) -> None:
        self._estimates.pop(flow.id, None)
