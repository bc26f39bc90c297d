"""The ``gemini`` walker's ``$ref`` and ``allOf``: local references inlined (a cycle becomes a
stub), ``allOf`` merged into its node (properties united, types intersected, the tighter bound
kept)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from addon.model import JSON
from addon.transforms.schema.gemini_base import (
    _LOWER_BOUNDS,
    _MAX_STEPS,
    _UPPER_BOUNDS,
    _Base,
    _num,
    _scalar,
    _type_names,
)


class _Refs(_Base):
    # ------------------------------------------------------------------ $ref and allOf

    def expand(self, node: JSON, refs: tuple[str, ...]) -> tuple[JSON, tuple[str, ...]]:
        """``$ref`` and ``allOf`` merged into the node, so that one schema is left."""
        for _ in range(_MAX_STEPS):
            if "$ref" in node:
                ref = node["$ref"]
                rest = {k: v for k, v in node.items() if k != "$ref"}
                target = self.resolve(ref) if isinstance(ref, str) else None
                if target is None:
                    self.note("$ref not resolved")
                    node = rest
                elif ref in refs:
                    self.note("recursive $ref cut")
                    node = self.merge(rest, self.stub(target))
                else:
                    self.note("$ref inlined")
                    refs = (*refs, ref)
                    node = self.merge(rest, target)
            elif "allOf" in node:
                parts = node["allOf"]
                node = {k: v for k, v in node.items() if k != "allOf"}
                if not isinstance(parts, list):
                    self.dropped("allOf")
                    continue
                self.note("allOf merged")
                for part in parts:
                    node = self.merge(node, part if isinstance(part, dict) else self.replaced(part))
            else:
                return node, refs
        self.note("cut", "too many $ref / allOf steps")
        return {k: v for k, v in node.items() if k not in ("$ref", "allOf")}, refs

    def resolve(self, ref: str) -> JSON | None:
        """The subschema a local ``$ref`` points at (a JSON pointer into the root), if any."""
        if not ref.startswith("#"):
            return None
        pointer = unquote(ref[1:])
        if pointer and not pointer.startswith("/"):
            return None  # a plain-name anchor: not supported
        target: Any = self.root
        for token in pointer.split("/")[1:] if pointer else ():
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and token in target:
                target = target[token]
            elif (
                isinstance(target, list)
                and token.isascii()
                and token.isdigit()
                and len(token) < 10
                and int(token) < len(target)
            ):
                target = target[int(token)]
            else:
                return None
        if isinstance(target, bool):
            return {}
        return target if isinstance(target, dict) else None

    def merge(self, a: JSON, b: JSON) -> JSON:
        """Both schemas at once (``allOf``): ``a``'s annotations win, constraints combine."""
        out = dict(a)
        for key, value in b.items():
            if key not in out:
                out[key] = value
                continue
            mine = out[key]
            if key == "$ref":
                if not (isinstance(mine, str) and mine == value):
                    before = out.get("allOf")
                    out["allOf"] = [*(before if isinstance(before, list) else ()), {"$ref": value}]
            elif key == "allOf" and isinstance(mine, list) and isinstance(value, list):
                out[key] = [*mine, *value]
            elif key == "properties" and isinstance(mine, dict) and isinstance(value, dict):
                props = dict(mine)
                for name, sub in value.items():
                    props[name] = {"allOf": [props[name], sub]} if name in props else sub
                out[key] = props
            elif key == "required" and isinstance(mine, list) and isinstance(value, list):
                out[key] = [*mine, *(r for r in value if isinstance(r, str) and r not in mine)]
            elif key == "type":
                out[key] = self.meet(mine, value)
            elif key == "enum" and isinstance(mine, list) and isinstance(value, list):
                common = [v for v in mine if _scalar(v) and v in value]
                if common:
                    out[key] = common
                else:
                    self.note("allOf conflict", "enum")
            elif key in _LOWER_BOUNDS and _num(mine) and _num(value):
                out[key] = max(mine, value)
            elif key in _UPPER_BOUNDS and _num(mine) and _num(value):
                out[key] = min(mine, value)
            elif key == "items" and isinstance(mine, dict) and isinstance(value, dict):
                out[key] = {"allOf": [mine, value]}
            elif key == "nullable" and isinstance(mine, bool) and isinstance(value, bool):
                out[key] = mine and value
            elif key in ("anyOf", "oneOf") and mine is not value:
                self.note("allOf conflict", key)
        return out

    def meet(self, a: Any, b: Any) -> Any:
        """The types both ``a`` and ``b`` allow (an integer is a number)."""
        mine, theirs = _type_names(a), _type_names(b)
        if mine is None:
            return b
        if theirs is None:
            return a
        both: list[str] = []
        for t in mine:
            if t in theirs:
                m = t
            elif (t == "integer" and "number" in theirs) or (t == "number" and "integer" in theirs):
                m = "integer"
            else:
                continue
            if m not in both:
                both.append(m)
        if not both:
            self.note("allOf conflict", "type")
            return a
        return both[0] if len(both) == 1 else both
