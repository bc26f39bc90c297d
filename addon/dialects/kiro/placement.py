"""Where a Kiro request goes and what a route adds: path, framing, ``modelId``, ``prepare``.

Contract: pure functions over ``Request`` and ``Target``; no body codec (``request`` /
``request_encode``)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Literal

from addon.dialects.base import Query, Target, endpoint_base, split_path
from addon.model import Notes, OpaqueTool, Request, Tool

from .request import SIDE

PATH = "/generateAssistantResponse"
DESCRIPTION_LIMIT = 10240
"""Kiro refuses tool descriptions longer than this (characters; a route may set its own)."""
MODEL_IDS: dict[str, str] = {
    "claude-sonnet-4-5": "claude-sonnet-4.5",
    "claude-sonnet-4-5-20250929": "claude-sonnet-4.5",
    "claude-haiku-4-5": "claude-haiku-4.5",
    "claude-haiku-4-5-20251001": "claude-haiku-4.5",
    "claude-opus-4-5": "claude-opus-4.5",
    "claude-opus-4-5-20251101": "claude-opus-4.5",
    "claude-sonnet-4": "claude-sonnet-4",
    "claude-sonnet-4-20250514": "claude-sonnet-4",
    "claude-3-7-sonnet-20250219": "CLAUDE_3_7_SONNET_20250219_V1_0",
    "claude-3-7-sonnet-latest": "CLAUDE_3_7_SONNET_20250219_V1_0",
}
"""Client model names → Kiro ``modelId`` (the Kiro IDE's own names, as in its requests:
``claude-sonnet-4.5``, ``claude-haiku-4.5``, ``claude-opus-4.5``, ``auto``, ``simple-task``)."""
_DASHED = re.compile(r"(claude-(?:sonnet|opus|haiku)-\d+)-(\d)(?:-\d{8})?")
_DATED = re.compile(r"(claude-(?:sonnet|opus|haiku)-\d+)-\d{8}")


def model_id(name: str, route_map: Mapping[str, str] | None = None) -> str:
    """The Kiro ``modelId`` for a client's model name: ``MODEL_IDS``, then Anthropic's dated and
    dashed names such as ``claude-sonnet-4-5-20250929`` → ``claude-sonnet-4.5``; other names
    go as they are. A route's ``model_map`` comes first (applied for every upstream by
    ``addon.plan.request.transform``): a name it chose is kept (``route_map``)."""
    if route_map and name in route_map:
        return route_map[name]
    if name in MODEL_IDS:
        return MODEL_IDS[name]
    if m := _DASHED.fullmatch(name):
        return f"{m[1]}.{m[2]}"
    if m := _DATED.fullmatch(name):
        return m[1]
    return name


def prepare(
    req: Request,
    notes: Notes,
    *,
    model_map: Mapping[str, str] | None = None,
    profile_arn: str | None = None,
    description_limit: int = DESCRIPTION_LIMIT,
    keep_model: bool = False,
) -> Request:
    """What a route to Kiro adds before encoding: the model name mapped to Kiro's ``modelId``
    (``keep_model``: the route's ``model_map`` already named it, sent as it is), tool
    descriptions cut to ``description_limit`` characters (ending in ``...``), and the
    ``profileArn`` to send (kept in the private table)."""
    model = req.model if keep_model else model_id(req.model, model_map)
    if model != req.model:
        notes[f"model {req.model} → Kiro modelId {model}"] += 1
    tools = req.tools
    if tools:
        cut = 0
        out: list[Tool | OpaqueTool] = []
        for t in tools:
            if isinstance(t, Tool) and t.description and len(t.description) > description_limit:
                keep = max(0, description_limit - 3)
                t = dataclasses.replace(t, description=t.description[:keep] + "...")
                cut += 1
            out.append(t)
        if cut:
            notes[f"tool descriptions cut to {description_limit} characters (Kiro's limit)"] += cut
            tools = tuple(out)
    extra = req.extra
    if profile_arn is not None:
        side = extra.get(SIDE)
        extra = {
            **extra,
            SIDE: {**(side if isinstance(side, dict) else {}), "profile_arn": profile_arn},
        }
    return dataclasses.replace(req, model=model, tools=tools, extra=extra)


def place(req: Request, t: Target) -> tuple[str, Query]:
    """``{base}/generateAssistantResponse``, no query (the client's path without its endpoint
    and API version: ``/v1/chat/completions`` → ``/generateAssistantResponse``); a route's
    ``upstream_path`` wins; same dialect: the client's path and query."""
    if t.upstream_path is not None:
        return split_path(t.upstream_path, t.query if t.same_dialect else ())
    if t.same_dialect:
        return t.path, t.query
    return endpoint_base(t) + PATH, ()


def framing(query: Query) -> Literal["aws_eventstream"]:
    """Kiro always answers in AWS event-stream frames, whatever was asked."""
    return "aws_eventstream"
