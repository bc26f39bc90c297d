"""The real Claude Code's model discovery through the bridge (issue 44 point 3, ``expose_as``).

With ``CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1`` Claude Code 2.1.197 asks
``GET {ANTHROPIC_BASE_URL}/v1/models?limit=1000`` at start, keeps the ids starting ``claude``
or ``anthropic`` and caches them in ``$CLAUDE_CONFIG_DIR/cache/gateway-models.json`` (its
``/model`` picker's "From gateway" entries). The bridge before a home Anthropic gateway
exposes a DeepSeek-like service's models as ``claude-{model}``: the cache must hold them, and
``--model claude-deepseek-reasoner`` must reach DeepSeek as ``deepseek-reasoner``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, Reply, ScriptedUpstream
from tests.real.clients.loop import answer
from tests.real.clients.programs import Program, base_env, run

KEY = "sk-ant-real-client-models-key"
DS_KEY = "sk-deepseek-real-client-key"
DS_ENV = "CB_REAL_EXPOSE_DS_KEY"
HOME_LIST = {
    "data": [{"type": "model", "id": "claude-sonnet-4-6", "display_name": "Claude Sonnet 4.6",
              "created_at": "2026-02-17T00:00:00Z", "lifecycle": "active"}],
    "has_more": False, "first_id": "claude-sonnet-4-6", "last_id": "claude-sonnet-4-6",
}  # fmt: skip


def deepseek(rec: Recorded) -> Reply:
    if rec.headers.get("authorization") != f"Bearer {DS_KEY}":
        return JSONReply({"error": {"message": "Authentication Fails"}}, status=401)
    if rec.method == "GET":
        return JSONReply({"object": "list", "data": [{"id": "deepseek-chat", "object": "model"}]})
    body = rec.json()
    return answer("openai_chat", bool(body.get("stream")), f"DEEPSEEK SAYS {body['model']}")


def home(rec: Recorded) -> Reply:
    if rec.method == "GET":
        return JSONReply(HOME_LIST)
    body = rec.json()
    return answer("anthropic", bool(body.get("stream")), "home answers")


ROUTES = """
[[routes]]
name = "claude-home"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"

[[routes]]
name = "deepseek-for-claude-code"
path = "*/v1/messages"
client = "anthropic"
upstream = "openai_chat"
upstream_url = "{ds}"
api_key_env = "{env}"
model_map = {{"*haiku*" = "deepseek-chat", "*" = "deepseek-reasoner"}}
expose_as = "claude-{{model}}"
"""


def test_claude_code_discovers_the_exposed_models_and_reaches_deepseek(
    program: Callable[[str], Program], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = program("claude-code")
    home_dir, project = tmp_path / "home", tmp_path / "project"
    home_dir.mkdir()
    project.mkdir()
    with ScriptedUpstream() as ds, ScriptedUpstream() as gateway:
        ds.script, gateway.script = deepseek, home
        routes = tmp_path / "routes.toml"
        routes.write_text(ROUTES.format(ds=ds.base_url, env=DS_ENV))
        monkeypatch.setenv(DS_ENV, DS_KEY)
        with Proxy(gateway.port, {"bridge_routes": str(routes)}) as proxy:
            config = home_dir / ".claude"
            env = base_env(home_dir) | {
                "ANTHROPIC_BASE_URL": proxy.base_url,
                "ANTHROPIC_API_KEY": KEY,
                "CLAUDE_CONFIG_DIR": str(config),
                "CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
                "DISABLE_ERROR_REPORTING": "1",
                "CLAUDE_CODE_MAX_RETRIES": "1",
            }
            argv = [str(found.binary), "-p", "hi", "--output-format", "json",
                    "--max-turns", "1", "--model", "claude-deepseek-reasoner"]  # fmt: skip
            done = run(argv, cwd=project, env=env)
            log = proxy.log_text()
        cache = config / "cache" / "gateway-models.json"
        assert cache.exists(), f"{done.describe()}\n{log}"
        cached = json.loads(cache.read_text())
        assert cached["baseUrl"] == proxy.base_url
        ids = [m["id"] for m in cached["models"]]
        assert {"claude-deepseek-chat", "claude-deepseek-reasoner"} <= set(ids), ids
        assert "claude-sonnet-4-6" in ids and not [i for i in ids if i.startswith("deepseek")]
        shown = {m["id"]: m.get("display_name") for m in cached["models"]}
        assert shown["claude-deepseek-reasoner"] == "deepseek-reasoner"
        gets = [r for r in gateway.requests if r.method == "GET"]
        assert [urlsplit(r.path).path for r in gets] == ["/v1/models"], gets
        assert "limit=1000" in gets[0].path
        posts = [r.json()["model"] for r in ds.requests if r.method == "POST"]
        assert "deepseek-reasoner" in posts, f"{done.describe()}\n{log}"
        assert "DEEPSEEK SAYS deepseek-reasoner" in done.stdout, done.describe()
        assert DS_KEY not in log and KEY not in log
