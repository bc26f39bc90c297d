"""The caption calls of a text-only route (``images = false``, ``vision = "<route>"``;
docs/routes.md#images), decided from plain values: which images a request needs captioned
(``wanted``: each once, for each vision route its route chain names), the vision route's
request for one image (``caption_calls``: a fixed prompt, the image, a whole answer, in the
vision route's upstream dialect, to its ``upstream_url`` with its key — one call per key of a
pool, tried in order), its answer read (``read_caption``), the client's 502 when it failed
(``vision_failed``), and where the caption is kept in the shared store (``STORE_SCOPE``).
The shell (``addon.shell.captions``) sends them with the bridge's own client, before the
rewrite; ``addon.plan.images`` puts the captions in."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode

from addon.config.routes import GLOB_CHARS, Route, withholds_key
from addon.dialects import DIALECTS, Dialect
from addon.dialects.base import Target, WireRequest
from addon.model import ClientError, Image, Message, Params, Request, Text, Usage
from addon.plan.images import TAKES_URLS, image_key, images_of, source_of
from addon.plan.routing import RouteMatch
from addon.plan.values import Incoming, dump, error_bytes, load_json, short
from addon.plan.wire_request import auth_value, read_key
from addon.stores.reasoning import Scope

CAPTION_PROMPT = (
    "Describe this image for a reader who cannot see it: what it shows, any text in it "
    "word for word, and details that matter for a task about it. Answer with the "
    "description only, in plain text."
)
"""The fixed prompt of every caption call (the same words: the same caption for the same
image and model)."""
CAPTION_MAX_TOKENS = 1024
MAX_CAPTION_CHARS = 8000
"""A caption longer than this is cut (with ``…``)."""
PARALLEL = 4
"""Caption calls one request makes at once."""
STORE_KIND = "caption"


def store_scope(vision: Route) -> Scope:
    """Where a vision route's captions are kept in the shared store (one scope per route)."""
    return Scope(f"vision:{vision.name}", "captions")


@dataclass(frozen=True, slots=True)
class Wanted:
    """An image a vision route must caption for this request."""

    vision: Route
    image: Image = field(repr=False)
    key: str
    """``image_key``: SHA-256 of its bytes (or file id, or URL)."""

    @property
    def name(self) -> tuple[str, str]:
        """What the captions are kept under: (vision route's name, image key)."""
        return self.vision.name, self.key


def wanted(chain: tuple[Route, ...], routes: tuple[Route, ...], req: Request) -> tuple[Wanted, ...]:
    """The images of ``req`` each vision route of ``chain`` (a route with ``images = false``
    and ``vision``) must caption, each once; none for a route whose request is refused anyway
    (``addon.plan.images.refusal``: a file the client uploaded, a URL where the vision
    route's upstream takes bytes only)."""
    images = images_of(req)
    held = {source_of(image) for image in images}
    if "file" in held:  # no vision route can read it: the request is refused (``refusal``)
        return ()
    by_name = {r.name: r for r in routes}
    visions = [
        by_name[r.vision]
        for r in chain
        if r.images is False
        and r.vision in by_name
        and ("url" not in held or by_name[r.vision].upstream in TAKES_URLS)
    ]
    if not visions:
        return ()
    out: dict[tuple[str, str], Wanted] = {}
    for vision in dict.fromkeys(visions):
        for image in images:
            w = Wanted(vision, image, image_key(image))
            out.setdefault(w.name, w)
    return tuple(out.values())


@dataclass(frozen=True, slots=True)
class CaptionJob:
    """What one request's captions need, as plain values (``caption_job``)."""

    client: str
    """The client's dialect (its 502's shape, where its key is read)."""
    wants: tuple[Wanted, ...]
    incoming: Incoming = field(repr=False)
    """The client's request (path, headers: its key may go to the vision route)."""
    origin: tuple[str, str, int]
    """Where the client sent its request: a vision route without ``upstream_url`` is asked there."""
    asked: str
    """The model the client asked for."""
    via: tuple[str, str] | None
    """The upstream proxy the flow came through: the calls go that way."""
    client_name: str
    """The client key's name (the ledger's column); empty: none."""


def caption_job(
    found: RouteMatch,
    chain: tuple[Route, ...] | None,
    routes: tuple[Route, ...],
    headers: Mapping[str, str],
    origin: tuple[str, str, int],
    via: tuple[str, str] | None = None,
    client_name: str = "",
) -> CaptionJob | None:
    """The captions a matched request needs on the route its flow goes to and the rest of its
    chain (``chain``: the fallbacks' pick, else the matched route alone); None: none."""
    route = found.route
    if route is None or found.outside:
        return None
    decoded = found.view.decoded(route.client)
    if decoded is None:
        return None
    wants = wanted(chain or (route,), routes, decoded.request)
    if not wants:
        return None
    incoming = Incoming("POST", found.host, found.view.path, headers, b"", origin[2])
    asked = found.view.model(route.client) or decoded.request.model
    return CaptionJob(route.client, wants, incoming, origin, asked, via, client_name)


@dataclass(frozen=True, slots=True)
class Refusal:
    """The client's answer when a caption could not be had, and the flow's comment."""

    status: int
    body: bytes = field(repr=False)
    comment: str


