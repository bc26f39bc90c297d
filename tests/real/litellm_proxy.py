"""Start and stop LiteLLM's proxy on 127.0.0.1 in front of a llama-server, for tests (issue 28).

``scripts/litellm_proxy.py`` installs the pinned ``litellm[proxy]`` into its own venv in the
cache; ``locate()`` asks it where (installing first unless $INSTALL_ENV is ``0``), and
``LiteLLMProxy.start()`` writes a config with one model, ``MODEL``, pointing at the
llama-server (LiteLLM serves ``/v1/chat/completions``, ``/v1/messages`` and
``/v1/responses`` for it), runs it offline on a free loopback port with a master key and
waits, bounded, for ``/health/liveliness``. Glossary: *unavailable* means LiteLLM cannot be
installed here (a skip with its reason, never a pass).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from tests.real.llama_cpp import HOST, free_port
from tests.real.process import log_tail, prepared, stop_process, wait_ok

REPO = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO / "scripts" / "litellm_proxy.py"
# Set to 0 to never install LiteLLM from a test run (then a missing install is a skip).
INSTALL_ENV = "CURSOR_BRIDGE_INSTALL_LITELLM"
MODEL = "smollm2"
LOCKED_MODEL = "smollm2-locked"
MASTER_KEY = "sk-cursor-bridge-real-tests"
# The model names the client drivers of ``bridge_clients`` send: LiteLLM knows them all.
ALIASES = ("claude-sonnet-4.6", "claude-sonnet-4-6", "gpt-5.5", "gemini-2.5-pro")


class Unavailable(RuntimeError):
    """LiteLLM is not installed and cannot be installed here; the message says why."""


@dataclass(frozen=True)
class Install:
    version: str
    program: Path


def locate(install: bool | None = None) -> Install:
    """The cached LiteLLM; installed first if ``install`` (default: unless $INSTALL_ENV=0)."""
    if install is None:
        install = os.environ.get(INSTALL_ENV) != "0"
    info = prepared(
        INSTALL_SCRIPT,
        install,
        f"LiteLLM not installed: run `python scripts/litellm_proxy.py` (or unset {INSTALL_ENV})",
        "LiteLLM cannot be installed here: pip failed (no package index?)",
        Unavailable,
    )
    return Install(version=info["version"], program=Path(info["litellm"]))


def config_for(
    llama_base_url: str, locked_base_url: str | None = None, aliases: tuple[str, ...] = ALIASES
) -> dict[str, object]:
    """``MODEL`` and its ``aliases`` routed to llama-server's OpenAI-compatible API (chat,
    messages, responses; LiteLLM's own Gemini endpoints translate to its chat).

    With ``locked_base_url`` (a llama-server started with ``--api-key``) also
    ``LOCKED_MODEL``, sent there with a wrong key: LiteLLM's own 401 for every request. Any
    other model name is LiteLLM's unknown-model error.
    """

    def model(name: str, base_url: str, key: str) -> dict[str, object]:
        # ``openai/<MODEL>`` whatever the alias: LiteLLM applies a known model's rules
        # (``openai/gpt-5.5`` refuses ``temperature: 0``).
        params = {"model": f"openai/{MODEL}", "api_base": f"{base_url}/v1", "api_key": key}
        return {"model_name": name, "litellm_params": params}

    models = [model(name, llama_base_url, "unused") for name in (MODEL, *aliases)]
    if locked_base_url is not None:
        models.append(model(LOCKED_MODEL, locked_base_url, "sk-wrong-upstream-key"))
    # No cooldown: else the locked model's first 401 makes the next requests a 429.
    return {"model_list": models, "router_settings": {"disable_cooldowns": True}}


@dataclass
class LiteLLMProxy:
    """One running LiteLLM proxy; ``base_url`` has no trailing slash and no ``/v1``."""

    install: Install
    port: int
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    workdir: tempfile.TemporaryDirectory[str]
    master_key: str = MASTER_KEY

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @classmethod
    def start(
        cls,
        llama_base_url: str,
        install: Install | None = None,
        *,
        locked_base_url: str | None = None,
        timeout: float = 180.0,
    ) -> LiteLLMProxy:
        install = install or locate()
        port = free_port()
        workdir = tempfile.TemporaryDirectory(prefix="cursor-bridge-litellm-")
        config = Path(workdir.name) / "litellm.yaml"
        # JSON is YAML: no YAML writer needed.
        config.write_text(json.dumps(config_for(llama_base_url, locked_base_url), indent=1))
        env = {
            **{k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")},
            # Offline: the bundled model cost map, not the one on GitHub.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            # Without a master key LiteLLM refuses to start (UnsafeMasterKeyError).
            "LITELLM_MASTER_KEY": MASTER_KEY,
            "NO_PROXY": "127.0.0.1,localhost",
        }
        argv = [
            str(install.program),
            "--config", str(config),
            "--host", HOST,
            "--port", str(port),
            "--num_workers", "1",
        ]  # fmt: skip
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            cwd=workdir.name,
            start_new_session=True,
        )
        proxy = cls(install=install, port=port, process=process, log=log, workdir=workdir)
        try:
            proxy.wait_ready(timeout)
        except BaseException:
            proxy.stop()
            raise
        return proxy

    def wait_ready(self, timeout: float) -> None:
        url = f"{self.base_url}/health/liveliness"
        wait_ok(self.process, url, "LiteLLM", self.log, timeout, 0.5)

    def log_text(self, limit: int = 8000) -> str:
        return log_tail(self.log, limit)

    def stop(self, timeout: float = 15.0) -> None:
        # Its own session: the group holds LiteLLM and any worker it forked, nothing else.
        stop_process(self.process, timeout, group=True)
        self.log.close()
        self.workdir.cleanup()

    def __enter__(self) -> LiteLLMProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
