"""The model catalogue addon: ``GET …/models`` answered with the configured models (``bridge_models``
and their ``-thinking`` variants), the routes' models and the names routes of the client's dialect
expose (``expose_as``), in that dialect's list shape (``addon.plan.list_shapes``), merged with the
upstream's own list and the lists of the routes' other upstreams (``addon.plan.model_lists``,
asked through ``Retry`` with each route's key, a few seconds at most). Only a path whose chat sibling a route takes, inside
``allow_hosts`` / ``ignore_hosts``: a client picks its model from this list, so it must name the
bridge's routes."""

from __future__ import annotations

import asyncio
from typing import Any

from mitmproxy import ctx, http

from addon.config.options import CATALOGUE_OPTIONS, ConfigError, parse_models
from addon.plan.list_shapes import merged_list
from addon.plan.model_lists import (
    MODELS_SUFFIX,
    ListRequest,
    listed_names,
    models_plan,
)
from addon.shell.flows import Flows, ModelsAsked
from addon.shell.headers import header_map, is_json, json_response, replace_headers
from addon.shell.host_filter import outside_proxy_hosts
from addon.shell.notes import append_comment, log, log_internal_error
from addon.shell.option_checks import OptionChecks, add_options, environment
from addon.shell.outbound.retry import Retry, RetryAnswer
from addon.shell.settings import BridgeSettings

SUFFIX = MODELS_SUFFIX
LIST_TIMEOUT = 5.0
"""Seconds another upstream's model list may take (the client waits for the slowest)."""


class ModelCatalogue(OptionChecks):
    name = "cursor_bridge_models"

    def __init__(self, settings: BridgeSettings, flows: Flows, retry: Retry | None = None) -> None:
        self._settings = settings
        self._flows = flows
        """A list being answered is its flow's record's ``models``."""
        self._retry = retry
        self.models: tuple[str, ...] = ()

    def load(self, loader: Any) -> None:
        add_options(loader, CATALOGUE_OPTIONS)

    def configure(self, updated: set[str]) -> None:
        if "bridge_models" in updated:
            try:
                self.models = parse_models(ctx.options.bridge_models)
            except ConfigError as e:
                self.refuse(str(e))

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or not flow.live:
            return
        try:
            req = flow.request
            if req.method != "GET":
                return
            record = self._flows.get(flow.id)
            checked = record.client_route if record is not None else None
            inside = not outside_proxy_hosts(flow)
            query = tuple(req.query.items(multi=True))
            request = (req.method, req.path, req.scheme, req.host, req.port)
            found = models_plan(
                self._settings.settings.routes,
                self.models,
                request,
                header_map(req.headers),
                query,
                environment(),
                checked,
                inside,
            )
            if found is None:
                return
            if found.key is not None:
                # The list goes to the upstream it addresses with the key of a route of that
                # upstream whose models it lists (a pool's first key), never the client's.
                key = found.key
                replace_headers(req.headers, key.drop_headers, key.set_headers)
                if key.drop_query:
                    req.query = [(k, v) for k, v in query if k not in key.drop_query]
                note = f"cursor-bridge [{key.route.name}]: model list asked with its key"
                append_comment(flow, note)
            if (found.models or found.others) and inside:
                others = found.others if self._retry is not None else ()
                asked = ModelsAsked(found.models, others, found.shape, found.display)
                self._flows.open(flow.id).models = asked
        except Exception as e:
            log_internal_error("cursor-bridge: models request", e)

    async def response(self, flow: http.HTTPFlow) -> None:
        record = self._flows.get(flow.id)
        asked = record.models if record is not None else None
        if asked is None:
            return
        models, others = asked.models, asked.others
        try:
            if others:
                models = (*models, *await self._other_lists(flow, others))
            self._answer(flow, tuple(dict.fromkeys(models)), asked)
        except Exception as e:  # the upstream's answer goes on as it is
            log_internal_error("cursor-bridge: models answer", e)

    async def _other_lists(
        self, flow: http.HTTPFlow, others: tuple[ListRequest, ...]
    ) -> tuple[str, ...]:
        """The names the other upstreams list (for their routes); one log line for each that
        does not answer a list, never its key."""
        assert self._retry is not None
        retry = self._retry

        async def ask(one: ListRequest) -> RetryAnswer | str:
            fields = [(k.encode(), v.encode()) for k, v in one.headers]
            request = http.Request.make("GET", one.url, b"", fields)
            return await retry.attempt(flow, request, LIST_TIMEOUT)

        answers = await asyncio.gather(*(ask(one) for one in others))
        names: list[str] = []
        for one, got in zip(others, answers, strict=True):
            why = got if isinstance(got, str) else None
            if isinstance(got, RetryAnswer):
                if 200 <= got.status < 300:
                    try:
                        names.extend(listed_names(one.route, got.content))
                        continue
                    except (ValueError, RecursionError):
                        why = "not a model list"
                else:
                    why = f"HTTP {got.status}"
            log.info(
                "cursor-bridge [%s]: model list of %s not merged: %s",
                one.route.name,
                one.where,
                why,
            )
        return tuple(names)

    def _answer(self, flow: http.HTTPFlow, models: tuple[str, ...], asked: ModelsAsked) -> None:
        """The list in the client's dialect's shape (``merged_list``), the upstream's merged."""
        resp = flow.response
        if resp is None:
            return
        upstream = (resp.status_code, is_json(resp), resp.get_content(strict=False) or b"")
        got = merged_list(asked.shape, upstream, models, dict(asked.display))
        how = "merged with the upstream's" if got.merged else "answered by cursor-bridge"
        if not got.merged and resp.status_code >= 300:
            how += f" (upstream said HTTP {resp.status_code})"
        flow.response = json_response(200, got.body)
        append_comment(flow, f"cursor-bridge: {got.added} models {how}")
