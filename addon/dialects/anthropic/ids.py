"""Tool-call ids that Anthropic accepts, made from any other dialect's ids, and back.

Contract: pure, stateless, reversible. Anthropic refuses a ``tool_use.id`` (and
so the ``tool_use_id`` of its result) that does not match ``^[a-zA-Z0-9_-]+$``;
OpenAI-compatible gateways in front of Kimi K2 send ids like
``functions.Bash:0``. Nothing per flow or per process remembers a mapping:
the id itself carries it.

- ``to_anthropic(id)``: an id Anthropic accepts that does not start with
  ``PREFIX`` is returned unchanged (Anthropic's own ``toolu_…`` ids, OpenAI's
  ``call_…``); any other string becomes ``PREFIX`` + the URL-safe base64 of its
  UTF-8 bytes without ``=`` padding (lone surrogates kept with
  ``surrogatepass``). The result always matches Anthropic's pattern, and the
  mapping is injective: unchanged ids never start with ``PREFIX``, escaped ids
  always do, and base64 is injective.
- ``from_anthropic(id)``: the inverse on everything ``to_anthropic`` produces;
  any other id (one the client made up, an Anthropic id) is returned unchanged.

Applied by the anthropic dialect only: its response and stream encoders map
every outgoing ``tool_use`` id (whatever the upstream), its request decoder maps
the ids a client sends back, and its request encoder maps the ids of a request
going to an Anthropic upstream. An Anthropic → Anthropic route therefore sees
the ids unchanged (decode then encode is the identity on them).
"""

from __future__ import annotations

import base64
import binascii
import re

PREFIX = "toolu_b64_"
"""Marks an escaped id. Valid ids that happen to start with it are escaped too."""
PATTERN = re.compile(r"[a-zA-Z0-9_-]+")
"""Anthropic's pattern for tool_use ids (matched whole)."""


def to_anthropic(tool_id: str) -> str:
    """``tool_id`` unchanged when Anthropic accepts it as is, else escaped (see the module)."""
    if PATTERN.fullmatch(tool_id) and not tool_id.startswith(PREFIX):
        return tool_id
    raw = tool_id.encode("utf-8", "surrogatepass")
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def from_anthropic(tool_id: str) -> str:
    """The id ``to_anthropic`` was given; an id it cannot have produced comes back unchanged."""
    if not tool_id.startswith(PREFIX):
        return tool_id
    encoded = tool_id[len(PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        original = raw.decode("utf-8", "surrogatepass")
    except (binascii.Error, ValueError):
        return tool_id
    # Only the canonical escape of an id that needed escaping is ours: anything else (a
    # made-up id with our prefix) stays as it is, so that no two ids decode to one.
    return original if to_anthropic(original) == tool_id else tool_id
