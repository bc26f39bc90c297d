"""Unit tests: the time a bridge-made answer names is pinned (``addon.plan.request.clock``), so that two
answers built a second apart still compare equal byte for byte."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import addon.plan.request

PINNED = 1_764_000_000
"""What ``addon.plan.request.clock`` says in unit tests (Unix seconds)."""


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(addon.plan.request, "clock", lambda: float(PINNED))
    yield
