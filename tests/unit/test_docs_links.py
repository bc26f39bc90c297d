"""Every relative link in README.md, docs/ and certs/README.md leads somewhere: the file exists
and, for a Markdown page, the ``#anchor`` is one of its headings (GitHub's slugs). README is
the front door: at most 120 lines, and every recipe one click away."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "certs" / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation gone, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    out: set[str] = set()
    for line in text.splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            base = slug(m.group(1))
            n, name = 0, base
            while name in out:  # a repeated heading gets -1, -2, …
                n += 1
                name = f"{base}-{n}"
            out.add(name)
    return out


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_is_a_front_door() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    assert len(text.splitlines()) <= 120
    assert text.index("scripts/run") < 400 and text.index("scripts/test") < 400
    targets = {t.partition("#")[0] for t in links(readme)}
    for page in ("docs/clients.md", "docs/upstreams.md", "docs/deploy.md", "docs/architecture.md"):
        assert page in targets, f"README does not link {page}"
    # every recipe the README used to hold is one click away, under its own heading
    assert {"cursor", "claude-code", "codex-cli", "opencode", "gemini-cli"} <= anchors(
        ROOT / "docs" / "clients.md"
    )
    assert {"anthropic", "gemini-api-or-code-assist", "kiro", "a-model-without-tool-calling"} <= (
        anchors(ROOT / "docs" / "upstreams.md")
    )
