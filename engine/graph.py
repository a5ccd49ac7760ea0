"""The workflow DAG: cycle detection, layers and readiness queries.

Only this module touches ``networkx``; everything else sees :class:`WorkflowGraph` and,
for a run in progress, its :class:`Frontier`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import networkx as nx

from phasegraph.model import GraphDef, NodeDef, NodeOutcome, NodeState, NodeStatus

__all__ = ["Frontier", "Tally", "WorkflowGraph", "compile_graph", "find_cycle"]


def _digraph(nodes: Iterable[NodeDef]) -> nx.DiGraph:
    graph = nx.DiGraph()
    for node in nodes:
        graph.add_node(node.id)
    for node in nodes:
        for need in node.needs:
            if graph.has_node(need):
                graph.add_edge(need, node.id)
    return graph


def find_cycle(nodes: Iterable[NodeDef]) -> tuple[str, ...] | None:
    """Return one dependency cycle as a node chain (first node repeated last), or None.

    Unknown ``needs`` are ignored here; the loader reports them separately.
    """
    node_list = list(nodes)
    try:
        edges = nx.find_cycle(_digraph(node_list))
    except nx.NetworkXNoCycle:
        return None
    chain = [edge[0] for edge in edges]
    return (*chain, chain[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowGraph:
    """A compiled, immutable view of a graph's DAG.

    Attributes:
        definition: The graph definition it was compiled from.
        nodes: Node id → definition.
        layers: Topological generations: every node's needs are in earlier layers.
        order: All node ids, layer by layer (declaration order within a layer).
        needs: Node id → direct prerequisites.
        dependents: Node id → the nodes that directly need it, in ``order``.
        position: Node id → its index in ``order``.
        descendants: Node id → every node that (transitively) needs it.
        ancestors: Node id → every node it (transitively) needs.
    """

    definition: GraphDef
    nodes: Mapping[str, NodeDef]
    layers: tuple[tuple[str, ...], ...]
    order: tuple[str, ...]
    needs: Mapping[str, tuple[str, ...]]
    dependents: Mapping[str, tuple[str, ...]]
    position: Mapping[str, int]
    descendants: Mapping[str, frozenset[str]]
    ancestors: Mapping[str, frozenset[str]]

    def ready(self, nodes: Mapping[str, NodeState]) -> list[str]:
        """Pending nodes whose every prerequisite completed with outcome ``success``."""
        ready = []
        for node_id in self.order:
            if nodes[node_id].status is not NodeStatus.PENDING:
                continue
            if all(_succeeded(nodes[need]) for need in self.needs[node_id]):
                ready.append(node_id)
        return ready

    def unordered(self, a: str, b: str) -> bool:
        """Whether ``a`` and ``b`` may run concurrently (neither needs the other)."""
        return a != b and b not in self.descendants[a] and b not in self.ancestors[a]


def _succeeded(state: NodeState) -> bool:
    return state.status is NodeStatus.COMPLETED and state.outcome is NodeOutcome.SUCCESS


class Tally(NamedTuple):
    """Counts over a run's nodes, what the run's status is decided from.

    Attributes:
        running: Nodes running.
        pending: Nodes pending.
        waiting: Nodes waiting (on a human gate, or parked).
        parked: Nodes whose outcome is ``parked``.
        succeeded: Nodes whose outcome is ``success``.
        total: All nodes.
        ready: Whether some pending node has every prerequisite succeeded.
    """

    running: int
    pending: int
    waiting: int
    parked: int
    succeeded: int
    total: int
    ready: bool


def _counts(node: NodeState) -> tuple[int, int, int, int, int]:
    status = node.status
    return (
        status is NodeStatus.RUNNING,
        status is NodeStatus.PENDING,
        status is NodeStatus.WAITING,
        node.outcome is NodeOutcome.PARKED,
        node.outcome is NodeOutcome.SUCCESS,
    )


class Frontier:
    """Readiness of one run's nodes, updated change by change instead of rescanned.

    Built from the node states of a run (O(nodes + edges)), then moved along with
    :meth:`apply` as steps change nodes. It keeps each node's count of prerequisites that
    have not succeeded and the set of pending nodes with none left, so a query or an
    update costs O(changed nodes and their direct dependents), not O(nodes x needs).
    """

    def __init__(self, workflow: WorkflowGraph, nodes: Mapping[str, NodeState]) -> None:
        self._workflow = workflow
        self._nodes = dict(nodes)
        self._unmet = {
            node_id: sum(not _succeeded(nodes[need]) for need in _distinct(workflow, node_id))
            for node_id in workflow.order
        }
        self._ready = {
            node_id
            for node_id in workflow.order
            if self._unmet[node_id] == 0 and nodes[node_id].status is NodeStatus.PENDING
        }
        # Ready nodes by graph position; entries no longer ready are dropped lazily.
        self._queue = [workflow.position[node_id] for node_id in self._ready]
        heapq.heapify(self._queue)
        sums = [0, 0, 0, 0, 0]
        for node in self._nodes.values():
            for index, flag in enumerate(_counts(node)):
                sums[index] += flag
        self._sums = sums

    @property
    def running(self) -> int:
        """How many nodes are running."""
        return self._sums[0]

    def first_ready(self) -> str | None:
        """The ready node that comes first in graph order, if any."""
        queue, order = self._queue, self._workflow.order
        while queue and order[queue[0]] not in self._ready:
            heapq.heappop(queue)
        return order[queue[0]] if queue else None

    def ready(self) -> list[str]:
        """Every ready node, in graph order."""
        return sorted(self._ready, key=self._workflow.position.__getitem__)

    def tally(self, changes: Mapping[str, NodeState]) -> Tally:
        """The counts for the node states with ``changes`` applied (nothing is changed)."""
        sums = list(self._sums)
        for node_id, node in changes.items():
            _shift(sums, self._nodes[node_id], node)
        unmet = self._unmet_changes(changes)
        ready = any(node_id not in changes and node_id not in unmet for node_id in self._ready)
        if not ready:
            ready = any(
                self._unmet[node_id] + unmet.get(node_id, 0) == 0
                and changes.get(node_id, self._nodes[node_id]).status is NodeStatus.PENDING
                for node_id in {**changes, **unmet}
            )
        running, pending, waiting, parked, succeeded = sums
        return Tally(running, pending, waiting, parked, succeeded, len(self._nodes), ready)

    def apply(self, changes: Mapping[str, NodeState]) -> None:
        """Move to the node states with ``changes`` applied."""
        unmet = self._unmet_changes(changes)
        for node_id, node in changes.items():
            _shift(self._sums, self._nodes[node_id], node)
            self._nodes[node_id] = node
        for node_id, delta in unmet.items():
            self._unmet[node_id] += delta
        for node_id in {**changes, **unmet}:
            if self._unmet[node_id] == 0 and self._nodes[node_id].status is NodeStatus.PENDING:
                if node_id not in self._ready:
                    self._ready.add(node_id)
                    heapq.heappush(self._queue, self._workflow.position[node_id])
            else:
                self._ready.discard(node_id)

    def _unmet_changes(self, changes: Mapping[str, NodeState]) -> dict[str, int]:
        """How each dependent's count of unmet prerequisites moves under ``changes``."""
        moved: dict[str, int] = {}
        for node_id, node in changes.items():
            now = _succeeded(node)
            if _succeeded(self._nodes[node_id]) is now:
                continue
            for dependent in self._workflow.dependents[node_id]:
                moved[dependent] = moved.get(dependent, 0) + (-1 if now else 1)
        return moved


