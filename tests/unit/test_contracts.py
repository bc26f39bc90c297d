"""Typed contracts (issue 41 point 3): outcomes, counters, the notes that drive control and the
dialects' names are enums or typed records defined once, so a misspelt or renamed one fails
where it is written (mypy --strict, or at once at run time), never silently in a count."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest
from mypy import api as mypy_api

from addon.dialects import DIALECTS, DialectName, names
from addon.plan.wire_request import ENV_KEY_NOTE, RouteKey, credentials
from addon.report.counters import BridgeState
from addon.report.outcome import OUTCOMES, Count, FlowReport, Outcome
from addon.transforms.repair import ToolSchemas, repair_call

ROOT = Path(__file__).resolve().parents[2]
ADDON = ROOT / "addon"
GROUPED = {Count.REPAIRS, Count.RESTORES, Count.NOT_REWRITTEN}
"""Counters ``bridge.stats`` writes in their own place; every other one goes under ``other:``."""


def _sources(skip: str | None = None) -> list[Path]:
    return [p for p in sorted(ADDON.rglob("*.py")) if skip is None or skip not in p.parts]


# --------------------------------------------------------------------------- counters


def test_count_takes_only_a_counter_name() -> None:
    state = BridgeState()
    with pytest.raises(TypeError, match="not a counter"):
        state.count("requests rewritten")  # type: ignore[arg-type]
    state.count(Count.REQUESTS_REWRITTEN, 2)
    assert state.counters == Counter({"requests rewritten": 2})
    assert "other: 2 requests rewritten" in state.summary()  # the text users read, unchanged


def test_the_docs_list_every_counter_and_only_those() -> None:
    """docs/observability.md names the counters under ``other:``: exactly ``Count``'s."""
    text = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    listed = text.split("`other:` holds these counters", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`([^`]+)`", listed.split(":", 1)[1])) - {"addon.report.outcome.Count"}
    assert named == {c.value for c in Count} - {c.value for c in GROUPED}


def test_every_count_call_names_a_counter() -> None:
    """No ``….count("…")`` with a string anywhere in the addon: each names a ``Count``."""
    free = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "count"
                and isinstance(node.func.value, ast.Attribute | ast.Name)
                and "state" in ast.unparse(node.func.value)
            ):
                arg = node.args[0] if node.args else None
                # A ``Count`` named, or a value typed ``Count`` (mypy refuses a string there:
                # the test below); never text written at the call.
                if arg is None or isinstance(arg, ast.Constant | ast.JoinedStr | ast.BinOp):
                    free.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert free == []


def test_mypy_refuses_a_free_string_for_a_counter_or_an_outcome() -> None:
    code = (
        "from addon.report.outcome import Count, FlowReport, Outcome\n"
        "from addon.report.counters import BridgeState\n"
        "BridgeState().count('requests rewriten')\n"
        "FlowReport('r', 'rewriten')\n"
        "FlowReport('r').add_outcome('rejected')\n"
        "BridgeState().count(Count.REQUESTS_REWRITTEN)\n"
        "FlowReport('r', Outcome.REWRITTEN).add_outcome(Outcome.REJECTED)\n"
    )
    out, _, status = mypy_api.run(
        ["--config-file", "", "--strict", "--python-version", "3.12", "-c", code]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1
    assert [line.split(":")[1] for line in errors] == ["3", "4", "5"], out
    assert all("[arg-type]" in line for line in errors)


# --------------------------------------------------------------------------- outcomes


def test_the_outcomes_text_is_what_the_line_and_stats_show() -> None:
    assert [o.value for o in OUTCOMES] == [
        "rejected",
        "loop_guard",
        "not_rewritten",
        "retried",
        "repaired",
        "rewritten",
    ]
    report = FlowReport("r", Outcome.REJECTED)
    assert " outcome=rejected " in report.line()
    assert report.counters() == Counter({"flows rejected": 1})
    assert all(type(k) is str for k in report.counters())  # plain text in bridge.stats


# --------------------------------------------------------------------------- notes


def test_a_repair_counts_by_its_kind_not_its_text() -> None:
    schemas = ToolSchemas(
        {"todo": {"type": "object", "properties": {"content": {"type": "string"}}}}
    )
    notes: Counter[str] = Counter()
    repair_call("todo", '{"contents": "x"', schemas, notes)  # repaired and an alias applied
    assert notes and FlowReport("r", notes=notes).repairs == sum(notes.values())
    as_text = Counter({str(note): n for note, n in notes.items()})  # the same text, untyped
    assert as_text == notes and FlowReport("r", notes=as_text).repairs == 0


def test_the_route_key_note_is_written_from_the_typed_key_never_read_back() -> None:
    chat = DIALECTS[names.OPENAI_CHAT]
    for key, note in (
        (RouteKey("sk-route-value-1234"), ENV_KEY_NOTE),
        (RouteKey("sk-pool-value-1234", "API key from POOL (the route's key pool)"), None),
    ):
        notes: Counter[str] = Counter()
        headers, _ = credentials(chat, chat, {"authorization": "Bearer c"}, key, notes)
        assert headers == (("authorization", f"Bearer {key.value}"),)
        assert list(notes) == [note or key.note]
        assert key.value not in repr(key)


# --------------------------------------------------------------------------- dialect names


def test_the_dialect_names_are_defined_once() -> None:
    assert set(DialectName.__value__.__args__) == set(DIALECTS)
    assert {getattr(names, n) for n in dir(names) if n.isupper() and n != "UPSTREAM_ONLY"} == set(
        DIALECTS
    )


ALLOWED = {
    ("addon/model.py", "gemini"),  # a schema profile's name ("gemini" keeps Gemini's keywords)
    ("addon/transforms/schema/__init__.py", "gemini"),  # the same schema profile
}


def test_no_dialect_is_named_by_its_text_outside_the_dialects() -> None:
    """A string literal equal to a dialect's name appears only in ``addon/dialects/`` (a
    route's own name, ``name="gemini"``, is a route's, and docstrings are prose)."""
    found = []
    for path in _sources(skip="dialects"):
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {
            id(kw.value)
            for node in ast.walk(tree)
            for kw in getattr(node, "keywords", ())
            if kw.arg == "name"
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and node.value in DIALECTS
                and id(node) not in skip
                and (rel, node.value) not in ALLOWED
            ):
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert found == []
