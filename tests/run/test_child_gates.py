"""The pure rules of child runs: the gate a ``graph:`` state opens, ids, links, answers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasegraph.errors import ActionError
from phasegraph.model import (
    ActionDef,
    ErrorRecord,
    Interrupt,
    NodeState,
    NodeStatus,
    RunState,
    RunStatus,
    StepRecord,
    frozen_map,
    replace,
)
from phasegraph.run import RUN_ID_PATTERN, SystemClock, prepare
from phasegraph.run._children import (
    CHILD_RUN,
    COMPLETED,
    FAILED,
    ChildGraph,
    ParentLink,
    child_answer,
    child_graph,
    child_interrupt,
    child_run_id,
)
from phasegraph.run._prepare import initial_state
from phasegraph.run._steps import StepBuilder
from phasegraph.spec import load_graph_text

NOW = datetime(2026, 11, 29, tzinfo=UTC)
_RUN_IDS = st.from_regex(RUN_ID_PATTERN, fullmatch=True)
_NODE_IDS = st.from_regex(
    r"[A-Za-z][A-Za-z0-9_-]{0,40}(\.[A-Za-z0-9][A-Za-z0-9_-]{0,20}){0,2}", fullmatch=True
)


def _state(data: dict[str, Any] | None = None, **run_input: Any) -> RunState:
    return RunState(
        run_id="r1",
        graph="g",
        graph_source="g",
        graph_digest="d",
        seq=4,
        status=RunStatus.RUNNING,
        input=frozen_map(run_input),
        data=frozen_map(data or {}),
        nodes=MappingProxyType({"n": NodeState(status=NodeStatus.RUNNING)}),
        created_at=NOW,
        updated_at=NOW,
    )


def _binding(**run_input: Any) -> ChildGraph:
    return ChildGraph(graph="/graphs/child.yaml", input=frozen_map(run_input), into="out")


# -- ids --------------------------------------------------------------------------------


def test_a_child_run_id_names_its_parent_node_and_the_step_that_opened_its_gate() -> None:
    assert child_run_id("r1", "each.7", 12) == "r1.each.7.12"


@given(run_id=_RUN_IDS, node=_NODE_IDS, seq=st.integers(0, 2**40), other=st.integers(0, 2**40))
def test_child_run_ids_are_run_ids_and_tell_gates_apart(
    run_id: str, node: str, seq: int, other: int
) -> None:
    made = child_run_id(run_id, node, seq)
    assert RUN_ID_PATTERN.fullmatch(made)
    assert made == child_run_id(run_id, node, seq)  # derived, not drawn: the same every time
    assert (made == child_run_id(run_id, node, other)) == (seq == other)


def test_a_long_child_run_id_keeps_a_readable_head_and_a_digest_of_the_whole() -> None:
    run_id = "r" * 120
    made = child_run_id(run_id, "each.1", 5)
    assert len(made) == 128
    assert made.startswith(run_id[:100])
    assert made != child_run_id(run_id, "each.2", 5)


# -- the gate ---------------------------------------------------------------------------


def test_the_gate_names_the_child_run_its_graph_its_input_and_where_results_go() -> None:
    state = _state({"topic": "x"}, who="ann")
    gate = child_interrupt(
        _binding(title="{who} on {topic}"), state, "n", "run", item=None, now=NOW
    )
    assert gate == Interrupt(
        id="r1:n:run",
        node="n",
        kind=CHILD_RUN,
        payload=gate.payload,
        created_at=NOW,
    )
    assert dict(gate.payload) == {
        "run": "r1.n.5",  # opened by step 5, the one after the state's
        "graph": "/graphs/child.yaml",
        "input": {"title": "ann on x"},
        "into": "out",
    }


@pytest.mark.parametrize(
    ("declared", "item", "passed"),
    [
        ("{item}", {"id": "a", "n": 3}, {"id": "a", "n": 3}),  # the item itself, not its text
        ("{item}", 7, 7),
        ("{item[n]}", {"n": 3}, 3),
        ("n={item[n]}", {"n": 3}, "n=3"),  # more than one placeholder: text
        (["{item}", "{item[n]}"], {"n": [1, 2]}, [{"n": [1, 2]}, [1, 2]]),
        ({"deep": {"x": "{item[n]}"}}, {"n": None}, {"deep": {"x": None}}),
        (5, "ignored", 5),
    ],
)
def test_a_placeholder_alone_passes_the_value_itself(declared: Any, item: Any, passed: Any) -> None:
    gate = child_interrupt(_binding(v=declared), _state(), "n", "run", item=item, now=NOW)
    assert gate.payload["input"] == {"v": passed}


def test_an_input_naming_what_the_run_does_not_have_is_refused_with_the_name() -> None:
    with pytest.raises(ActionError, match=r"\{missing\}"):
        child_interrupt(_binding(v="{missing}"), _state(), "n", "run", item=None, now=NOW)
    with pytest.raises(ActionError, match=r"item\[n\]"):
        child_interrupt(_binding(v="{item[n]}"), _state(), "n", "run", item={}, now=NOW)


GRAPH = """
graph: parent
nodes:
  - id: sub
    machine: child_run
    bind:
      run: {graph: {graph: hello, input: {who: "{who}"}, into: got}}
