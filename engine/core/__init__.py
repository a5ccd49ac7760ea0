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
from phasegraph.core._writes import (
    WriteConflict,
    declared_conflicts,
    shared_keys,
    write_conflict,
)

__all__ = [
    "CompiledMachine",
    "Frontier",
    "MachineSet",
    "Position",
    "StepResult",
    "WorkflowGraph",
    "WriteConflict",
    "compile_graph",
    "compile_machine",
    "compile_machines",
    "declared_conflicts",
    "find_cycle",
    "shared_keys",
    "write_conflict",
]
