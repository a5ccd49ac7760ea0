"""Model invariants that the hot path relies on."""

import dataclasses
from datetime import UTC, datetime

from phasegraph.model import RunState, RunStatus, StepRecord, apply_record


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
