"""The workflow DAG: cycle detection, layers and readiness queries.

Only this module touches ``networkx``; everything else sees :class:`WorkflowGraph`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import networkx as nx

from phasegraph.model import GraphDef, NodeDef, NodeOutcome, NodeState, NodeStatus

__all__ = ["WorkflowGraph", "compile_graph", "find_cycle"]


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
        descendants: Node id → every node that (transitively) needs it.
        ancestors: Node id → every node it (transitively) needs.
    """

    definition: GraphDef
    nodes: Mapping[str, NodeDef]
    layers: tuple[tuple[str, ...], ...]
    order: tuple[str, ...]
    needs: Mapping[str, tuple[str, ...]]
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


def compile_graph(definition: GraphDef) -> WorkflowGraph:
    """Compile a validated graph definition (which the loader checked is acyclic)."""
    dag = _digraph(definition.nodes)
    position = {node.id: index for index, node in enumerate(definition.nodes)}
    layers = tuple(
        tuple(sorted(generation, key=position.__getitem__))
        for generation in nx.topological_generations(dag)
    )
    return WorkflowGraph(
        definition=definition,
        nodes=MappingProxyType({n.id: n for n in definition.nodes}),
        layers=layers,
        order=tuple(node for layer in layers for node in layer),
        needs=MappingProxyType({n.id: n.needs for n in definition.nodes}),
        descendants=MappingProxyType({n: frozenset(nx.descendants(dag, n)) for n in dag.nodes}),
        ancestors=MappingProxyType({n: frozenset(nx.ancestors(dag, n)) for n in dag.nodes}),
    )
