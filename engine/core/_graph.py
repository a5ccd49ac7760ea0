"""The workflow DAG: cycle detection, layers and readiness queries.

Only this module touches ``networkx``; everything else sees :class:`WorkflowGraph` and,
for a run in progress, its :class:`Frontier`. Layers and the acyclic check are one pass
over plain dicts (O(nodes + edges), a few times cheaper than building a ``networkx``
graph of 20,000 nodes); ``networkx`` is imported only to name the cycle of a graph that
has one, so a run of a graph read back from the compiled-graph cache never loads it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from phasegraph.model import (
    EMPTY,
    GraphDef,
    Interrupt,
    NodeDef,
    NodeOutcome,
    NodeState,
    NodeStatus,
    Plan,
    RunStatus,
    child_id,
    empty_field,
)

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Frontier", "WorkflowGraph", "compile_graph", "find_cycle"]


def _needs(nodes: Iterable[NodeDef]) -> dict[str, dict[str, None]]:
    """Node id → its known needs, each once (a repeated id merges its needs).

    A child of a plan comes before its parent: the parent ends when its children have,
    so whatever comes after the parent comes after every child too.
    """
    needs: dict[str, dict[str, None]] = {node.id: {} for node in nodes}
    for node in nodes:
        known = needs[node.id]
        for need in node.needs:
            if need in needs:
                known[need] = None
        if node.parent is not None and node.parent in needs:
            needs[node.parent][node.id] = None
    return needs


def _generations(
    needs: Mapping[str, Mapping[str, None]],
) -> tuple[list[list[str]], dict[str, dict[str, None]]] | None:
    """The topological layers and each node's dependents, or ``None`` if there is a cycle.

    Kahn's algorithm: a layer is the nodes whose needs are all in earlier layers. Each
    node's dependents are the keys of a dict, in the order found: a dict of strings is
    not tracked by the garbage collector, a list is (20,000 of them for 20,000 nodes).
    """
    dependents: dict[str, dict[str, None]] = {node_id: {} for node_id in needs}
    waiting: dict[str, int] = {}
    for node_id, known in needs.items():
        waiting[node_id] = len(known)
        for need in known:
            dependents[need][node_id] = None
    layer = [node_id for node_id, count in waiting.items() if not count]
    layers: list[list[str]] = []
    placed = 0
    while layer:
        layers.append(layer)
        placed += len(layer)
        following = []
        for node_id in layer:
            for dependent in dependents[node_id]:
                waiting[dependent] -= 1
                if not waiting[dependent]:
                    following.append(dependent)
        layer = following
    return (layers, dependents) if placed == len(needs) else None


def _digraph(needs: Mapping[str, Mapping[str, None]]) -> nx.DiGraph:
    import networkx as nx  # here: only a graph with a cycle needs it, to name the cycle

    graph = nx.DiGraph()
    graph.add_nodes_from(needs)
    graph.add_edges_from((need, node_id) for node_id, known in needs.items() for need in known)
    return graph


def find_cycle(nodes: Iterable[NodeDef]) -> tuple[str, ...] | None:
    """Return one dependency cycle as a node chain (first node repeated last), or None.

    Unknown ``needs`` are ignored here; the loader reports them separately.
    """
    needs = _needs(nodes)
    if _generations(needs) is not None:
        return None  # the usual answer: no graph to build, no cycle to search for
    import networkx as nx

    dag = _digraph(needs)
    try:
        edges = nx.find_cycle(dag)
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
        needs: Node id → direct prerequisites, each once, in ``order``.
        dependents: Node id → the nodes that directly need it, in ``order``.
        position: Node id → its index in ``order``.
        parents: Child of a plan → the node whose plan made it (a node that is no
            child has no entry). A parent comes after its children in ``order``.
        members: Node with a plan → the ids of its plan's current children.
        limits: Node with a plan → how many of its children may run at once (0: no
            limit of its own).

    Compiling costs O(nodes + edges) time and memory. Whether one node (transitively)
    needs another is answered on demand (:meth:`unordered`, :meth:`descendants`): most
    graphs never ask, and one that does pays for the nodes it asks about only.
    """

    definition: GraphDef
    nodes: Mapping[str, NodeDef]
    layers: tuple[tuple[str, ...], ...]
    order: tuple[str, ...]
    needs: Mapping[str, tuple[str, ...]]
    dependents: Mapping[str, tuple[str, ...]]
    position: Mapping[str, int]
    parents: Mapping[str, str] = empty_field()
    members: Mapping[str, tuple[str, ...]] = empty_field()
    limits: Mapping[str, int] = empty_field()

    def unordered(self, a: str, b: str) -> bool:
        """Whether ``a`` and ``b`` may run concurrently (neither needs the other)."""
        if a == b:
            return False
        first, second = (a, b) if self.position[a] < self.position[b] else (b, a)
        # Only a node earlier in ``order`` can be needed by a later one.
        return not self._needs(second, first)

    def descendants(self, node_id: str) -> list[str]:
        """Every node that (transitively) needs ``node_id``, in ``order``.

        For a child of a plan, only its siblings: what needs its parent waits for the
        parent's own outcome, which its plan decides when every child has ended.
        """
        found = self._search(node_id, len(self.order))
        parent = self.parents.get(node_id)
        if parent is not None:
            parents = self.parents
            found = {other for other in found if parents.get(other) == parent}
        return sorted(found, key=self.position.__getitem__)

    def _needs(self, later: str, earlier: str) -> bool:
        """Whether ``later`` transitively needs ``earlier`` (searched from ``earlier``)."""
        return later in self._search(earlier, self.position[later] + 1)

    def _search(self, start: str, bound: int) -> set[str]:
        """The nodes that transitively need ``start`` among the first ``bound`` of ``order``.

        A node can only be needed by nodes after it in ``order``, so the search never
        looks past ``bound``: asking about two nearby nodes stays cheap in a large graph.
        """
        found: set[str] = set()
        stack, position, dependents = [start], self.position, self.dependents
        while stack:
            for dependent in dependents[stack.pop()]:
                if dependent not in found and position[dependent] < bound:
                    found.add(dependent)
                    stack.append(dependent)
        return found


