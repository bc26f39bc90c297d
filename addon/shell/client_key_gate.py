"""The client keys addon (``bridge_client_keys``): a request that would spend a key of the
proxy's must carry a client's key, or is answered 401 in its own dialect before any other
addon acts on it (no fallback relay, no Kiro token read, no upstream call).

A client key never goes upstream: once checked (or on a request no route guards), every header
and query parameter holding a listed client key is removed from the flow's request, before any
other addon reads it (the route's own key, where it has one, is set by the addon that sends).
What is checked and how is ``addon.plan.spending``; the file is ``addon.config.client_keys``'s.
Here: the option, the file read again when it changes, the flow's record and log line."""

from __future__ import annotations

import os
import time
from typing import Any

from mitmproxy import command, ctx, http

from addon.config.client_keys import ClientKeys, ClientKeysError, load_client_keys
from addon.config.options import CLIENT_KEY_OPTIONS
from addon.plan import Reject
from addon.plan.spending import (
    Admitted,
    admit,
    gate,
    unguarded_warning,
)
from addon.redact import clean
from addon.report.outcome import Count
from addon.shell.headers import header_map, json_response
from addon.shell.notes import add_notes, append_comment, log, log_internal_error
from addon.shell.option_checks import OptionChecks, add_options, environment
from addon.shell.reporter import Report
from addon.shell.settings import BridgeSettings

type Stamp = tuple[int, int, int] | None
"""A file's modification time (ns), size and inode; None: it cannot be read."""

FAILED_CLOSED = (
    b'{"error":{"message":"cursor-bridge: the client key check failed",'
    b'"type":"server_error","code":"bridge_internal_error"}}'
)
"""The answer when the check itself failed (a bug): refused, never let through unchecked."""


