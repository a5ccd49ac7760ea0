"""MkDocs hook: the reference pages, added to the site when it is built.

A placeholder for the generated reference: each page says where its source is.
"""

from __future__ import annotations

from typing import Any

__all__ = ["on_files"]

PAGES = {
    "reference/yaml.md": ("YAML formats", "specs/machine.schema.json and specs/graph.schema.json"),
    "reference/machines.md": ("Built-in machines", "phasegraph machines"),
    "reference/tools.md": ("Built-in tools", "engine/tools"),
    "reference/cli.md": ("Command line", "phasegraph --help"),
    "reference/http.md": ("HTTP API", "specs/openapi.yaml"),
    "reference/python.md": ("Python API", "the package's docstrings"),
}


def on_files(files: Any, config: Any) -> Any:
    """Add each reference page."""
    from mkdocs.structure.files import File

    for path, (title, source) in PAGES.items():
        content = f"# {title}\n\nSee `{source}`.\n"
        files.append(File.generated(config, path, content=content))
    return files