# Where a Frontier counts each node status, and each outcome (None: none yet) after them.
# Two maps: a status and an outcome may be equal strings ("failed", "cancelled").
_STATUS_SLOT: Final[dict[NodeStatus, int]] = {
    status: slot for slot, status in enumerate(NodeStatus)
}
_OUTCOME_SLOT: Final[dict[NodeOutcome | None, int]] = {
    outcome: len(NodeStatus) + slot for slot, outcome in enumerate([None, *NodeOutcome])
}
_PENDING = _STATUS_SLOT[NodeStatus.PENDING]
_RUNNING = _STATUS_SLOT[NodeStatus.RUNNING]
_WAITING = _STATUS_SLOT[NodeStatus.WAITING]
_SUCCESS = _OUTCOME_SLOT[NodeOutcome.SUCCESS]
_PARKED = _OUTCOME_SLOT[NodeOutcome.PARKED]
_SLOTS: Final = len(NodeStatus) + len(_OUTCOME_SLOT)
# Enum members read from their class cost a property call each (Python 3.11): once here.
_IS_PENDING: Final = NodeStatus.PENDING
_IN_FLIGHT: Final = frozenset({NodeStatus.RUNNING, NodeStatus.WAITING})
"""A plan's child that holds one of its plan's places: running, or waiting (for a person,
its own children or a child run) — it has started and not ended."""
_IS_COMPLETED: Final = NodeStatus.COMPLETED
_IS_SUCCESS: Final = NodeOutcome.SUCCESS
_RUN_RUNNING: Final = RunStatus.RUNNING


def _succeeded(state: NodeState) -> bool:
    return state.status is _IS_COMPLETED and state.outcome is _IS_SUCCESS


