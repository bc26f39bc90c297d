"""The mitmproxy shell: the only modules (with ``main`` and ``contentview``) that import mitmproxy.

Hooks only apply what the sans-IO layers decide:

- ``request``: match a route; decode the body with the client dialect, run the
  transforms (tool checks, schema profile, ``-thinking`` models, text tool
  protocol), encode for the upstream and set the body; or answer a client
  mistake with a 400 in the client's dialect; or leave a body we cannot read
  untouched. ``GET …/models`` is marked for the model catalogue.
- ``responseheaders``: a 2xx SSE answer gets a ``StreamProcessor`` behind
  ``flow.response.stream``; anything else is buffered.
- ``response``: a buffered JSON answer is decoded, parsed for text tool calls
  when the route uses a text protocol, re-encoded whole; a required tool call
  that did not come is retried once (httpx); model lists are merged.
- ``error``: the flow's state is freed.

Problems met while handling a flow are logged, one line each, never raised.
Headers are never logged and never copied into ``flow.metadata``: they carry
the user's API keys.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from mitmproxy import contentviews, ctx, exceptions, http

from addon.config import OPTIONS, ConfigError, Settings, parse_settings
from addon.contentview import BridgeContentview
from addon.dialects import DIALECTS, Dialect
from addon.dialects.base import describe
from addon.model import ClientError, Notes, Request, Response, Thinking, ToolCall, UnsupportedShape
from addon.routes import Route, match
from addon.state import BridgeState
from addon.stream.decompress import UnsupportedEncoding, make_decompressor
from addon.stream.processor import Stage, StreamProcessor
from addon.stream.stages import HideThinkingStage, TextToolStage
from addon.stream.whole import sse_from_response
from addon.textproto.invoke import make_trigger
from addon.textproto.parser import Protocol, TextProtocolParser
from addon.transforms.text_tools import TextToolSettings, apply_text_tools, parse_text_tools
from addon.transforms.thinking import apply_thinking_prompt, catalogue_models, resolve_model
from addon.transforms.tokens import estimate_input_tokens
from addon.transforms.tools import check_tools, sanitize_tool_schemas

log = logging.getLogger("cursor_bridge")

META_KEY = "cursor_bridge"
"""``flow.metadata`` key holding what the bridge did (plain JSON data, no secrets)."""
MAX_TRACKED_FLOWS = 10_000
"""Flows whose answer is still awaited; the oldest are forgotten past this (a leak guard)."""
RETRY_TIMEOUT = httpx.Timeout(300.0, connect=15.0)
_HOP_BY_HOP = frozenset(
    {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
     "proxy-connection", "proxy-authorization", "trailer"}
)  # fmt: skip


@dataclass(slots=True)
class _FlowPlan:
    """What ``request`` decided, kept until the answer has been rewritten."""

    route: Route
    client: Dialect
    upstream: Dialect
    notes: Notes = field(default_factory=Counter)
    protocol: Protocol | None = None
    trigger: str | None = None
    tools: tuple[str, ...] = ()
    parse_text: bool = False
    """Parse the answer's text for tool calls and/or thinking tags."""
    tool_required: bool = False
    hide_thinking: bool = False
    stream: bool = False
    """The client asked for a stream."""
    processor: StreamProcessor | None = None
    parser: TextProtocolParser | None = None

    def new_parser(self) -> TextProtocolParser:
        self.parser = TextProtocolParser(self.protocol, trigger=self.trigger, tools=self.tools)
        return self.parser


