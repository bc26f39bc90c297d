"""A second entry point, for workers behind a load balancer: ``mitmdump -s addon/main.py -s
addon/health.py`` (``scripts/gateway`` loads both; docs/deploy.md does the same by hand).

It answers ``GET`` / ``HEAD`` of ``PATH`` itself, ``200 ok``, and leaves any other flow alone.
Loaded as a script (``__mitmproxy_script__.health``), it imports nothing of the package. Why:
the answer proves what a TCP check cannot, that the worker's event loop still serves requests."""

from mitmproxy import http

PATH = "/_cursor_bridge/health"
"""The health check's path: answered here, never forwarded (no connection to the upstream is
opened); one no LLM API uses. HAProxy's ``option httpchk`` asks it every second: the kernel
completes a TCP handshake from the listen backlog even when the process is stuck."""

DUMPER_FILTER = "!(~u /_cursor_bridge/health$)"
"""A ``dumper_filter`` that keeps the health checks out of mitmdump's flow log (which shows
them otherwise); ``scripts/gateway`` sets it unless told another filter."""


class Health:
    name = "cursor_bridge_health"

    def request(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        if flow.response is None and req.method in ("GET", "HEAD") and req.path == PATH:
            flow.response = http.Response.make(
                200, b"ok\n", {"content-type": "text/plain", "cache-control": "no-store"}
            )


addons = [Health()]