@dataclass(frozen=True, slots=True)
class CaptionCall:
    """One caption request as the shell sends it."""

    origin: tuple[str, str, int] | None
    """Scheme, host, port (the vision route's ``upstream_url``); None: where the client sent
    its request."""
    path: str
    """Path and query."""
    headers: tuple[tuple[str, str], ...] = field(repr=False)
    body: bytes = field(repr=False)
    model: str
    """The model as sent (the ledger's column)."""
    key_name: str
    """The environment variable of the key sent (never its value); empty: the client's."""


def caption_model(vision: Route, asked: str) -> str:
    """The vision route's model: its ``model_map``'s for the client's model, else the first
    plain name of its ``model``, else the client's model."""
    mapped = vision.mapped_model(asked)
    if mapped is not None:
        return mapped
    plain = [m for m in vision.model or () if not any(c in m for c in GLOB_CHARS)]
    return plain[0] if plain else asked


def caption_calls(
    vision: Route, image: Image, client: Dialect, incoming: Incoming, env: Mapping[str, str],
    asked: str,
) -> tuple[CaptionCall, ...]:  # fmt: skip
    """The vision route's request for ``image``: one per key of its pool (in order), else one
    with its key, else the client's where it may go there. ``ClientError`` (502): its key's
    variable is not set."""
    upstream = DIALECTS[vision.upstream]
    model = caption_model(vision, asked)
    req = Request(
        origin=upstream.name,
        model=model,
        messages=(Message("user", (Text(CAPTION_PROMPT), Image(image.url, image.detail))),),
        params=Params(max_tokens=CAPTION_MAX_TOKENS),
    )
    wire = _wire(vision, upstream, client, incoming, req)
    body = dump(wire.body)
    query = urlencode(wire.query)
    path = wire.path + (f"?{query}" if query else "")
    target = vision.target
    origin = (target.scheme, target.host, target.port) if target is not None else None
    fixed = (("content-type", "application/json"), *upstream.fixed_headers)
    names = vision.key_names
    if names:
        calls = []
        for name in names:
            key = env.get(name)
            if not key:
                raise ClientError(
                    f"the vision route '{vision.name}' takes its API key from {name}, "
                    "which is not set",
                    status=502,
                    code="vision_failed",
                )
            headers = (*fixed, auth_value(upstream, key))
            calls.append(CaptionCall(origin, path, headers, body, model, name))
        return tuple(calls)
    found = read_key(client, incoming.headers, incoming.query)
    if found is None or withholds_key(vision, incoming.host, incoming.port):
        return (CaptionCall(origin, path, fixed, body, model, ""),)
    return (CaptionCall(origin, path, (*fixed, auth_value(upstream, found[1])), body, model, ""),)


def _wire(
    vision: Route, upstream: Dialect, client: Dialect, incoming: Incoming, req: Request
) -> WireRequest:
    """The body and where it goes: as a request of the client's dialect would be placed for
    the vision route's upstream, but always as another dialect's (a whole answer, never the
    client's own path and query), under its ``upstream_url``'s prefix."""
    path = incoming.bare_path
    base = client.path_base(path) if client.path_base is not None else None
    target = Target(path, (), client.path, False, vision.upstream_path, vision.project, base)
    body = upstream.encode_request(req, Counter())  # its notes are nobody's
    if upstream.envelope is not None:
        body = upstream.envelope(body, req, target)
    new_path, query = upstream.placement(req, target)
    if vision.target is not None:
        new_path = vision.target.join(new_path)
    return WireRequest(body, new_path, query)


@dataclass(frozen=True, slots=True)
class Caption:
    text: str
    usage: Usage | None


def read_caption(vision: Route, status: int, content: bytes) -> Caption | str:
    """The caption in the vision route's answer, or why there is none (a few words)."""
    upstream = DIALECTS[vision.upstream]
    try:
        body = load_json(content)
    except (ValueError, RecursionError):
        body = None
    if not 200 <= status < 300:
        said = upstream.error_message(body) if body is not None else None
        return f"HTTP {status}" + (f": {short(said)}" if said else "")
    if not isinstance(body, dict):
        return "its answer is not a JSON object"
    try:
        answer = upstream.decode_response(body)
    except Exception as e:  # a lenient decoder met a shape it did not foresee
        return f"its answer could not be read ({type(e).__name__})"
    text = " ".join(" ".join(p.text.split()) for p in answer.parts if isinstance(p, Text))
    text = text.strip()
    if not text:
        return "its answer holds no text"
    if len(text) > MAX_CAPTION_CHARS:
        text = text[: MAX_CAPTION_CHARS - 1] + "…"
    return Caption(text, answer.usage)


def vision_failed(client: Dialect, vision: str, why: str) -> tuple[Refusal, str]:
    """The client's 502 in its dialect naming the vision route and why, and the log line."""
    message = f"the bridge's vision route '{vision}' could not caption an image: {why}"
    error = ClientError(message, status=502, code="vision_failed")
    comment = f"cursor-bridge [{vision}]: answered 502: no caption ({short(why)})"
    return Refusal(502, error_bytes(client, error), comment), message
