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
from itertools import pairwise
from typing import Final

from phasegraph.core._graph import WorkflowGraph
from phasegraph.model import NodeDef

__all__ = ["WriteConflict", "declared_conflicts", "shared_keys", "write_conflict"]


# A plain class, not a dataclass: defining a dataclass costs every run's start more
# (dataclasses writes and compiles its methods) than it saves here.
class WriteConflict:
    """Two unordered nodes that write the same keys with no reducer to combine them.

    Attributes:
        first: The node that comes first in the graph (or wrote first, at run time).
        second: The other node.
        keys: The keys both write, sorted.
    """

    __slots__ = ("first", "keys", "second")

    def __init__(self, first: str, second: str, keys: tuple[str, ...]) -> None:
        self.first: Final = first
        self.second: Final = second
        self.keys: Final = keys

    def message(self) -> str:
        """What is wrong and the two ways to fix it."""
        keys = ", ".join(map(repr, self.keys))
        return (
            f"nodes {self.first!r} and {self.second!r} may run at the same time and both write "
            f"{keys}: order them with `needs` or declare a reducer for {self.keys[0]!r} "
            f"(reducers: {{{self.keys[0]}: append}})"
        )


def shared_keys(nodes: Iterable[NodeDef], reducers: Mapping[str, str]) -> dict[str, list[str]]:
    """Keys that two or more nodes declare in ``writes`` with no reducer → those nodes.

    Cheap (no graph needed): a graph where this is empty cannot have a declared conflict.
    """
    writers: defaultdict[str, list[str]] = defaultdict(list)
    for node in nodes:
        for key in dict.fromkeys(node.writes or ()):
            if key not in reducers:
                writers[key].append(node.id)
    return {key: ids for key, ids in writers.items() if len(ids) > 1}


def declared_conflicts(
    nodes: Iterable[NodeDef], reducers: Mapping[str, str], workflow: WorkflowGraph
) -> list[WriteConflict]:
    """Unordered nodes whose declared ``writes`` share a key without a reducer.

    The writers of a key are safe exactly when they form a chain, each needing the one
    before it, so only neighbours in graph order are compared: each key costs as many
    reachability questions as it has writers, never one per pair. Every key that breaks
    the rule is reported, at each place its chain breaks, in declaration order.
    """
    listed = list(nodes)
    declared = {node.id: index for index, node in enumerate(listed)}
    shared: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for key, ids in shared_keys(listed, reducers).items():
        chain = sorted(ids, key=workflow.position.__getitem__)
        for pair in pairwise(chain):
            if workflow.unordered(*pair):
                first, second = sorted(pair, key=declared.__getitem__)
                shared[(first, second)].append(key)
    pairs = sorted(shared, key=lambda pair: (declared[pair[1]], declared[pair[0]]))
    return [WriteConflict(a, b, tuple(sorted(shared[(a, b)]))) for a, b in pairs]


def write_conflict(
    workflow: WorkflowGraph, last_writer: str | None, node_id: str, key: str
) -> WriteConflict | None:
    """The conflict, if ``node_id`` writing ``key`` after ``last_writer`` is one.

    Comparing with the last writer is enough: the writers so far form a chain (or the
    run would have failed already), and a node that comes after the chain's last link
    comes after all of it. Only for keys without a reducer; the caller knows them.
    """
    if last_writer is None or not workflow.unordered(last_writer, node_id):
        return None
    return WriteConflict(last_writer, node_id, (key,))
