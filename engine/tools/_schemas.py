"""Describe a tool to a model: its name, what it does and a JSON Schema of its arguments.

A built-in tool's description is read from the tool itself: the first paragraph of its
docstring, and a schema built from its keyword-only parameters (after the scope) and
their annotations.
An annotation this module does not know becomes an unconstrained argument.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["describe_tool", "function_entry"]

_SCALARS: Final = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
_SEQUENCE: Final = re.compile(r"^(?:Sequence|list|tuple)\[(\w+)(?:, \.\.\.)?\]$")
_MAPPING: Final = re.compile(r"^(?:Mapping|dict)\[")


def _schema_of(annotation: Any) -> dict[str, Any]:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    kinds = [part.strip() for part in str(text).split("|") if part.strip() != "None"]
    if len(kinds) != 1:
        return {}
    kind = kinds[0]
    if kind in _SCALARS:
        return {"type": _SCALARS[kind]}
    sequence = _SEQUENCE.match(kind)
    if sequence:
        return {"type": "array", "items": _schema_of(sequence[1])}
    if _MAPPING.match(kind):
        return {"type": "object"}
    return {}


def describe_tool(name: str, tool: Callable[..., Any]) -> dict[str, Any]:
    """The ``{"type": "function", "function": {...}}`` entry a chat request lists for ``tool``."""
    doc = inspect.getdoc(tool) or name
    summary = " ".join(doc.split("\n\n")[0].split())
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(tool).parameters.values():
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue  # the scope, passed by the engine
        properties[parameter.name] = _schema_of(parameter.annotation)
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return function_entry(name, summary, parameters)


def function_entry(name: str, description: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A chat request's tool entry; an MCP tool's comes from its listing (its ``inputSchema``)."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": dict(parameters)},
    }