def stamp_of(path: str) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class ClientKeysGate(OptionChecks):
    name = "cursor_bridge_client_keys"

    def __init__(self, settings: BridgeSettings, report: Report) -> None:
        self._settings = settings
        self.report = report
        self.keys: ClientKeys | None = None
        """The clients in use; None: no ``bridge_client_keys``, nothing is checked."""
        self._path = ""
        self._stamp: Stamp = None
        """The keys file as it was when last read (well or not: a bad file warns once)."""

    def load(self, loader: Any) -> None:
        add_options(loader, CLIENT_KEY_OPTIONS)

    def running(self) -> None:
        super().running()
        self._warn_unguarded()

    def _warn_unguarded(self) -> None:
        """One warning line when client keys are set and no route spends a key of the proxy's
        (every request is then served)."""
        if self.keys is None:
            return
        warning = unguarded_warning(self._settings.settings.routes)
        if warning is not None:
            log.warning("cursor-bridge: %s", warning)

    def configure(self, updated: set[str]) -> None:
        """The option, parsed: a bad file refuses the value (at start mitmdump exits with one
        error line naming the problem)."""
        if "bridge_client_keys" not in updated:
            return
        path = str(ctx.options.bridge_client_keys or "").strip()
        if not path:
            self.keys, self._path, self._stamp = None, "", None
            return
        stamp = stamp_of(path)
        try:
            keys = load_client_keys(path, environment())
        except ClientKeysError as e:
            self.refuse(str(e))
            return
        self.keys, self._path, self._stamp = keys, path, stamp
        log.info("cursor-bridge: %d client key(s) from %s", len(keys.entries), clean(path, 1000))
        if self._running:  # set while running (at start: ``running``, once the routes are read)
            self._warn_unguarded()

    @command.command("bridge.reload_client_keys")  # type: ignore[untyped-decorator]
    def reload_client_keys(self) -> str:
        """Read the bridge_client_keys file again now (it is also read again when it
        changes); a bad file keeps the keys in use."""
        if not self._path:
            return "cursor-bridge: no bridge_client_keys file"
        return self._reload(stamp_of(self._path))

    def _reload(self, stamp: Stamp) -> str:
        """The file read again; a bad one keeps the keys in use, with one warning line."""
        self._stamp = stamp
        try:
            keys = load_client_keys(self._path, environment())
        except ClientKeysError as e:
            text = f"cursor-bridge: client keys not reloaded, the previous ones stay: {e}"
            log.warning("%s", clean(text, 2000))
            return text
        self.keys = keys
        text = f"cursor-bridge: {len(keys.entries)} client key(s) from {self._path}"
        log.info("%s", clean(text, 2000))
        return text

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """A request whose body mitmproxy streams (``stream_large_bodies``) goes upstream before
        its body is read (and before ``request``): its client keys are removed now."""
        if self.keys is not None and flow.live and flow.request.stream:
            self._strip(flow)

    def request(self, flow: http.HTTPFlow) -> None:
        """A guarded request checked; the file read again first when its modification time,
        size or inode changed (one ``stat`` per guarded request). The admitted client's name
        goes on the flow's record (``FlowRecord.client_name``) and in its metadata
        (``client_name``); a refused request gets one log line, naming the route and where a
        key was looked for, never a key. Then, checked or not guarded, the request loses every
        client key it carries. What to do is ``addon.plan.spending.gate``'s; here it is
        applied."""
        if self.keys is None or flow.response is not None or flow.error is not None:
            return
        if not flow.live or flow.request.stream:
            return  # a streamed request went upstream already (``requestheaders``)
        started = time.perf_counter_ns()
        req = flow.request
        try:
            headers, query = header_map(req.headers), tuple(req.query.items(multi=True))
            settings = self._settings.settings
            matched = self.report.flows.route_match(flow, settings)  # the record's, for all
            fields = [(k, v) for k in req.headers for v in req.headers.get_all(k)]
            outcome = admit(settings, matched, headers, fields, query, self._current)
            found = outcome.found
            if isinstance(found, Reject):
                flow.response = http.Response.make(
                    found.status, found.body, {"content-type": "application/json"}
                )
            else:
                for name in outcome.strip.headers:
                    req.headers.pop(name, None)
                if outcome.strip.query:
                    req.query = [(k, v) for k, v in query if k not in outcome.strip.query]
            if isinstance(found, Admitted):
                record = self.report.flows.open(flow.id)
                record.client_name, record.client_route = found.name, found.route
        except Exception as e:
            log_internal_error("cursor-bridge: client keys", e)
            flow.response = json_response(500, FAILED_CLOSED)
            return
        try:
            if outcome.comment is not None or outcome.meta is not None:
                add_notes(flow, outcome.comment, outcome.meta or {}, merge=True)
            if outcome.report is not None:
                self.report.state.count(Count.REJECTED)
                outcome.report.spent_ns = time.perf_counter_ns() - started
                self.report.close(flow, outcome.report, line=True)
        except Exception as e:
            log_internal_error("cursor-bridge: client keys", e)

    def _current(self, guarded: bool) -> ClientKeys:
        """The keys in use; a guarded request reads the file again first when it changed."""
        if guarded:
            stamp = stamp_of(self._path)
            if stamp != self._stamp:
                self._reload(stamp)
        keys = self.keys
        assert keys is not None
        return keys

    def _strip(self, flow: http.HTTPFlow) -> None:
        """Every header and query parameter holding a client key removed from the request
        (``client_keys_in``); the comment names them, never a key."""
        keys, req = self.keys, flow.request
        if keys is None:
            return
        query = tuple(req.query.items(multi=True))
        fields = [(name, value) for name in req.headers for value in req.headers.get_all(name)]
        outcome = gate(keys, None, {}, fields, query)
        for name in outcome.strip.headers:
            req.headers.pop(name, None)
        if outcome.strip.query:
            req.query = [(k, v) for k, v in query if k not in outcome.strip.query]
        if outcome.comment is not None:
            append_comment(flow, outcome.comment)
