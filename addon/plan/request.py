"""The request side: ``decide(settings, route, incoming, env)`` returns one decision
(``addon.plan.decision``); ``transform`` runs the route's transforms, in order, and returns
the plan with what they decided (``FlowPlan`` is frozen: each decision is a new one). A body the bridge cannot read or cannot write strictly is passed
on untouched on a same-dialect route, answered with an error in the client's dialect
otherwise (``_not_understood``); an exception nobody expected becomes the same kind of
decision (``internal_error``)."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from addon.config.options import Settings
from addon.config.routes import Route, match, withholds_key
from addon.dialects import DIALECTS, Dialect
from addon.dialects.base import RouteFacts, WireRequest, describe
from addon.jsonio import same
from addon.model import (
    JSON,
    AnswerDefaults,
    ClientError,
    Notes,
    OpaqueTool,
    Request,
    ToolMode,
    UnsupportedShape,
    new_nonce,
)
from addon.plan.caching import Seeds, cache_policy, secret_of, with_cache_key
from addon.plan.conditions import Decoded, RequestView
from addon.plan.decision import Decision, Pass, Reject, Rewrite
from addon.plan.flow_plan import FlowPlan
from addon.plan.images import Captions, foreign_files, see_images
from addon.plan.values import (
    SHAPE_ERRORS,
    Incoming,
    RouteCredentials,
    dump,
    error_bytes,
    load_json,
    short,
)
from addon.plan.web_search import offer_search
from addon.plan.wire_request import KEY_PARAMETERS, RouteKey, build_wire, credentials
from addon.redact import Secrets
from addon.stores.reasoning import Scope, StoreView
from addon.textproto.invoke import make_trigger
from addon.transforms.cache import place_breakpoints, strip_cache_control
from addon.transforms.call_ids import history_call_ids
from addon.transforms.client_noise import noise_for, strip_client_noise
from addon.transforms.conversation import conversation_of
from addon.transforms.custom_tools import wrap_custom_tools
from addon.transforms.loop_guard import check_loop
from addon.transforms.repair import schemas_of
from addon.transforms.restore import restore_request
from addon.transforms.text_tools import TextToolSettings, apply_text_tools
from addon.transforms.thinking import apply_thinking_prompt, resolve_model
from addon.transforms.tools import check_tools, leave_out_tools, sanitize_tool_schemas

clock: Callable[[], float] = time.time
"""The time a client's answer says it was made, where the upstream's does not say
(``AnswerDefaults``); tests that compare the bytes of two answers pin it."""


def route_for(
    settings: Settings, method: str, host: str, path: str, body: bytes | RequestView = b""
) -> Route | None:
    """The first route that matches, or None: the flow is not the bridge's. A route's
    ``model`` globs and ``when`` conditions are asked of the body (a ``RequestView``: read
    once per client dialect, and only when a route that fits otherwise has them; give the
    same view to ``decide`` and it reuses the decode)."""
    view = body if isinstance(body, RequestView) else RequestView(body, path)
    return match(settings.routes, host, path, method, view.model, view.facts)


def decide(
    settings: Settings,
    route: Route,
    incoming: Incoming,
    env: Mapping[str, str],
    creds: RouteCredentials | None = None,
    store: StoreView | None = None,
    secrets: Secrets | None = None,
    view: RequestView | None = None,
    captions: Captions | None = None,
) -> Decision:
    """Decode, transform and encode one routed request (see the module docstring). ``creds``:
    what the shell read for the route (a Kiro token file), sent instead of any other key;
    ``store``: the reasoning store (restores what the client dropped; captures the answer);
    ``view``: the one ``route_for`` read (its body is ``incoming.body``): a decode it made
    for the route's ``when`` is not made again; ``captions``: what the request hook got for
    its images (``addon.plan.images``). A request passed on untouched still goes to
    the route's ``upstream_url`` (``Pass.wire``)."""
    d = _decide(settings, route, incoming, env, creds, store, secrets, view, captions)
    keyed = route.target is not None or route.api_key_env or creds is not None
    if isinstance(d, Pass) and d.reason is not None and keyed:
        return replace(d, wire=passed_on(route, incoming, env, creds))
    return d


