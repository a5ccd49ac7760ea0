"""The write-conflict rule: one definition, checked at load, at prepare and at run time."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import graph, prepared
from phasegraph.core._graph import compile_graph
from phasegraph.core._writes import declared_conflicts
from phasegraph.errors import SpecError
from phasegraph.model import EMPTY, GraphDef, NodeDef
from phasegraph.spec import load_graph

KEYS = ("a", "b", "c")


@st.composite
def dags(draw: st.DrawFn) -> tuple[tuple[NodeDef, ...], dict[str, str]]:
    """Random DAGs (edges only from earlier to later nodes) with random declared writes."""
    count = draw(st.integers(1, 8))
    nodes = []
    for index in range(count):
        needs = draw(st.sets(st.integers(0, index - 1), max_size=3)) if index else set()
        writes = draw(st.none() | st.lists(st.sampled_from(KEYS), max_size=3))
        nodes.append(
            NodeDef(
                id=f"n{index}",
                machine="task",
                needs=tuple(f"n{i}" for i in sorted(needs)),
                writes=None if writes is None else tuple(writes),
            )
        )
    reducers = draw(st.dictionaries(st.sampled_from(KEYS), st.just("append"), max_size=2))
    return tuple(nodes), reducers


def _reference(nodes: tuple[NodeDef, ...], reducers: dict[str, str]) -> set[tuple[str, str, str]]:
    """The rule straight from its definition: unordered = neither reaches the other."""
    dag = nx.DiGraph()
    dag.add_nodes_from(n.id for n in nodes)
    dag.add_edges_from((need, n.id) for n in nodes for need in n.needs)
    found = set()
    for a, b in combinations(nodes, 2):
        if nx.has_path(dag, a.id, b.id) or nx.has_path(dag, b.id, a.id):
            continue
        for key in set(a.writes or ()) & set(b.writes or ()) - set(reducers):
            found.add((a.id, b.id, key))
    return found


@given(dags())
def test_declared_conflicts_match_the_definition(case: tuple[tuple[NodeDef, ...], dict]) -> None:
    nodes, reducers = case
    workflow = compile_graph(GraphDef(name="g", nodes=nodes, machines=EMPTY))
    conflicts = declared_conflicts(nodes, reducers, workflow)
    found = {(c.first, c.second, key) for c in conflicts for key in c.keys}
    reference = _reference(nodes, reducers)
    # Every reported pair breaks the rule, and every key that breaks it is reported.
    assert found <= reference
    assert {key for _, _, key in found} == {key for _, _, key in reference}
    for conflict in conflicts:
        assert f"nodes {conflict.first!r} and {conflict.second!r}" in conflict.message()


@given(dags())
def test_unordered_and_descendants_match_reachability(
    case: tuple[tuple[NodeDef, ...], dict],
) -> None:
    nodes, _ = case
    workflow = compile_graph(GraphDef(name="g", nodes=nodes, machines=EMPTY))
    dag = nx.DiGraph()
    dag.add_nodes_from(n.id for n in nodes)
    dag.add_edges_from((need, n.id) for n in nodes for need in n.needs)
    for a in dag.nodes:
        expected = nx.descendants(dag, a)
        assert set(workflow.descendants(a)) == expected
        for b in dag.nodes:
            ordered = a == b or b in expected or a in nx.descendants(dag, b)
            assert workflow.unordered(a, b) is not ordered


def test_a_graph_built_in_code_is_refused_at_prepare() -> None:
    left = NodeDef(id="left", machine="task", writes=("out",))
    definition = graph([left, NodeDef(id="right", machine="task", writes=("out",))])
    with pytest.raises(SpecError) as refused:
        prepared(definition, {})
    message = str(refused.value)
    assert "nodes 'left' and 'right' may run at the same time and both write 'out'" in message
    assert "declare a reducer for 'out'" in message


def test_a_reducer_or_an_order_resolves_it(tmp_path: Path) -> None:
    text = """
graph: g
nodes:
  - {id: left, machine: task, writes: [out], bind: {run: {python: "m:f"}}}
  - {id: right, machine: task, writes: [out], bind: {run: {python: "m:f"}}%s}
"""
    path = tmp_path / "g.yaml"
    path.write_text(text % "", encoding="utf-8")
    with pytest.raises(SpecError, match="may run at the same time"):
        load_graph(path)
    path.write_text(text % ", needs: [left]", encoding="utf-8")
    assert [n.id for n in load_graph(path).nodes] == ["left", "right"]
