"""A routes file → ``Route``s: TOML read, each key's type checked by pydantic.

Contract: ``load_routes`` raises ``RoutesError`` with one line naming the file, the key and
what it takes. Imported only when a routes file is read, so that the proxy that runs on the
built-in routes never loads pydantic. This module imports ``addon.config.routes``, never the
reverse. The file's keys: docs/routes.md."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from addon.config import expose, routes
from addon.config import upstream_url as upstream_urls
from addon.config.images import check_vision, image_keys
from addon.config.routes import Route
from addon.config.search_backend import (
    MAX_PRICE,
    MAX_RESULTS,
    MAX_SEARCH_TIMEOUT,
    SearchBackend,
    search_url,
)
from addon.dialects import OPENAI_CHAT, DialectName
from addon.model import CachePolicy, CacheTTL, SchemaProfile, ToolMode


class RoutesError(ValueError):
    """A routes file that cannot be used; the message names the file and the key."""


def load_routes(path: str | Path) -> tuple[Route, ...]:
    p = Path(path).expanduser()
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise RoutesError(f"routes file '{p}': cannot read it: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise RoutesError(
            f"routes file '{p}': not UTF-8 text (byte {e.start}); TOML files are UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise RoutesError(f"routes file '{p}': not valid TOML: {e}") from None
    try:
        found = read_routes(data)
    except ValueError as e:
        raise RoutesError(f"routes file '{p}': {e}") from None
    names = [r.name for r in found]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise RoutesError(f"routes file '{p}': route names must be unique: {', '.join(dupes)}")
    try:
        routes.check_fallbacks(found)
        expose.check_unique(found)
        check_vision(found)
    except ValueError as e:
        raise RoutesError(f"routes file '{p}': {e}") from None
    return found


class WhenFields(BaseModel):
    """A route's ``when`` table (``addon.config.routes.When``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    thinking: bool | None = None
    images: bool | None = None
    min_input_tokens: int | None = Field(default=None, ge=0)
    background: bool | None = None

    def when(self) -> routes.When:
        return routes.When(**{name: getattr(self, name) for name in type(self).model_fields})


class PriceFields(BaseModel):
    """A route's ``price`` table (``addon.config.routes.TokenPrice``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)
    cache_read: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    cache_write: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    def price(self) -> routes.TokenPrice:
        return routes.TokenPrice(self.input, self.output, self.cache_read, self.cache_write)


class SearchFields(BaseModel):
    """A route's ``search`` table (``addon.config.search_backend.SearchBackend``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    url: str
    kind: Literal["searxng"] = "searxng"
    max_results: int = Field(default=5, ge=1, le=MAX_RESULTS)
    timeout: float = Field(default=10.0, gt=0, le=MAX_SEARCH_TIMEOUT)
    key_env: str | None = None
    price: float = Field(default=0.0, ge=0, le=MAX_PRICE)

    _url = field_validator("url")(search_url)

    def backend(self) -> SearchBackend:
        return SearchBackend(**{name: getattr(self, name) for name in type(self).model_fields})


