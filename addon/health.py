"""A second entry point, for workers behind a load balancer: ``mitmdump -s addon/main.py -s
addon/health.py`` (``scripts/gateway`` loads both; docs/deploy.md does the same by hand).

It answers ``GET`` (and ``HEAD``) of ``PATH`` itself, ``200 ok``, without ever opening a
connection to the upstream: HAProxy's ``option httpchk`` asks it every second, and the
answer proves what a TCP check cannot, that the worker's event loop still serves requests
(the kernel completes a TCP handshake from the listen backlog even when the process is
stuck). Any other flow is left alone. The path is one no LLM API uses; mitmproxy's flow log
still shows the checks unless ``dumper_filter`` leaves them out (``scripts/gateway`` sets
``DUMPER_FILTER`` unless told another filter).

Like ``main.py`` it is loaded as a script (``__mitmproxy_script__.health``): it imports
nothing of the package.
"""

from mitmproxy import http

PATH = "/_cursor_bridge/health"
"""The health check's path: answered here, never forwarded."""

DUMPER_FILTER = "!(~u /_cursor_bridge/health$)"
"""A ``dumper_filter`` that keeps the health checks out of mitmdump's flow log."""


class Health:
    name = "cursor_bridge_health"

    def request(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        if flow.response is None and req.method in ("GET", "HEAD") and req.path == PATH:
            flow.response = http.Response.make(
                200, b"ok\n", {"content-type": "text/plain", "cache-control": "no-store"}
            )


addons = [Health()]