class Bridge:
    name = "cursor_bridge"

    def __init__(self) -> None:
        self.settings = Settings()
        self.state = BridgeState()
        self._plans: OrderedDict[str, _FlowPlan] = OrderedDict()
        self._model_flows: set[str] = set()
        self._count_flows: dict[str, int] = {}
        self._http: httpx.AsyncClient | None = None

    # ------------------------------------------------------------------ options

    def load(self, loader: Any) -> None:
        contentviews.add(BridgeContentview(self.state.originals))
        for spec in OPTIONS:
            loader.add_option(
                name=spec.name,
                typespec=spec.typespec,
                default=spec.default,
                help=spec.help,
                choices=list(spec.choices) if spec.choices else None,
            )

    def configure(self, updated: set[str]) -> None:
        if not any(name.startswith("bridge_") for name in updated):
            return
        try:
            self.settings = parse_settings(lambda name: getattr(ctx.options, name))
        except ConfigError as e:
            raise _options_error(str(e)) from e
        if "bridge_routes" in updated and ctx.options.bridge_routes:
            log.info(
                "cursor-bridge: %d route(s) from %s",
                len(self.settings.routes),
                ctx.options.bridge_routes,
            )

    # ------------------------------------------------------------------ request

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.error is not None or not flow.live:
            return
        req = flow.request
        path = req.path.split("?", 1)[0]
        if self.settings.models and req.method == "GET" and path.endswith("/models"):
            self._model_flows.add(flow.id)
            return
        if req.method == "POST" and path.endswith("/messages/count_tokens"):
            self._count_tokens_request(flow)
            return
        route = match(self.settings.routes, req.host, req.path, req.method)
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
        if client.name != upstream.name:
            notes[f"request {client.name} → {upstream.name}"] += 1
        plan = _FlowPlan(route, client, upstream, notes)
        try:
            unified = self._transform(client.decode_request(body, notes), plan)
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
        query = req.path.partition("?")[2]
        if route.upstream_path:
            req.path = route.upstream_path + (f"?{query}" if query else "")
        elif client.path != upstream.path and path.endswith(client.path):
            # e.g. /v1/messages → /v1/chat/completions
            req.path = path[: -len(client.path)] + upstream.path + (f"?{query}" if query else "")
        plan.stream = unified.stream
        self._remember(flow.id, plan)
        self.state.count("requests rewritten")
        self.state.originals.put(flow.id, "request", original, summary)
        flow.comment = _append(flow.comment, f"{label}: {summary}")
        meta: dict[str, Any] = {
            "route": route.name,
            "action": "rewritten",
            "client": client.name,
            "upstream": upstream.name,
            "stream": unified.stream,
            "changes": dict(notes),
        }
        if plan.protocol:
            meta["tool_protocol"] = plan.protocol
            if plan.trigger:
                meta["trigger"] = plan.trigger
        flow.metadata[META_KEY] = meta

    def _transform(self, req: Request, plan: _FlowPlan) -> Request:
        """The route's transforms, in order; decisions go to ``plan``."""
        s, notes = self.settings, plan.notes
        model, thinking = resolve_model(req.model, s.models)
        if thinking:
            notes[f"{req.model} → {model} with thinking"] += 1
            req = dataclasses.replace(req, model=model)
        check_tools(req)
        req = sanitize_tool_schemas(req, plan.route.schema_profile or s.schema, notes)
        mode = plan.route.tool_mode or s.tool_mode
        tools = [t.name for t in req.tools or () if t.name]
        choice = req.tool_choice
        if mode != "native":
            plan.protocol = mode
            plan.trigger = make_trigger() if mode == "invoke" else None
            plan.tools = tuple(tools)
            plan.parse_text = True
            plan.tool_required = bool(tools) and (
                (choice is not None and choice.mode in ("required", "tool"))
                or (s.tool_strict and (choice is None or choice.mode != "none"))
            )
            settings = TextToolSettings(mode, plan.trigger, s.desc_limit, s.param_limit)
            req = apply_text_tools(req, settings, notes)
        # Thinking asked for by name (BASE-thinking), or by an Anthropic client, on an upstream
        # that only has text: ask for <thinking> tags and parse them.
        asked = req.thinking is not None and req.thinking.enabled and mode != "native"
        if thinking or asked:
            plan.parse_text = True
            req = apply_thinking_prompt(req, notes)
        plan.hide_thinking = s.thinking_output == "hidden"
        return req

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
        stages: list[Stage] = []
        if plan.parse_text:
            stages.append(TextToolStage(plan.new_parser()))
        if plan.hide_thinking:
            stages.append(HideThinkingStage())
        processor = StreamProcessor(
            plan.upstream.stream_decoder(),
            plan.client.stream_encoder(),
            stages=stages,
            decompressor=decompressor,
        )
        plan.processor = processor
        if decompressor is not None:
            del resp.headers["content-encoding"]
            flow.comment = _append(flow.comment, "stream decompressed")
        resp.headers.pop("content-length", None)
        if flow.request.http_version.startswith("HTTP/1"):
            resp.headers["transfer-encoding"] = "chunked"
        resp.stream = _stream_callable(processor, label)

    async def response(self, flow: http.HTTPFlow) -> None:
        if flow.id in self._model_flows:
            self._model_flows.discard(flow.id)
            self._merge_models(flow)
            return
        if flow.id in self._count_flows:
            self._count_tokens_response(flow, self._count_flows.pop(flow.id))
            return
        plan = self._plans.pop(flow.id, None)
        resp = flow.response
        if plan is None or resp is None:
            return
        if plan.processor is not None:
            self._stream_done(flow, plan)
            return
        label = f"cursor-bridge [{plan.route.name}]"
        if not (200 <= resp.status_code < 300):
            if plan.client.name != plan.upstream.name:
                self._translate_error(flow, plan, label)
            return
        if not _is_json(resp):
            return
        try:
            answer = self._decode_answer(resp.get_content(strict=False) or b"", plan)
            if plan.tool_required and not any(isinstance(p, ToolCall) for p in answer.parts):
                retried = await self._retry(flow, plan, label)
                if retried is not None:
                    answer = retried
            if plan.stream:
                # The client asked for a stream and the upstream answered whole: stream it.
                body = sse_from_response(answer, plan.client.stream_encoder())
            else:
                body = json.dumps(plan.client.encode_response(answer), ensure_ascii=False).encode()
        except (ValueError, UnsupportedShape) as e:
            log.info("%s: answer passed through unchanged: %s", label, _short(e))
            flow.comment = _append(flow.comment, f"answer not rewritten ({_short(e)})")
            return
        except Exception as e:  # a rewrite bug must not cost the user the answer
            log.exception("%s: answer passed through after an internal error", label)
            flow.comment = _append(flow.comment, f"answer not rewritten (internal error: {e})")
            return
        if plan.parser is not None and plan.parser.calls:
            flow.comment = _append(
                flow.comment, f"{plan.parser.calls} text tool calls → tool_calls"
            )
        self._log_rejected(plan, label)
        self.state.originals.put(
            flow.id, "response", resp.get_content(strict=False) or b"", "answer re-encoded"
        )
        if plan.stream:
            resp.headers["content-type"] = "text/event-stream; charset=utf-8"
            flow.comment = _append(
                flow.comment, "whole answer sent as a stream (client asked for one)"
            )
        resp.content = body
        self.state.count("answers rewritten")

    def _decode_answer(self, raw: bytes, plan: _FlowPlan) -> Response:
        """A whole upstream answer → unified, parsed and filtered as the route says."""
        body = json.loads(raw or b"")
        if not isinstance(body, dict):
            raise UnsupportedShape("the answer is JSON but not an object")
        answer = plan.upstream.decode_response(body)
        if plan.parse_text:
            answer = parse_text_tools(answer, plan.new_parser())
        if plan.hide_thinking:
            answer = dataclasses.replace(
                answer, parts=tuple(p for p in answer.parts if not isinstance(p, Thinking))
            )
        return answer

    async def _retry(self, flow: http.HTTPFlow, plan: _FlowPlan, label: str) -> Response | None:
        """Ask the upstream once more when a required tool call did not come."""
        req = flow.request
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in req.headers.fields
            if k.decode("latin-1").lower() not in _HOP_BY_HOP
        ]
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=RETRY_TIMEOUT, verify=not _ssl_insecure())
        try:
            answer = await self._http.request(
                req.method, req.url, headers=headers, content=req.content
            )
        except httpx.HTTPError as e:
            log.warning("%s: retry for a required tool call failed: %s", label, _short(e))
            flow.comment = _append(flow.comment, f"retry failed ({type(e).__name__})")
            return None
        if not (200 <= answer.status_code < 300):
            log.warning("%s: retry for a required tool call got HTTP %d", label, answer.status_code)
            flow.comment = _append(flow.comment, f"retry got HTTP {answer.status_code}")
            return None
        try:
            retried = self._decode_answer(answer.content, plan)
        except (ValueError, UnsupportedShape) as e:
            log.warning("%s: retry answer not understood: %s", label, _short(e))
            return None
        self.state.count("required-tool retries")
        made = any(isinstance(p, ToolCall) for p in retried.parts)
        flow.comment = _append(
            flow.comment,
            "no tool call although one was required: retried once"
            + (" → got one" if made else " → still none"),
        )
        return retried

    def _stream_done(self, flow: http.HTTPFlow, plan: _FlowPlan) -> None:
        p = plan.processor
        assert p is not None
        label = f"cursor-bridge [{plan.route.name}]"
        meta = flow.metadata.get(META_KEY)
        if isinstance(meta, dict):
            meta["stream_events"] = p.events_in
            meta["stream_fallback"] = p.error
            if plan.parser is not None:
                meta["text_tool_calls"] = plan.parser.calls
        if plan.parser is not None and plan.parser.calls:
            flow.comment = _append(
                flow.comment, f"{plan.parser.calls} text tool calls → tool_calls"
            )
        self._log_rejected(plan, label)
        if p.error:
            self.state.count("stream fallbacks")
            flow.comment = _append(flow.comment, f"stream passed through after: {p.error}")
        else:
            self.state.count("streams rewritten")

    def _log_rejected(self, plan: _FlowPlan, label: str) -> None:
        if plan.parser is not None and plan.parser.rejected:
            log.info(
                "%s: %d would-be tool call(s) kept as text: %s",
                label,
                len(plan.parser.rejected),
                "; ".join(plan.parser.rejected[:3]),
            )

    def _translate_error(self, flow: http.HTTPFlow, plan: _FlowPlan, label: str) -> None:
        """An upstream error, re-shaped for a client of another dialect (status kept)."""
        resp = flow.response
        assert resp is not None
        raw = resp.get_content(strict=False) or b""
        try:
            message = plan.upstream.error_message(json.loads(raw))
        except ValueError:
            message = None
        if not message:
            text = raw.decode("utf-8", "replace").strip()
            message = f"upstream answered HTTP {resp.status_code}" + (
                f": {text[:500]}" if text else ""
            )
        out = plan.client.encode_error(ClientError(message, status=resp.status_code))
        resp.content = json.dumps(out, ensure_ascii=False).encode()
        resp.headers["content-type"] = "application/json"
        flow.comment = _append(
            flow.comment, f"upstream error {resp.status_code} → {plan.client.name} shape"
        )
        log.info(
            "%s: upstream answered HTTP %d: %s",
            label,
            resp.status_code,
            _short(ValueError(message)),
        )

    def _count_tokens_request(self, flow: http.HTTPFlow) -> None:
        try:
            body = json.loads(flow.request.get_content(strict=False) or b"")
        except ValueError:
            return  # not ours to judge: the upstream answers
        self._count_flows[flow.id] = estimate_input_tokens(body)

    def _count_tokens_response(self, flow: http.HTTPFlow, estimate: int) -> None:
        """``count_tokens``: the upstream's answer when it has one, otherwise an estimate."""
        resp = flow.response
        if resp is None:
            return
        if 200 <= resp.status_code < 300 and _is_json(resp):
            try:
                body = json.loads(resp.get_content(strict=False) or b"")
                if isinstance(body, dict) and isinstance(body.get("input_tokens"), int):
                    return
            except ValueError:
                pass
        flow.response = http.Response.make(
            200, json.dumps({"input_tokens": estimate}), {"content-type": "application/json"}
        )
        flow.comment = _append(
            flow.comment,
            f"cursor-bridge: count_tokens estimated ({estimate}; upstream answered "
            f"HTTP {resp.status_code})",
        )
        self.state.count("token counts estimated")

    def _merge_models(self, flow: http.HTTPFlow) -> None:
        """``GET …/models``: add the catalogue (and -thinking variants) to the upstream's list."""
        resp = flow.response
        if resp is None:
            return
        ours = catalogue_models(self.settings.models)
        listed: list[Any] = []
        if 200 <= resp.status_code < 300 and _is_json(resp):
            try:
                body = json.loads(resp.get_content(strict=False) or b"")
                if isinstance(body, dict) and isinstance(body.get("data"), list):
                    listed = body["data"]
            except ValueError:
                listed = []
        known = {m.get("id") for m in listed if isinstance(m, dict)}
        added = [
            {"id": m, "object": "model", "created": 0, "owned_by": "cursor-bridge"}
            for m in ours
            if m not in known
        ]
        how = "merged with the upstream's" if listed else "answered by cursor-bridge"
        if not listed and resp.status_code >= 300:
            how += f" (upstream said HTTP {resp.status_code})"
        flow.response = http.Response.make(
            200,
            json.dumps({"object": "list", "data": [*listed, *added]}, ensure_ascii=False),
            {"content-type": "application/json"},
        )
        flow.comment = _append(flow.comment, f"cursor-bridge: {len(added)} models {how}")

    def error(self, flow: http.HTTPFlow) -> None:
        self._plans.pop(flow.id, None)
        self._model_flows.discard(flow.id)
        self._count_flows.pop(flow.id, None)

    async def done(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
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
        flow.metadata[META_KEY] = {"route": route.name, "action": "rejected", "error": e.message}

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


def _is_json(resp: http.Response) -> bool:
    ctype = resp.headers.get("content-type", "").lower()
    return ctype.startswith("application/json") or "+json" in ctype


def _ssl_insecure() -> bool:
    try:
        return bool(ctx.options.ssl_insecure)
    except (AttributeError, KeyError):
        return False


def _options_error(message: str) -> exceptions.OptionsError:
    return exceptions.OptionsError(message)  # type: ignore[no-untyped-call]


def _append(comment: str, line: str) -> str:
    return f"{comment}\n{line}" if comment else line


def _short(e: BaseException) -> str:
    text = str(e)
    return text if len(text) <= 200 else text[:197] + "..."
