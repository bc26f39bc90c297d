"""What the bridge writes about a flow — log lines, its comment, its metadata — each redacted.

Everything goes through ``addon.redact`` (credentials redacted, surrogates and control
characters escaped) and the flow's exact secrets (``addon.shell.flows``; every log line gets
every running flow's), so writing it never raises and never shows a key an upstream echoed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from mitmproxy import http

from addon.redact import Secrets, clean, clean_data
from addon.shell.flows import secrets_of

log = logging.getLogger("cursor_bridge")

META_KEY = "cursor_bridge"
"""``flow.metadata`` key holding what the bridge did (plain JSON data, no secrets)."""
MAX_COMMENT_LINE = 2000


def append_comment(flow: http.HTTPFlow, line: str) -> None:
    line = secrets_of(flow.id)(clean(line, MAX_COMMENT_LINE))
    flow.comment = f"{flow.comment}\n{line}" if flow.comment else line


KEPT_META = ("client_name",)
"""What an addon sets for the whole flow before the others write its metadata (the client
key's name, ``addon.shell.client_key_gate``): ``set_meta`` keeps it."""


def set_meta(flow: http.HTTPFlow, meta: Mapping[str, Any]) -> None:
    """``flow.metadata[META_KEY]``: plain data, every string cleaned (see ``addon.redact``);
    the ``KEPT_META`` keys already there stay unless ``meta`` sets them."""
    prior = flow.metadata.get(META_KEY)
    kept = {k: prior[k] for k in KEPT_META if isinstance(prior, dict) and k in prior}
    flow.metadata[META_KEY] = secrets_of(flow.id).data(clean_data({**kept, **meta}))


def add_notes(
    flow: http.HTTPFlow, line: str | None, meta: Mapping[str, Any], *, merge: bool
) -> None:
    """``append_comment`` (``line``, if any) and ``set_meta`` in one step (the flow's secrets
    read once): ``meta`` merged into the flow's metadata (``merge``), or replacing it but for
    ``KEPT_META``."""
    secrets = secrets_of(flow.id)
    if line is not None:
        line = secrets(clean(line, MAX_COMMENT_LINE))
        flow.comment = f"{flow.comment}\n{line}" if flow.comment else line
    prior = flow.metadata.get(META_KEY)
    keep = KEPT_META if not merge else tuple(prior) if isinstance(prior, dict) else ()
    kept = {k: prior[k] for k in keep if isinstance(prior, dict) and k in prior}
    flow.metadata[META_KEY] = secrets.data(clean_data({**kept, **meta}))


def write_notes(
    flow: http.HTTPFlow, secrets: Secrets, lines: Sequence[str], meta: Mapping[str, Any]
) -> None:
    """``append_comment`` for each of ``lines``, then ``set_meta``, with the flow's
    ``secrets`` as its record holds them (``FlowRecord.secrets``)."""
    for line in lines:
        line = secrets(clean(line, MAX_COMMENT_LINE))
        flow.comment = f"{flow.comment}\n{line}" if flow.comment else line
    prior = flow.metadata.get(META_KEY)
    kept = {k: prior[k] for k in KEPT_META if isinstance(prior, dict) and k in prior}
    flow.metadata[META_KEY] = secrets.data(clean_data({**kept, **meta}))


def seal_flow(flow: http.HTTPFlow, secrets: Secrets, comments: Sequence[str] = ()) -> None:
    """The flow is over: its last ``comments`` appended, then its comment and metadata
    redacted once more with its ``secrets`` (the flow table's: for what was written into the
    metadata directly)."""
    lines = [secrets(clean(line, MAX_COMMENT_LINE)) for line in comments]
    if lines:
        flow.comment = "\n".join([flow.comment, *lines] if flow.comment else lines)
    if secrets:
        flow.comment = secrets(flow.comment)
        meta = flow.metadata.get(META_KEY)
        if isinstance(meta, dict):
            flow.metadata[META_KEY] = secrets.data(meta)


def log_internal_error(where: str, e: BaseException) -> None:
    """One log line for an exception nobody expected (a bug): never a traceback."""
    log.error("%s: internal error (%s: %s)", clean(where, 200), type(e).__name__, clean(e, 300))