class Frontier:
    """Readiness of one run's nodes, updated change by change instead of rescanned.

    A node is *ready* when it is pending and every node it needs completed with outcome
    ``success``. Built from the node states of a run (O(nodes + edges)), a frontier is
    moved along with :meth:`apply` as steps change nodes. It keeps each node's count of
    prerequisites that have not succeeded, the set of ready nodes and counts per status
    and outcome, so a query or an update costs O(changed nodes and their direct
    dependents), not O(nodes x needs). Only a node's status and outcome matter here;
    changes to anything else cost nothing.

    Children of a plan (see :class:`~phasegraph.model.Plan`) are nodes like any other,
    with three additions kept here too: a plan may limit how many of its children run at
    once (a child waiting at a gate, or for its own children or a child run, still holds
    its place: it has started and not ended); a parent that waits for its children
    (``awaits``) is due to *join* once every current child has ended; and only nodes
    that are no child decide whether the run completed, each parent standing for its
    children.

    Args:
        workflow: The compiled DAG.
        nodes: The node states.
        awaits: Whether a node, in a given state, waits for its plan's children (only
            asked of nodes that have a plan; ``None``: no node does).
    """

    __slots__ = (
        "_awaiting",
        "_awaits",
        "_counts",
        "_current",
        "_group_queues",
        "_group_running",
        "_nodes",
        "_open",
        "_queue",
        "_ready",
        "_top",
        "_unmet",
        "_workflow",
    )

    def __init__(
        self,
        workflow: WorkflowGraph,
        nodes: Mapping[str, NodeState],
        awaits: Callable[[str, NodeState], bool] | None = None,
    ) -> None:
        self._workflow = workflow
        self._nodes = dict(nodes)
        self._awaits = awaits
        succeeded = {node_id for node_id, node in nodes.items() if _succeeded(node)}
        self._unmet = {
            node_id: len(needs) - len(succeeded.intersection(needs))
            for node_id, needs in workflow.needs.items()
        }
        self._ready = {
            node_id
            for node_id, count in self._unmet.items()
            if count == 0 and nodes[node_id].status is _IS_PENDING
        }
        parents = workflow.parents
        # Ready nodes by graph position, one heap per plan with a limit of its own (the
        # rest share the first); entries no longer ready are dropped lazily.
        self._queue: list[int] = []
        self._group_queues: dict[str, list[int]] = {}
        for node_id in self._ready:
            heapq.heappush(self._queue_of(node_id), workflow.position[node_id])
        # Nodes per status and per outcome, in one list (see _STATUS_SLOT): thousands of runs in
        # flight each keep one, and a list of ints is a fraction of two enum-keyed dicts.
        self._counts = [0] * _SLOTS
        for node in self._nodes.values():
            self._counts[_STATUS_SLOT[node.status]] += 1
            self._counts[_OUTCOME_SLOT[node.outcome]] += 1
        # With plans: nodes that are no child, how many, and how many succeeded (the
        # run's verdict; without plans it is the success count of every node).
        self._top = [len(self._nodes), len(succeeded)]
        self._current: set[str] = set()
        self._open: dict[str, int] = {}
        self._group_running: dict[str, int] = {}
        self._awaiting: set[str] = set()
        if workflow.members:  # a plan of no item has a parent and no children
            self._top = [
                sum(1 for node_id in self._nodes if node_id not in parents),
                sum(1 for node_id in succeeded if node_id not in parents),
            ]
            for parent, members in workflow.members.items():
                self._current.update(members)
                self._open[parent] = sum(1 for m in members if not nodes[m].status.terminal)
            for node_id, parent in parents.items():
                if nodes[node_id].status in _IN_FLIGHT:
                    self._group_running[parent] = self._group_running.get(parent, 0) + 1
            self._awaiting = {
                parent for parent in workflow.members if self._waits(parent, nodes[parent])
            }

    @property
    def running(self) -> int:
        """How many nodes are running."""
        return self._counts[_RUNNING]

    def first_ready(self) -> str | None:
        """The ready node that comes first in graph order, if any.

        A child of a plan whose limit of children in flight is reached is passed over.
        """
        order = self._workflow.order
        best = _first(self._queue, order, self._ready)
        if self._group_queues:
            limits, running = self._workflow.limits, self._group_running
            for parent, queue in self._group_queues.items():
                if running.get(parent, 0) >= limits[parent]:
                    continue
                head = _first(queue, order, self._ready)
                if head is not None and (best is None or head < best):
                    best = head
        return order[best] if best is not None else None

    def ready(self) -> list[str]:
        """Every ready node, in graph order."""
        return sorted(self._ready, key=self._workflow.position.__getitem__)

    def joinable(self) -> list[str]:
        """The parents waiting for their plan's children, every one of which has ended."""
        if not self._awaiting:
            return []
        found = [parent for parent in self._awaiting if not self._open.get(parent)]
        return sorted(found, key=self._workflow.position.__getitem__)

    def status(
        self, changes: Mapping[str, NodeState], interrupts: Mapping[str, Interrupt]
    ) -> RunStatus:
        """The run status once ``changes`` apply, with ``interrupts`` pending (no move).

        Running while a node runs or can start, or a parent can join its ended
        children; else waiting (parked, if an interrupt or a node's outcome says so)
        while a node waits; else completed if every node that is no child succeeded,
        failed if not.
        """
        moved = self._moved(changes)
        counts, top = self._counts, self._top
        if moved:
            counts, top = counts.copy(), top.copy()
            self._shift(counts, top, moved)
        if counts[_RUNNING] or (counts[_PENDING] and self._any_ready(moved)):
            return _RUN_RUNNING
        if counts[_WAITING]:
            if self._awaiting and self._any_joinable(moved):
                return _RUN_RUNNING
            parked = counts[_PARKED] or any(i.parked for i in interrupts.values())
            return RunStatus.PARKED if parked else RunStatus.WAITING
        # With plans, only nodes that are no child count: a parent stands for its children.
        done = top[1] == top[0] if self._workflow.parents else counts[_SUCCESS] == len(self._nodes)
        return RunStatus.COMPLETED if done else RunStatus.FAILED

    def apply(self, changes: Mapping[str, NodeState]) -> None:
        """Move to the node states with ``changes`` applied."""
        moved = self._moved(changes)
        if not moved:
            return
        unmet = self._unmet_changes(moved)
        if self._workflow.members:
            self._move_groups(moved)
        self._shift(self._counts, self._top, moved)
        self._nodes.update(moved)
        for node_id, delta in unmet.items():
            self._unmet[node_id] += delta
        for node_id in moved.keys() | unmet.keys():
            if self._unmet[node_id] == 0 and self._nodes[node_id].status is _IS_PENDING:
                if node_id not in self._ready:
                    self._ready.add(node_id)
                    heapq.heappush(self._queue_of(node_id), self._workflow.position[node_id])
            else:
                self._ready.discard(node_id)

    def _queue_of(self, node_id: str) -> list[int]:
        """The heap a ready node waits in: its plan's, if the plan limits its children."""
        parent = self._workflow.parents.get(node_id)
        if parent is None or not self._workflow.limits.get(parent):
            return self._queue
        return self._group_queues.setdefault(parent, [])

    def _waits(self, node_id: str, node: NodeState) -> bool:
        return self._awaits is not None and self._awaits(node_id, node)

    def _move_groups(self, moved: Mapping[str, NodeState]) -> None:
        """Keep each plan's open children, running children and waiting parents counted."""
        parents, members, nodes = self._workflow.parents, self._workflow.members, self._nodes
        for node_id, node in moved.items():
            old = nodes[node_id]
            parent = parents.get(node_id)
            if parent is not None:
                running = self._group_running
                delta = (node.status in _IN_FLIGHT) - (old.status in _IN_FLIGHT)
                if delta:
                    running[parent] = running.get(parent, 0) + delta
                if node_id in self._current:
                    delta = (not node.status.terminal) - (not old.status.terminal)
                    if delta:
                        self._open[parent] = self._open.get(parent, 0) + delta
            if node_id in members:
                if self._waits(node_id, node):
                    self._awaiting.add(node_id)
                else:
                    self._awaiting.discard(node_id)

    def _any_joinable(self, moved: Mapping[str, NodeState]) -> bool:
        """Whether some parent can join its children once ``moved`` apply."""
        if not moved:
            return any(not self._open.get(parent) for parent in self._awaiting)
        parents, members, nodes = self._workflow.parents, self._workflow.members, self._nodes
        open_after = dict(self._open)
        awaiting = set(self._awaiting)
        for node_id, node in moved.items():
            parent = parents.get(node_id)
            if parent is not None and node_id in self._current:
                old = nodes[node_id]
                delta = (not node.status.terminal) - (not old.status.terminal)
                open_after[parent] = open_after.get(parent, 0) + delta
            if node_id in members:
                if self._waits(node_id, node):
                    awaiting.add(node_id)
                else:
                    awaiting.discard(node_id)
        return any(not open_after.get(parent) for parent in awaiting)

    def _any_ready(self, moved: Mapping[str, NodeState]) -> bool:
        """Whether some node is ready, with a place to start in, once ``moved`` apply.

        A child whose plan has as many children in flight as its limit allows cannot
        start (its siblings may all be waiting, so the run waits too).
        """
        full = self._full_groups(moved) if self._group_queues else ()
        parents = self._workflow.parents
        if not moved:
            if not full:
                return bool(self._ready)
            return any(parents.get(node_id) not in full for node_id in self._ready)
        unmet = self._unmet_changes(moved)
        touched = moved.keys() | unmet.keys()
        return any(
            node_id not in touched and (not full or parents.get(node_id) not in full)
            for node_id in self._ready
        ) or any(
            self._unmet[node_id] + unmet.get(node_id, 0) == 0
            and moved.get(node_id, self._nodes[node_id]).status is _IS_PENDING
            and (not full or parents.get(node_id) not in full)
            for node_id in touched
        )

    def _full_groups(self, moved: Mapping[str, NodeState]) -> set[str]:
        """The plans with as many children in flight as their limit, once ``moved`` apply."""
        parents, limits, nodes = self._workflow.parents, self._workflow.limits, self._nodes
        in_flight = dict(self._group_running)
        for node_id, node in moved.items():
            parent = parents.get(node_id)
            if parent is not None:
                delta = (node.status in _IN_FLIGHT) - (nodes[node_id].status in _IN_FLIGHT)
                in_flight[parent] = in_flight.get(parent, 0) + delta
        return {
            parent
            for parent, count in in_flight.items()
            if limits.get(parent) and count >= limits[parent]
        }

    def _shift(self, counts: list[int], top: list[int], moved: Mapping[str, NodeState]) -> None:
        """Move the counts from the nodes' current states to ``moved``."""
        parents = self._workflow.parents
        for node_id, node in moved.items():
            old = self._nodes[node_id]
            counts[_STATUS_SLOT[old.status]] -= 1
            counts[_STATUS_SLOT[node.status]] += 1
            counts[_OUTCOME_SLOT[old.outcome]] -= 1
            counts[_OUTCOME_SLOT[node.outcome]] += 1
            if parents and node_id not in parents:
                top[1] += _succeeded(node) - _succeeded(old)

    def _moved(self, changes: Mapping[str, NodeState]) -> Mapping[str, NodeState]:
        """The changes that give a node a new status or outcome (most steps have none)."""
        nodes = self._nodes
        for node_id, node in changes.items():
            old = nodes[node_id]
            if node.status is not old.status or node.outcome is not old.outcome:
                break
        else:
            return EMPTY  # the usual step: a running node moved between states
        return {
            node_id: node
            for node_id, node in changes.items()
            if node.status is not nodes[node_id].status
            or node.outcome is not nodes[node_id].outcome
        }

    def _unmet_changes(self, moved: Mapping[str, NodeState]) -> dict[str, int]:
        """How each dependent's count of unmet prerequisites moves under ``moved``."""
        unmet: dict[str, int] = {}
        for node_id, node in moved.items():
            now = _succeeded(node)
            if _succeeded(self._nodes[node_id]) is now:
                continue
            for dependent in self._workflow.dependents[node_id]:
                unmet[dependent] = unmet.get(dependent, 0) + (-1 if now else 1)
        return unmet


