"""Whether a YAML file holds a machine or a graph, told from its top-level keys."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final, Literal

from phasegraph.core._sources import read_bytes

__all__ = ["Kind", "is_machine_file", "kind_of"]

Kind = Literal["machine", "graph"]

_TOP_KEY: Final = re.compile(r"""^["']?(machine|states|initial|nodes|graph)["']?[ \t]*:""", re.M)


def kind_of(text: str) -> Kind | None:
    """What a definition's text holds, or None when no top-level key says.

    ``machine`` for a top-level ``machine:``, ``states:`` or ``initial:``; ``graph`` for
    ``nodes:`` (or ``graph:`` alone).
    """
    keys = set(_TOP_KEY.findall(text))
    if "nodes" in keys and "states" not in keys:
        return "graph"
    if keys & {"machine", "states", "initial"}:
        return "machine"
    return "graph" if "graph" in keys else None


def is_machine_file(path: Path) -> bool:
    """Whether ``path`` is a readable machine definition (a graph file is not)."""
    try:
        return kind_of(read_bytes(path).decode("utf-8", errors="replace")) == "machine"
    except OSError:
        return False