def _shift(sums: list[int], old: NodeState, new: NodeState) -> None:
    """Move ``sums`` (see :func:`_counts`) from counting ``old`` to counting ``new``."""
    if old.status is new.status and old.outcome is new.outcome:
        return  # the usual step: a running node moved between states
    for index, (was, now) in enumerate(zip(_counts(old), _counts(new), strict=True)):
        sums[index] += now - was


def _distinct(workflow: WorkflowGraph, node_id: str) -> Iterable[str]:
    """A node's prerequisites, each once (the same edges :attr:`WorkflowGraph.dependents` has)."""
    return dict.fromkeys(n for n in workflow.needs[node_id] if n in workflow.nodes)


def compile_graph(definition: GraphDef) -> WorkflowGraph:
    """Compile a validated graph definition (which the loader checked is acyclic)."""
    dag = _digraph(definition.nodes)
    position = {node.id: index for index, node in enumerate(definition.nodes)}
    layers = tuple(
        tuple(sorted(generation, key=position.__getitem__))
        for generation in nx.topological_generations(dag)
    )
    order = tuple(node for layer in layers for node in layer)
    ranks = {node: index for index, node in enumerate(order)}
    return WorkflowGraph(
        definition=definition,
        nodes=MappingProxyType({n.id: n for n in definition.nodes}),
        layers=layers,
        order=order,
        needs=MappingProxyType({n.id: n.needs for n in definition.nodes}),
        dependents=MappingProxyType(
            {n: tuple(sorted(dag.successors(n), key=ranks.__getitem__)) for n in order}
        ),
        position=MappingProxyType(ranks),
        descendants=MappingProxyType({n: frozenset(nx.descendants(dag, n)) for n in dag.nodes}),
        ancestors=MappingProxyType({n: frozenset(nx.ancestors(dag, n)) for n in dag.nodes}),
    )
