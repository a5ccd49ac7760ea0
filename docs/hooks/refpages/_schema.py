"""JSON Schema objects as Markdown tables, shared by the YAML page and the HTTP page.

One row per field: its type, default, allowed values and description.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from refpages._markdown import code, plain, table

__all__ = ["allowed", "kind", "object_section", "ref_name"]

_LIMITS: Final = (
    ("minimum", ">= {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "<= {}"),
    ("exclusiveMaximum", "< {}"),
    ("minLength", "at least {} characters"),
    ("maxLength", "at most {} characters"),
    ("minItems", "at least {} items"),
    ("maxItems", "at most {} items"),
    ("minProperties", "at least {} entries"),
    ("pattern", "matches {}"),
    ("format", "format {}"),
)


def ref_name(ref: str) -> str:
    """The name a ``$ref`` points at (its last path part)."""
    return ref.rsplit("/", 1)[-1]


def _link(name: str) -> str:
    return f"[{name}](#{name.lower()})"


def kind(schema: Mapping[str, Any]) -> str:
    """The type of ``schema`` in words, with a link for each named schema it uses."""
    if "$ref" in schema:
        return _link(ref_name(schema["$ref"]))
    for key, joint in (("anyOf", " or "), ("oneOf", " or "), ("allOf", " and ")):
        if key in schema:
            return joint.join(dict.fromkeys(kind(option) for option in schema[key]))
    if "const" in schema:
        return f"constant {code(json.dumps(schema['const']))}"
    if "enum" in schema:
        return f"{schema.get('type', 'value')} (see Allowed)"
    types = schema.get("type")
    if isinstance(types, list):
        return " or ".join(kind({**schema, "type": t}) for t in types)
    if types == "array":
        items = schema.get("items")
        return f"array of {kind(items)}" if isinstance(items, Mapping) else "array"
    if types == "object":
        return _object_kind(schema)
    return str(types) if types else "any"


def _object_kind(schema: Mapping[str, Any]) -> str:
    patterns: Mapping[str, Any] = schema.get("patternProperties", {})
    if patterns and not schema.get("properties"):
        return " or ".join(f"map of name to {kind(v)}" for v in patterns.values())
    values = schema.get("additionalProperties")
    if isinstance(values, Mapping) and values:
        return f"map of string to {kind(values)}"
    return "object" if schema.get("properties") or values is False else "object (any keys)"


def allowed(schema: Mapping[str, Any]) -> str:
    """What values ``schema`` accepts beyond its type: enum values and limits."""
    parts = []
    for key in ("anyOf", "oneOf"):
        parts += [allowed(option) for option in schema.get(key, ())]
    if "enum" in schema:
        parts.append(", ".join(code(json.dumps(v)) for v in schema["enum"]))
    parts += [form.format(code(str(schema[key]))) for key, form in _LIMITS if key in schema]
    parts += [f"names match {code(pattern)}" for pattern in schema.get("patternProperties", {})]
    if isinstance(schema.get("items"), Mapping):
        inner = allowed(schema["items"])
        parts += [f"each item: {inner}"] if inner else []
    return "; ".join(part for part in parts if part)


def _default(schema: Mapping[str, Any]) -> str:
    return code(json.dumps(schema["default"])) if "default" in schema else ""


def object_section(name: str, schema: Mapping[str, Any], level: int = 3) -> str:
    """A heading for ``name``, its description, and a table of its fields."""
    lines = [f"{'#' * level} {name}", ""]
    if schema.get("description"):
        lines += [plain(schema["description"]), ""]
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    if properties:
        rows = [
            (
                code(field) + (" (required)" if field in required else ""),
                kind(prop),
                _default(prop),
                allowed(prop),
                plain(prop.get("description", "")),
            )
            for field, prop in properties.items()
        ]
        lines.append(table(("Field", "Type", "Default", "Allowed", "Description"), rows))
        extra = schema.get("additionalProperties")
        if extra is False:
            lines += ["No other field is allowed.", ""]
        elif isinstance(extra, Mapping) and extra:
            lines += [f"Other fields: {kind(extra)}.", ""]
    else:
        shown = allowed(schema)
        lines += [f"Type: {kind(schema)}" + (f"; allowed: {shown}" if shown else "") + ".", ""]
    return "\n".join(lines) + "\n"