def passed_on(
    route: Route, incoming: Incoming, env: Mapping[str, str], creds: RouteCredentials | None
) -> WireRequest | None:
    """Where an untouched request of a route with an ``upstream_url`` or a key of its own
    goes: that origin (else where the client sent it), the prefix before the client's path,
    its query, and the key rules of ``build_wire`` (the route's own key in the client
    dialect's header, never the client's; none to another host unless ``client_key``)."""
    target = route.target
    client = DIALECTS[route.client]
    withhold = withholds_key(route, incoming.host, incoming.port)
    try:
        route_key = _route_key(route, env, creds)
    except ClientError:  # its variable is gone: no key at all rather than the client's
        route_key, withhold = None, True
    notes: Notes = Counter()
    set_headers, drop = credentials(
        client, client, incoming.headers, route_key, notes, incoming.query, withhold
    )
    query = incoming.query
    if withhold or route_key is not None:
        query = tuple((k, v) for k, v in query if k.lower() not in KEY_PARAMETERS)
    if target is None:
        return WireRequest({}, incoming.bare_path, query, set_headers, drop)
    origin = (target.scheme, target.host, target.port)
    path = target.join(incoming.bare_path)
    return WireRequest({}, path, query, set_headers, drop, origin=origin)


def _decide(
    settings: Settings,
    route: Route,
    incoming: Incoming,
    env: Mapping[str, str],
    creds: RouteCredentials | None = None,
    store: StoreView | None = None,
    secrets: Secrets | None = None,
    view: RequestView | None = None,
    captions: Captions | None = None,
) -> Decision:
    client, upstream = DIALECTS[route.client], DIALECTS[route.upstream]
    target = route.target
    plan = FlowPlan(
        route,
        client,
        upstream,
        max_event_bytes=settings.max_event_bytes,
        fast_path=settings.fast_path,
        host=incoming.host if target is None else target.host,
        store=store,
        secrets=secrets or Secrets(),
        profile_arn=creds.profile_arn if creds is not None else None,
    )
    made = view.decoded(route.client, read=False) if view is not None else None
    try:
        body = view.json() if made is not None and view is not None else load_json(incoming.body)
        if not isinstance(body, dict):
            raise UnsupportedShape("the body is JSON but not an object")
    except (ValueError, UnsupportedShape) as e:
        return _not_understood(plan, f"request body is not a JSON object ({short(e)})")
    except RecursionError:
        return _not_understood(plan, "request body is nested too deeply")
    notes: Notes = Counter()
    # First, on every route: the comment's first line names both dialects.
    notes[f"request {client.name} → {upstream.name}"] += 1
    try:
        route_key = _route_key(route, env, creds)
    except ClientError as e:
        return _reject(plan, e)
    try:
        decoded = _decode(client, body, made, incoming, notes)
        decoded = see_images(route, decoded, captions or {}, notes, settings.routes)
        foreign_files(decoded, route, client.name)
        plan = replace(
            plan,
            defaults=AnswerDefaults(decoded.model, int(clock()), new_nonce()),
            history_ids=history_call_ids(decoded.messages),
        )
        unified, plan = transform(decoded, plan, settings, notes)
        wire_for = _wire_maker(route, client, upstream, incoming, route_key)
        wire = wire_for(unified, notes)
        unified, plan, wire = _live_search(unified, plan, wire, wire_for)
        invoke = _invoke_maker(decoded, settings, wire_for) if plan.loop_fallback else None
        plan = replace(
            plan,
            unified=unified,
            encode_stage=lambda req: dump(wire_for(req, Counter()).body),
            encode_invoke=invoke,
        )
        if plan.same_dialect and decoded.origin == upstream.name:
            _keep_explicit_empties(body, wire.body)
        as_sent = (
            plan.same_dialect
            and decoded.origin == upstream.name
            and unchanged(incoming.body, body, wire.body)
        )
        encoded = incoming.body if as_sent else dump(wire.body)
    except (UnsupportedShape, ClientError, RecursionError, ValueError, *SHAPE_ERRORS) as e:
        return _refused(plan, e)
    summary = describe(notes) or "no changes needed"
    plan = replace(
        plan,
        # A search not live asks for whole answers; the client gets the stream it asked.
        stream=decoded.stream if plan.search is not None else unified.stream,
        upstream_framing=upstream.framing_for(wire.query),
        client_framing=client.framing_for(incoming.query),
        request_notes=Counter(notes),
    )
    return Rewrite(plan, wire, summary, incoming.body, encoded)


