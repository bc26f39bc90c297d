"""The ``gemini`` walker's keyword families: what an object, an array, a string and a number
keep (each only where Gemini allows it; glossary in ``gemini_base``)."""

from __future__ import annotations

import math
from typing import Any

from addon.model import JSON
from addon.transforms.schema.gemini_base import _MAX_LISTED, _Base, _count, _num, _render


class _Families(_Base):
    def object_keys(self, node: JSON, out: JSON, depth: int, refs: tuple[str, ...]) -> set[str]:
        raw = node.get("properties")
        props: JSON = {}
        if isinstance(raw, dict):
            for name, sub in raw.items():
                props[name] = self.node(sub, depth + 1, refs)
            if not props:
                self.note("empty properties dropped")
        elif "properties" in node:
            self.dropped("properties")
        if props:
            out["properties"] = props
        if "required" in node:
            raw = node["required"]
            if isinstance(raw, list):
                required: list[str] = []
                for name in raw:
                    if isinstance(name, str) and name in props and name not in required:
                        required.append(name)
                if len(required) != len(raw):
                    self.note("required entry dropped", n=len(raw) - len(required))
                if required:
                    out["required"] = required
                elif not raw:
                    self.dropped("required")
            else:
                self.dropped("required")
        for key in ("minProperties", "maxProperties"):
            if key in node:
                self.bound(node, out, key)
        if "propertyOrdering" in node:
            raw = node["propertyOrdering"]
            order: list[str] = []
            if isinstance(raw, list):
                for name in raw:
                    if isinstance(name, str) and name in props and name not in order:
                        order.append(name)
            if order and len(order) == len(raw):
                out["propertyOrdering"] = order
            elif order:
                out["propertyOrdering"] = order
                self.note("propertyOrdering entry dropped", n=len(raw) - len(order))
            else:
                self.dropped("propertyOrdering")
        return {"properties", "required", "minProperties", "maxProperties", "propertyOrdering"}

    def array_keys(self, node: JSON, out: JSON, depth: int, refs: tuple[str, ...]) -> set[str]:
        consumed = {"items", "prefixItems", "minItems", "maxItems"}
        items = node.get("items")
        prefix = node.get("prefixItems")
        if isinstance(items, list):  # draft 4-7 tuple form; additionalItems is the rest
            prefix, rest = items, node.get("additionalItems")
            consumed.add("additionalItems")
        else:
            rest = items
            if "prefixItems" in node and not isinstance(prefix, list):
                self.dropped("prefixItems")
        schema: Any
        if isinstance(prefix, list) and prefix:
            options = [*prefix, rest] if isinstance(rest, dict) or rest is True else list(prefix)
            self.note("tuple items → one items schema")
            schema = options[0] if len(options) == 1 else {"anyOf": options}
        elif isinstance(rest, dict):
            schema = rest
        else:
            if "items" in node and not isinstance(items, list):
                schema = self.replaced(rest)
            else:
                self.note("array items added")
                schema = {}
        out["items"] = self.node(schema, depth + 1, refs)
        for key in ("minItems", "maxItems"):
            if key in node:
                self.bound(node, out, key)
        return consumed

    def string_keys(self, node: JSON, out: JSON) -> set[str]:
        for key in ("minLength", "maxLength"):
            if key in node:
                self.bound(node, out, key)
        if "pattern" in node:
            if isinstance(node["pattern"], str):
                out["pattern"] = node["pattern"]
            else:
                self.dropped("pattern")
        return {"minLength", "maxLength", "pattern"}

    def bound(self, node: JSON, out: JSON, key: str) -> None:
        value = _count(node[key])
        if value is None:
            self.dropped(key)
        else:
            out[key] = value

    def number_keys(self, node: JSON, out: JSON, t: str) -> set[str]:
        low: int | float | None = None
        high: int | float | None = None
        for key in ("minimum", "maximum"):
            if key in node:
                if _num(node[key]):
                    if key == "minimum":
                        low = node[key]
                    else:
                        high = node[key]
                else:
                    self.dropped(key)
        exclusive_min, exclusive_max = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
        if isinstance(exclusive_min, bool):  # draft 4: a flag on minimum
            if exclusive_min and low is not None:
                low = math.floor(low) + 1 if t == "integer" else low
                self.note("exclusiveMinimum → minimum")
        elif _num(exclusive_min):
            bound = math.floor(exclusive_min) + 1 if t == "integer" else exclusive_min
            low = bound if low is None else max(low, bound)
            self.note("exclusiveMinimum → minimum")
        elif "exclusiveMinimum" in node:
            self.dropped("exclusiveMinimum")
        if isinstance(exclusive_max, bool):
            if exclusive_max and high is not None:
                high = math.ceil(high) - 1 if t == "integer" else high
                self.note("exclusiveMaximum → maximum")
        elif _num(exclusive_max):
            bound = math.ceil(exclusive_max) - 1 if t == "integer" else exclusive_max
            high = bound if high is None else min(high, bound)
            self.note("exclusiveMaximum → maximum")
        elif "exclusiveMaximum" in node:
            self.dropped("exclusiveMaximum")
        if low is not None:
            out["minimum"] = low
        if high is not None:
            out["maximum"] = high
        return {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}

    def enum_keys(self, values: list[Any], out: JSON, t: str, desc: str | None) -> str | None:
        """``enum`` written where Gemini takes it (strings); another type's values are listed
        in the description, which is returned."""
        if t == "string":
            kept: list[str] = []
            seen: set[str] = set()
            for v in values:
                if isinstance(v, str) and v not in seen:
                    seen.add(v)
                    kept.append(v)
            if len(kept) != len(values):
                self.note("enum value dropped", n=len(values) - len(kept))
            if kept:
                out["enum"] = kept
            elif not values:
                self.dropped("enum")
        elif values:
            listed = ", ".join(_render(v) for v in values[:_MAX_LISTED])
            if len(values) > _MAX_LISTED:
                listed += ", …"
            desc = (f"{desc}\n" if desc else "") + f"Allowed values: {listed}"
            self.note("enum moved to the description", f"{t} values")
        else:
            self.dropped("enum")
        return desc