"""


def _builder_and_start() -> tuple[StepBuilder, RunState]:
    definition = load_graph_text(GRAPH, name="parent.yaml")
    prepared = prepare(definition, "parent.yaml")
    steps = StepBuilder(prepared, SystemClock())
    state = initial_state(prepared, "p1", {"who": "bo"}, NOW)
    start = steps.start_next(state)
    assert start is not None
    return steps, steps.apply(state, start)


def test_entering_a_graph_state_opens_a_gate_on_the_node_before_any_child_exists() -> None:
    steps, state = _builder_and_start()
    record = steps.decide(state, ["sub"])
    assert isinstance(record, StepRecord)
    assert record.kind == "wait"
    after = steps.apply(state, record)
    assert after.status is RunStatus.WAITING
    assert after.nodes["sub"].status is NodeStatus.WAITING
    gate = after.interrupts["p1:sub:run"]
    assert (gate.kind, gate.seq) == (CHILD_RUN, record.seq)
    assert dict(gate.payload) == {
        "run": child_run_id("p1", "sub", record.seq),
        "graph": "hello",
        "input": {"who": "bo"},
        "into": "got",
    }
    assert steps.decide(after, []) is None  # nothing to do: the run waits, holding nothing


def test_the_gates_answer_moves_the_node_on_with_the_childs_results() -> None:
    steps, state = _builder_and_start()
    waiting = steps.apply(state, steps.decide(state, ["sub"]))  # type: ignore[arg-type]
    gate = waiting.interrupts["p1:sub:run"]
    child = replace_state(
        _state({"message": "hello, bo!", "scratch": 1}),
        run_id=gate.payload["run"],
        status=RunStatus.COMPLETED,
    )
    result = child_answer(child, ("message",), "got")
    answered = steps.answer(waiting, gate.id, result, step=gate.seq)
    after = steps.apply(waiting, answered)
    assert after.status is RunStatus.COMPLETED
    assert after.data["got"] == {"message": "hello, bo!"}  # its output keys, nothing else


def replace_state(state: RunState, **changes: Any) -> RunState:
    return replace(state, **changes)


# -- the parent link and the answers ------------------------------------------------------


def test_a_childs_first_record_names_the_gate_it_answers() -> None:
    gate = Interrupt(
        id="p:each.3:run", node="each.3", kind=CHILD_RUN, payload=frozen_map({"into": "o"}), seq=9
    )
    link = ParentLink.of_gate("p", gate)
    assert link == ParentLink(run="p", node="each.3", interrupt="p:each.3:run", step=9, into="o")
    record = StepRecord(seq=0, time=NOW, kind="created", result=link.result())
    assert ParentLink.of_record(record) == link
    assert ParentLink.of_record(StepRecord(seq=0, time=NOW, kind="created")) is None
    forked = frozen_map({"forked_from": "p", "at": 3, "patched": []})
    assert ParentLink.of_record(StepRecord(seq=0, time=NOW, kind="created", result=forked)) is None
    damaged = frozen_map({"child_of": {"run": "p", "interrupt": "x", "node": "n", "step": "9"}})
    assert ParentLink.of_record(StepRecord(seq=0, time=NOW, kind="created", result=damaged)) is None


def test_a_completed_child_answers_with_its_declared_outputs_only() -> None:
    child = replace_state(_state({"value": 1, "other": 2}), status=RunStatus.COMPLETED)
    result = child_answer(child, ("value", "absent"), "out")
    assert result.trigger == COMPLETED
    assert dict(result.payload) == {"run": "r1", "status": "completed"}
    assert dict(result.data) == {"out": {"value": 1}}
    assert dict(child_answer(child, ("value",), None).data) == {}


def test_a_child_that_did_not_complete_answers_failed_with_why() -> None:
    logged = ErrorRecord(time=NOW, node="w", state="run", message="boom")
    failed = replace_state(_state(), status=RunStatus.FAILED, errors=(logged,))
    result = child_answer(failed, ("value",), "out")
    assert result.trigger == FAILED
    assert result.payload["status"] == "failed"
    assert "boom" in result.payload["message"]
    assert "r1" in result.payload["message"]
    assert not result.data
    cancelled = replace_state(
        _state(),
        status=RunStatus.CANCELLED,
        nodes=MappingProxyType({"n": NodeState(status=NodeStatus.CANCELLED, error="stop it")}),
    )
    assert "stop it" in child_answer(cancelled, (), None).payload["message"]
    with pytest.raises(ValueError, match="has not ended"):
        child_answer(_state(), (), None)


def test_a_relative_graph_is_found_beside_the_graph_that_binds_it(tmp_path: Path) -> None:
    action = ActionDef(kind="graph", config=frozen_map({"graph": {"graph": "sub/c.yaml"}}))
    assert child_graph(action, tmp_path).graph == str((tmp_path / "sub" / "c.yaml").resolve())
    named = ActionDef(kind="graph", config=frozen_map({"graph": {"graph": "hello"}}))
    assert child_graph(named, tmp_path).graph == "hello"
