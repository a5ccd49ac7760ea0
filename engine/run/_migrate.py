"""Moving a run to another definition: a static check of the fit, then one committed step.

A run follows the definition it stored (:mod:`phasegraph.run._definitions`) until it is
migrated. :func:`fit` checks, without running anything, that everything the run holds
has a place in the new definition: each node (by id, or renamed), the state each node
stands in (by path, or renamed) in that node's machine, the hook of each open gate bound
to a ``human:`` gate there, each budget a node has spent on declared by its machine, and
each node with a step in flight (ledger entries) standing on a bound hook. Each misfit is
a problem located in the new files (the node, or its machine). A fit that holds is
committed as one ``migrate`` step (:data:`~phasegraph.model.MIGRATE`) naming who moved
the run and both definitions; from then on the run follows the new one. Nodes the new
graph adds start as pending nodes.

Renames come from a mapping file (``--renames FILE``)::

    nodes: {old_id: new_id}
    states: {old/state/path: new/state/path}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from phasegraph.errors import InputError, Problem
from phasegraph.model import (
    PATH_SEPARATOR,
    GraphDef,
    MachineDef,
    NodeDef,
    NodeState,
    NodeStatus,
    RunState,
    StateDef,
    replace,
)
from phasegraph.run._prepare import PreparedGraph, with_plans

__all__ = ["Fit", "Migration", "Renames", "fit", "pinned", "read_renames"]


@dataclass(frozen=True, slots=True)
class Renames:
    """Node ids and state paths the new definition calls by other names.

    Attributes:
        nodes: Old node id → new node id.
        states: Old state path (``outer/inner``) → new state path, in any node.
    """

    nodes: Mapping[str, str] = field(default_factory=dict)
    states: Mapping[str, str] = field(default_factory=dict)


def read_renames(path: Path) -> Renames:
    """The renames in a YAML mapping file (``nodes:`` and ``states:``, both optional).

    Raises:
        InputError: The file cannot be read or is not such a mapping (naming the file).
    """
    from phasegraph.spec._yaml import read_file  # only a migration with renames needs it

    doc, problems = read_file(path, "renames")
    if problems or doc is None:
        raise InputError("; ".join(str(problem) for problem in problems) or f"{path} is empty")
    data = doc.data
    if set(data) - {"nodes", "states"}:
        raise InputError(
            f"the renames file {path} must be a mapping with `nodes:` (old id: new id) and "
            "`states:` (old/path: new/path)"
        )
    parts: dict[str, dict[str, str]] = {}
    for key in ("nodes", "states"):
        value = data.get(key) or {}
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise InputError(f"{path}: `{key}:` must map names to names (old: new)")
        parts[key] = dict(value)
    return Renames(nodes=parts["nodes"], states=parts["states"])


@dataclass(frozen=True, slots=True)
class Fit:
    """What :func:`fit` found: the problems, or the node changes a migration makes.

    Attributes:
        problems: Each thing of the run without a place in the new definition.
        nodes: New node id → its state in the new definition (renamed, moved or added).
        dropped: Old ids of renamed nodes.
    """

    problems: tuple[Problem, ...]
    nodes: Mapping[str, NodeState]
    dropped: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Migration:
    """A migration checked, and made unless it was a dry run or the fit failed.

    Attributes:
        run_id: The run.
        from_digest: The version the run followed.
        to_digest: The version it was checked against (and moved to, if ``applied``).
        problems: Why it does not fit (empty: it fits).
        applied: Whether the ``migrate`` step was committed.
        seq: That step's seq (0 when none was committed).
    """

    run_id: str
    from_digest: str
    to_digest: str
    problems: tuple[Problem, ...] = ()
    applied: bool = False
    seq: int = 0

    @property
    def fits(self) -> bool:
        """Whether everything the run holds has a place in the new definition."""
        return not self.problems


def _state(
    machines: Mapping[str, MachineDef], machine: str, path: tuple[str, ...]
) -> StateDef | None:
    """The state at ``path`` in ``machine`` (nested machines followed), if it has one."""
    found: StateDef | None = None
    current = machines.get(machine)
    for part in path:
        if current is None or part not in current.states:
            return None
        found = current.states[part]
        current = machines.get(found.machine) if found.machine else None
    return found


def _family(machines: Mapping[str, MachineDef], machine: str) -> list[MachineDef]:
    found: list[MachineDef] = []
    stack = [machine]
    while stack:
        name = stack.pop()
        definition = machines.get(name)
        if definition is None or definition in found:
            continue
        found.append(definition)
        stack += [s.machine for s in definition.states.values() if s.machine]
    return found


def fit(state: RunState, new: PreparedGraph, renames: Renames | None = None) -> Fit:
    """Check that everything ``state`` holds has a place in ``new`` (see the module doc)."""
    renames = renames or Renames()
    graph = with_plans(new, state.plans).definition if state.plans else new.definition
    by_id = {node.id: node for node in graph.nodes}
    first = graph.nodes[0].location if graph.nodes else graph.location
    problems: list[Problem] = []
    changed: dict[str, NodeState] = {}
    run = state.run_id
    gated = {interrupt.node for interrupt in state.interrupts.values()}
    for old_id, node in state.nodes.items():
        node_id = renames.nodes.get(old_id, old_id)
        definition = by_id.get(node_id)
        if definition is None:
            text = (
                f"run {run}: node {old_id!r} ({_where(node)}) has no place in the new graph, "
                f"which has no node {node_id!r}: keep the node, or name its new id in a "
                f"renames file (nodes: {{{old_id}: NEW_ID}})"
            )
            problems.append(Problem(text, graph.location if first is None else first))
            continue
        if node_id != old_id and old_id in gated:
            text = (
                f"run {run}: node {old_id!r} waits at a gate; a node with an open gate "
                "cannot be renamed (answer the gate first)"
            )
            problems.append(Problem(text, definition.location))
            continue
        moved = _moved(node, renames)
        problems += _node_problems(run, old_id, moved, definition, graph, old_id in gated)
        if node_id != old_id or moved is not node:
            changed[node_id] = moved
    kept = {renames.nodes.get(old, old) for old in state.nodes}
    for added in graph.nodes:
        if added.id not in kept:
            changed[added.id] = NodeState()  # a node the new graph adds: it starts pending
    dropped = tuple(
        old for old, new_id in renames.nodes.items() if old in state.nodes and old != new_id
    )
    return Fit(tuple(problems), MappingProxyType(changed), dropped)


def _where(node: NodeState) -> str:
    if node.status is NodeStatus.PENDING:
        return "not started"
    return f"{node.status} in state {PATH_SEPARATOR.join(node.path) or '-'}"


def _moved(node: NodeState, renames: Renames) -> NodeState:
    """``node`` standing in its state's new path, if the state was renamed."""
    path = PATH_SEPARATOR.join(node.path)
    if path and path in renames.states:
        return replace(node, path=tuple(renames.states[path].split(PATH_SEPARATOR)))
    return node


