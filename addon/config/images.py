"""A route's ``images`` and ``vision`` keys checked (docs/routes.md#images): what a text-only
route does with a request's images, and the route that captions them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Route(Protocol):
    """What the check reads of an ``addon.config.routes.Route``."""

    @property
    def name(self) -> str: ...
    @property
    def images(self) -> bool | str | None: ...
    @property
    def vision(self) -> str | None: ...
    @property
    def token_file(self) -> str | None: ...


def image_keys(images: object, vision: object) -> None:
    if images is not None and not isinstance(images, bool) and images != "drop":
        raise ValueError('images: true, false or "drop"')
    if vision is not None and (not isinstance(vision, str) or not vision.strip()):
        raise ValueError("vision: must be a route's name")
    if vision is not None and images is not False:
        raise ValueError("vision: only with images = false (a route that sends no images)")


def check_vision(routes: Sequence[Route]) -> None:
    """Every ``vision`` names another route that sees images (its ``images`` unset or true)
    and reads no Kiro token file. ``ValueError`` naming the route and the key."""
    by_name = {r.name: r for r in routes}
    for route in routes:
        other = by_name.get(route.vision or "")
        where = f"route {route.name!r}: vision"
        if route.vision is not None and (other is None or other is route):
            raise ValueError(f"{where}: no other route is named {route.vision!r}")
        if other is not None and (other.images not in (None, True) or other.token_file):
            raise ValueError(
                f"{where}: route {other.name!r} must see images (no images = "
                "false or drop) and use api_key_env, not a token_file"
            )
