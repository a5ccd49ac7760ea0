"""The write-conflict rule, once: nodes that may run together must not write the same key.

A run's final data must not depend on timing, or crash-resume and replay could not be
exact. So two nodes the DAG leaves unordered may not both write one top-level data key,
unless the graph declares a reducer (``append``, ``merge``) that combines their writes.
The rule is checked where nodes declare their keys (when a graph loads or is prepared)
and, for keys nobody declared, when a step writes them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations

from phasegraph.core._graph import WorkflowGraph
from phasegraph.model import NodeDef

__all__ = ["WriteConflict", "declared_conflicts", "write_conflict"]


@dataclass(frozen=True, slots=True)
class WriteConflict:
    """Two unordered nodes that write the same keys with no reducer to combine them.

    Attributes:
        first: The node that comes first in the graph (or wrote first, at run time).
        second: The other node.
        keys: The keys both write, sorted.
    """

    first: str
    second: str
    keys: tuple[str, ...]

    def message(self) -> str:
        """What is wrong and the two ways to fix it."""
        keys = ", ".join(map(repr, self.keys))
        return (
            f"nodes {self.first!r} and {self.second!r} may run at the same time and both write "
            f"{keys}: order them with `needs` or declare a reducer for {self.keys[0]!r} "
            f"(reducers: {{{self.keys[0]}: append}})"
        )


def declared_conflicts(
    nodes: Iterable[NodeDef], reducers: Mapping[str, str], workflow: WorkflowGraph
) -> list[WriteConflict]:
    """Every pair of unordered nodes whose declared ``writes`` share a key without a reducer.

    Nodes are grouped by key first, so the pairs compared are only those that share a key.
    Conflicts are listed in graph order of the second node, then the first.
    """
    order = {node.id: index for index, node in enumerate(nodes)}
    writers: defaultdict[str, list[str]] = defaultdict(list)
    for node in sorted((n for n in nodes if n.writes), key=lambda n: order[n.id]):
        for key in dict.fromkeys(node.writes or ()):
            if key not in reducers:
                writers[key].append(node.id)
    shared: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for key, ids in writers.items():
        for a, b in combinations(ids, 2):
            if workflow.unordered(a, b):
                shared[(a, b)].append(key)
    pairs = sorted(shared, key=lambda pair: (order[pair[1]], order[pair[0]]))
    return [WriteConflict(a, b, tuple(sorted(shared[(a, b)]))) for a, b in pairs]


def write_conflict(
    workflow: WorkflowGraph, earlier_writers: Iterable[str], node_id: str, key: str
) -> WriteConflict | None:
    """The conflict, if ``node_id`` writing ``key`` after ``earlier_writers`` is one.

    Only for keys without a reducer; the caller knows the graph's reducers.
    """
    for other in earlier_writers:
        if other != node_id and workflow.unordered(other, node_id):
            return WriteConflict(other, node_id, (key,))
    return None
