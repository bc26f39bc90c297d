"""Tool-call argument repair and normalization against the request's own tool schemas.

Contract: pure functions over ``addon.model`` values, cost linear in the arguments' size; the
stream stage is ``addon.stream.hold_calls.RepairStage``. Why: arguments that almost fit the tool
they call (``filePath`` for ``path``, a todo status ``done``, a trailing comma, a cut-off
object) become what the client's tool accepts, never changing the call's meaning."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # imported when first used: a proxy that repairs nothing never loads them
    from jsonschema import exceptions as jsonschema_errors
    from jsonschema.protocols import Validator

from addon.jsonio import dumps, loads
from addon.model import JSON, Notes, Request, Response, TalliedNote, Tally, Tool, ToolCall
from addon.transforms.arguments import parse_arguments as parse_arguments

EVENT: Final = "tool_repair"
"""``event`` of the structured log record."""

MAX_ERRORS: Final = 5
"""Validation errors named in one log record."""

MAX_KEYS: Final = 50
MAX_KEY: Final = 100
"""Keys named in one log record, and characters of each (keys are the model's text)."""

NOTE_REPAIRED: Final = TalliedNote("tool call arguments repaired", Tally.REPAIR)


# --------------------------------------------------------------------------- the rules as data


@dataclass(frozen=True, slots=True)
class AliasGroup:
    """Keys that name the same argument. ``targets``: the members a rename may go *to* (the
    one the schema declares); every other undeclared member is renamed to it."""

    members: tuple[str, ...]
    targets: tuple[str, ...]


ALIAS_GROUPS: Final[tuple[AliasGroup, ...]] = (
    AliasGroup(
        ("path", "filePath", "file_path", "target_file", "file"),
        ("path", "filePath", "file_path", "target_file", "file"),
    ),
    AliasGroup(("content", "contents", "text", "streamContent"), ("content",)),
    AliasGroup(("old_string", "oldString"), ("old_string", "oldString")),
    AliasGroup(("new_string", "newString"), ("new_string", "newString")),
    AliasGroup(("command", "cmd"), ("command", "cmd")),
)
"""Key aliases (issue 11). Both directions where the issue says ``↔`` and for the snake/camel
pairs (OpenCode's ``edit`` takes ``oldString``; Claude Code's ``Edit`` takes ``old_string``):
a rename only ever goes to the key the schema declares."""

TODO_STATES: Final = frozenset({"pending", "in_progress", "completed"})
"""A ``status`` enum holding these marks a todo list."""

TODO_STATUS: Final[Mapping[str, str]] = {
    "todo": "pending",
    "pending": "pending",
    "in_progress": "in_progress",
    "inprogress": "in_progress",
    "done": "completed",
    "complete": "completed",
    "completed": "completed",
}
"""Status spellings (lower-cased, runs of spaces and dashes read as ``_``) → the enum value."""

TODO_PRIORITY: Final = "medium"


# --------------------------------------------------------------------------- the schema map


VALIDATORS_KEPT: Final = 256
"""Validators kept for the process, one per distinct schema (``_validator_for``)."""


def preload() -> None:
    """Load what validating and repairing arguments needs (``jsonschema``: ~150 ms of
    imports, ``json_repair``: ~20 ms) and build one validator: for a proxy that repairs,
    before its first flow, which would otherwise pay it."""
    import json_repair  # noqa: F401

    _validator_for('{"type": "object"}')


@functools.lru_cache(maxsize=VALIDATORS_KEPT)
def _validator_for(text: str) -> Validator | None:
    """A validator for the schema written as ``text``; ``None`` when it is not one
    ``jsonschema`` can use. Kept for the process: a client sends the same tools with every
    request of a conversation, and building one (the schema checked against its
    metaschema, its references resolved) takes about a millisecond, which every tool call
    of every stream paid. Built from its own copy of the schema (``text`` decoded), so that
    nothing a request does to its tools later reaches it."""
    from jsonschema import validators as jsonschema_validators

    schema = loads(text)
    try:
        cls = jsonschema_validators.validator_for(
            schema, default=jsonschema_validators.Draft202012Validator
        )
        cls.check_schema(schema)
        found: Validator = cls(schema)
    except Exception:  # an invalid schema, an unknown $schema: no validation
        return None
    return found


class ToolSchemas:
    """The request's own function tools (the *schema map*): name → parameters schema (JSON
    Schema of the arguments object), the client's own, before any schema profile. Validators
    are built on first use, once per distinct schema for the whole process
    (``_validator_for``)."""

    __slots__ = ("_schemas", "_validators")

    def __init__(self, schemas: Mapping[str, JSON] | None = None) -> None:
        self._schemas: dict[str, JSON] = dict(schemas or {})
        self._validators: dict[str, Validator | None] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._schemas

    def __len__(self) -> int:
        return len(self._schemas)

    def __bool__(self) -> bool:
        return bool(self._schemas)

    def __iter__(self) -> Iterator[str]:
        return iter(self._schemas)

    def __repr__(self) -> str:
        return f"ToolSchemas({sorted(self._schemas)!r})"

    def get(self, name: str) -> JSON | None:
        return self._schemas.get(name)

    def validator(self, name: str) -> Validator | None:
        """A validator for the tool's schema; ``None`` when the tool is unknown or its schema
        is not one ``jsonschema`` can use."""
        if name in self._validators:
            return self._validators[name]
        schema = self._schemas.get(name)
        found: Validator | None = None
        if schema is not None:
            try:
                text = dumps(schema)
            except Exception:  # not JSON (a value no client could send): no validation
                text = None
            found = _validator_for(text) if text is not None else None
        self._validators[name] = found
        return found


def schemas_of(req: Request) -> ToolSchemas:
    """The schema map of a request: its function tools (not custom, not opaque) with a name and
    an object schema. Take it from the client's request before ``sanitize_tool_schemas``."""
    out: dict[str, JSON] = {}
    for tool in req.tools or ():
        if (
            isinstance(tool, Tool)
            and tool.format is None
            and tool.name
            and isinstance(tool.parameters, dict)
        ):
            out.setdefault(tool.name, tool.parameters)
    return ToolSchemas(out)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class RepairResult:
    arguments: str
    """The arguments to send on: strict compact JSON when ``changed``, else the model's text."""
    changed: bool = False
    repaired: bool = False
    """The text was not strict JSON and had to be repaired (or unwrapped)."""
    valid: bool | None = None
    """The ``jsonschema`` verdict on the result; ``None``: not checked (no usable schema, or
    the arguments are not an object)."""
    aliases: tuple[tuple[str, str], ...] = ()
    """Renames applied, ``(alias, canonical)``."""
    collisions: tuple[str, ...] = ()
    """Alias keys dropped because their canonical key (or an earlier alias) was there
    (*collisions*)."""
    statuses: tuple[tuple[str, str], ...] = ()
    """Todo statuses rewritten, ``(as written, as sent)``."""
    priorities: int = 0
    """Todo items given ``priority: medium``."""
    record: JSON | None = field(default=None)
    """The structured log record, when one is due (invalid arguments, a collision, or a cut
    call changed)."""


def _repaired(text: str) -> TalliedNote:
    """A note of a change to a call's arguments: the flow's ``repairs=`` counts it."""
    return TalliedNote(text, Tally.REPAIR)


def repair_call(
    name: str, arguments: str, schemas: ToolSchemas, notes: Notes, *, cut: bool = False
) -> RepairResult:
    """One call's arguments repaired and normalized against its tool's schema: parse, key
    aliases, todo lists, validate (docs/tools.md#argument-repair). A tool not in ``schemas``
    gets its arguments back untouched. ``cut``: the answer ended inside this call (said in
    the log record)."""
    schema = schemas.get(name)
    if schema is None:
        return RepairResult(arguments)
    parsed = parse_arguments(arguments)
    value, repaired = parsed.value, parsed.repaired
    if not isinstance(value, dict):
        if parsed.empty:
            value = {}  # no arguments at all: checked as {}, sent as they came
        else:
            hint = "the arguments are not a JSON object" + (
                " (the answer ended inside this call)" if cut else ""
            )
            return RepairResult(
                arguments, record=_record(name, (), (), (), (), [], [], [], False, cut, hint)
            )
    original_keys = tuple(value)
    props = _properties(schema)
    obj, aliases, collisions = _apply_aliases(value, props)
    statuses, priorities = _normalize_todos(obj, props, schema)
    changed = repaired or bool(aliases or collisions or statuses or priorities)
    text = arguments
    if changed:
        try:
            text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except ValueError:  # NaN / Infinity after a repair: strict JSON cannot carry it
            hint = "the arguments hold numbers JSON cannot carry (NaN, Infinity)"
            return RepairResult(
                arguments,
                record=_record(name, original_keys, (), (), (), [], [], [], repaired, cut, hint),
            )
    valid, missing, unexpected, errors = _validate(schemas.validator(name), obj, schema)
    if repaired:
        notes[NOTE_REPAIRED] += 1
    for alias, canonical in aliases:
        notes[_repaired(f"argument aliases applied: {alias} → {canonical}")] += 1
    for alias, kept in collisions:
        notes[_repaired(f"argument alias dropped: {alias} ({kept} present)")] += 1
    for before, after in statuses:
        notes[_repaired(f"todo status normalized: {before} → {after}")] += 1
    if priorities:
        notes[_repaired(f"todo priority set: {TODO_PRIORITY}")] += priorities
    if valid is False:
        notes[f"tool call arguments still invalid: {name}"] += 1
    record: JSON | None = None
    if valid is False or collisions or (cut and changed):
        hint = _hint(missing, unexpected, errors, collisions, props, parsed.empty or not value, cut)
        record = _record(
            name,
            original_keys,
            tuple(obj),
            tuple(f"{a} → {c}" for a, c in aliases),
            tuple(a for a, _ in collisions),
            missing,
            unexpected,
            errors,
            repaired,
            cut,
            hint,
        )
    return RepairResult(
        text,
        changed=changed,
        repaired=repaired,
        valid=valid,
        aliases=tuple(aliases),
        collisions=tuple(a for a, _ in collisions),
        statuses=tuple(statuses),
        priorities=priorities,
        record=record,
    )


def repair_response(
    resp: Response, schemas: ToolSchemas, notes: Notes
) -> tuple[Response, list[JSON]]:
    """A whole answer with each call of a known function tool repaired (``repair_call``); the
    log records made. The same object when nothing changed. The last call of an answer cut at
    the token limit (``finish == "length"``) is treated as cut."""
    if not schemas or not any(isinstance(p, ToolCall) for p in resp.parts):
        return resp, []
    last_call = max(i for i, p in enumerate(resp.parts) if isinstance(p, ToolCall))
    records: list[JSON] = []
    parts = list(resp.parts)
    changed = False
    for i, part in enumerate(resp.parts):
        if not isinstance(part, ToolCall) or part.custom or part.name not in schemas:
            continue
        cut = resp.finish == "length" and i == last_call
        result = repair_call(part.name, part.arguments, schemas, notes, cut=cut)
        if result.record is not None:
            records.append(result.record)
        if result.changed:
            parts[i] = dataclasses.replace(part, arguments=result.arguments)
            changed = True
    if not changed:
        return resp, records
    return dataclasses.replace(resp, parts=tuple(parts)), records


# --------------------------------------------------------------------------- normalization


def _resolve(node: Any, root: JSON, depth: int = 0) -> Any:
    """``node`` with a local ``$ref`` (``#/$defs/X``, ``#/definitions/X``) followed."""
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and depth < 16:
        ref: str = node["$ref"]
        if not ref.startswith("#"):
            return node
        target: Any = root
        for token in ref[1:].split("/")[1:] if ref != "#" else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or token not in target:
                return node
            target = target[token]
        node, depth = target, depth + 1
    return node


def _obj(node: Any, root: JSON) -> JSON:
    """``node`` resolved, as an object (``{}`` when it is none)."""
    node = _resolve(node, root)
    return node if isinstance(node, dict) else {}


def _properties(schema: JSON) -> JSON:
    return _obj(_obj(schema, schema).get("properties"), schema)


def _apply_aliases(
    value: JSON, props: JSON
) -> tuple[JSON, list[tuple[str, str]], list[tuple[str, str]]]:
    """Renamed keys in place; ``(obj, [(alias, canonical)], [(dropped alias, kept key)])``."""
    if not props:
        return value, [], []
    rename: dict[str, str] = {}  # alias present in the arguments → canonical
    for group in ALIAS_GROUPS:
        declared = [m for m in group.targets if m in props]
        if len(declared) != 1:
            continue
        canonical = declared[0]
        for member in group.members:
            if member != canonical and member not in props and member in value:
                rename[member] = canonical
    if not rename:
        return value, [], []
    out: JSON = {}
    aliases: list[tuple[str, str]] = []
    collisions: list[tuple[str, str]] = []
    for key, item in value.items():
        to = rename.get(key)
        if to is None:
            out[key] = item
        elif to in value or to in out:
            collisions.append((key, to))
        else:
            out[to] = item
            aliases.append((key, to))
    return out, aliases, collisions


def _normalize_todos(obj: JSON, props: JSON, root: JSON) -> tuple[list[tuple[str, str]], int]:
    """Todo statuses and priorities fixed in place (``obj`` is ours: a fresh decode)."""
    statuses: list[tuple[str, str]] = []
    priorities = 0
    for key, prop in props.items():
        items = obj.get(key)
        if not isinstance(items, list):
            continue
        item_props = _obj(_obj(_obj(prop, root).get("items"), root).get("properties"), root)
        enum = _obj(item_props.get("status"), root).get("enum")
        if not isinstance(enum, list) or not TODO_STATES.issubset(enum):
            continue
        priority = item_props.get("priority")
        priority_enum = _obj(priority, root).get("enum")
        give_priority = isinstance(_resolve(priority, root), dict) and (
            not isinstance(priority_enum, list) or TODO_PRIORITY in priority_enum
        )
        for item in items:
            if not isinstance(item, dict):
                continue
            written = item.get("status")
            if isinstance(written, str) and written not in enum:
                spelled = re.sub(r"[\s\-_]+", "_", written.strip().lower())
                target: str | None = TODO_STATUS.get(spelled)
                if target is None:
                    target = TODO_STATUS.get(spelled.replace("_", ""))
                if target is not None and target in enum:
                    item["status"] = target
                    statuses.append((written, target))
            if give_priority and "priority" not in item:
                item["priority"] = TODO_PRIORITY
                priorities += 1
    return statuses, priorities


# --------------------------------------------------------------------------- validation


def _validate(
    validator: Validator | None, obj: JSON, schema: JSON
) -> tuple[bool | None, list[str], list[str], list[str]]:
    """``(valid, missing, unexpected, errors)``; ``valid`` is ``None`` when not checkable."""
    props = _properties(schema)
    top = _resolve(schema, schema)
    required = top.get("required") if isinstance(top, dict) else None
    missing = (
        [k for k in required if isinstance(k, str) and k not in obj]
        if isinstance(required, list)
        else []
    )
    unexpected = [k for k in obj if props and k not in props]
    if validator is None:
        return None, missing, unexpected, []
    try:
        found = list(_first(validator.iter_errors(obj), MAX_ERRORS))
    except Exception:  # an unresolvable $ref met while validating: not checkable
        return None, missing, unexpected, []
    errors = list(dict.fromkeys(f"{_pointer(e.absolute_path)}: {e.validator}" for e in found))
    return not found, missing, unexpected, errors


def _first(
    errors: Iterable[jsonschema_errors.ValidationError], n: int
) -> Iterator[jsonschema_errors.ValidationError]:
    for i, e in enumerate(errors):
        if i >= n:
            return
        yield e


def _pointer(path: Iterable[object]) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _hint(
    missing: list[str],
    unexpected: list[str],
    errors: list[str],
    collisions: list[tuple[str, str]],
    props: JSON,
    empty: bool,
    cut: bool,
) -> str:
    said: list[str] = []
    if cut:
        said.append("the answer ended inside this call: its arguments were cut")
    if empty and missing:
        said.append("the arguments are empty: the call was probably cut or the model lost them")
    elif missing:
        said.append(f"required key(s) missing: {', '.join(missing)}")
    for key in _keys(unexpected)[:5]:
        close = difflib.get_close_matches(key, missing, n=1) or difflib.get_close_matches(
            key, [str(p) for p in props], n=1
        )
        if close:
            said.append(f"unknown key {key!r}: did the model mean {close[0]!r}?")
        else:
            said.append(f"unknown key {key!r}")
    if collisions:
        said.append(
            "dropped " + ", ".join(f"{a!r} because {k!r} was given too" for a, k in collisions)
        )
    if errors and not missing and not unexpected:
        said.append(f"schema errors at {', '.join(errors)}")
    return "; ".join(said) or "the arguments do not match the tool's schema"


def _keys(keys: Iterable[str]) -> list[str]:
    out = [k if len(k) <= MAX_KEY else k[: MAX_KEY - 1] + "…" for k in keys]
    return out if len(out) <= MAX_KEYS else [*out[:MAX_KEYS], f"… {len(out) - MAX_KEYS} more"]


def _record(
    tool: str,
    original_keys: Iterable[str],
    normalized_keys: Iterable[str],
    aliases: Iterable[str],
    collisions: Iterable[str],
    missing: list[str],
    unexpected: list[str],
    errors: list[str],
    repaired: bool,
    cut: bool,
    hint: str,
) -> JSON:
    return {
        "event": EVENT,
        "tool": tool,
        "original_keys": _keys(original_keys),
        "normalized_keys": _keys(normalized_keys),
        "aliases": list(aliases),
        "collisions": list(collisions),
        "missing": _keys(missing),
        "unexpected": _keys(unexpected),
        "errors": errors,
        "json_repaired": repaired,
        "cut": cut,
        "hint": hint,
    }
