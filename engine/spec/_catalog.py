"""The built-in machines and graphs: YAML files shipped as package data.

A bare name (no ``/``, no ``.yaml`` suffix) means a built-in: a YAML file of the
package-data packages ``phasegraph.states`` (machines) or ``phasegraph.graphs`` (graphs),
found in the installed package, or beside it in a source checkout (an editable install),
else through :mod:`importlib.resources`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeGuard

from phasegraph.core._sources import builtin_overrides
from phasegraph.errors import Problem, SpecError
from phasegraph.spec._suggest import did_you_mean

__all__ = [
    "builtin",
    "builtin_dir",
    "builtin_files",
    "builtin_graphs",
    "builtin_machines",
    "graph_source",
    "is_name",
    "machine_source",
]


def builtin_dir(kind: str) -> Path:
    """The folder of the built-in ``kind`` (``states`` or ``graphs``)."""
    # Installed, the package-data folder sits in the package; in a source checkout (an
    # editable install), beside it. Looked for first, without importlib.resources, whose
    # import (with zipfile) is a share of a short run's start-up.
    package = Path(__file__).resolve().parents[1]
    for folder in (package / kind, package.parent / kind):
        if folder.is_dir():
            return folder
    from importlib import resources  # anywhere else (a zip): ask the import system

    try:
        root = resources.files(f"phasegraph.{kind}")
    except (ModuleNotFoundError, TypeError):
        root = None
    if isinstance(root, Path) and root.is_dir():
        return root
    return package.parent / kind


def builtin_files(kind: str) -> dict[str, Path]:
    """Name -> file of every built-in ``kind`` (``states`` or ``graphs``), sorted by name.

    While a run's stored definition is loaded, the built-in files it kept are among them
    (a built-in this installation no longer has included).
    """
    found = {path.stem: path for path in sorted(builtin_dir(kind).glob("*.yaml"))}
    kept = builtin_overrides(kind)
    return dict(sorted({**found, **kept}.items())) if kept else found


def builtin_machines() -> list[str]:
    """Return the names of the built-in machines (``states/*.yaml``), sorted."""
    return sorted(builtin_files("states"))


def builtin_graphs() -> list[str]:
    """Return the names of the built-in graphs (``graphs/*.yaml``), sorted."""
    return sorted(builtin_files("graphs"))


def builtin(name: str, kind: str, what: str) -> Path:
    """The file of the built-in ``what`` (machine or graph) called ``name``.

    Raises:
        SpecError: There is none (the message lists the known ones).
    """
    found = builtin_files(kind)
    if name in found:
        return found[name]
    message = (
        f"unknown built-in {what} {name!r}; to load a file, give a path containing '/' or "
        f"ending in .yaml (built-in {what}s: {', '.join(found) or 'none'})"
    )
    # Only here: the messages module loads the format checks, which naming a built-in
    # that exists (a cached graph's start-up) never needs.

    raise SpecError([Problem(message + did_you_mean(name, found))])


def machine_source(name: str) -> Path:
    """Return the file of the built-in machine ``name``.

    Raises:
        SpecError: No built-in machine has that name (the message lists them).
    """
    return builtin(name, "states", "machine")


def graph_source(name: str) -> Path:
    """Return the file of the built-in graph ``name``.

    Raises:
        SpecError: No built-in graph has that name (the message lists them).
    """
    return builtin(name, "graphs", "graph")


def is_name(source: str | Path) -> TypeGuard[str]:
    """Whether ``source`` names a built-in (a str without ``/`` or a ``.yaml`` suffix)."""
    if not isinstance(source, str):
        return False
    return "/" not in source and os.sep not in source and not source.endswith((".yaml", ".yml"))
