"""Where a Gemini request goes on the wire: paths, placement, the Code Assist envelope.

Contract: pure functions over paths, ``Request`` and ``Target``; no body codec (that is
``request`` / ``request_encode``). A public-API client's model and streaming live in its path
(``from_path``); an upstream gets the public API's path (``place_public``) or Code Assist's
(``place_code_assist``), the body then wrapped (``code_assist_envelope``)."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from addon.dialects.base import Framing, PathFields, Query, Target, endpoint_base, split_path
from addon.model import JSON, Request, Text

from .parts import CODE_ASSIST, SIDE, digest

_ENDPOINT = re.compile(
    r"^(?P<base>.*?)/(?P<version>v\d+[a-z]*\d*)"
    r"(?P<resource>/(?:models|tunedModels|projects)/[^?]*?)?:(?P<method>[A-Za-z]+)$"
)
"""``{base}/{version}[/models/{model}]:{method}`` (public API, Vertex AI, Code Assist)."""
_GENERATE = {"generateContent": False, "streamGenerateContent": True}


def from_path(path: str, query: Query) -> PathFields:
    """The model and whether it streams, from a Gemini client's path: ``/v1beta/models/{model}:
    streamGenerateContent`` → ``{"model": model, "stream": True}``; Code Assist's
    ``/v1internal:generateContent`` → ``{"stream": False}`` (its model is in the body). Model
    names may be URL-encoded and carry ``models/`` prefixes; Vertex AI's
    ``projects/…/publishers/google/models/{model}`` gives ``{model}``."""
    m = _ENDPOINT.match(unquote(path))
    if m is None:
        return {}
    out: PathFields = {}
    resource = m["resource"]
    if resource:
        name = resource.lstrip("/")
        if name.startswith("projects/") and "/models/" in name:
            name = name.rsplit("/models/", 1)[1]
        name = bare_model(name)
        if name:
            out["model"] = name
    if m["method"] in _GENERATE:
        out["stream"] = _GENERATE[m["method"]]
        out["stream_explicit"] = True  # the client chose the endpoint: it said
    return out


def path_base(path: str) -> str | None:
    """Where a Gemini client's endpoint starts (``Dialect.path_base``): ``/proxy`` of
    ``/proxy/v1beta/models/m:streamGenerateContent``, ``""`` of ``/v1internal:generateContent``;
    None for a path of another shape."""
    m = _ENDPOINT.match(path)
    return m["base"] if m else None


def bare_model(model: str) -> str:
    """``models/gemini-2.5-pro`` → ``gemini-2.5-pro`` (every ``models/`` prefix)."""
    while model.startswith("models/"):
        model = model[len("models/") :]
    return model


def framing(query: Query) -> Framing:
    return "sse" if ("alt", "sse") in query else "json_array"


def place_public(req: Request, t: Target) -> tuple[str, Query]:
    """``{base}/v1beta/models/{model}:streamGenerateContent?alt=sse`` or ``:generateContent``
    (``endpoint_base``: the client's path without its endpoint and API version). Same
    dialect: the client's path and query; a route's ``upstream_path`` wins (``_route_path``)."""
    if t.upstream_path is not None:
        return _route_path(req, t)
    if t.same_dialect:
        return with_path_model(t.path, req.model), t.query
    model = quote(bare_model(req.model), safe="/")
    return f"{endpoint_base(t)}/v1beta/models/{model}:{_method(req)}", _alt(req)


def with_path_model(path: str, model: str) -> str:
    """A Gemini client's path naming ``model`` (a route's ``model_map`` chose another name
    than the client's); the path as it is when it names that model already."""
    m = _ENDPOINT.match(path)
    resource = m["resource"] if m else None
    if m is None or not resource or "/models/" not in resource:
        return path
    head, _, name = resource.rpartition("/models/")
    if bare_model(unquote(name)) == bare_model(model):
        return path
    named = quote(bare_model(model), safe="/")
    return f"{m['base']}/{m['version']}{head}/models/{named}:{m['method']}"


def place_code_assist(req: Request, t: Target) -> tuple[str, Query]:
    """``{base}/v1internal:streamGenerateContent?alt=sse`` or ``:generateContent``."""
    if t.upstream_path is not None:
        return _route_path(req, t)
    if t.same_dialect:
        return t.path, t.query
    return f"{endpoint_base(t)}/v1internal:{_method(req)}", _alt(req)


def _method(req: Request) -> str:
    return "streamGenerateContent" if req.stream else "generateContent"


def _alt(req: Request) -> Query:
    return (("alt", "sse"),) if req.stream else ()


def _route_path(req: Request, t: Target) -> tuple[str, Query]:
    """A route's ``upstream_path`` wins, its query as written. Same dialect: without a query of
    its own the client's query goes along (as ``suffix_placement`` does); with one, the client's
    ``alt`` and ``key`` are added unless the route sets them (the framing the client asked for,
    and its key, which a same-dialect route leaves where it is). Another dialect: ``alt=sse``
    is added to a streamed request unless the route says ``alt`` itself or names the unary
    ``:generateContent``; the client's own query (its ``key`` included) never goes along."""
    path, query = split_path(t.upstream_path or "", ())
    has_query = "?" in (t.upstream_path or "")
    named = {k for k, _ in query}
    if t.same_dialect:
        if not has_query:
            return path, t.query
        return path, query + tuple(
            (k, v) for k, v in t.query if k in ("alt", "key") and k not in named
        )
    if req.stream and "alt" not in named and not path.endswith(":generateContent"):
        query += (("alt", "sse"),)
    return path, query


def code_assist_envelope(body: JSON, req: Request, t: Target) -> JSON:
    """``{model, project, user_prompt_id, request: body}``.

    ``project``: the route's, else the one a Code Assist client sent, else left out.
    ``user_prompt_id``: a Code Assist client's own, else a stable id derived from the
    conversation (a digest of its first user message: the same on every turn). Other envelope
    fields of a Code Assist client go along as they were."""
    side = req.extra.get(SIDE) if req.origin == CODE_ASSIST else None
    envelope: JSON = dict(side.get("envelope") or {}) if isinstance(side, dict) else {}
    out: JSON = {"model": bare_model(req.model)}
    project = t.project if t.project is not None else envelope.pop("project", None)
    envelope.pop("project", None)
    if project is not None:
        out["project"] = project
    prompt_id = envelope.pop("user_prompt_id", None)
    out["user_prompt_id"] = prompt_id if isinstance(prompt_id, str) else _prompt_id(req)
    out["request"] = body
    for k, v in envelope.items():
        out.setdefault(k, v)
    return out


def _prompt_id(req: Request) -> str:
    first = next((m for m in req.messages if m.role == "user"), None)
    text = "".join(p.text for p in first.parts if isinstance(p, Text)) if first else ""
    return f"bridge-{digest(text)}"
