"""YAML in: machine and graph files read, checked and converted into definitions.

Files are read with line numbers and checked against the formats, then converted into
frozen :mod:`phasegraph.model` definitions; built-in ones are found by name. Owns ``yaml``
and ``pydantic``/``jsonschema`` (the format checks), and ``re2`` (input patterns). May
import :mod:`phasegraph.core`, :mod:`phasegraph.codec` (the compiled-graph cache keeps
definitions as its bytes), :mod:`phasegraph.model` and :mod:`phasegraph.errors`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from phasegraph.spec._cache import load_graph

if TYPE_CHECKING:
    from phasegraph.spec._loader import YamlLimits, load_graph_text, load_machine

__all__ = [
    "YamlLimits",
    "load_graph",
    "load_graph_text",
    "load_machine",
]


def __getattr__(name: str) -> Any:
    """Import the loader's names on first use.

    A graph read back from the cache (:func:`load_graph`) needs none of the libraries
    the loader imports.
    """
    if name not in __all__:
        raise AttributeError(f"module 'phasegraph.spec' has no attribute {name!r}")
    value = getattr(importlib.import_module("phasegraph.spec._loader"), name)
    globals()[name] = value
    return value
