"""Model invariants that the hot path relies on."""

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasegraph.model import (
    ChunkedMap,
    RunState,
    RunStatus,
    StepRecord,
    apply_record,
    updated_map,
)


def test_apply_record_carries_every_field_it_does_not_change() -> None:
    # apply_record builds the next state field by field (it runs on every step): a field
    # added to RunState later must be carried over, not reset to its default.
    markers = {field.name: object() for field in dataclasses.fields(RunState)}
    state = RunState(**{**markers, "seq": 4})  # type: ignore[arg-type]
    now = datetime.now(UTC)
    record = StepRecord(seq=5, time=now, kind="status", status=RunStatus.RUNNING)
    after = apply_record(state, record)
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


def _reference(cls: type) -> type:
    """``cls`` as ``dataclasses`` alone would build it (without quick_init)."""
    fields = [
        (f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory))
        for f in dataclasses.fields(cls)
    ]
    return dataclasses.make_dataclass(
        cls.__name__, fields, frozen=True, slots=True, kw_only=True, namespace={}
    )


def test_quick_init_builds_what_the_dataclass_init_builds() -> None:
    import inspect

    from phasegraph.actions import ActionContext, ActionResult
    from phasegraph.core._machine import Position, StepResult
    from phasegraph.model import ErrorRecord, Interrupt, NodeState, RunState, StepRecord
    from phasegraph.store.base import Commit, Lease, RunMeta, StoredRun

    classes = [NodeState, Interrupt, ErrorRecord, RunState, StepRecord, Commit, Lease]
    classes += [RunMeta, StoredRun, ActionContext, ActionResult, Position, StepResult]
    for cls in classes:
        reference = _reference(cls)
        ours = inspect.signature(cls).parameters
        theirs = inspect.signature(reference).parameters
        # Same names, kinds and required fields (a factory's default shows as its value).
        assert [(p.name, p.kind, p.default is p.empty) for p in ours.values()] == [
            (p.name, p.kind, p.default is p.empty) for p in theirs.values()
        ], cls
        required = {name: object() for name, p in ours.items() if p.default is p.empty}
        built, expected = cls(**required), reference(**required)
        for item in dataclasses.fields(cls):
            assert getattr(built, item.name) is getattr(expected, item.name), (cls, item.name)
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.__setattr__(dataclasses.fields(cls)[0].name, None)
        with pytest.raises(TypeError, match="unexpected keyword"):
            cls(**required, not_a_field=1)
        if required:
            with pytest.raises(TypeError, match="missing"):
                cls()


def test_quick_init_refuses_what_it_cannot_speed_up() -> None:
    from phasegraph.model import quick_init

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Unslotted:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Positional:
        a: int

    with pytest.raises(TypeError, match="Unslotted is not a slotted dataclass"):
        quick_init(Unslotted)
    with pytest.raises(TypeError, match=r"Positional\.a is not a keyword-only init field"):
        quick_init(Positional)


def test_quick_init_refuses_a_class_with_a_post_init() -> None:
    from phasegraph.model import quick_init

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("negative")

    with pytest.raises(TypeError, match="__post_init__"):
        quick_init(Checked)
