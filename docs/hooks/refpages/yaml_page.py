"""The YAML reference: every field of a machine file and a graph file, from their JSON Schemas."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from refpages._markdown import REPO, generated_from, plain
from refpages._schema import object_section

__all__ = ["SCHEMAS", "page", "render"]

SCHEMAS: Sequence[tuple[str, Path]] = (
    ("Machine file", REPO / "specs" / "machine.schema.json"),
    ("Graph file", REPO / "specs" / "graph.schema.json"),
)
"""Each YAML format's heading and its schema (regenerated from the loader's models by
``PHASEGRAPH_REGEN_SPECS=1 pytest tests/spec/test_schema.py``)."""


def _format(title: str, schema: Mapping[str, Any]) -> str:
    lines = [f"## {title}", ""]
    if schema.get("description"):
        lines += [plain(schema["description"]), ""]
    top = {k: v for k, v in schema.items() if k != "description"}
    lines.append(object_section(f"{schema.get('title', title)} (top level)", top))
    for name, definition in schema.get("$defs", {}).items():
        lines.append(object_section(name, definition))
    return "\n".join(lines)


def render(schemas: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """The page for ``(heading, JSON Schema)`` pairs."""
    parts = [
        "# YAML reference",
        "",
        "Every field of the YAML files phasegraph reads: a machine (`states/*.yaml`, or "
        "your own) and a graph of nodes that run machines. A field marked required must "
        "be given; a type links to the object it names.",
        "",
        generated_from("specs/machine.schema.json", "specs/graph.schema.json"),
    ]
    parts += [_format(title, schema) for title, schema in schemas]
    return "\n".join(parts)


def page(paths: Sequence[tuple[str, Path]] = SCHEMAS) -> str:
    """The page from the schema files."""
    return render([(title, json.loads(path.read_text(encoding="utf-8"))) for title, path in paths])
