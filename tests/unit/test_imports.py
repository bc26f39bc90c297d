"""What a proxy loads at start: the layers of the design, and nothing it may never use.

A mitmdump on the built-in routes must stay close to bare mitmdump in memory (issue: within
10 MB). Libraries only some flows need — pydantic (a routes file), httpx (a retry, a Kiro
token refresh), jsonschema and json-repair (a tool call to repair), botocore (a Kiro stream),
sqlite3 (a reasoning store kept in a file), redis (one kept in Redis), prometheus_client
(``bridge_metrics``) — are imported where they
are first used.
"""

from __future__ import annotations

import subprocess
import sys

LATER = (
    "pydantic",
    "httpx",
    "jsonschema",
    "json_repair",
    "botocore",
    "sqlite3",
    "redis",
    "prometheus_client",
)


def _loaded(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return set(out.split())


def test_the_addon_starts_without_the_libraries_only_some_flows_need() -> None:
    loaded = _loaded("import addon.shell.addons")
    assert not [m for m in LATER if m in loaded]


def test_below_the_shell_nothing_imports_mitmproxy() -> None:
    """Only ``addon.shell`` talks to mitmproxy: the sans-IO layers run without it."""
    loaded = _loaded(
        "import addon.plan, addon.stream.processor, addon.report.view, addon.stores.reasoning, addon.config.routes"
    )
    assert "mitmproxy" not in loaded
    assert not [m for m in LATER if m in loaded]


def test_a_routes_file_brings_pydantic_when_it_is_read() -> None:
    loaded = _loaded(
        "import tempfile, pathlib\n"
        "from addon.config.routes_file import load_routes\n"
        "p = pathlib.Path(tempfile.mkdtemp()) / 'r.toml'\n"
        "p.write_text('[[routes]]\\nname = \"a\"\\n')\n"
        "assert load_routes(p)[0].name == 'a'"
    )
    assert "pydantic" in loaded
