"""What the shell's addons share: the metadata key, flow comments, logging and headers."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from mitmproxy import exceptions, http

from addon.config import OptionSpec

log = logging.getLogger("cursor_bridge")

META_KEY = "cursor_bridge"
"""``flow.metadata`` key holding what the bridge did (plain JSON data, no secrets)."""


def append_comment(flow: http.HTTPFlow, line: str) -> None:
    flow.comment = f"{flow.comment}\n{line}" if flow.comment else line


def header_map(headers: http.Headers) -> dict[str, str]:
    """Names lower-cased; repeated headers joined with ", " (the values may be secrets)."""
    out: dict[str, str] = {}
    for name in headers:
        out[name.lower()] = ", ".join(headers.get_all(name))
    return out


def environment() -> Mapping[str, str]:
    return os.environ


def options_error(message: str) -> exceptions.OptionsError:
    return exceptions.OptionsError(message)  # type: ignore[no-untyped-call]


def is_json(resp: http.Response) -> bool:
    ctype = resp.headers.get("content-type", "").lower()
    return ctype.startswith("application/json") or "+json" in ctype


def json_response(status: int, body: bytes) -> http.Response:
    return http.Response.make(status, body, {"content-type": "application/json"})


def add_options(loader: Any, specs: Sequence[OptionSpec]) -> None:
    for spec in specs:
        loader.add_option(
            name=spec.name,
            typespec=spec.typespec,
            default=spec.default,
            help=spec.help,
            choices=list(spec.choices) if spec.choices else None,
        )
