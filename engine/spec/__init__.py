"""YAML in: machine and graph files read, checked and converted into definitions.

Files are read with line numbers and checked against the formats, then converted into
frozen :mod:`phasegraph.model` definitions; built-in ones are found by name. Owns ``yaml``
and ``pydantic``/``jsonschema`` (the format checks), and ``re2`` (input patterns). May
import :mod:`phasegraph.core`, :mod:`phasegraph.model` and :mod:`phasegraph.errors`.
"""

from __future__ import annotations

from phasegraph.spec._loader import YamlLimits, load_graph, load_graph_text, load_machine

__all__ = [
    "YamlLimits",
    "load_graph",
    "load_graph_text",
    "load_machine",
]
