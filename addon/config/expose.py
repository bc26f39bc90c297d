"""A route's ``expose_as``: the names under which the models it serves appear in a client's
model list, and which take the route when a request names them (docs/routes.md#expose_as).

Contract: plain values. ``expose_value`` checks the key (a list of names, or a rule with one
``{model}``); ``exposed_pairs`` gives each exposed name with the model it serves (what goes
upstream); ``check_route`` and ``check_unique`` are the checks made at start, each naming the
route(s). ``addon.config.routes`` imports this module, never the reverse."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Protocol

SLOT = "{model}"
"""Where a rule puts the name of the model the route serves."""
GLOBS = "*?["
"""A name holding one of these is a glob (``addon.config.routes.GLOB_CHARS``)."""

type Exposure = str | tuple[str, ...]
"""A rule (``"claude-{model}"``) or a list of names."""
type Pairs = tuple[tuple[str, str], ...]
"""Exposed name → the model it serves, in file order."""


def expose_value(v: object) -> Exposure | None:
    """``expose_as``: a rule string holding ``{model}`` once (no other braces, no glob), or a
    list of names (each once, no glob, no braces, no space)."""
    if v is None:
        return None
    if isinstance(v, str):
        return _rule(v)
    if not isinstance(v, tuple | list) or not v:
        raise ValueError('a rule like "claude-{model}" or a list of names, e.g. ["claude-ds"]')
    for name in v:
        _name(name)
    dupes = sorted({n for n in v if v.count(n) > 1})
    if dupes:
        raise ValueError(f"names {', '.join(map(repr, dupes))} twice")
    return tuple(v)


def _rule(v: str) -> str:
    if SLOT not in v:
        alone = "" if "{" in v or "}" in v else f"; one name alone is a list: [{v!r}]"
        raise ValueError(
            f'the rule {v!r} has no {SLOT}, where the model\'s name goes (e.g. "claude-{SLOT}")'
            + alone
        )
    rest = v.replace(SLOT, "", 1)
    if "{" in rest or "}" in rest:
        raise ValueError(f"the rule {v!r} holds braces other than one {SLOT}")
    _plain(rest, v)
    return v


def _name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError("names must be non-empty strings")
    if "{" in name or "}" in name:
        raise ValueError(
            f"{name!r} holds braces: a rule is one string, not a list (e.g. "
            f'expose_as = "claude-{SLOT}")'
        )
    _plain(name, name)
    return name


def _plain(text: str, shown: str) -> None:
    if any(c in text for c in GLOBS):
        raise ValueError(f"{shown!r} is a glob; a client picks a name from its list")
    if any(c.isspace() or not c.isprintable() for c in text):
        raise ValueError(f"{shown!r} holds a space or a control character")


def served_models(
    model_map: tuple[tuple[str, str], ...] | None, model: tuple[str, ...] | None
) -> tuple[str, ...]:
    """The models a route serves by name, as sent upstream: its ``model_map``'s upstream
    names, then its ``model`` names without glob characters that no ``model_map`` glob takes
    (they go as they are)."""
    out: dict[str, None] = dict.fromkeys(target for _, target in model_map or ())
    for name in model or ():
        if not any(c in name for c in GLOBS) and _mapped(model_map, name) is None:
            out[name] = None
    return tuple(out)


def _mapped(model_map: tuple[tuple[str, str], ...] | None, model: str) -> str | None:
    for glob, target in model_map or ():
        if fnmatchcase(model, glob):
            return target
    return None


@lru_cache(maxsize=512)
def exposed_pairs(
    expose_as: Exposure | None,
    model_map: tuple[tuple[str, str], ...] | None,
    model: tuple[str, ...] | None,
) -> Pairs:
    """Each exposed name with the model it serves: a rule's name for each served model; a
    listed name, the model ``model_map`` sends for it, else the route's one served model.
    ``ValueError`` where that is not known (checked at start: ``check_route``)."""
    if expose_as is None:
        return ()
    served = served_models(model_map, model)
    if not served:
        raise ValueError(
            "expose_as: the route names no model it serves: give it a model_map "
            '(e.g. {"*" = "deepseek-chat"}) or model names without globs'
        )
    if isinstance(expose_as, str):
        return tuple((expose_as.replace(SLOT, m, 1), m) for m in served)
    pairs: list[tuple[str, str]] = []
    for name in expose_as:
        target = _mapped(model_map, name) or (served[0] if len(served) == 1 else None)
        if target is None:
            raise ValueError(
                f"expose_as: which model {name!r} stands for is not known (the route serves "
                f"{', '.join(served)}): map it in model_map, e.g. {{{name!r} = {served[0]!r}}}, "
                f'or use a rule like "claude-{SLOT}"'
            )
        pairs.append((name, target))
    return tuple(pairs)


class Exposing(Protocol):
    """What the checks read of a route (a ``Route`` or a routes file's ``RouteFields``)."""

    @property
    def name(self) -> str: ...
    @property
    def client(self) -> str: ...
    @property
    def expose_as(self) -> Exposure | None: ...
    @property
    def model_map(self) -> tuple[tuple[str, str], ...] | None: ...
    @property
    def model(self) -> tuple[str, ...] | None: ...
    @property
    def when(self) -> object: ...


def check_route(route: Exposing) -> None:
    """A route's ``expose_as`` names a model for every name, and the route has no ``when``
    (such a route is chosen by what a request holds, never by a model's name)."""
    if route.expose_as is None:
        return
    if route.when is not None:
        raise ValueError(
            "expose_as: not with when (a route with when is chosen by what a request holds, "
            "not by the model it names)"
        )
    exposed_pairs(route.expose_as, route.model_map, route.model)


def check_unique(routes: Sequence[Exposing]) -> None:
    """No name is exposed by two routes of the same client dialect (a request naming it would
    not know its route): ``ValueError`` naming both routes and the name."""
    seen: dict[tuple[str, str], str] = {}
    for route in routes:
        for name, _ in exposed_pairs(route.expose_as, route.model_map, route.model):
            first = seen.setdefault((route.client, name), route.name)
            if first != route.name:
                raise ValueError(
                    f"expose_as: routes {first!r} and {route.name!r} both expose {name!r} to "
                    f"{route.client} clients (a request for it would not know its route)"
                )
