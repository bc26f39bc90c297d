"""The mitmproxy shell: the only module (with ``main``) that imports mitmproxy.

Hooks only apply what the sans-IO layers decide:

- ``request``: match a route; decode the body with the client dialect, run the
  transforms, encode for the upstream, set the body; or answer a client mistake
  with a 400 in the client's dialect; or leave a body we cannot read untouched.
- ``responseheaders``: a 2xx SSE answer gets a ``StreamProcessor`` behind
  ``flow.response.stream``; anything else is buffered.
- ``response``: a buffered JSON answer is decoded and re-encoded whole.
- ``error``: the flow's state is freed.

Problems met while handling a flow are logged, one line each, never raised.
Headers are never logged and never copied into ``flow.metadata``: they carry
the user's API keys.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mitmproxy import contentviews, ctx, exceptions, http

from addon.contentview import BridgeContentview
from addon.dialects import DIALECTS, Dialect
from addon.dialects.base import describe
from addon.model import (
    SCHEMA_PROFILES,
    TOOL_MODES,
    ClientError,
    Notes,
    SchemaProfile,
    ToolMode,
    UnsupportedShape,
)
from addon.routes import DEFAULT_ROUTES, Route, RoutesError, load_routes, match
from addon.state import BridgeState
from addon.stream.decompress import UnsupportedEncoding, make_decompressor
from addon.stream.processor import StreamProcessor
from addon.transforms.tools import check_tools, sanitize_tool_schemas

log = logging.getLogger("cursor_bridge")

META_KEY = "cursor_bridge"
"""``flow.metadata`` key holding what the bridge did (plain JSON data, no secrets)."""
MAX_TRACKED_FLOWS = 10_000
"""Flows whose answer is still awaited; the oldest are forgotten past this (a leak guard)."""


@dataclass(slots=True)
class _FlowPlan:
    """What ``request`` decided, kept until the answer has been rewritten."""

    route: Route
    client: Dialect
    upstream: Dialect
    notes: Notes = field(default_factory=Counter)
    processor: StreamProcessor | None = None


class Bridge:
    name = "cursor_bridge"

    def __init__(self) -> None:
        self.routes: tuple[Route, ...] = DEFAULT_ROUTES
        self.tool_mode: ToolMode = "native"
        self.schema: SchemaProfile = "none"
        self.state = BridgeState()
        self._plans: OrderedDict[str, _FlowPlan] = OrderedDict()

    # ------------------------------------------------------------------ options

    def load(self, loader: object) -> None:
        contentviews.add(BridgeContentview(self.state.originals))
        add = loader.add_option  # type: ignore[attr-defined]
        add(
            name="bridge_routes",
            typespec=str,
            default="",
            help=(
                "Path to a TOML routes file saying which requests cursor-bridge rewrites and "
                "how (host glob, path glob, client and upstream dialect, tool mode, schema "
                "profile, upstream path). Empty: the built-in default route, POST "
                "…/chat/completions on any host, OpenAI dialect on both sides."
            ),
        )
        add(
            name="bridge_tool_mode",
            typespec=str,
            default="native",
            choices=list(TOOL_MODES),
            help=(
                "How tools reach the upstream on routes that do not set tool_mode: "
                "'native' sends them as the upstream's own tool definitions."
            ),
        )
        add(
            name="bridge_schema",
            typespec=str,
            default="none",
            choices=list(SCHEMA_PROFILES),
            help=(
                "Tool-schema profile for routes that do not set one: 'none' sends schemas as "
                "the client wrote them; 'strict' removes additionalProperties, $schema, title "
                "and default, collapses anyOf to its first non-null option and drops an empty "
                "required list, for upstreams that reject those keywords."
            ),
        )

    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        if "bridge_tool_mode" in updated:
            value = opts.bridge_tool_mode
            if value not in TOOL_MODES:
                raise _options_error(
                    f"bridge_tool_mode must be one of {', '.join(TOOL_MODES)}, not {value!r}"
                    + (
                        " (the text tool protocols 'invoke' and 'bracket' are not available "
                        "in this version)"
                        if value in ("invoke", "bracket")
                        else ""
                    )
                )
            self.tool_mode = value
        if "bridge_schema" in updated:
            value = opts.bridge_schema
            if value not in SCHEMA_PROFILES:
                raise _options_error(
                    f"bridge_schema must be one of {', '.join(SCHEMA_PROFILES)}, not {value!r}"
                )
            self.schema = value
        if "bridge_routes" in updated:
            path = opts.bridge_routes
            if not path:
                self.routes = DEFAULT_ROUTES
            else:
                try:
                    self.routes = load_routes(path)
                except RoutesError as e:
                    raise _options_error(str(e)) from e
                log.info("cursor-bridge: %d route(s) from %s", len(self.routes), path)

    # ------------------------------------------------------------------ request

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.error is not None or not flow.live:
            return
        req = flow.request
        route = match(self.routes, req.host, req.path, req.method)
        if route is None:
            return
        client, upstream = DIALECTS[route.client], DIALECTS[route.upstream]
        label = f"cursor-bridge [{route.name}]"
        try:
            original = req.get_content(strict=False) or b""
            body = json.loads(original)
            if not isinstance(body, dict):
                raise UnsupportedShape("the body is JSON but not an object")
        except (ValueError, UnsupportedShape) as e:
            self._passthrough(flow, route, f"request body is not a JSON object ({_short(e)})")
            return
        notes: Notes = Counter()
        try:
            unified = client.decode_request(body, notes)
            check_tools(unified)
            unified = sanitize_tool_schemas(unified, route.schema_profile or self.schema, notes)
            out = upstream.encode_request(unified, notes)
        except UnsupportedShape as e:
            self._passthrough(flow, route, f"request not understood ({_short(e)})")
            return
        except ClientError as e:
            self._reject(flow, route, client, e)
            return
        except Exception as e:  # a bug of ours must not cost the user the request
            log.debug("%s: internal error", label, exc_info=True)
            self._passthrough(flow, route, f"internal error {type(e).__name__}: {_short(e)}")
            return
        summary = describe(notes) or "no changes needed"
        req.content = json.dumps(out, ensure_ascii=False).encode()
        req.headers["accept-encoding"] = "identity"
        if route.upstream_path:
            query = req.path.partition("?")[2]
            req.path = route.upstream_path + (f"?{query}" if query else "")
        self._remember(flow.id, _FlowPlan(route, client, upstream, notes))
        self.state.count("requests rewritten")
        self.state.originals.put(flow.id, "request", original, summary)
        flow.comment = _append(flow.comment, f"{label}: {summary}")
        flow.metadata[META_KEY] = {
            "route": route.name,
            "action": "rewritten",
            "client": client.name,
            "upstream": upstream.name,
            "stream": unified.stream,
            "changes": dict(notes),
        }

    # ------------------------------------------------------------------ response

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        plan = self._plans.get(flow.id)
        resp = flow.response
        if plan is None or resp is None:
            return
        if not (200 <= resp.status_code < 300):
            return
        if not resp.headers.get("content-type", "").lower().startswith("text/event-stream"):
            return
        label = f"cursor-bridge [{plan.route.name}]"
        try:
            decompressor = make_decompressor(resp.headers.get("content-encoding"))
        except UnsupportedEncoding as e:
            log.warning("%s: stream passed through unchanged: %s", label, e)
            flow.comment = _append(flow.comment, f"{label}: stream not rewritten ({e})")
            resp.stream = True  # still stream it: SSE must never be buffered
            self._plans.pop(flow.id, None)
            return
        processor = StreamProcessor(
            plan.upstream.stream_decoder(), plan.client.stream_encoder(), decompressor=decompressor
        )
        plan.processor = processor
        if decompressor is not None:
            del resp.headers["content-encoding"]
            flow.comment = _append(flow.comment, "stream decompressed")
        resp.headers.pop("content-length", None)
        if flow.request.http_version.startswith("HTTP/1"):
            resp.headers["transfer-encoding"] = "chunked"
        resp.stream = _stream_callable(processor, label)

    def response(self, flow: http.HTTPFlow) -> None:
        plan = self._plans.pop(flow.id, None)
        resp = flow.response
        if plan is None or resp is None:
            return
        label = f"cursor-bridge [{plan.route.name}]"
        meta = flow.metadata.get(META_KEY)
        if plan.processor is not None:
            p = plan.processor
            if isinstance(meta, dict):
                meta["stream_events"] = p.events_in
                meta["stream_fallback"] = p.error
            if p.error:
                self.state.count("stream fallbacks")
                flow.comment = _append(flow.comment, f"stream passed through after: {p.error}")
            else:
                self.state.count("streams rewritten")
            return
        if not (200 <= resp.status_code < 300):
            return
        if not resp.headers.get("content-type", "").lower().startswith("application/json"):
            return
        try:
            body = json.loads(resp.get_content(strict=False) or b"")
            if not isinstance(body, dict):
                raise UnsupportedShape("the answer is JSON but not an object")
            out = plan.client.encode_response(plan.upstream.decode_response(body))
        except (ValueError, UnsupportedShape) as e:
            log.info("%s: answer passed through unchanged: %s", label, _short(e))
            flow.comment = _append(flow.comment, f"answer not rewritten ({_short(e)})")
            return
        except Exception as e:  # a rewrite bug must not cost the user the answer
            log.exception("%s: answer passed through after an internal error", label)
            flow.comment = _append(flow.comment, f"answer not rewritten (internal error: {e})")
            return
        self.state.originals.put(
            flow.id,
            "response",
            resp.get_content(strict=False) or b"",
            "answer re-encoded for the client",
        )
        resp.content = json.dumps(out, ensure_ascii=False).encode()
        self.state.count("answers rewritten")

    def error(self, flow: http.HTTPFlow) -> None:
        self._plans.pop(flow.id, None)

    def done(self) -> None:
        if self.state.counters:
            log.info("cursor-bridge: %s", self.state.summary())

    # ------------------------------------------------------------------ helpers

    def _reject(self, flow: http.HTTPFlow, route: Route, client: Dialect, e: ClientError) -> None:
        """Answer a client mistake ourselves, in the client's dialect; the upstream is not called."""
        label = f"cursor-bridge [{route.name}]"
        req = flow.request
        self.state.count("rejected")
        log.warning("%s: %s %s → %d: %s", label, req.method, req.path, e.status, e.message)
        flow.response = http.Response.make(
            e.status,
            json.dumps(client.encode_error(e), ensure_ascii=False),
            {"content-type": "application/json"},
        )
        flow.comment = _append(flow.comment, f"{label}: answered {e.status}: {e.message}")
        flow.metadata[META_KEY] = {
            "route": route.name,
            "action": "rejected",
            "error": e.message,
        }

    def _passthrough(self, flow: http.HTTPFlow, route: Route, why: str) -> None:
        self.state.count("passed through")
        log.info(
            "cursor-bridge [%s]: %s %s passed through: %s",
            route.name,
            flow.request.method,
            flow.request.path,
            why,
        )
        flow.comment = _append(flow.comment, f"cursor-bridge [{route.name}]: passed through: {why}")
        flow.metadata[META_KEY] = {"route": route.name, "action": "passthrough", "reason": why}

    def _remember(self, flow_id: str, plan: _FlowPlan) -> None:
        self._plans[flow_id] = plan
        while len(self._plans) > MAX_TRACKED_FLOWS:
            self._plans.popitem(last=False)


def _stream_callable(processor: StreamProcessor, label: str) -> Callable[[bytes], Sequence[bytes]]:
    """The ``flow.response.stream`` callable: ``b""`` ends the body, anything else is fed."""
    reported = False

    def stream(data: bytes) -> Sequence[bytes]:
        nonlocal reported
        try:
            out = processor.finish() if data == b"" else processor.feed(data)
        except Exception:
            # A bug in the processor itself: never eat the user's stream.
            log.exception("%s: stream rewrite failed; passing the rest through", label)
            processor.passthrough = True
            processor.error = processor.error or "internal error"
            reported = True
            return [data] if data else []
        if processor.error and not reported:
            reported = True
            log.warning("%s: stream passed through from here on: %s", label, processor.error)
        return out

    return stream


def _options_error(message: str) -> exceptions.OptionsError:
    return exceptions.OptionsError(message)  # type: ignore[no-untyped-call]


def _append(comment: str, line: str) -> str:
    return f"{comment}\n{line}" if comment else line


def _short(e: BaseException) -> str:
    text = str(e)
    return text if len(text) <= 200 else text[:197] + "..."