def _first(queue: list[int], order: tuple[str, ...], ready: set[str]) -> int | None:
    """The smallest position in ``queue`` still ready (stale entries are popped)."""
    while queue and order[queue[0]] not in ready:
        heapq.heappop(queue)
    return queue[0] if queue else None


def compile_graph(definition: GraphDef, plans: Mapping[str, Plan] | None = None) -> WorkflowGraph:
    """Compile a validated graph definition (which the loader checked is acyclic).

    Args:
        definition: The graph, with the children of its plans among its nodes (each
            child names its ``parent``).
        plans: Node id → its plan: which children count now, and their limit.

    Raises:
        ValueError: The graph has a dependency cycle after all.
    """
    needs = _needs(definition.nodes)
    found = _generations(needs)
    if found is None:
        raise ValueError(f"graph {definition.name!r} has a dependency cycle")
    generations, dependents = found
    position = {node.id: index for index, node in enumerate(definition.nodes)}
    layers = tuple(
        tuple(sorted(generation, key=position.__getitem__)) for generation in generations
    )
    order = tuple(node for layer in layers for node in layer)
    ranks = {node: index for index, node in enumerate(order)}
    rank = ranks.__getitem__
    parents = {node.id: node.parent for node in definition.nodes if node.parent is not None}
    members: dict[str, tuple[str, ...]] = {}
    limits: dict[str, int] = {}
    for parent, plan in (plans or {}).items():
        members[parent] = tuple(child_id(parent, item) for item in plan.members)
        limits[parent] = plan.limit
    return WorkflowGraph(
        definition=definition,
        nodes=MappingProxyType({n.id: n for n in definition.nodes}),
        layers=layers,
        order=order,
        needs=MappingProxyType({n: tuple(sorted(needs[n], key=rank)) for n in order}),
        dependents=MappingProxyType({n: tuple(sorted(dependents[n], key=rank)) for n in order}),
        position=MappingProxyType(ranks),
        parents=MappingProxyType(parents) if parents else EMPTY,
        members=MappingProxyType(members) if members else EMPTY,
        limits=MappingProxyType(limits) if limits else EMPTY,
    )