def _node_problems(
    run: str, old_id: str, node: NodeState, definition: NodeDef, graph: GraphDef, gated: bool
) -> list[Problem]:
    """What of ``node`` (of run ``run``, called ``old_id`` there) has no place in ``definition``."""
    machines = graph.machines
    machine = machines.get(definition.machine)
    where = machine.location if machine is not None and machine.location else definition.location
    name = f"run {run}: node {old_id!r}"
    problems: list[Problem] = []
    if node.path:
        path = PATH_SEPARATOR.join(node.path)
        found = _state(machines, definition.machine, node.path)
        if found is None:
            known = ", ".join(machine.states) if machine is not None else "none"
            text = (
                f"{name} stands in state {path!r}, which machine {definition.machine!r} of "
                f"the new graph does not have (its states: {known}); keep the state, or name "
                f"its new path in a renames file (states: {{{path}: NEW/PATH}})"
            )
            return [Problem(text, where)]
        hook = found.hook
        binding = definition.bind.get(hook) if hook else None
        if gated and (binding is None or binding.kind != "human"):
            text = (
                f"{name} waits at a gate in state {path!r}, but hook {hook!r} is not bound to "
                "a human gate in the new graph: bind it with `human:` there"
            )
            problems.append(Problem(text, definition.location))
        if node.ledger and (hook is None or binding is None):
            text = (
                f"{name} has a step in flight in state {path!r} (its effect ledger holds "
                f"{len(node.ledger)} entries) but nothing is bound to its hook in the new graph"
            )
            problems.append(Problem(text, definition.location))
    budgets = {b for m in _family(machines, definition.machine) for b in m.budgets}
    for budget in sorted(set(node.counters) - budgets):
        text = (
            f"{name} has spent {node.counters[budget]} of budget {budget!r}, which machine "
            f"{definition.machine!r} of the new graph does not declare"
        )
        problems.append(Problem(text, where))
    return problems


def pinned(
    prepared: PreparedGraph, key: str, state: RunState, dropped: tuple[str, ...]
) -> dict[str, Any]:
    """The ``result`` of a ``migrate`` step moving ``state``'s run to ``prepared`` (``key``)."""
    result: dict[str, Any] = {
        "definition": key,
        "graph_digest": prepared.definition.digest,
        "graph_source": prepared.source,
        "graph": prepared.definition.name,
        "from": {
            "definition": state.definition,
            "graph_digest": state.graph_digest,
            "graph_source": state.graph_source,
        },
    }
    if dropped:
        result["dropped"] = list(dropped)
    return result
