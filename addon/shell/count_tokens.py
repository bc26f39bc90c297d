"""The count_tokens addon: Anthropic ``POST …/messages/count_tokens`` when the upstream has
no such endpoint.

Claude Code calls it to decide when to compact a conversation. The request goes
upstream as it is; only when the upstream lacks the endpoint (404, 405, 501) does
the bridge answer ``{"input_tokens": N}`` with an estimate (about four characters a
token), and say so in the flow comment. An auth, rate-limit or server error is the
client's to see. On a Kiro route (Kiro has no such endpoint) the estimate answers at once.
On a Gemini route the count is Gemini's own: the conversation goes to
its ``countTokens`` (``addon.dialects.gemini.tokens``) and ``totalTokens`` comes back as
``input_tokens``; its errors reach the client in Anthropic's shape. Only paths whose
``…/messages`` a route takes from Anthropic clients
are touched, never a host outside mitmproxy's ``allow_hosts`` / ``ignore_hosts``; a
body that is not strict JSON goes upstream as it is, without an estimate.
"""

from __future__ import annotations

from collections import Counter

from mitmproxy import http

from addon.dialects import DIALECTS
from addon.dialects.base import Dialect, Target
from addon.model import ClientError, UnsupportedShape
from addon.plan import dump, load_json
from addon.routes import match
from addon.shell.common import (
    SECRETS,
    append_comment,
    environment,
    header_map,
    internal_error,
    json_response,
    outside_proxy_hosts,
)
from addon.shell.settings import BridgeSettings
from addon.state import BridgeState
from addon.transforms.tokens import estimate_input_tokens
from addon.transforms.tools import leave_out_tools
from addon.wire import credentials, secret_values

SUFFIX = "/count_tokens"
MISSING_ENDPOINT = frozenset({404, 405, 501})


class CountTokens:
    name = "cursor_bridge_count_tokens"

    def __init__(self, settings: BridgeSettings, state: BridgeState) -> None:
        self._settings = settings
        self._state = state
        self._estimates: dict[str, int] = {}
        self._counted: dict[str, Dialect] = {}
        """Flows whose upstream counts the tokens itself (``Dialect.token_count``)."""
        """Flows whose count was asked of Gemini's ``countTokens``."""

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or not flow.live:
            return
        try:
            self._request(flow)
        except Exception as e:  # the request goes upstream as the client sent it
            self._estimates.pop(flow.id, None)
            internal_error("cursor-bridge: count_tokens request", e)

    def _request(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        path = req.path.split("?", 1)[0]
        if req.method != "POST" or not path.endswith("/messages" + SUFFIX):
            return
        route = match(self._settings.settings.routes, req.host, path[: -len(SUFFIX)], "POST")
        if route is None or route.client != "anthropic" or outside_proxy_hosts(flow):
            return
        try:
            body = load_json(req.get_content(strict=False) or b"")
        except (ValueError, RecursionError):
            return  # not ours to judge: the upstream answers
        estimate = estimate_input_tokens(body)
        upstream = DIALECTS[route.upstream]
        if not upstream.counts_tokens:
            # Kiro has no token-count endpoint: the estimate answers, the upstream is not asked.
            flow.response = json_response(200, dump({"input_tokens": estimate}))
            append_comment(
                flow,
                f"cursor-bridge: count_tokens estimated ({estimate}; Kiro has no such endpoint)",
            )
            self._state.count("token counts estimated")
            return
        # The key follows the upstream's dialect here too (a Bearer gateway would say 401).
        env_key = environment().get(route.api_key_env) if route.api_key_env else None
        set_headers, drop = credentials(
            DIALECTS[route.client], DIALECTS[route.upstream], header_map(req.headers),
            env_key or None, Counter(),
        )  # fmt: skip
        counter = upstream.token_count
        if counter is not None and isinstance(body, dict):
            notes: Counter[str] = Counter()
            try:
                unified = DIALECTS["anthropic"].decode_request(body, notes)
                where = f"the {upstream.name} upstream"
                unified = leave_out_tools(unified, upstream.runs, where, notes)
            except (ClientError, UnsupportedShape, ValueError, TypeError, KeyError):
                unified = None  # Gemini has no count_tokens path: the estimate answers its 404
        else:
            unified = None
        if unified is not None and counter is not None:
            target = Target(
                path[: -len(SUFFIX)], (), "/messages", same_dialect=False, project=route.project
            )
            new_path, _, new_body = counter.request(unified, target, route.upstream, notes)
            req.path = new_path
            req.content = dump(new_body)
            req.headers["content-type"] = "application/json"
            self._counted[flow.id] = upstream
        # The flow's own credentials: redacted from the error the bridge writes for it.
        query = tuple(req.query.items(multi=True))
        SECRETS.add(flow.id, secret_values(header_map(req.headers), query, env_key))
        for name in drop:
            req.headers.pop(name, None)
        for name, value in set_headers:
            req.headers[name] = value
        self._estimates[flow.id] = estimate

    def response(self, flow: http.HTTPFlow) -> None:
        estimate = self._estimates.pop(flow.id, None)
        counted = self._counted.pop(flow.id, None)
        resp = flow.response
        if estimate is None or resp is None:
            return
        try:
            if resp.status_code in MISSING_ENDPOINT:
                self._answer(flow, resp.status_code, estimate)
            elif counted is not None:
                self._from_upstream(flow, resp, counted)
        except Exception as e:  # the upstream's answer goes on as it is
            internal_error("cursor-bridge: count_tokens answer", e)
        finally:
            SECRETS.drop(flow.id)

    def _from_upstream(self, flow: http.HTTPFlow, resp: http.Response, upstream: Dialect) -> None:
        """Gemini's ``totalTokens`` as Anthropic's ``input_tokens``; its errors re-shaped."""
        try:
            body = load_json(resp.get_content(strict=False) or b"")
        except (ValueError, RecursionError):
            body = None
        counter = upstream.token_count
        assert counter is not None
        total = counter.answer(body) if 200 <= resp.status_code < 300 else None
        if total is not None:
            flow.response = json_response(200, dump({"input_tokens": total}))
            append_comment(flow, f"cursor-bridge: count_tokens from Gemini's countTokens ({total})")
            return
        message = upstream.error_message(body) or (
            f"the upstream's countTokens answered HTTP {resp.status_code} without a count"
        )
        status = resp.status_code if resp.status_code >= 400 else 502
        message = SECRETS.get(flow.id)(message)
        error = DIALECTS["anthropic"].encode_error(ClientError(message, status=status))
        flow.response = json_response(status, dump(error))
        append_comment(flow, f"cursor-bridge: count_tokens error from Gemini (HTTP {status})")

    def _answer(self, flow: http.HTTPFlow, status: int, estimate: int) -> None:
        flow.response = json_response(200, dump({"input_tokens": estimate}))
        append_comment(
            flow,
            f"cursor-bridge: count_tokens estimated ({estimate}; the upstream has no such "
            f"endpoint: HTTP {status})",
        )
        self._state.count("token counts estimated")

    def error(self, flow: http.HTTPFlow) -> None:
        self._estimates.pop(flow.id, None)
        self._counted.pop(flow.id, None)
        SECRETS.drop(flow.id)
