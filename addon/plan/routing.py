"""Which route takes a request, matched once per request (sans-IO).

``match_request`` matches the client's request against the routes once: its chat route
(``route_for``) and, for Anthropic's ``…/count_tokens``, its token-count route
(``count_route``). The shell keeps the ``RouteMatch`` on the flow's record
(``addon.shell.flows.FlowRecord.match``); every later request hook reads it there, and matches
again only when an addon before it sent the request elsewhere (``RouteMatch.fits``). What the
bridge found for the route it sends the flow to (a Kiro token, the fallback's pick) travels on
the same record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan.conditions import RequestView
from addon.plan.count_tokens import count_route
from addon.plan.request import route_for
from addon.plan.values import Incoming, RouteCredentials, short
from addon.plan.wire_request import secret_values
from addon.redact import Secrets
from addon.report.outcome import FlowReport, Outcome


@dataclass(frozen=True, slots=True)
class RouteMatch:
    """What a request matched, and what it was matched from."""

    method: str
    host: str
    path: str
    """The path without its query (a client key removed from the query changes no match)."""
    view: RequestView
    """The body and path as the routes' ``model`` and ``when`` read them: a decode made for a
    ``when`` is reused by ``decide``."""
    route: Route | None
    """The chat route (``route_for``); None: no route takes the request."""
    counted: Route | None = None
    """The token-count route of an Anthropic ``…/count_tokens`` (``count_route``)."""
    outside: bool = False
    """mitmproxy's ``allow_hosts`` / ``ignore_hosts`` leave the request alone: no route's."""

    def refused(self, route: Route, status: int, message: str) -> FlowReport:
        """The flow line of a request the bridge answers ``status`` for ``route``: the
        request named by its method and path alone (a query may hold a key)."""
        return FlowReport(
            route.name,
            Outcome.REJECTED,
            client=route.client,
            upstream=route.upstream,
            reason=f"answered {status}: {short(message)}",
            fields={"request": f"{short(self.method)} {short(self.path)}"},
        )

    def fits(self, method: str, host: str, path: str) -> bool:
        """Whether this match is the request's still (``path``: with or without its query)."""
        return (method, host, path.split("?", 1)[0]) == (self.method, self.host, self.path)


def match_request(
    settings: Settings, method: str, host: str, path: str, body: bytes, outside: bool = False
) -> RouteMatch:
    """The request's routes, matched once (``outside``: the proxy's hosts leave it alone)."""
    bare = path.split("?", 1)[0]
    view = RequestView(body, path)
    route = route_for(settings, method, host, path, view)
    counted = count_route(settings.routes, method, host, bare, body)  # None: no count path
    return RouteMatch(method, host, bare, view, route, counted, outside)


def flow_secrets(
    incoming: Incoming,
    env: Mapping[str, str],
    creds: RouteCredentials | None,
    route: Route,
    routes: Sequence[Route],
) -> Secrets:
    """What a routed flow's lines are redacted with: the client's credentials, the route's key
    (a Kiro token's where it has one), and a fallback's or a pool's every key, wherever
    echoed."""
    route_key = creds.key if creds else env.get(route.key_env or "")
    others = [env.get(n) for r in routes for n in r.key_names]
    return secret_values(incoming.headers, incoming.query, route_key, *others)
