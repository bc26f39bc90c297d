"""The model catalogue addon: ``GET …/models`` lists the configured models and their
``-thinking`` variants, merged with the upstream's own list when it has one.

Its option is ``bridge_models``; only hosts that a route covers are touched.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

from mitmproxy import ctx, http

from addon.config import CATALOGUE_OPTIONS, ConfigError, Settings, parse_models
from addon.plan import dump
from addon.shell.common import add_options, append_comment, is_json, json_response, options_error
from addon.transforms.thinking import catalogue_models


class ModelCatalogue:
    name = "cursor_bridge_models"

    def __init__(self, settings: Callable[[], Settings]) -> None:
        self._settings = settings
        self.models: tuple[str, ...] = ()
        self._flows: set[str] = set()

    def load(self, loader: Any) -> None:
        add_options(loader, CATALOGUE_OPTIONS)

    def configure(self, updated: set[str]) -> None:
        if "bridge_models" in updated:
            try:
                self.models = parse_models(ctx.options.bridge_models)
            except ConfigError as e:
                raise options_error(str(e)) from e

    def request(self, flow: http.HTTPFlow) -> None:
        if not self.models or flow.response is not None or not flow.live:
            return
        req = flow.request
        if req.method != "GET" or not req.path.split("?", 1)[0].endswith("/models"):
            return
        host = req.host.lower()
        if any(fnmatchcase(host, r.host.lower()) for r in self._settings().routes):
            self._flows.add(flow.id)

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.id not in self._flows:
            return
        self._flows.discard(flow.id)
        resp = flow.response
        if resp is None:
            return
        listed: list[Any] = []
        if 200 <= resp.status_code < 300 and is_json(resp):
            try:
                body = json.loads(resp.get_content(strict=False) or b"")
                if isinstance(body, dict) and isinstance(body.get("data"), list):
                    listed = body["data"]
            except (ValueError, RecursionError):
                listed = []
        known = {m.get("id") for m in listed if isinstance(m, dict)}
        added = [
            {"id": m, "object": "model", "created": 0, "owned_by": "cursor-bridge"}
            for m in catalogue_models(self.models)
            if m not in known
        ]
        how = "merged with the upstream's" if listed else "answered by cursor-bridge"
        if not listed and resp.status_code >= 300:
            how += f" (upstream said HTTP {resp.status_code})"
        flow.response = json_response(200, dump({"object": "list", "data": [*listed, *added]}))
        append_comment(flow, f"cursor-bridge: {len(added)} models {how}")

    def error(self, flow: http.HTTPFlow) -> None:
        self._flows.discard(flow.id)
