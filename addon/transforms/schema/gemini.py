"""The ``gemini`` profile: a schema as Gemini's function declarations take it.

The walker visits each node once (``node``), gives it one type or an ``anyOf`` (``types``,
``single``, ``infer``, ``union``), and leaves the keyword families (``gemini_families``) and
``$ref`` / ``allOf`` (``gemini_refs``) to its bases. Glossary in ``gemini_base``. What each
keyword becomes: docs/tools.md#the-gemini-profile."""

from __future__ import annotations

from typing import Any

from addon.model import JSON, Notes
from addon.transforms.schema.gemini_base import (
    _ANNOTATIONS,
    _ARRAY_KEYS,
    _FORMATS,
    _KEYS_OF,
    _NAME,
    _NUMBER_KEYS,
    _OBJECT_KEYS,
    _STRING_KEYS,
    _TYPED_KEYS,
    _TYPES,
    GEMINI_MAX_DEPTH,
    _is_null,
    _num,
    _plain,
)
from addon.transforms.schema.gemini_families import _Families
from addon.transforms.schema.gemini_refs import _Refs


def gemini_schema(schema: Any, *, upper_types: bool = False, notes: Notes | None = None) -> JSON:
    """``schema`` as Gemini's function declarations take it; every change counted in ``notes``
    (``$ref`` inlined, ``null`` unions → ``nullable``, ``const`` → ``enum``, unknown keywords
    dropped).

    The result uses only ``GEMINI_KEYWORDS``, every node has a ``type`` or an ``anyOf``, and a
    keyword appears only on the type Gemini allows it for (it answers 400 to ``properties`` on a
    string, ``enum`` on an integer, an array without ``items``, an empty ``properties``).

    What each keyword becomes: docs/tools.md#the-gemini-profile.

    Types are lower-case (the public API takes both in ``parameters`` and
    ``parametersJsonSchema``); ``upper_types=True`` writes Gemini's enum names (``STRING``) for
    endpoints that want them. Never raises: a non-object schema counts as ``{}``, nesting is
    bounded by ``GEMINI_MAX_DEPTH`` and size by ``GEMINI_MAX_NODES``. The input is not mutated
    and the output shares nothing mutable with it. Applying it to its own output changes
    nothing. Notes read ``schema <change> (gemini)[: <keyword>]``, e.g.
    ``schema keyword dropped (gemini): propertyNames``, ``schema $ref inlined (gemini)``.
    """
    cleaner = _Gemini(schema, upper_types)
    out = cleaner.node(schema, 0, (), root=True)
    if notes is not None:
        notes.update(cleaner.notes)
    return out


