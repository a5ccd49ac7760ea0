"""YAML in: machine and graph files read, checked and converted into definitions.

Files are read with line numbers and checked against the formats, then converted into
frozen :mod:`phasegraph.model` definitions; built-in ones are found by name. Owns ``yaml``
and ``pydantic``/``jsonschema`` (the format checks), and ``re2`` (input patterns). May
import :mod:`phasegraph.core`, :mod:`phasegraph.model` and :mod:`phasegraph.errors`.
"""

from __future__ import annotations

from phasegraph.spec._catalog import (
    is_name,
)
from phasegraph.spec._input import input_validator
from phasegraph.spec._loader import (
    YamlLimits,
    builtin_graphs,
    builtin_machines,
    graph_source,
    load_graph,
    load_graph_text,
    load_machine,
    load_machine_family,
    machine_source,
    read_raw,
)

__all__ = [
    "YamlLimits",
    "builtin_graphs",
    "builtin_machines",
    "graph_source",
    "input_validator",
    "is_name",
    "load_graph",
    "load_graph_text",
    "load_machine",
    "load_machine_family",
    "machine_source",
    "read_raw",
]
