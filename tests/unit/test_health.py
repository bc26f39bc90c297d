"""``addon/health.py``: the workers' health check, answered without the upstream."""

from __future__ import annotations

from mitmproxy.test import tflow

from addon.health import PATH, Health


def test_the_health_path_is_answered_here() -> None:
    for method in ("GET", "HEAD"):
        flow = tflow.tflow()
        flow.request.method = method
        flow.request.path = PATH
        Health().request(flow)
        assert flow.response is not None
        assert flow.response.status_code == 200
        assert flow.response.content == b"ok\n"


def test_every_other_flow_is_left_alone() -> None:
    for method, path in (("POST", PATH), ("GET", PATH + "?x=1"), ("GET", "/v1/models")):
        flow = tflow.tflow()
        flow.request.method = method
        flow.request.path = path
        Health().request(flow)
        assert flow.response is None, (method, path)