def _live_search(
    unified: Request,
    plan: FlowPlan,
    wire: WireRequest,
    wire_for: Callable[[Request, Notes], WireRequest],
) -> tuple[Request, FlowPlan, WireRequest]:
    """A web search runs live only on an SSE stream, which carries the relay's leg's marker
    (Kiro's frames cannot): elsewhere its upstream calls are whole (``WebSearch.live``)."""
    search = plan.search
    if search is None or not search.live or plan.upstream.framing_for(wire.query) == "sse":
        return unified, plan, wire
    unified = dataclasses.replace(unified, stream=False)
    plan = replace(plan, search=replace(search, live=False, nonce=""))
    return unified, plan, wire_for(unified, Counter())


def _decode(
    client: Dialect, body: JSON, made: Decoded | None, incoming: Incoming, notes: Notes
) -> Request:
    """The client's request, unified: the decode routing made (``made``, its notes too), else
    one now; then what the client's path says (``Dialect.from_path``)."""
    if made is not None:
        notes.update(made.notes)
        decoded = made.request
    else:
        decoded = client.decode_request(body, notes)
    if client.from_path is not None:
        decoded = dataclasses.replace(
            decoded, **client.from_path(incoming.bare_path, incoming.query)
        )
    return decoded


def _invoke_maker(
    decoded: Request, settings: Settings, wire_for: Callable[[Request, Notes], WireRequest]
) -> Callable[[FlowPlan, Notes], tuple[FlowPlan, bytes]]:
    """The loop guard's second request, made later from the same client request: the
    route's transforms again with the invoke text protocol, on the first plan (no store:
    it keeps native answers only; no third request)."""

    def invoke(first: FlowPlan, notes: Notes) -> tuple[FlowPlan, bytes]:
        base = dataclasses.replace(first, sink=None, encode_invoke=None)
        req, second = transform(decoded, base, settings, notes, "invoke")
        return second, dump(wire_for(req, notes).body)

    return invoke


def _wire_maker(
    route: Route,
    client: Dialect,
    upstream: Dialect,
    incoming: Incoming,
    route_key: RouteKey | None,
) -> Callable[[Request, Notes], WireRequest]:
    """The upstream request for a unified one (also for a staged retry or the loop guard's
    second request, made later from the same client request)."""

    target = route.target
    withhold = withholds_key(route, incoming.host, incoming.port)

    def wire_for(req: Request, notes: Notes) -> WireRequest:
        wire = build_wire(
            req,
            client,
            upstream,
            path=incoming.bare_path,
            query=incoming.query,
            headers=incoming.headers,
            notes=notes,
            upstream_path=route.upstream_path,
            route_key=route_key,
            project=route.project,
            withhold_key=withhold,
        )
        if target is None:
            return wire
        return replace(
            wire,
            path=target.join(wire.path),
            origin=(target.scheme, target.host, target.port),
        )

    return wire_for


def _route_key(
    route: Route, env: Mapping[str, str], creds: RouteCredentials | None
) -> RouteKey | None:
    """The key sent upstream instead of the client's, with the note that names where it came
    from: the token file's, else the one in the route's environment variable (a key pool's:
    its name). ``ClientError`` (500) when that variable is not set."""
    if creds is not None:
        return RouteKey(creds.key, "Kiro token from the route's token file")
    name = route.key_env  # a key pool's link: its one key
    if name is None:
        return None
    key = env.get(name) or None
    if key is None:
        raise ClientError(
            f"the bridge's route '{route.name}' takes its API key from the environment "
            f"variable {name}, which is not set",
            status=500,
            code="bridge_configuration",
        )
    if route.key_pool:
        return RouteKey(key, f"API key from {name} (the route's key pool)")  # a name
    return RouteKey(key)


