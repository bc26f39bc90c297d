"""Client noise: lines a client writes into its prompt for its own vendor's billing or
telemetry, left out when the request goes to another vendor (docs/caching.md#client-noise).

Claude Code puts ``x-anthropic-billing-header: cc_version=…; cc_entrypoint=…;`` in a system
block of its own. It means nothing to another upstream, and a version that adds a per-request
value to it (``cch=…``) would change the prompt's first bytes on every turn, so no prefix
cache upstream of it would ever hit. Anthropic's own API reads it: there it is kept byte for
byte (the request is not touched).

Contract: pure over ``addon.model``; ``noise_for`` says whether a vendor's lines are noise for
an upstream, ``strip_client_noise`` returns the request without them and names what it left out.
"""

from __future__ import annotations

import dataclasses
import re

from addon.dialects.names import ANTHROPIC
from addon.model import Message, Notes, Part, Request, Text

NOISE = re.compile(r"^[ \t]*x-anthropic-billing-header:[^\n]*(?:\n|\Z)", re.M | re.I)
"""A billing line of Claude Code's, wherever in a system text it stands (its own block today)."""

ANTHROPIC_HOSTS = ("anthropic.com",)
"""Hosts of the vendor the billing line is written for: there it is kept."""


def noise_for(upstream: str, host: str, route_says: bool | None = None) -> bool:
    """Whether the client's vendor lines are noise on this upstream: as the route says
    (``strip_client_noise``), else everywhere but Anthropic's own API (an Anthropic-dialect
    server of another vendor, a local model behind an Anthropic endpoint, included)."""
    if route_says is not None:
        return route_says
    host = host.lower().rstrip(".")
    own = any(host == h or host.endswith("." + h) for h in ANTHROPIC_HOSTS)
    return not (upstream == ANTHROPIC and own)


def strip_client_noise(req: Request, notes: Notes) -> Request:
    """``req`` without the billing lines in its system messages; a block left empty by them
    is left out whole. Unchanged (the same object) when it has none."""
    messages: list[Message] = []
    found = 0
    for m in req.messages:
        if m.role != "system" or not any(
            isinstance(p, Text) and NOISE.search(p.text) for p in m.parts
        ):
            messages.append(m)
            continue
        parts: list[Part] = []
        for p in m.parts:
            if not isinstance(p, Text):
                parts.append(p)
                continue
            text, n = NOISE.subn("", p.text)
            found += n
            if text.strip() or not n:
                parts.append(dataclasses.replace(p, text=text) if n else p)
        if parts:
            messages.append(dataclasses.replace(m, parts=tuple(parts)))
    if not found:
        return req
    notes[f"client billing line left out ({found}): not sent to another vendor"] += 1
    return dataclasses.replace(req, messages=tuple(messages))
