"""The client keys addon (``bridge_client_keys``): a request that would spend a key of the
proxy's must carry a client's key, or is answered 401 in its own dialect before any other
addon acts on it (no fallback relay, no Kiro token read, no upstream call).

What is checked and how is ``addon.plan.client_keys``; the file is ``addon.client_keys``'s.
Here: the option, the file read again when it changes, the flow's record and log line."""

from __future__ import annotations

import os
import time
from typing import Any

from mitmproxy import command, ctx, http

from addon.client_keys import ClientKeys, ClientKeysError, load_client_keys
from addon.config import CLIENT_KEY_OPTIONS
from addon.outcome import FlowReport
from addon.plan import RequestView, short
from addon.plan.client_keys import Admitted, check_client_key, guarded_route
from addon.redact import clean
from addon.shell.headers import header_map, json_response
from addon.shell.host_filter import outside_proxy_hosts
from addon.shell.notes import append_comment, log, log_internal_error, set_meta
from addon.shell.options import OptionChecks, add_options, environment
from addon.shell.report import Report
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

    def request(self, flow: http.HTTPFlow) -> None:
        """A guarded request checked; the file read again first when its modification time,
        size or inode changed (one ``stat`` per guarded request). The admitted client's name
        goes on the flow's record (``FlowRecord.client_name``) and in its metadata
        (``client_name``); a refused request gets one log line, naming the route and where a
        key was looked for, never a key."""
        if self.keys is None or flow.response is not None or flow.error is not None:
            return
        if not flow.live:
            return
        started = time.perf_counter_ns()
        try:
            req = flow.request
            view = RequestView(req.get_content(strict=False) or b"", req.path)
            route = guarded_route(self._settings.settings, req.method, req.host, req.path, view)
            if route is None or outside_proxy_hosts(flow):
                return
            stamp = stamp_of(self._path)
            if stamp != self._stamp:
                self._reload(stamp)
            keys = self.keys
            assert keys is not None
            query = tuple(req.query.items(multi=True))
            found = check_client_key(keys, route, header_map(req.headers), query)
        except Exception as e:
            log_internal_error("cursor-bridge: client keys", e)
            flow.response = json_response(500, FAILED_CLOSED)
            return
        if isinstance(found, Admitted):
            self.report.flows.open(flow.id).client_name = found.name
            set_meta(flow, {"client_name": found.name})
            return
        try:
            flow.response = json_response(found.status, found.body)
            label = f"cursor-bridge [{route.name}]"
            append_comment(flow, f"{label}: answered {found.status}: {found.message}")
            set_meta(flow, {"route": route.name, "action": "rejected", "error": found.message})
            self.report.state.count("rejected")
            bare = req.path.split("?", 1)[0]  # a query may hold a key
            line = FlowReport(
                route.name,
                "rejected",
                client=route.client,
                upstream=route.upstream,
                spent_ns=time.perf_counter_ns() - started,
                reason=f"answered {found.status}: {short(found.message)}",
                fields={"request": f"{short(req.method)} {short(bare)}"},
            )
            self.report.close(flow, line, line=True)
        except Exception as e:
            log_internal_error(f"cursor-bridge [{route.name}]: client keys", e)