def _refused(plan: FlowPlan, e: Exception) -> Pass | Reject:
    """What a request the bridge could not read or write becomes (``decide``)."""
    if isinstance(e, UnsupportedShape):
        return _not_understood(plan, f"request not understood ({short(e)})")
    if isinstance(e, ClientError):
        return _reject(plan, e)
    if isinstance(e, RecursionError):
        return _not_understood(plan, "request body is nested too deeply")
    if isinstance(e, SHAPE_ERRORS):  # a codec met a value of a type it did not foresee
        return _not_understood(
            plan, f"request not understood (unexpected shape: {type(e).__name__}: {short(e)})"
        )
    # dump: a value JSON has no room for
    return _not_understood(plan, f"request cannot be written as strict JSON ({short(e)})")


def internal_error(route: Route, e: BaseException) -> Pass | Reject:
    """What the client gets when the bridge itself failed on its request (a bug): the request
    untouched on a same-dialect route, else a 500 in the client's dialect. Never raises."""
    plan = FlowPlan(route, DIALECTS[route.client], DIALECTS[route.upstream])
    why = f"internal error ({type(e).__name__}: {short(e)})"
    if plan.same_dialect:
        return Pass(route, why)
    return _reject(
        plan,
        ClientError(
            f"cursor-bridge failed on this {plan.client.name} request: {why}",
            status=500,
            code="bridge_internal_error",
        ),
    )


_EMPTY: tuple[Any, ...] = (None, False, "", [], {})


SAME_MIN_BYTES = 16 * 1024
"""A same-dialect body this large or larger is looked at for being unchanged (``unchanged``)…"""
SAME_BYTES_PER_VALUE = 256
"""…within a budget of one container or value (not shared by both) per this many bytes."""


