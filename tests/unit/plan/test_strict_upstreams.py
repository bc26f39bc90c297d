"""What the bridge sends upstream passes the real services' rules (``tests.upstream_rules``):
every recorded client request, rewritten for every upstream dialect, is a body the service of
that dialect takes (Gemini judged as a Gemini 3 model, which checks thought signatures)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan import Incoming, Rewrite, decide
from tests.realdata import FIXTURES
from tests.upstream_rules import refusal_for

CLIENTS = FIXTURES / "clients"
CLIENT_DIALECTS = {
    "claude-code-": "anthropic",
    "ai-sdk-6.0.326-anthropic-": "anthropic",
    "codex-": "openai_responses",
    "opencode-": "openai_chat",
    "ai-sdk-6.0.326-openai-compatible-": "openai_chat",
    "gemini-cli-": "gemini",
}
UPSTREAMS = [
    "anthropic",
    "openai_chat",
    "openai_responses",
    "gemini",
    "gemini_code_assist",
    "kiro",
]
GEMINI_3 = "gemini-3-pro-preview"


def _recordings() -> list[str]:
    if not CLIENTS.is_dir():
        return []
    return sorted(
        p.name
        for p in CLIENTS.glob("*.request.json")
        if any(p.name.startswith(k) for k in CLIENT_DIALECTS) and "aux-head" not in p.name
    )


def _as_gemini_3(recorded: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The request asking for a Gemini 3 model (the body's ``model``, or a Gemini path's)."""
    path, body = recorded["path"], dict(recorded["body"])
    if "/models/" in path:
        head, _, rest = path.partition("/models/")
        path = f"{head}/models/{GEMINI_3}:{rest.split(':', 1)[1]}"
    else:
        body["model"] = GEMINI_3
    return path, body


@pytest.mark.skipif(not _recordings(), reason=f"recordings not available ({CLIENTS})")
@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("name", _recordings() or ["none"])
def test_every_recorded_request_is_rewritten_into_what_the_service_takes(
    name: str, upstream: str
) -> None:
    recorded = json.loads((CLIENTS / name).read_text())
    client = next(d for k, d in CLIENT_DIALECTS.items() if name.startswith(k))
    path, body = _as_gemini_3(recorded)
    route = Route(name="strict", path="*", client=client, upstream=upstream)  # type: ignore[arg-type]
    headers = {k.lower(): v for k, v in recorded["headers"].items()}
    incoming = Incoming("POST", "api.example.com", path, headers, json.dumps(body).encode())
    decision = decide(Settings(routes=(route,)), route, incoming, {})
    assert isinstance(decision, Rewrite), decision
    sent = decision.body or json.dumps(decision.wire.body).encode()
    wire_path = decision.wire.path
    if upstream == "gemini":
        assert GEMINI_3 in wire_path  # so the signature rule is applied
    refused = refusal_for("POST", wire_path, sent)
    assert refused is None, refused.message
