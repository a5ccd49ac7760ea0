"""Compiled machines and workflow graphs: the pure structures every step consults.

Owns ``transitions`` (:mod:`._machine`) and ``networkx`` (:mod:`._graph`). May import
:mod:`phasegraph.model` and :mod:`phasegraph.errors` only.
"""

from __future__ import annotations

from phasegraph.core._graph import (
    Frontier,
    WorkflowGraph,
    compile_graph,
    find_cycle,
)
from phasegraph.core._machine import (
    CompiledMachine,
    MachineSet,
    Position,
    StepResult,
    compile_machine,
    compile_machines,
)

__all__ = [
    "CompiledMachine",
    "Frontier",
    "MachineSet",
    "Position",
    "StepResult",
    "WorkflowGraph",
    "compile_graph",
    "compile_machine",
    "compile_machines",
    "find_cycle",
]