def unchanged(raw: bytes, original: JSON, body: JSON) -> bool:
    """Whether ``body``, what the codecs wrote for the upstream, is the client's ``original``
    again (``jsonio.same``): then its bytes ``raw`` go upstream as the client sent them, and
    the body is not written anew (for a 10 MB body, a third of the bridge's time). A small
    body is not compared (that costs about what writing it does), nor one with a byte order
    mark (the upstream gets none)."""
    if len(raw) < SAME_MIN_BYTES or raw.startswith(b"\xef\xbb\xbf"):
        return False
    return same(original, body, len(raw) // SAME_BYTES_PER_VALUE)


def _keep_explicit_empties(original: JSON, body: JSON) -> None:
    """Top-level fields the client set to an explicit nothing (``"stream": false``,
    ``"tool_choice": null``, ``"system": ""``, ``"stop_sequences": []`` …) that the codec
    left out: the upstream gets them as sent. Only for a same-dialect route whose body was
    decoded as that dialect (a Cursor Responses-shaped body on /chat/completions is not)."""
    for key, value in original.items():
        if key not in body and any(value == e and type(value) is type(e) for e in _EMPTY):
            body[key] = value


def transform(
    req: Request, plan: FlowPlan, s: Settings, notes: Notes, mode: ToolMode | None = None
) -> tuple[Request, FlowPlan]:
    """The route's transforms, in order: the request for the upstream and the plan with what
    they decided; what they did goes to ``notes``. ``mode``: a tool mode instead of the
    route's (the loop guard's second request)."""
    route, upstream = plan.route, plan.upstream
    # Named from the client's request as it came, before any transform adds to it.
    seeds = Seeds(secret_of(plan.store), conversation_of(req))
    req, plan, thinking, mapped = _model_names(req, plan, s, notes)
    check_tools(req)
    if (route.tool_repair or s.tool_repair) == "on":
        plan = replace(plan, schemas=schemas_of(req))  # the client's own, before any profile
    mode = mode or route.tool_mode or s.tool_mode
    # The loop guard reads the history while it is still structured (before a text protocol);
    # the answer is judged against its verdict.
    verdict = check_loop(req, s.loop_max_repeat)
    if verdict is not None and plan.loop is None:
        notes[verdict.note] += 1
    plan = replace(
        plan,
        loop=verdict,
        loop_fallback=verdict is not None and s.loop_fallback and mode == "native",
    )
    req, plan = _web_search(req, plan, notes)
    if mode == "native":
        req = leave_out_tools(req, upstream.runs, f"the {upstream.name} upstream", notes)
    else:
        req = leave_out_tools(req, _runs_nothing, f"the {mode} text protocol", notes)
    req = _client_only(req, plan, notes)
    cache = cache_policy(route.cache_control, req.origin, upstream)
    if cache == "drop":
        req = strip_cache_control(req, notes)
    req = with_cache_key(req, plan, seeds, notes)
    if route.reasoning == "off" and req.thinking is not None and not thinking:
        notes["reasoning request not sent (route: reasoning = off)"] += 1
        req = dataclasses.replace(req, thinking=None)
    if mode == "native" and upstream.reasoning_switch:
        # What the client dropped comes back from the store (scoped to this upstream and the
        # model as sent); the signature rules and the thinking policy apply.
        if plan.store is not None:
            plan = replace(plan, sink=plan.store.scoped(Scope.of(route.name, plan.host, req.model)))
        origin = DIALECTS.get(req.origin)
        req = restore_request(
            req,
            plan.sink,
            upstream.reasoning,
            notes,
            signature_fallback=route.signature_fallback,
            origin=origin.reasoning if origin is not None else "none",
            thinking_budget=s.thinking_budget,
            default_thinking=route.reasoning != "off" and not thinking,
            policy="on" if route.reasoning == "on" else "auto",
        )
    # The route's profile, else the upstream's own (Gemini refuses much of JSON Schema).
    profile = route.schema_profile or upstream.schema_profile or s.schema
    req = sanitize_tool_schemas(req, profile, notes)
    # Thinking asked for by name (BASE-thinking), or by a client's switch on an upstream that
    # only has text: ask for <thinking> tags and parse them. Before the text protocol renders
    # tool results as user text, so the hint never lands after a tool result.
    # No reasoning switch (Kiro): a client's thinking request is the thinking prompt there.
    asked = (
        req.thinking is not None
        and req.thinking.enabled
        and (mode != "native" or not upstream.reasoning_switch)
    )
    if thinking or asked:
        plan = replace(plan, parse_text=True)
        req = apply_thinking_prompt(req, notes)
    if mode != "native" or not upstream.native_custom_tools:
        req, custom = wrap_custom_tools(req, notes)
        plan = replace(plan, custom_tools=custom)
    req, plan = _tool_protocol(req, plan, s, notes, mode, seeds)
    if upstream.prepare is not None:
        facts = RouteFacts(mapped, route.profile_arn or plan.profile_arn, route.description_limit)
        req = upstream.prepare(req, notes, facts)
    if cache == "auto" and upstream.cache_marks is not None:
        req = place_breakpoints(req, upstream.cache_marks, route.cache_ttl, notes)
    return req, replace(plan, hide_thinking=s.thinking_output == "hidden")


def _web_search(req: Request, plan: FlowPlan, notes: Notes) -> tuple[Request, FlowPlan]:
    """A client's search tool the upstream cannot run, run by the bridge where the route names
    a backend (``search``): the model gets a ``web_search`` function tool in its place."""
    req, search = offer_search(req, plan.client, plan.upstream, plan.route.search, notes)
    return req, replace(plan, search=search)


def _model_names(
    req: Request, plan: FlowPlan, s: Settings, notes: Notes
) -> tuple[Request, FlowPlan, bool, bool]:
    """The model sent upstream: a ``BASE-thinking`` name as ``BASE`` with thinking on
    (``bridge_models``; the first bool says so), then the route's ``model_map`` (the second
    bool: it chose the name). Another name: the client's answer keeps the one it asked for
    (``rename_answer``)."""
    model, thinking = resolve_model(req.model, s.models)
    if thinking:
        notes[f"{req.model} → {model} with thinking"] += 1
        req = dataclasses.replace(req, model=model)
    mapped = plan.route.mapped_model(req.model)
    if mapped is not None and mapped != req.model:
        why = "expose_as" if plan.route.exposes(req.model) else "model_map"
        notes[f"model {req.model} → {mapped} (the route's {why})"] += 1
        req = dataclasses.replace(req, model=mapped)
        plan = replace(plan, rename_answer=True)
    return req, plan, thinking, mapped is not None


def _tool_protocol(
    req: Request, plan: FlowPlan, s: Settings, notes: Notes, mode: ToolMode, seeds: Seeds
) -> tuple[Request, FlowPlan]:
    """A text protocol's tools in the prompt (``mode`` not native), or, on an upstream whose
    models write one at times, its calls read from a native answer; decided on the plan."""
    tools = [t.name for t in req.tools or () if t.name]
    choice = req.tool_choice
    if mode != "native":
        # The same trigger on every turn of the conversation (its bytes stay cacheable).
        trigger = make_trigger(seeds.derive("invoke")) if mode == "invoke" else None
        plan = replace(
            plan,
            protocol=mode,
            trigger=trigger,
            tools=tuple(tools),
            parse_text=True,
            tool_required=bool(tools)
            and (
                (choice is not None and choice.mode in ("required", "tool"))
                or (s.tool_strict and (choice is None or choice.mode != "none"))
            ),
        )
        settings = TextToolSettings(mode, trigger, s.desc_limit, s.param_limit)
        return apply_text_tools(req, settings, notes), plan
    text_calls = plan.upstream.answer_text_calls
    if text_calls is not None and tools:
        # Kiro's models still write "[Calling tool: X]" text at times: the answer (only) is
        # read for such calls; the request keeps its native tools.
        plan = replace(plan, protocol=text_calls, tools=tuple(tools), parse_text=True)
    return req, plan


def _runs_nothing(tool: OpaqueTool) -> bool:
    """A text protocol carries function tools only."""
    return False


def _client_only(req: Request, plan: FlowPlan, notes: Notes) -> Request:
    """What only the client's own vendor reads, left out for another: its dialect's extra
    fields, its billing lines (``client_noise``)."""
    upstream = plan.upstream
    if req.origin != upstream.name:
        req = _foreign_extras(req, upstream, notes)
    if noise_for(upstream.name, plan.host, plan.route.strip_client_noise):
        req = strip_client_noise(req, notes)
    return req


def _foreign_extras(req: Request, upstream: Dialect, notes: Notes) -> Request:
    """Fields only the client's dialect has are not sent to another: name them."""
    # ``__…__`` keys are a codec's private tables (items, turn layout), not the client's fields.
    fields = sorted(k for k in req.extra if not (k.startswith("__") and k.endswith("__")))
    if fields and req.origin != upstream.name:
        notes[f"{req.origin}-only fields not sent: {', '.join(fields)}"] += 1
    return req


def _not_understood(plan: FlowPlan, why: str) -> Pass | Reject:
    """Same dialect: the upstream can read what we could not, pass it. Otherwise the upstream
    cannot either (another dialect, another path): say so in the client's dialect."""
    if plan.same_dialect:
        return Pass(plan.route, why)
    return _reject(
        plan,
        ClientError(
            f"cursor-bridge could not translate this {plan.client.name} request for the "
            f"{plan.upstream.name} upstream: {why}",
            code="untranslatable_request",
        ),
    )


def _reject(plan: FlowPlan, e: ClientError) -> Reject:
    if plan.secrets:  # a message that quotes the request never quotes the flow's key
        message = plan.secrets(e.message)
        e = ClientError(message, param=e.param, code=e.code, status=e.status, type=e.type)
    return Reject(plan.route, e.status, error_bytes(plan.client, e), e.message)