class _Gemini(_Families, _Refs):
    # ------------------------------------------------------------------ one node

    def node(self, node: Any, depth: int, refs: tuple[str, ...], *, root: bool = False) -> JSON:
        if not isinstance(node, dict):
            node = self.replaced(node)
        self.budget -= 1
        if depth > GEMINI_MAX_DEPTH:
            return self.cut(node, "too deep")
        if self.budget < 0:
            return self.cut(node, "too large")
        node, refs = self.expand(node, refs)
        if "anyOf" in node or "oneOf" in node:
            return self.union(node, depth, refs, root)
        types, nullable = self.types(node)
        if len(types) > 1:
            self.note("type list → anyOf")
            for key in node:
                if key in _TYPED_KEYS and not any(key in _KEYS_OF[t] for t in types):
                    self.dropped(key)
            options = [
                {
                    k: v
                    for k, v in node.items()
                    if k not in _ANNOTATIONS
                    and k != "type"
                    and (k not in _TYPED_KEYS or k in _KEYS_OF[t])
                }
                | {"type": t}
                for t in types
            ]
            outer = {k: v for k, v in node.items() if k in _ANNOTATIONS}
            if nullable:
                outer["nullable"] = True
            return self.union({**outer, "anyOf": options}, depth, refs, root)
        if types:
            t: str | None = types[0]
        elif _is_null(node):  # only null: Gemini has no null type, a nullable string says it
            t = "string"
            self.note("type added", t)
        else:
            t = None
        return self.single(node, t, nullable, depth, refs, root)

    def types(self, node: JSON, *, quiet: bool = False) -> tuple[list[str], bool]:
        """The node's known types (lower-case, without ``null``) and whether it may be null."""
        nullable = node.get("nullable") is True
        if "type" not in node:
            return [], nullable
        raw = node["type"]
        names = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        known: list[str] = []
        null = unknown = False
        for name in names:
            low = name.lower() if isinstance(name, str) else None
            if low == "null":
                null = True
            elif low in _TYPES:
                if low not in known:
                    known.append(low)
            else:
                unknown = True
        if not quiet:
            if null:
                self.note("null type → nullable")
            if unknown or not names:
                self.note("unknown type dropped")
        return known, nullable or null

    def single(
        self,
        node: JSON,
        t: str | None,
        nullable: bool,
        depth: int,
        refs: tuple[str, ...],
        root: bool,
    ) -> JSON:
        values: list[Any] | None = None
        if "const" in node:
            values = [node["const"]]
            self.note("const → enum")
        elif isinstance(node.get("enum"), list):
            values = node["enum"]
        if values is not None and any(v is None for v in values):
            values = [v for v in values if v is not None]
            nullable = True
            self.note("null enum value → nullable")
        if t is None:
            t = self.infer(node, values, root)
            self.note("type added", t)
        consumed = {"type", "const", "nullable", "description"}
        if values is not None:
            consumed.add("enum")
        if "nullable" in node and not isinstance(node["nullable"], bool):
            self.dropped("nullable")
        desc = node.get("description")
        if "description" in node and not isinstance(desc, str):
            self.dropped("description")
            desc = None
        out: JSON = {} if t == "any" else {"type": self.typ(t)}
        if values is not None:
            desc = self.enum_keys(values, out, t, desc)
        if desc is not None:
            out["description"] = desc
        if t == "any":
            out["anyOf"] = self.any_value(depth, nullable)
        elif nullable:
            out["nullable"] = True
        if t == "object":
            consumed |= self.object_keys(node, out, depth, refs)
        elif t == "array":
            consumed |= self.array_keys(node, out, depth, refs)
        elif t == "string":
            consumed |= self.string_keys(node, out)
        elif t in ("integer", "number"):
            consumed |= self.number_keys(node, out, t)
        if "format" in node:
            consumed.add("format")
            fmt = node["format"]
            if (
                isinstance(fmt, str)
                and fmt in _FORMATS.get(t, ())
                and (fmt != "enum" or "enum" in out)
            ):
                out["format"] = fmt
            else:
                name = fmt if isinstance(fmt, str) and _NAME.fullmatch(fmt) else "other"
                self.note("format dropped", name)
        for key in node:
            if key not in consumed:
                self.dropped(key)
        return out

    def infer(self, node: JSON, values: list[Any] | None, root: bool) -> str:
        keys = node.keys()
        if not keys.isdisjoint(_OBJECT_KEYS):
            return "object"
        if not keys.isdisjoint(_ARRAY_KEYS):
            return "array"
        if values:
            if all(isinstance(v, str) for v in values):
                return "string"
            if all(isinstance(v, bool) for v in values):
                return "boolean"
            if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return "integer"
            if all(_num(v) for v in values):
                return "number"
            if any(isinstance(v, str) for v in values):
                return "string"
        fmt = node.get("format")
        if fmt in _FORMATS["integer"]:
            return "integer"
        if fmt in _FORMATS["number"]:
            return "number"
        if not keys.isdisjoint(_STRING_KEYS) or isinstance(fmt, str):
            return "string"
        if not keys.isdisjoint(_NUMBER_KEYS):
            return "number"
        default = node.get("default")
        for kind, name in (
            (bool, "boolean"),
            (int, "integer"),
            (float, "number"),
            (str, "string"),
            (list, "array"),
            (dict, "object"),
        ):
            if isinstance(default, kind):
                return name
        return "object" if root else "any"

    def any_value(self, depth: int, nullable: bool) -> list[JSON]:
        """Options for a value the schema does not constrain: Gemini wants a type on every node,
        and a string alone would make the model stringify objects and arrays. The array option
        is left out near the depth bound, so that the result stays within it."""
        scalars = ("string", "number", "boolean", "object")
        options: list[JSON] = [{"type": self.typ(t)} for t in scalars]
        if depth + 3 <= GEMINI_MAX_DEPTH:
            items = {"anyOf": [{"type": self.typ(t)} for t in scalars]}
            options.append({"type": self.typ("array"), "items": items})
        if nullable:
            for option in options:
                option["nullable"] = True
        return options

    # ------------------------------------------------------------------ unions

    def union(self, node: JSON, depth: int, refs: tuple[str, ...], root: bool) -> JSON:
        outer = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
        options: list[Any] | None = None
        for key in ("anyOf", "oneOf"):
            if key not in node:
                continue
            value = node[key]
            if not isinstance(value, list) or not value or options is not None:
                self.dropped(key)
            else:
                options = value
                if key == "oneOf":
                    self.note("oneOf → anyOf")
        if options is None:
            return self.node(outer, depth + 1, refs, root=root)
        nullable = outer.get("nullable") is True
        kept = [o for o in options if not _is_null(o)]
        if len(kept) < len(options):
            nullable = True
            self.note("null option → nullable")
        if not kept:  # only null: as {"type": "null"}
            return self.node({**outer, "type": "null"}, depth + 1, refs, root=root)
        if len(kept) == 1:
            only = kept[0] if isinstance(kept[0], dict) else self.replaced(kept[0])
            merged = self.merge(outer, only)
            if nullable:
                merged["nullable"] = True
            return self.node(merged, depth + 1, refs, root=root)
        constraints = {k: v for k, v in outer.items() if k not in _ANNOTATIONS}
        branches: list[JSON] = []
        for option in kept:
            merged = self.merge(
                constraints, option if isinstance(option, dict) else self.replaced(option)
            )
            if nullable:
                merged["nullable"] = True
            branch = self.node(merged, depth + 1, refs)
            for b in branch["anyOf"] if set(branch) == {"anyOf"} else [branch]:
                if b not in branches:
                    branches.append(b)
        for key in outer:
            if key in _ANNOTATIONS and key not in ("description", "nullable"):
                self.dropped(key)
        desc = outer.get("description")
        if "description" in outer and not isinstance(desc, str):
            self.dropped("description")
            desc = None
        if len(branches) == 1:
            (only_branch,) = branches
            if desc is not None and "description" not in only_branch:
                return {**only_branch, "description": desc}
            return only_branch
        out: JSON = {}
        if desc is not None:
            out["description"] = desc
        out["anyOf"] = branches
        return out

    # ------------------------------------------------------------------ stand-ins

    def stub(self, node: JSON) -> JSON:
        """A permissive stand-in: the node's own type (``object`` if none) and description."""
        types, nullable = self.types(node, quiet=True)
        t = types[0] if types else "object"
        out: JSON = {"type": t}
        if t == "array":
            out["items"] = {"type": "string"}
        if isinstance(node.get("description"), str):
            out["description"] = node["description"]
        if nullable:
            out["nullable"] = True
        return out

    def cut(self, node: JSON, why: str) -> JSON:
        stub = self.stub(node)
        if stub != _plain(node):
            self.note("cut", why)
        if self.upper:
            stub["type"] = stub["type"].upper()
            if "items" in stub:
                stub["items"] = {"type": "STRING"}
        return stub
