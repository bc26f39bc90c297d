"""A key's probe decided sans-IO (issue 40, point 1): which GET probes a key of a pool (the
route's ``key_probe``, OpenRouter's ``/api/v1/key``, the model list beside the path the key's
requests go to), which headers carry the key (never the URL), and what the two answers mean —
the URL must refuse a request without a key before its answer to the key says anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from addon.config.routes import Route
from addon.config.routes_file import RoutesError, load_routes
from addon.plan.fallback import MemoryCooldowns
from addon.plan.key_errors import Blame, judge
from addon.plan.key_pool import KeyAction, key_verdict
from addon.plan.key_probe import (
    OPENROUTER_KEY,
    PROBE_TIMEOUT,
    Probe,
    ProbeResult,
    probe_for,
    probe_result,
    probe_timeout,
    probed_mark,
    probed_verdict,
)

KEYS = ("KEY_A", "KEY_B")
AMBIGUOUS = b'{"error":"unauthorized"}'


def link(**fields: object) -> Route:
    return Route(name="pool", api_key_env=("KEY_A",), **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("upstream", "sent", "path", "header"),
    [
        ("openai_chat", "/v1/chat/completions", "/v1/models", "authorization"),
        ("openai_chat", "/api/v1/chat/completions", "/api/v1/models", "authorization"),
        ("openai_responses", "/v1/responses", "/v1/models", "authorization"),
        ("anthropic", "/v1/messages?beta=true", "/v1/models", "x-api-key"),
        ("gemini", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
         "/v1beta/models", "x-goog-api-key"),
    ],
)  # fmt: skip
def test_the_probe_known_per_upstream_is_the_model_list_beside_the_path_it_sends_to(
    upstream: str, sent: str, path: str, header: str
) -> None:
    probe = probe_for(link(upstream=upstream), sent, "api.example.com")
    assert probe is not None
    assert (probe.path, probe.key_header) == (path, header)
    assert probe.label == f"GET {path}"


def test_anthropic_probes_carry_its_version_and_the_key_only_in_the_second_request() -> None:
    probe = probe_for(link(upstream="anthropic"), "/v1/messages", "api.anthropic.com")
    assert probe is not None
    assert ("anthropic-version", "2023-06-01") in probe.keyless()
    assert not [h for h, _ in probe.keyless() if h == "x-api-key"]
    assert ("x-api-key", "sk-ant-x") in probe.keyed("sk-ant-x")


def test_a_key_goes_in_the_upstream_dialects_header_never_the_url() -> None:
    gemini = probe_for(link(upstream="gemini"), "/v1beta/models/m:generateContent", "g")
    openai = probe_for(link(), "/v1/chat/completions", "api.openai.com")
    assert gemini is not None and openai is not None
    assert ("x-goog-api-key", "AIza-k") in gemini.keyed("AIza-k")
    assert "?" not in gemini.path
    assert ("authorization", "Bearer sk-k") in openai.keyed("sk-k")


@pytest.mark.parametrize("host", ["openrouter.ai", "OpenRouter.ai.", "eu.openrouter.ai"])
def test_openrouter_is_probed_at_its_key_endpoint(host: str) -> None:
    probe = probe_for(link(), "/api/v1/chat/completions", host)
    assert probe is not None and probe.path == OPENROUTER_KEY == "/api/v1/key"


def test_a_routes_key_probe_wins_over_what_is_known() -> None:
    probe = probe_for(link(key_probe="/me"), "/api/v1/chat/completions", "openrouter.ai")
    assert probe is not None and probe.path == "/me"


@pytest.mark.parametrize(
    ("upstream", "sent"),
    [("kiro", "/generateAssistantResponse"), ("openai_chat", "/v1/completions"),
     ("gemini_code_assist", "/v1internal:streamGenerateContent")],
)  # fmt: skip
def test_no_probe_where_none_is_known(upstream: str, sent: str) -> None:
    route = Route(name="k", upstream=upstream, api_key_env=("K",))  # type: ignore[arg-type]
    assert probe_for(route, sent, "example.com") is None


@pytest.mark.parametrize(
    ("keyless", "keyed", "result"),
    [
        (401, 401, ProbeResult.REFUSED),
        (403, 403, ProbeResult.REFUSED),
        (401, 403, ProbeResult.REFUSED),
        (401, 200, ProbeResult.ACCEPTED),
        (403, 204, ProbeResult.ACCEPTED),
        # The URL answers without a key: whatever it says to the key proves nothing.
        (200, 401, ProbeResult.NO_PROOF),
        (200, 200, ProbeResult.NO_PROOF),
        (404, 401, ProbeResult.NO_PROOF),
        (None, 401, ProbeResult.NO_PROOF),
        # Refused without a key, then no answer or another one: nothing known.
        (401, None, ProbeResult.NO_PROOF),
        (401, 429, ProbeResult.NO_PROOF),
        (401, 500, ProbeResult.NO_PROOF),
        (401, 404, ProbeResult.NO_PROOF),
    ],
)
def test_a_probe_proves_something_only_when_the_url_refuses_a_request_without_a_key(
    keyless: int | None, keyed: int | None, result: ProbeResult
) -> None:
    assert probe_result(keyless, keyed) is result


def test_an_ambiguous_401_the_probe_refuses_is_the_keys_fault_one_key_per_request() -> None:
    route = link()
    verdict = key_verdict(route, 401, AMBIGUOUS, revoked_already=False)
    assert verdict is not None and verdict.action is KeyAction.ANSWER
    assert verdict.judgement.blame is Blame.UNKNOWN
    probe = Probe("/api/v1/key", "authorization")
    refused = probed_verdict(verdict, probe, ProbeResult.REFUSED, revoked_already=False)
    assert refused.action is KeyAction.REVOKE and refused.judgement.blame is Blame.KEY
    assert refused.detail(401, 3600) == (
        "HTTP 401 and its probe GET /api/v1/key refused the key, revoked for 3600 s"
    )
    again = probed_verdict(verdict, probe, ProbeResult.REFUSED, revoked_already=True)
    assert again.action is KeyAction.PASS_ON
    for result in (ProbeResult.ACCEPTED, ProbeResult.NO_PROOF):
        assert probed_verdict(verdict, probe, result, revoked_already=False) is verdict


def test_only_a_401_or_403_the_table_does_not_name_asks_for_a_probe() -> None:
    named = judge(401, b'{"error":{"code":"invalid_api_key","message":"x"}}')
    assert named is not None and named.blame is Blame.KEY
    assert judge(401, AMBIGUOUS) is not None
    assert judge(401, AMBIGUOUS).blame is Blame.UNKNOWN  # type: ignore[union-attr]
    assert judge(429, AMBIGUOUS) is None


def test_the_probes_timeout_is_short_and_never_past_the_routes() -> None:
    assert probe_timeout(link()) == PROBE_TIMEOUT
    assert probe_timeout(link(timeout=2.0)) == 2.0


def test_a_probe_that_passed_is_remembered_under_its_own_entry() -> None:
    cooldowns = MemoryCooldowns(lambda: 100.0)
    cooldowns.cool(probed_mark("pool#KEY_A"), 60)
    assert cooldowns.cooling("probed:pool#KEY_A") and not cooldowns.cooling("pool#KEY_A")
    cooldowns.clear("probed:pool#KEY_A")
    assert not cooldowns.cooling("probed:pool#KEY_A")


@pytest.mark.parametrize("bad", ["api/v1/key", "//evil.example/x", "/v1/models?key=x", "/a b"])
def test_a_key_probe_is_a_plain_absolute_path(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match=r"key_probe|path"):
        Route(name="p", api_key_env=KEYS, key_probe=bad)
    file = tmp_path / "routes.toml"
    file.write_text(f'[[routes]]\nname = "p"\napi_key_env = ["A", "B"]\nkey_probe = "{bad}"\n')
    with pytest.raises(RoutesError, match="key_probe"):
        load_routes(file)


def test_a_routes_file_names_a_key_probe(tmp_path: Path) -> None:
    file = tmp_path / "routes.toml"
    file.write_text('[[routes]]\nname = "p"\napi_key_env = ["A", "B"]\nkey_probe = "/api/v1/key"\n')
    (route,) = load_routes(file)
    assert route.key_probe == "/api/v1/key"