class RouteFields(BaseModel):
    """``Route`` field for field (a test holds them together). The checks beyond types are
    ``addon.config.routes``' own, run on the key they are about so that an error names it."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str
    host: str = "*"
    path: str = "*/chat/completions"
    methods: tuple[str, ...] = ("POST",)
    client: DialectName = OPENAI_CHAT
    upstream: DialectName = OPENAI_CHAT
    tool_mode: ToolMode | None = None
    schema_profile: SchemaProfile | None = Field(default=None, alias="schema")
    upstream_path: str | None = None
    api_key_env: str | tuple[str, ...] | None = None
    cache_control: CachePolicy | None = None
    cache_ttl: CacheTTL = "5m"
    prompt_cache_key: bool | None = Field(default=None, strict=True)
    strip_client_noise: bool | None = Field(default=None, strict=True)
    count_tokens: routes.TokenCounting | None = None
    tool_repair: Literal["on", "off"] | None = None
    project: str | None = None
    reasoning: Literal["auto", "on", "off"] = "auto"
    signature_fallback: Literal["sentinel", "none"] = "sentinel"
    model_map: tuple[tuple[str, str], ...] | None = None
    profile_arn: str | None = None
    token_file: str | None = None
    refresh_url: str | None = None
    description_limit: int | None = Field(default=None, ge=16)
    model: tuple[str, ...] | None = None
    upstream_url: str | None = None
    client_key: bool = Field(default=False, strict=True)
    when: WhenFields | None = None
    fallback: tuple[str, ...] = ()
    timeout: float = Field(default=routes.DEFAULT_TIMEOUT, gt=0, le=routes.MAX_TIMEOUT, strict=True)
    cooldown: float = Field(
        default=routes.DEFAULT_COOLDOWN, ge=0, le=routes.MAX_COOLDOWN, strict=True
    )
    price: PriceFields | None = None
    reserve_max_output: int = Field(
        default=routes.DEFAULT_RESERVE_MAX_OUTPUT, ge=1, le=routes.MAX_RESERVE_OUTPUT, strict=True
    )
    expose_as: str | tuple[str, ...] | None = None
    key_probe: str | None = None
    search: SearchFields | None = None
    images: StrictBool | Literal["drop"] | None = None
    vision: str | None = None

    _env = field_validator("api_key_env", mode="before")(routes.env_names)
    _methods = field_validator("methods")(routes.http_methods)
    _not_empty = field_validator("name", "host", "path")(routes.not_empty)
    _path = field_validator("path")(routes.path_glob)
    _absolute = field_validator("upstream_path")(routes.absolute_path)
    _client = field_validator("client")(routes.client_side)
    _pairs = field_validator("model_map", mode="before")(routes.model_map_pairs)
    _url = field_validator("refresh_url")(upstream_urls.http_url)
    _model = field_validator("model", mode="before")(routes.model_globs)
    _upstream_url = field_validator("upstream_url")(upstream_urls.upstream_url)
    _fallback = field_validator("fallback", mode="before")(routes.fallback_names)
    _probe = field_validator("key_probe")(routes.probe_path)
    _expose = field_validator("expose_as", mode="before")(expose.expose_value)

    @model_validator(mode="after")
    def _dialect_keys(self) -> RouteFields:
        routes.dialect_keys(self)  # type: ignore[arg-type]  # same attributes as a Route
        expose.check_route(self)
        image_keys(self.images, self.vision)
        return self

    def route(self) -> Route:
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        fields["when"] = self.when.when() if self.when is not None else None
        fields["price"] = self.price.price() if self.price is not None else None
        fields["search"] = self.search.backend() if self.search is not None else None
        return Route(**fields)


class _RoutesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    routes: list[RouteFields] = Field(min_length=1)


ROUTE_KEYS: tuple[str, ...] = tuple(f.alias or n for n, f in RouteFields.model_fields.items())
"""The keys a route takes in a file (``schema`` for ``schema_profile``)."""


def read_routes(data: dict[str, Any]) -> tuple[Route, ...]:
    """The routes of a parsed TOML document. Raises ``ValueError`` naming the bad key."""
    try:
        parsed = _RoutesFile.model_validate(data)
    except ValidationError as e:
        raise ValueError(_describe(e, data)) from None
    return tuple(r.route() for r in parsed.routes)


def _describe(e: ValidationError, data: dict[str, Any]) -> str:
    problems = []
    for err in e.errors():
        where = ""
        for part in err["loc"]:
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        got = (
            f" (got {err['input']!r})" if err["type"] not in ("missing", "extra_forbidden") else ""
        )
        if err["type"] == "extra_forbidden":
            loc = err["loc"]
            allowed = (
                tuple(WhenFields.model_fields)
                if len(loc) > 3 and loc[2] == "when"
                else tuple(PriceFields.model_fields)
                if len(loc) > 3 and loc[2] == "price"
                else tuple(SearchFields.model_fields)
                if len(loc) > 3 and loc[2] == "search"
                else ROUTE_KEYS
                if len(loc) > 1
                else ("routes",)
            )
            msg = f"unknown key (allowed: {', '.join(allowed)})"
        else:
            msg = err["msg"].removeprefix("Value error, ").replace("a valid tuple", "a list")
            msg = msg.replace(" or instance of WhenFields", " (e.g. {thinking = true})")
            msg = msg.replace(" or instance of PriceFields", " (e.g. {input = 0.5, output = 2})")
            msg = msg.replace(" or instance of SearchFields", ' (e.g. {url = "http://…"})')
        problems.append(f"{where or 'top level'}: {msg}{got}{_route_name(data, err['loc'])}")
    return "; ".join(problems)


def _route_name(data: dict[str, Any], loc: tuple[int | str, ...]) -> str:
    """`` (in route 'name')`` for a problem inside a route that has a name, else ``""``."""
    if len(loc) < 2 or loc[0] != "routes" or not isinstance(loc[1], int):
        return ""
    listed = data.get("routes")
    if not isinstance(listed, list) or not 0 <= loc[1] < len(listed):
        return ""
    route = listed[loc[1]]
    name = route.get("name") if isinstance(route, dict) else None
    return f" (in route {name!r})" if isinstance(name, str) and name else ""
