"""Tool-call argument repair and normalization (issue 11): ``addon.transforms.repair``."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from addon.model import (
    JSON,
    Message,
    Notes,
    OpaqueTool,
    Request,
    Response,
    Text,
    Tool,
    ToolCall,
)
from addon.transforms.arguments import parse_arguments
from addon.transforms.repair import (
    EVENT,
    NOTE_REPAIRED,
    ToolSchemas,
    repair_call,
    repair_response,
    schemas_of,
)


def obj(*props: str, required: tuple[str, ...] | None = None, closed: bool = True) -> JSON:
    """An object schema with string properties ``props`` (all required unless told)."""
    schema: JSON = {
        "type": "object",
        "properties": {p: {"type": "string"} for p in props},
        "required": list(props if required is None else required),
    }
    if closed:
        schema["additionalProperties"] = False
    return schema


EDIT = obj("path", "old_string", "new_string")
OPENCODE_EDIT = obj("filePath", "oldString", "newString")
WRITE = obj("path", "content")
SHELL = obj("command")
CURSOR_READ = obj("target_file")
TODO_ITEM: JSON = {
    "type": "object",
    "properties": {
        "content": {"type": "string"},
        "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]},
        "priority": {"type": "string", "enum": ["high", "medium", "low"]},
        "id": {"type": "string"},
    },
    "required": ["content", "status", "priority", "id"],
}
TODOWRITE: JSON = {
    "type": "object",
    "properties": {"todos": {"type": "array", "items": TODO_ITEM}},
    "required": ["todos"],
}
SCHEMAS = ToolSchemas(
    {
        "edit": EDIT,
        "oc_edit": OPENCODE_EDIT,
        "write": WRITE,
        "shell": SHELL,
        "read_file": CURSOR_READ,
        "todowrite": TODOWRITE,
        "free": {"type": "object", "properties": {"x": {"type": "integer"}}},
        "bare": {},
    }
)


def run(name: str, arguments: str, schemas: ToolSchemas = SCHEMAS) -> tuple[Any, Notes]:
    notes: Notes = Counter()
    return repair_call(name, arguments, schemas, notes), notes


def loads(text: str) -> Any:
    return json.loads(text)


# --------------------------------------------------------------------------- schema map


def test_schemas_of_takes_function_tools_only() -> None:
    custom = Tool("ApplyPatch", "patch", {}, format={"type": "text"})
    opaque = OpaqueTool("openai_responses", "web", "web_search", {"type": "web_search"})
    weird = Tool("weird", None, "not a schema")  # type: ignore[arg-type]
    req = Request(
        "openai_chat",
        "m",
        (),
        tools=(Tool("edit", "edit", EDIT), custom, opaque, Tool("", None, {}), weird),
    )
    schemas = schemas_of(req)
    assert list(schemas) == ["edit"]
    assert "ApplyPatch" not in schemas and "web" not in schemas
    assert schemas.get("edit") is EDIT
    assert len(schemas) == 1 and bool(schemas)
    assert not schemas_of(Request("openai_chat", "m", ()))


def test_unusable_schema_means_no_validation() -> None:
    schemas = ToolSchemas({"t": {"type": "no-such-type"}})
    assert schemas.validator("t") is None
    assert schemas.validator("unknown") is None
    result, _ = run("t", '{"a": 1}', schemas)
    assert result.valid is None and result.record is None and not result.changed


def test_a_schema_seen_again_reuses_its_validator_built_from_its_own_copy() -> None:
    """Every request of a conversation carries the same tools: their validators are built once
    for the process. What a request does to its schema afterwards reaches no validator."""
    first = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    again = json.loads(json.dumps(first))
    a, b = ToolSchemas({"t": first}), ToolSchemas({"u": again})
    validator = a.validator("t")
    assert validator is not None and b.validator("u") is validator
    first["properties"]["n"]["type"] = "string"  # the first request's schema, changed later
    assert run("t", '{"n": 3}', ToolSchemas({"t": again}))[0].valid is True
    assert run("t", '{"n": "3"}', ToolSchemas({"t": again}))[0].valid is False
    # A schema written otherwise is another schema: its own validator.
    other = ToolSchemas({"t": {**again, "required": []}}).validator("t")
    assert other is not None and other is not validator
    assert ToolSchemas({"t": {"type": "no-such-type"}}).validator("t") is None


# --------------------------------------------------------------------------- untouched


@pytest.mark.parametrize(
    "arguments",
    [
        '{"path": "a.py", "old_string": "x", "new_string": "y"}',
        '{"path":"a.py","old_string":"x","new_string":"y"}',
        '  {\n "path" : "a.py", "old_string": "x", "new_string": "y" }  ',
    ],
)
def test_valid_arguments_keep_the_models_own_text(arguments: str) -> None:
    result, notes = run("edit", arguments)
    assert result.arguments == arguments
    assert not result.changed and not result.repaired and result.valid is True
    assert result.record is None and not notes


def test_unknown_tool_is_untouched_even_when_broken() -> None:
    result, notes = run("nope", "{'filePath': 'a',}")
    assert result.arguments == "{'filePath': 'a',}"
    assert not result.changed and result.valid is None and result.record is None
    assert not notes


# --------------------------------------------------------------------------- JSON repair


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"command": "ls",}', {"command": "ls"}),  # trailing comma
        ("{'command': 'ls'}", {"command": "ls"}),  # single quotes
        ('{"command": "echo a\nb"}', {"command": "echo a\nb"}),  # raw newline in a string
        ('{"command": "a\tb"}', {"command": "a\tb"}),  # raw tab
        ('```json\n{"command": "ls"}\n```', {"command": "ls"}),  # code fence
        ('```\n{"command": "ls"}\n```\n', {"command": "ls"}),
        ('Here you go: {"command": "ls"}', {"command": "ls"}),  # prose before
        ('{command: "ls"}', {"command": "ls"}),  # unquoted key
        ('{"command": "ls -la', {"command": "ls -la"}),  # truncated
        ('{"command": "ls"', {"command": "ls"}),
        ('"{\\"command\\": \\"ls\\"}"', {"command": "ls"}),  # encoded twice
    ],
)
def test_json_repair(arguments: str, expected: JSON) -> None:
    result, notes = run("shell", arguments)
    assert loads(result.arguments) == expected
    assert result.changed and result.repaired and result.valid is True
    assert result.record is None
    assert notes == Counter({NOTE_REPAIRED: 1})


def test_repaired_arguments_are_strict_compact_json_with_unicode_kept() -> None:
    result, _ = run("write", "{'path': 'ä.py', 'content': \"«x»\\n\",}")
    assert result.arguments == '{"path":"ä.py","content":"«x»\\n"}'


def test_truncated_object_of_a_write_is_closed_and_reported_missing_keys() -> None:
    result, notes = run("edit", '{"path": "a.py", "old_string": "x')
    assert loads(result.arguments) == {"path": "a.py", "old_string": "x"}
    assert result.repaired and result.valid is False
    assert result.record is not None
    assert result.record["missing"] == ["new_string"]
    assert "new_string" in result.record["hint"]
    assert notes[NOTE_REPAIRED] == 1
    assert notes["tool call arguments still invalid: edit"] == 1


def test_cut_call_says_so_in_its_record_even_when_valid() -> None:
    notes: Notes = Counter()
    result = repair_call("shell", '{"command": "ls', SCHEMAS, notes, cut=True)
    assert result.valid is True and result.record is not None
    assert result.record["cut"] is True and result.record["json_repaired"] is True
    assert "cut" in result.record["hint"]


@pytest.mark.parametrize(
    "arguments", ["not json at all", "[1, 2]", "42", '"just text"', '{"command": "a"} [1]']
)
def test_arguments_that_are_no_object_are_left_as_they_are_and_logged(arguments: str) -> None:
    result, notes = run("shell", arguments)
    assert result.arguments == arguments and not result.changed and result.valid is None
    assert result.record is not None and result.record["event"] == EVENT
    assert "not a JSON object" in result.record["hint"]
    assert not notes


def test_two_objects_back_to_back_are_not_guessed_into_one() -> None:
    result, _ = run("shell", '{"command": "a"}{"command": "b"}')
    assert result.arguments == '{"command": "a"}{"command": "b"}' and not result.changed


@pytest.mark.parametrize("arguments", ["{'x': NaN}", '{"x": Infinity}', '{"x": 1e400}'])
def test_no_nan_or_infinity_is_ever_written(arguments: str) -> None:
    result, _ = run("free", arguments)
    if result.changed:
        value = json.loads(result.arguments, parse_constant=lambda c: pytest.fail(c))
        assert value["x"] != float("inf")
    assert result.valid is not True  # x is no integer whatever became of it


@pytest.mark.parametrize(
    ("arguments", "content"),
    [
        ('{"path": "a", "content": "x\\n",}', "x\n"),
        ("{'path': 'a', 'content': 'x\\n  '}", "x\n  "),
        ('{"path": "a", "content": "line\n', "line\n"),
        ('```json\n{"path": "a", "content": "end\\n"}\n```', "end\n"),
    ],
)
def test_repair_keeps_trailing_whitespace_of_strings(arguments: str, content: str) -> None:
    result, _ = run("write", arguments)
    assert loads(result.arguments) == {"path": "a", "content": content}


@pytest.mark.parametrize("arguments", ["", "   ", "\n"])
def test_empty_arguments_are_kept_and_checked_as_an_empty_object(arguments: str) -> None:
    result, _ = run("bare", arguments)
    assert result.arguments == arguments and not result.changed and result.valid is True
    assert result.record is None
    result, _ = run("shell", arguments)
    assert result.arguments == arguments and result.valid is False
    assert result.record is not None and result.record["missing"] == ["command"]
    assert "empty" in result.record["hint"]


def test_empty_object_of_a_cut_call_is_kept_and_missing_keys_reported() -> None:
    result, notes = run("edit", "{}")
    assert result.arguments == "{}" and not result.changed and result.valid is False
    record = result.record
    assert record is not None
    assert record["missing"] == ["path", "old_string", "new_string"]
    assert record["original_keys"] == [] and record["normalized_keys"] == []
    assert "empty" in record["hint"]
    assert notes == Counter({"tool call arguments still invalid: edit": 1})


def test_deep_nesting_does_not_raise() -> None:
    deep = "[" * 100_000
    assert parse_arguments(deep).value is None
    result, _ = run("shell", deep)
    assert result.arguments == deep and not result.changed


def test_parse_arguments() -> None:
    assert parse_arguments('{"a": 1}').value == {"a": 1}
    assert not parse_arguments('{"a": 1}').repaired
    assert parse_arguments("").empty
    assert parse_arguments("{'a': 1}").repaired
    assert parse_arguments("nothing").value is None
    assert parse_arguments('{"a": Infinity}').repaired  # not strict JSON


# --------------------------------------------------------------------------- aliases


@pytest.mark.parametrize("alias", ["filePath", "file_path", "target_file", "file"])
def test_path_aliases_towards_path(alias: str) -> None:
    result, notes = run("write", json.dumps({alias: "a.py", "content": "x"}))
    assert loads(result.arguments) == {"path": "a.py", "content": "x"}
    assert result.aliases == ((alias, "path"),) and result.valid is True
    assert notes == Counter({f"argument aliases applied: {alias} → path": 1})
    assert result.record is None


@pytest.mark.parametrize("alias", ["path", "filePath", "file_path", "file"])
def test_path_aliases_towards_target_file(alias: str) -> None:
    result, _ = run("read_file", json.dumps({alias: "a.py"}))
    assert loads(result.arguments) == {"target_file": "a.py"}


@pytest.mark.parametrize(
    ("written", "declared"),
    [
        ("path", "filePath"),
        ("file_path", "filePath"),
        ("old_string", "oldString"),
        ("new_string", "newString"),
    ],
)
def test_aliases_go_whichever_way_the_schema_declares(written: str, declared: str) -> None:
    args = {"filePath": "a.py", "oldString": "x", "newString": "y"}
    args[written] = args.pop(declared)
    result, _ = run("oc_edit", json.dumps(args))
    assert loads(result.arguments) == {"filePath": "a.py", "oldString": "x", "newString": "y"}
    assert result.aliases == ((written, declared),) and result.valid is True


@pytest.mark.parametrize(
    ("alias", "canonical", "tool"),
    [
        ("oldString", "old_string", "edit"),
        ("newString", "new_string", "edit"),
        ("cmd", "command", "shell"),
        ("contents", "content", "write"),
        ("text", "content", "write"),
        ("streamContent", "content", "write"),
    ],
)
def test_named_aliases(alias: str, canonical: str, tool: str) -> None:
    base = {"edit": {"path": "a", "old_string": "x", "new_string": "y"}, "shell": {"command": "ls"},
            "write": {"path": "a", "content": "c"}}[tool]  # fmt: skip
    args = {(alias if k == canonical else k): v for k, v in base.items()}
    result, notes = run(tool, json.dumps(args))
    assert loads(result.arguments) == base
    assert list(loads(result.arguments)) == list(base)  # the renamed key keeps its place
    assert notes[f"argument aliases applied: {alias} → {canonical}"] == 1


def test_content_alias_is_one_way() -> None:
    schemas = ToolSchemas({"note": obj("text")})
    result, _ = run("note", '{"content": "x"}', schemas)
    assert not result.changed and result.valid is False
    assert result.record is not None and result.record["unexpected"] == ["content"]


def test_command_alias_goes_to_cmd_when_the_schema_says_cmd() -> None:
    schemas = ToolSchemas({"Shell": obj("cmd")})
    result, _ = run("Shell", '{"command": "ls"}', schemas)
    assert loads(result.arguments) == {"cmd": "ls"}


def test_a_key_the_schema_declares_is_never_an_alias() -> None:
    schemas = ToolSchemas({"t": obj("path", "file", required=())})
    result, _ = run("t", '{"file": "a", "filePath": "b"}', schemas)
    # ``file`` is the tool's own; ``filePath`` is ambiguous (path and file are declared).
    assert not result.changed


def test_no_alias_without_a_declared_target() -> None:
    schemas = ToolSchemas({"t": {"type": "object", "properties": {"x": {"type": "string"}}}})
    result, _ = run("t", '{"filePath": "a", "x": "y"}', schemas)
    assert not result.changed and result.valid is True
    result, _ = run("bare", '{"filePath": "a"}')
    assert not result.changed


def test_canonical_present_wins_and_the_alias_is_dropped_and_logged() -> None:
    result, notes = run("write", '{"filePath": "b.py", "path": "a.py", "content": "x"}')
    assert loads(result.arguments) == {"path": "a.py", "content": "x"}
    assert result.collisions == ("filePath",) and result.aliases == ()
    assert result.valid is True and result.changed
    record = result.record
    assert record is not None
    assert record["collisions"] == ["filePath"]
    assert record["original_keys"] == ["filePath", "path", "content"]
    assert record["normalized_keys"] == ["path", "content"]
    assert "filePath" in record["hint"]
    assert notes == Counter({"argument alias dropped: filePath (path present)": 1})


def test_of_two_aliases_the_first_written_is_renamed_the_other_dropped() -> None:
    result, notes = run("write", '{"file_path": "a.py", "filePath": "b.py", "content": "x"}')
    assert loads(result.arguments) == {"path": "a.py", "content": "x"}
    assert result.aliases == (("file_path", "path"),)
    assert result.collisions == ("filePath",)
    assert notes["argument alias dropped: filePath (path present)"] == 1


def test_aliases_only_at_the_top_level() -> None:
    schemas = ToolSchemas(
        {"t": {"type": "object", "properties": {"path": {"type": "string"}, "o": {}}}}
    )
    result, _ = run("t", '{"path": "a", "o": {"filePath": "b"}}', schemas)
    assert not result.changed


def test_schema_through_a_local_ref() -> None:
    schema: JSON = {"$ref": "#/$defs/args", "$defs": {"args": obj("path")}}
    result, _ = run("t", '{"filePath": "a"}', ToolSchemas({"t": schema}))
    assert loads(result.arguments) == {"path": "a"} and result.valid is True


def test_aliases_with_validation_failure_still_normalized_and_never_change_the_tool() -> None:
    result, notes = run("edit", '{"filePath": "a.py", "oldString": "x", "content": "y"}')
    assert loads(result.arguments) == {"path": "a.py", "old_string": "x", "content": "y"}
    assert result.valid is False
    record = result.record
    assert record is not None
    assert record["tool"] == "edit"
    assert record["original_keys"] == ["filePath", "oldString", "content"]
    assert record["normalized_keys"] == ["path", "old_string", "content"]
    assert record["aliases"] == ["filePath → path", "oldString → old_string"]
    assert record["missing"] == ["new_string"]
    assert record["unexpected"] == ["content"]
    assert "/: additionalProperties" in record["errors"]
    assert "/: required" in record["errors"]
    assert "new_string" in record["hint"]
    assert notes["tool call arguments still invalid: edit"] == 1


def test_hint_suggests_the_close_key() -> None:
    result, _ = run("shell", '{"comand": "ls"}')
    assert result.record is not None
    assert "did the model mean 'command'" in result.record["hint"]


def test_log_record_holds_keys_never_values() -> None:
    secret = "sk-verysecretvalue-1234567890"
    result, _ = run("edit", json.dumps({"path": secret, "oldString": secret, "extra": secret}))
    assert result.record is not None
    assert secret not in json.dumps(result.record)
    assert set(result.record) == {
        "event", "tool", "original_keys", "normalized_keys", "aliases", "collisions",
        "missing", "unexpected", "errors", "json_repaired", "cut", "hint",
    }  # fmt: skip


def test_log_record_bounds_the_models_keys() -> None:
    args = {f"k{i}" * 60: 1 for i in range(80)}
    result, _ = run("shell", json.dumps(args))
    record = result.record
    assert record is not None
    assert len(record["original_keys"]) == 51 and record["original_keys"][-1] == "… 30 more"
    assert all(len(k) <= 100 for k in record["original_keys"])


# --------------------------------------------------------------------------- todo lists


def todos(*items: JSON) -> str:
    return json.dumps({"todos": list(items)})


@pytest.mark.parametrize(
    ("written", "status"),
    [
        ("todo", "pending"),
        ("pending", "pending"),
        ("TODO", "pending"),
        ("Pending", "pending"),
        ("in-progress", "in_progress"),
        ("in progress", "in_progress"),
        ("In Progress", "in_progress"),
        ("inprogress", "in_progress"),
        ("done", "completed"),
        ("complete", "completed"),
        ("Done", "completed"),
    ],
)
def test_todo_statuses(written: str, status: str) -> None:
    item = {"content": "a", "status": written, "priority": "high", "id": "1"}
    result, notes = run("todowrite", todos(item))
    assert loads(result.arguments)["todos"][0]["status"] == status
    assert result.valid is True
    if written != status:
        assert result.statuses == ((written, status),)
        assert notes[f"todo status normalized: {written} → {status}"] == 1


def test_todo_statuses_already_in_the_enum_or_unknown_are_kept() -> None:
    items = [
        {"content": "a", "status": s, "priority": "low", "id": str(i)}
        for i, s in enumerate(["pending", "in_progress", "completed", "cancelled"])
    ]
    result, _ = run("todowrite", todos(*items))
    assert not result.changed and result.valid is True
    result, _ = run("todowrite", todos({**items[0], "status": "blocked"}))
    assert not result.changed and result.valid is False
    assert result.record is not None and "/todos/0/status: enum" in result.record["errors"]


def test_missing_priority_becomes_medium() -> None:
    result, notes = run(
        "todowrite",
        todos({"content": "a", "status": "done", "id": "1"}, {"content": "b", "status": "pending",
              "priority": "high", "id": "2"}),
    )  # fmt: skip
    got = loads(result.arguments)["todos"]
    assert got[0] == {"content": "a", "status": "completed", "id": "1", "priority": "medium"}
    assert got[1]["priority"] == "high"
    assert result.priorities == 1 and result.valid is True
    assert notes["todo priority set: medium"] == 1


def test_claude_code_todowrite_without_priority_gets_none() -> None:
    schema: JSON = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string"},
                        "status": {
                            "type": "string",
                            "enum": ["pending", "in_progress", "completed"],
                        },
                        "activeForm": {"type": "string"},
                    },
                    "required": ["content", "status", "activeForm"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["todos"],
    }
    arguments = todos({"content": "a", "status": "in progress", "activeForm": "Doing a"})
    result, _ = run("TodoWrite", arguments, ToolSchemas({"TodoWrite": schema}))
    assert loads(result.arguments)["todos"][0] == {
        "content": "a", "status": "in_progress", "activeForm": "Doing a"
    }  # fmt: skip
    assert result.valid is True


def test_priority_enum_without_medium_is_left_alone() -> None:
    item_schema = json.loads(json.dumps(TODO_ITEM))
    item_schema["properties"]["priority"]["enum"] = ["p0", "p1"]
    schema = {"type": "object", "properties": {"todos": {"type": "array", "items": item_schema}}}
    result, _ = run(
        "t", todos({"content": "a", "status": "pending", "id": "1"}), ToolSchemas({"t": schema})
    )
    assert not result.changed


def test_status_mapped_only_to_a_value_the_enum_has() -> None:
    schema = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "status": {"enum": ["pending", "in_progress", "completed", "todo"]}
                    },
                },
            }
        },
    }
    result, _ = run("t", todos({"status": "todo"}, {"status": "done"}), ToolSchemas({"t": schema}))
    assert [i["status"] for i in loads(result.arguments)["todos"]] == ["todo", "completed"]


def test_any_array_with_a_todo_status_enum_and_items_through_refs() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "item": {
                "type": "object",
                "properties": {
                    "status": {"$ref": "#/$defs/status"},
                    "priority": {"type": "string"},
                },
            },
            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
        },
        "properties": {"tasks": {"type": "array", "items": {"$ref": "#/$defs/item"}}},
    }
    result, _ = run("plan", '{"tasks": [{"status": "done"}]}', ToolSchemas({"plan": schema}))
    assert loads(result.arguments) == {"tasks": [{"status": "completed", "priority": "medium"}]}
    assert result.valid is True


def test_not_a_todo_enum_is_not_touched() -> None:
    schema = {
        "type": "object",
        "properties": {
            "jobs": {
                "type": "array",
                "items": {"properties": {"status": {"enum": ["done", "open"]}, "priority": {}}},
            }
        },
    }
    result, _ = run("t", '{"jobs": [{"status": "done"}]}', ToolSchemas({"t": schema}))
    assert not result.changed


def test_todo_items_that_are_not_objects_are_skipped() -> None:
    result, _ = run(
        "todowrite",
        '{"todos": ["just text", {"content": "a", "status": "done", "priority": "low", "id": "1"}]}',
    )
    got = loads(result.arguments)["todos"]
    assert got[0] == "just text" and got[1]["status"] == "completed"
    assert result.valid is False  # the string item is still not an object


def test_everything_at_once() -> None:
    arguments = "```json\n{'todos': [{'content': 'a', 'status': 'done', 'id': '1',},],}\n```"
    result, notes = run("todowrite", arguments)
    assert loads(result.arguments) == {
        "todos": [{"content": "a", "status": "completed", "id": "1", "priority": "medium"}]
    }
    assert result.repaired and result.valid is True and result.record is None
    assert notes == Counter(
        {
            NOTE_REPAIRED: 1,
            "todo status normalized: done → completed": 1,
            "todo priority set: medium": 1,
        }
    )


# --------------------------------------------------------------------------- validation


def test_validation_of_types() -> None:
    result, _ = run("free", '{"x": "1"}')
    assert result.valid is False and result.record is not None
    assert result.record["errors"] == ["/x: type"]
    assert "schema errors at /x: type" in result.record["hint"]
    result, _ = run("free", '{"x": 1}')
    assert result.valid is True and result.record is None


def test_schema_draft_is_honoured() -> None:
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"n": {"type": "number", "maximum": 5, "exclusiveMaximum": True}},
    }
    result, _ = run("t", '{"n": 5}', ToolSchemas({"t": draft4}))
    assert result.valid is False


def test_unresolvable_ref_is_not_a_failure() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/x.json"}}}
    result, _ = run("t", '{"a": 1}', ToolSchemas({"t": schema}))
    assert result.valid is None and result.record is None


def test_validators_are_built_once() -> None:
    schemas = ToolSchemas({"edit": EDIT})
    assert schemas.validator("edit") is schemas.validator("edit") is not None


# --------------------------------------------------------------------------- whole answers


def answer(*parts: Any, finish: Any = "tool_calls") -> Response:
    return Response("openai_chat", "chatcmpl-1", "m", tuple(parts), finish)


def test_repair_response_repairs_known_calls_only() -> None:
    resp = answer(
        Text("editing"),
        ToolCall("c1", "edit", '{"filePath": "a", "oldString": "x", "newString": "y",}'),
        ToolCall("c2", "unknown", "{'broken': 1,}"),
        ToolCall("c3", "shell", "{'cmd': 'ls'}", custom=True),
        ToolCall("c4", "shell", '{"command": "ls"}', extra={"k": 1}),
    )
    notes: Notes = Counter()
    fixed, records = repair_response(resp, SCHEMAS, notes)
    assert records == []
    p = fixed.parts
    assert p[0] == Text("editing")
    assert isinstance(p[1], ToolCall)
    assert p[1].arguments == '{"path":"a","old_string":"x","new_string":"y"}'
    assert p[1].id == "c1" and p[1].name == "edit"
    assert p[2] is resp.parts[2] and p[3] is resp.parts[3] and p[4] is resp.parts[4]
    assert fixed.id == resp.id and fixed.finish == "tool_calls"
    assert notes[NOTE_REPAIRED] == 1


def test_repair_response_returns_the_same_object_when_nothing_changed() -> None:
    resp = answer(ToolCall("c1", "shell", '{"command": "ls"}'))
    assert repair_response(resp, SCHEMAS, Counter()) == (resp, [])
    assert repair_response(resp, SCHEMAS, Counter())[0] is resp
    text_only = answer(Text("hi"), finish="stop")
    assert repair_response(text_only, SCHEMAS, Counter())[0] is text_only
    assert repair_response(resp, ToolSchemas(), Counter())[0] is resp


def test_repair_response_collects_records_and_marks_the_last_call_of_a_cut_answer() -> None:
    resp = answer(
        ToolCall("c1", "edit", "{}"),
        ToolCall("c2", "shell", '{"command": "echo hel'),
        finish="length",
    )
    fixed, records = repair_response(resp, SCHEMAS, Counter())
    assert [r["tool"] for r in records] == ["edit", "shell"]
    assert records[0]["cut"] is False and records[1]["cut"] is True
    assert isinstance(fixed.parts[1], ToolCall)
    assert loads(fixed.parts[1].arguments) == {"command": "echo hel"}


def test_repair_response_of_a_history_message_shape() -> None:
    # A Message is not a Response, but the same ToolCall parts: make sure nothing relies on
    # Response-only fields beyond parts and finish.
    m = Message("assistant", (ToolCall("c", "shell", "{'cmd': 'ls'}"),))
    resp = answer(*m.parts)
    fixed, _ = repair_response(resp, SCHEMAS, Counter())
    assert isinstance(fixed.parts[0], ToolCall)
    assert loads(fixed.parts[0].arguments) == {"command": "ls"}
