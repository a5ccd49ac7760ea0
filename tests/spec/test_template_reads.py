"""Template reads on load: a property against a brute-force oracle over random DAGs."""

from __future__ import annotations

import networkx as nx
from hypothesis import given
from hypothesis import strategies as st

from phasegraph.errors import SpecError
from phasegraph.spec import load_graph_text

KEYS = ("a", "b", "c")


@st.composite
def _graphs(draw: st.DrawFn) -> list[tuple[list[int], list[str], list[str]]]:
    """Nodes as (needs, writes, reads): needs only earlier nodes, so the graph is a DAG."""
    size = draw(st.integers(2, 6))
    nodes = []
    for index in range(size):
        needs = draw(st.lists(st.integers(0, index - 1), unique=True)) if index else []
        writes = draw(st.lists(st.sampled_from(KEYS), unique=True))
        reads = draw(st.lists(st.sampled_from(KEYS), unique=True))
        nodes.append((needs, writes, reads))
    return nodes


def _text(nodes: list[tuple[list[int], list[str], list[str]]]) -> str:
    lines = ["input: {type: object, properties: {}}", "nodes:"]
    for index, (needs, writes, reads) in enumerate(nodes):
        argv = ", ".join(["echo", *(f'"{{{key}}}"' for key in reads)])
        lines += [
            f"  - id: n{index}",
            "    machine: task",
            f"    needs: [{', '.join(f'n{n}' for n in needs)}]",
            f"    writes: [{', '.join(writes)}]",
            f"    bind: {{run: {{shell: [{argv}], on_exit: {{0: ok, default: fail}}}}}}",
        ]
    return "\n".join(lines) + "\n"


def _oracle(nodes: list[tuple[list[int], list[str], list[str]]]) -> set[tuple[str, str, str]]:
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(nodes)))
    dag.add_edges_from((need, index) for index, (needs, _, _) in enumerate(nodes) for need in needs)
    expected = set()
    for index, (_, _, reads) in enumerate(nodes):
        before, after = nx.ancestors(dag, index), nx.descendants(dag, index)
        for key in reads:
            writers = [w for w, (_, keys, _) in enumerate(nodes) if key in keys]
            if index in writers:
                continue
            if any(w not in before and w not in after for w in writers):
                expected.add((f"n{index}", key, "race"))
            elif writers and all(w in after for w in writers):
                expected.add((f"n{index}", key, "later"))
            elif not writers:
                expected.add((f"n{index}", key, "nothing"))
    return expected


def _kind(message: str) -> str:
    if "may run at the same time" in message:
        return "race"
    return "later" if "runs after" in message else "nothing"


@given(_graphs())
def test_reads_are_judged_as_the_dag_orders_them(
    nodes: list[tuple[list[int], list[str], list[str]]],
) -> None:
    found: set[tuple[str, str, str]] = set()
    try:
        load_graph_text(_text(nodes), name="g")
    except SpecError as refused:
        for problem in refused.problems:
            if "reads {" not in problem.message:
                continue  # a write conflict: the write rule's own business
            node = problem.message.split("'")[1]
            key = problem.message.split("reads {")[1].split("}")[0]
            found.add((node, key, _kind(problem.message)))
    assert found == _oracle(nodes)
