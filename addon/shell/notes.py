"""What the bridge writes about a flow — log lines, its comment, its metadata — each redacted.

Everything goes through ``addon.redact`` (credentials redacted, surrogates and control
characters escaped) and the running flows' exact secrets, so writing it never raises and
never shows a key, whatever an upstream echoed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mitmproxy import http

from addon.redact import SecretRegistry, clean, clean_data

log = logging.getLogger("cursor_bridge")

SECRETS = SecretRegistry()
"""The exact credential values of the routed flows still running (``addon.redact.Secrets``):
the rewrite addon adds a flow's when its request arrives and drops them when it is over."""


class _SecretFilter(logging.Filter):
    """Every line the bridge logs, redacted with the secrets of every flow still running: an
    upstream that echoes a key that has no key's shape ("Incorrect API key provided:
    SECRETKEY456") is caught wherever the line quotes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if len(SECRETS):
            try:
                message = record.getMessage()
            except Exception:  # a bad format is the handler's to report
                return True
            clean_message = SECRETS.redact(message)
            if clean_message != message:
                record.msg, record.args = clean_message, None
        return True


log.addFilter(_SecretFilter())

META_KEY = "cursor_bridge"
"""``flow.metadata`` key holding what the bridge did (plain JSON data, no secrets)."""
MAX_COMMENT_LINE = 2000


def append_comment(flow: http.HTTPFlow, line: str) -> None:
    line = SECRETS.get(flow.id)(clean(line, MAX_COMMENT_LINE))
    flow.comment = f"{flow.comment}\n{line}" if flow.comment else line


def set_meta(flow: http.HTTPFlow, meta: Mapping[str, Any]) -> None:
    """``flow.metadata[META_KEY]``: plain data, every string cleaned (see ``addon.redact``)."""
    flow.metadata[META_KEY] = SECRETS.get(flow.id).data(clean_data(dict(meta)))


def seal_flow(flow: http.HTTPFlow) -> None:
    """The flow is over: its comment and metadata redacted once more with its secrets (for
    what was written into the metadata directly), and the secrets forgotten."""
    secrets = SECRETS.get(flow.id)
    if secrets:
        flow.comment = secrets(flow.comment)
        meta = flow.metadata.get(META_KEY)
        if isinstance(meta, dict):
            flow.metadata[META_KEY] = secrets.data(meta)
    SECRETS.drop(flow.id)


def log_internal_error(where: str, e: BaseException) -> None:
    """One log line for an exception nobody expected (a bug): never a traceback."""
    log.error("%s: internal error (%s: %s)", clean(where, 200), type(e).__name__, clean(e, 300))
