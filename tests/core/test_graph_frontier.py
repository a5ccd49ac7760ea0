"""A run's frontier, moved change by change, agrees with rescanning every node.

The reference is the plain definition: a node is ready when it is pending and every
node it needs completed with outcome ``success``; the run status follows
:class:`~phasegraph.model.RunStatus`'s documented rules. Random DAGs (duplicate needs
included) get random sequences of node changes, in any status, not only legal ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import graph
from phasegraph.core._graph import Frontier, WorkflowGraph, compile_graph
from phasegraph.model import (
    EMPTY,
    Interrupt,
    NodeOutcome,
    NodeState,
    NodeStatus,
    RunStatus,
)

NODE_STATES = st.builds(
    NodeState,
    status=st.sampled_from(NodeStatus),
    outcome=st.none() | st.sampled_from(NodeOutcome),
)


@st.composite
def workflows(draw: st.DrawFn) -> WorkflowGraph:
    count = draw(st.integers(1, 8))
    ids = [f"n{i}" for i in range(count)]
    nodes = [
        (node_id, draw(st.lists(st.sampled_from(ids[:index]), max_size=4)) if index else [])
        for index, node_id in enumerate(ids)
    ]
    order = draw(st.permutations(nodes))  # declaration order differs from graph order
    return compile_graph(graph(order))


def _ready(workflow: WorkflowGraph, nodes: Mapping[str, NodeState]) -> list[str]:
    def succeeded(node: NodeState) -> bool:
        return node.status is NodeStatus.COMPLETED and node.outcome is NodeOutcome.SUCCESS

    return [
        node_id
        for node_id in workflow.order
        if nodes[node_id].status is NodeStatus.PENDING
        and all(succeeded(nodes[need]) for need in workflow.needs[node_id])
    ]


def _reference_status(
    workflow: WorkflowGraph, nodes: Mapping[str, NodeState], interrupts: Mapping[str, Interrupt]
) -> RunStatus:
    statuses = [node.status for node in nodes.values()]
    if NodeStatus.RUNNING in statuses or _ready(workflow, nodes):
        return RunStatus.RUNNING
    if NodeStatus.WAITING in statuses:
        parked = any(i.parked for i in interrupts.values()) or any(
            node.outcome is NodeOutcome.PARKED for node in nodes.values()
        )
        return RunStatus.PARKED if parked else RunStatus.WAITING
    if all(node.outcome is NodeOutcome.SUCCESS for node in nodes.values()):
        return RunStatus.COMPLETED
    return RunStatus.FAILED


INTERRUPTS = [
    MappingProxyType({}),
    MappingProxyType({"i": Interrupt(id="i", node="n0", kind="review", parked=False)}),
    MappingProxyType({"i": Interrupt(id="i", node="n0", kind="review", parked=True)}),
]


def _check(frontier: Frontier, workflow: WorkflowGraph, nodes: Mapping[str, NodeState]) -> None:
    expected = _ready(workflow, nodes)
    assert frontier.ready() == expected
    assert frontier.first_ready() == (expected[0] if expected else None)
    assert frontier.running == sum(n.status is NodeStatus.RUNNING for n in nodes.values())
    for interrupts in INTERRUPTS:
        assert frontier.status(EMPTY, interrupts) == _reference_status(workflow, nodes, interrupts)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), workflow=workflows())
def test_moved_frontier_matches_a_rescan(data: st.DataObject, workflow: WorkflowGraph) -> None:
    nodes: dict[str, NodeState] = {
        node_id: data.draw(NODE_STATES | st.just(NodeState())) for node_id in workflow.order
    }
    frontier = Frontier(workflow, nodes)
    _check(frontier, workflow, nodes)
    for _ in range(data.draw(st.integers(1, 20))):
        changed = data.draw(st.lists(st.sampled_from(workflow.order), min_size=1, max_size=3))
        changes = {node_id: data.draw(NODE_STATES) for node_id in changed}
        after = {**nodes, **changes}
        # Asking about the changes first must not move the frontier.
        for interrupts in INTERRUPTS:
            expected = _reference_status(workflow, after, interrupts)
            assert frontier.status(changes, interrupts) == expected
        _check(frontier, workflow, nodes)
        frontier.apply(changes)
        nodes = after
        _check(frontier, workflow, nodes)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), workflow=workflows(), parked=st.booleans())
def test_run_status_follows_the_documented_rules(
    data: st.DataObject, workflow: WorkflowGraph, parked: bool
) -> None:
    nodes = {node_id: data.draw(NODE_STATES) for node_id in workflow.order}
    interrupts = MappingProxyType(
        {"i": Interrupt(id="i", node=workflow.order[0], kind="review", parked=parked)}
        if data.draw(st.booleans())
        else {}
    )
    status = Frontier(workflow, nodes).status(EMPTY, interrupts)
    assert status == _reference_status(workflow, nodes, interrupts)
