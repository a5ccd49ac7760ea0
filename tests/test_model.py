"""Model invariants that the hot path relies on."""

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasegraph.errors import RunStateError
from phasegraph.model import (
    EMPTY,
    ChunkedMap,
    ErrorRecord,
    Interrupt,
    NodeState,
    NodeStatus,
    RunState,
    RunStatus,
    StepRecord,
    Value,
    apply_records,
    replace,
    updated_map,
)

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def test_apply_records_carries_every_field_it_does_not_change() -> None:
    # The fold builds the next state field by field (it runs on every step): a field
    # added to RunState later must be carried over, not reset to its default.
    markers = {name: object() for name in RunState.__struct_fields__}
    state = RunState(**{**markers, "seq": 4})  # type: ignore[arg-type]
    now = datetime.now(UTC)
    record = StepRecord(seq=5, time=now, kind="status", status=RunStatus.RUNNING)
    after = apply_records(state, [record])
    changed = {"seq": 5, "status": RunStatus.RUNNING, "updated_at": now}
    for name, marker in markers.items():
        if name in changed:
            assert getattr(after, name) == changed[name]
        else:
            assert getattr(after, name) is marker, name


@given(
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=80),
    st.lists(st.dictionaries(st.text(max_size=4), st.integers(), max_size=5), max_size=6),
)
def test_chunked_map_updates_like_a_dict_and_shares_what_did_not_change(
    start: dict[str, int], updates: list[dict[str, int]]
) -> None:
    expected = dict(start)
    current: Mapping[str, int] = ChunkedMap.of(start)
    for changes in updates:
        before = current
        expected.update(changes)
        current = updated_map(current, changes)
        assert dict(current) == expected
        assert list(current) == sorted(expected)  # canonical order, chunk by chunk
        assert len(current) == len(expected)
        assert all(key in current for key in expected)
        assert isinstance(current, ChunkedMap)
        assert isinstance(before, ChunkedMap)
        if changes and set(changes) <= set(before):
            untouched = [c for c in before.chunks if not set(c) & set(changes)]
            assert all(any(c is d for d in current.chunks) for c in untouched)


def start(**data: object) -> RunState:
    return RunState(
        run_id="r",
        graph="g",
        graph_source="g.yaml",
        graph_digest="d",
        seq=0,
        status=RunStatus.RUNNING,
        input=EMPTY,
        data=MappingProxyType(dict(data)),
        nodes=MappingProxyType({"a": NodeState(), "b": NodeState()}),
        created_at=T0,
        updated_at=T0,
    )


def step(seq: int, **fields: object) -> StepRecord:
    return StepRecord(seq=seq, time=T0 + timedelta(seconds=seq), kind="transition", **fields)  # type: ignore[arg-type]


def test_no_records_fold_to_the_state_itself() -> None:
    state = start()
    assert apply_records(state, []) is state


def test_a_fold_applies_data_appends_nodes_errors_and_interrupts() -> None:
    state = start(log=[1], keep="k")
    error = ErrorRecord(time=T0, node="a", state="work", message="boom")
    ask = Interrupt(id="r:a:review", node="a", kind="review")
    records = [
        step(1, node="a", data={"x": 1}, nodes={"a": NodeState(status=NodeStatus.RUNNING)}),
        step(2, node="b", appended={"log": [2, 3]}, errors=(error,)),
        step(3, node="a", interrupts={ask.id: ask}, status=RunStatus.WAITING),
        step(4, nodes={"a": NodeState(status=NodeStatus.WAITING, steps=4)}),
    ]
    after = apply_records(state, records)
    assert dict(after.data) == {"log": [1, 2, 3], "keep": "k", "x": 1}
    assert dict(after.writers) == {"x": ("a",), "log": ("b",)}
    assert after.nodes["a"] == NodeState(status=NodeStatus.WAITING, steps=4)
    assert after.nodes["b"] == NodeState()
    assert after.errors == (error,)
    assert dict(after.interrupts) == {ask.id: ask}
    assert (after.seq, after.status, after.updated_at) == (4, RunStatus.RUNNING, records[-1].time)
    assert state.data == {"log": [1], "keep": "k"}  # the state before is unchanged


def test_a_fold_refuses_a_record_out_of_order() -> None:
    with pytest.raises(RunStateError, match="step 3 cannot follow step 1") as caught:
        apply_records(start(), [step(1), step(3)])
    assert caught.value.seq == 3


def test_a_fold_refuses_an_append_to_a_key_that_holds_no_list() -> None:
    with pytest.raises(RunStateError, match="appends to data key 'log', which holds str"):
        apply_records(start(log="text"), [step(1, node="a", appended={"log": [1]})])


def test_a_node_writing_its_own_keys_again_leaves_the_writers_as_they_were() -> None:
    state = apply_records(start(), [step(1, node="a", data={"x": 1})])
    again = apply_records(state, [step(2, node="a", data={"x": 2})])
    assert again.writers is state.writers  # the usual step copies nothing
    other = apply_records(again, [step(3, node="b", data={"x": 3})])
    assert dict(other.writers) == {"x": ("b",)}


def test_values_are_frozen_and_keyword_only() -> None:
    from phasegraph.actions import ActionContext, ActionResult
    from phasegraph.core._machine import Position, StepResult
    from phasegraph.store.base import Commit, Lease, RunMeta, StoredRun

    classes = [NodeState, Interrupt, ErrorRecord, RunState, StepRecord, Commit, Lease]
    classes += [RunMeta, StoredRun, ActionContext, ActionResult, Position, StepResult]
    for cls in classes:
        assert issubclass(cls, Value), cls
    node = NodeState(steps=1)
    with pytest.raises(AttributeError):
        node.steps = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        NodeState(NodeStatus.RUNNING)  # type: ignore[misc]
    with pytest.raises(TypeError, match="not_a_field"):
        NodeState(not_a_field=1)  # type: ignore[call-arg]


def test_replace_copies_a_value_with_fields_changed() -> None:
    from phasegraph import ActionResult
    from phasegraph import replace as public_replace

    result = ActionResult(trigger="done", data={"k": 1})
    retried = public_replace(result, trigger="retry")
    assert retried == ActionResult(trigger="retry", data={"k": 1})
    assert result.trigger == "done"
    with pytest.raises(TypeError, match="no field 'trigge'"):
        replace(result, trigge="x")


def test_values_stay_out_of_the_collector_but_what_users_hand_in_does_not() -> None:
    """States, records and wire bodies are never walked; a result in a cycle is still freed."""
    import gc
    import weakref
    from datetime import UTC, datetime

    from phasegraph.actions import ActionResult
    from phasegraph.codec._envelope import encode_record, read_record
    from phasegraph.model import StepRecord

    record = StepRecord(seq=1, time=datetime.now(UTC), kind="created", data={"k": [1]})
    assert not gc.is_tracked(record)
    assert not gc.is_tracked(read_record(encode_record(record)))

    class Probe:
        pass

    probe = Probe()
    holder: list[object] = [probe]
    result = ActionResult(trigger="ok", data={"loop": holder})
    holder.append(result)  # result -> dict -> list -> result: a cycle through the result
    assert gc.is_tracked(result)
    alive = weakref.ref(probe)
    del probe, holder, result
    gc.collect()
    assert alive() is None
