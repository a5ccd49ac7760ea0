"""MkDocs hook: add the generated reference pages to the site when it is built.

Enable it in ``mkdocs.yml`` with ``hooks: [docs/hooks/reference.py]`` and list the pages
in ``nav`` (``reference/yaml.md``, ``reference/machines.md``, ``reference/tools.md``,
``reference/cli.md``, ``reference/http.md``, ``reference/python.md``). Each is rendered
from its source by :mod:`refpages` at build time, so a page cannot drift from what it
documents; ``mkdocs serve`` also rebuilds when a source changes. MkDocs itself is
imported only inside the hook, so the renderers work without it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the renderers beside this hook

from refpages import PAGES
from refpages._markdown import REPO

__all__ = ["on_files", "on_serve"]

WATCHED = ("specs", "states", "engine")
"""Folders whose changes ``mkdocs serve`` rebuilds the pages for."""


def on_files(files: Any, config: Any) -> Any:
    """Add each generated page, replacing a hand-written file of the same path."""
    from mkdocs.structure.files import File

    for path, render in PAGES.items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=render()))
    return files


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    """Rebuild while serving when a source of a page changes."""
    for folder in WATCHED:
        server.watch(str(REPO / folder))
    return server
