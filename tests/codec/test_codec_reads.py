"""Reads that go through many records without building each: the same answers as building.

``read_record`` checks what ``decode_record`` checks and keeps the body unbuilt;
``history_page_json`` and ``history_json`` render such bodies as JSON: the history JSON is
checked for what it holds (``history_checks``) and for the golden text, on valid records of
every kind, on corrupt ones and on format 1. A snapshot and the records after it, read back
and folded, give the state the run had.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_codec import (
    FAST,
    GOLDEN,
    envelope,
    error_records,
    interrupts,
    node_states,
    raw_body,
    texts,
    user_maps,
    user_values,
)
from test_codec_records import (
    PLACES,
    corrupted,
    every_corruption,
    odd_values,
    outcome,
    step_records_of_every_kind,
)

from history_checks import assert_holds
from payloads import (
    T0,
    golden_record,
    golden_record_v1,
    golden_record_v2,
    golden_record_v3,
    loop_record,
    shape,
)
from phasegraph import codec
from phasegraph.codec import _envelope, _history, _values
from phasegraph.codec import _wire as codec_wire
from phasegraph.errors import RunStateError
from phasegraph.model import (
    NodeState,
    RunState,
    RunStatus,
    StepRecord,
    apply_records,
    frozen_map,
)


def built(data: bytes) -> StepRecord:
    """``read_record``, then the record built from the body it kept."""
    return codec_wire.step_record(_envelope.read_record(data))


# --------------------------------------------------------------------------- read_record


@pytest.mark.parametrize(
    "record", [loop_record(7), golden_record(), golden_record_v1()], ids=["loop", "golden", "v1"]
)
def test_read_record_keeps_the_body_decode_record_builds(record: StepRecord) -> None:
    data = codec.encode_record(record)
    body = _envelope.read_record(data)
    assert body.seq == record.seq
    assert outcome(built, data) == outcome(codec.decode_record, data)


def test_a_format_1_record_reads_unbuilt_as_it_decodes() -> None:
    data = (GOLDEN / "record_v1.bin").read_bytes()
    assert outcome(built, data) == outcome(codec.decode_record, data)
    assert built(data) == golden_record_v1()


@FAST
@given(step_records_of_every_kind())
def test_every_kind_reads_unbuilt_as_it_decodes(record: StepRecord) -> None:
    data = codec.encode_record(record)
    assert outcome(built, data) == outcome(codec.decode_record, data)


@FAST
@given(
    step_records_of_every_kind() | st.builds(loop_record, st.integers(1, 10**6)),
    st.sampled_from([*PLACES, "user"]),
    st.integers(0, 100),
    odd_values(),
)
def test_a_changed_field_is_refused_by_read_record_as_by_decode_record(
    record: StepRecord, place: str, key: int, value: Any
) -> None:
    body = raw_body(codec.encode_record(record))
    if place == "user":  # a non-str key or a deep nest inside user data: check_plain's part
        field = ["r", "d", "a"][key % 3]
        body[field] = {"k": {1: value}} if key % 2 else {"k": [[[value]] * 2] * 2}
    else:
        body = corrupted(body, place, key, value)
    for version in (1, codec.FORMAT_VERSION):
        if version == 1:
            body = {k: v for k, v in body.items() if k != "a"}
        data = envelope(v=version, kind="record", body=body)
        assert outcome(built, data) == outcome(codec.decode_record, data)


@pytest.mark.parametrize("record", [loop_record(7), golden_record()], ids=["loop", "golden"])
def test_truncated_and_flipped_bytes_are_refused_by_read_record_as_by_decode_record(
    record: StepRecord,
) -> None:
    for data in every_corruption(codec.encode_record(record)):
        assert outcome(built, data) == outcome(codec.decode_record, data), data


def test_user_data_nested_too_deep_is_refused_alike() -> None:
    deep: Any = 1
    for _ in range(_values.MAX_DEPTH + 2):
        deep = [deep]
    body = raw_body(codec.encode_record(loop_record(3)))
    for field in ("r", "d", "ev"):
        changed = {**body, field: [{"k": deep}] if field == "ev" else {"k": deep}}
        data = envelope(v=codec.FORMAT_VERSION, kind="record", body=changed)
        result = outcome(built, data)
        assert result == outcome(codec.decode_record, data)
        assert result[0] == "refused"


# --------------------------------------------------------------------------- folding what was read


def start_state(data: dict[str, Any]) -> RunState:
    return RunState(
        run_id="r",
        graph="g",
        graph_source="g.yaml",
        graph_digest="d",
        seq=0,
        status=RunStatus.RUNNING,
        input=frozen_map({"n": 1}),
        data=frozen_map(data),
        nodes=MappingProxyType({"a": NodeState(), "b": NodeState()}),
        created_at=T0,
        updated_at=T0,
    )


def steps() -> st.SearchStrategy[dict[str, Any]]:
    """What one step changes (its seq and time are set by :func:`step_runs`)."""
    return st.fixed_dictionaries(
        {
            "kind": st.sampled_from(["transition", "start", "status", "reply"]),
            "node": st.sampled_from([None, "a", "b"]),
            "result": user_maps(1),
            "data": user_maps(2).filter(lambda data: "log" not in data),
            "appended": st.none() | st.lists(user_values(), max_size=2),
            "nodes": st.dictionaries(st.sampled_from(["a", "b", "c"]), node_states(), max_size=2),
            "status": st.sampled_from(RunStatus),
            "errors": st.just(()) | error_records(),
            "interrupts": st.none() | interrupts(),
            "events": st.lists(user_maps(1), max_size=1).map(tuple),
        }
    )


@st.composite
def step_runs(draw: st.DrawFn) -> tuple[RunState, list[StepRecord]]:
    """A start state and records that follow it: data set and lists appended to, nodes
    moved, errors logged, interrupts opened and closed, events raised."""
    data = draw(st.dictionaries(texts(4), user_values(), max_size=3))
    state = start_state({**data, "log": []})
    records = []
    for seq, step in enumerate(draw(st.lists(steps(), max_size=8)), 1):
        appended = step.pop("appended")
        records.append(
            StepRecord(
                seq=seq,
                time=T0 + timedelta(seconds=seq),
                appended=frozen_map({"log": appended}) if appended is not None else frozen_map(),
                **step,
            )
        )
    return state, records


def through_bytes(
    state: RunState, records: Sequence[StepRecord]
) -> tuple[RunState, list[bytes], list[StepRecord]]:
    """The state and records as a reader gets them back from their stored bytes."""
    blobs = [codec.encode_record(record) for record in records]
    return (
        codec.decode_snapshot(codec.encode_snapshot(state)),
        blobs,
        [codec.decode_record(blob) for blob in blobs],
    )


def folded(fold: Any, state: RunState, items: Sequence[Any]) -> tuple[Any, ...]:
    try:
        value = fold(state, list(items))
    except RunStateError as exc:
        return "refused", type(exc), str(exc), exc.seq
    return "folded", value, shape(value)


def one_by_one(state: RunState, records: Sequence[StepRecord]) -> RunState:
    for record in records:
        state = apply_records(state, [record])
    return state


@FAST
@given(step_runs())
def test_records_read_back_fold_at_once_as_they_fold_one_by_one(
    run: tuple[RunState, list[StepRecord]],
) -> None:
    # A head read folds the records after a snapshot at once; the run applied them one
    # step at a time. Both must give the same state, of the same types all the way down.
    state, _, records = through_bytes(*run)
    for end in {0, 1, len(records) // 2, len(records)}:
        assert folded(apply_records, state, records[:end]) == folded(
            one_by_one, state, records[:end]
        )


def test_the_golden_state_folds_the_golden_records_of_both_formats() -> None:
    state = codec.decode_snapshot((GOLDEN / "snapshot_v1.bin").read_bytes())
    for name in ("record_v1.bin", "record_v2.bin"):
        record = codec.decode_record((GOLDEN / name).read_bytes())
        after = apply_records(state, [record])
        assert (after.seq, after.status, after.updated_at) == (
            record.seq,
            record.status,
            record.time,
        )
        assert all(after.nodes[node_id] == node for node_id, node in record.nodes.items())
        extended = {key: [*state.data[key], *items] for key, items in record.appended.items()}
        assert after.data == {**state.data, **record.data, **extended}


# --------------------------------------------------------------------------- history JSON

CALL_JSON = {
    "arguments": {"argv": ["make", "deploy"]},
    "effect": "idempotent",
    "id": "run-0001:review:2:1",
    "index": 1,
    "on_unknown": "retry",
    "result": {"exit": 0, "stdout": "ok"},
    "tool": "run_command",
}
"""The golden ledger entry's JSON."""

GOLDEN_RECORD_JSON = {
    "actor": {"groups": ["release"], "name": "local:ana"},
    "appended": {"plan": ["ship", {"by": "ana"}]},
    "data": {"approved": True, "reviewer": "ana"},
    "dest": ["executing"],
    "errors": [
        {
            "details": {"error_code": "timeout", "retryable": True},
            "message": "provider timed out",
            "node": "plan",
            "recovered": True,
            "severity": "warning",
            "state": "think",
            "time": "2025-03-01T09:30:15.123456+00:00",
        }
    ],
    "events": [{"id": "run-0001:review:spec_review", "type": "spec_review_reply"}],
    "interrupts": {},
    "kind": "transition",
    "ledger": CALL_JSON,
    "node": "review",
    "nodes": {
        "review": {
            "counters": {},
            "error": None,
            "ledger": [CALL_JSON],
            "outcome": None,
            "path": ["executing"],
            "payload": {},
            "result": None,
            "status": "running",
            "steps": 0,
        }
    },
    "plan": {
        "hook": "children",
        "items": [
            {"id": "build", "needs": [], "value": {"argv": ["make"], "id": "build"}, "version": 1},
            {"id": "test", "needs": ["build"], "value": "run the tests", "version": 2},
        ],
        "limit": 2,
        "members": ["build", "test"],
        "version": 2,
    },
    "result": {"output": None, "payload": {"ok": True}, "trigger": "confirm"},
    "seq": 8,
    "source": ["review_pending", "ask"],
    "status": "completed",
    "time": "2025-03-01T09:00:01+00:00",
    "trigger": "confirm",
}
"""The golden record's JSON, every field of the ``StepRecord`` schema set."""


def rendered(blobs: Sequence[bytes], cuts: Sequence[int] = ()) -> bytes:
    """The history JSON of ``blobs`` rendered in pages cut at ``cuts``."""
    bodies = [_envelope.read_record(blob) for blob in blobs]
    edges = [0, *sorted(cuts), len(bodies)]
    pages = [_history.history_page_json(bodies[a:b]) for a, b in itertools.pairwise(edges)]
    return _history.history_json(pages)


@FAST
@given(
    st.lists(step_records_of_every_kind(), max_size=6),
    st.lists(st.integers(0, 6), max_size=3),
)
def test_history_json_holds_every_record_however_it_is_paged(
    records: list[StepRecord], cuts: list[int]
) -> None:
    blobs = [codec.encode_record(record) for record in records]
    whole = rendered(blobs)
    assert_holds(whole, [codec.decode_record(blob) for blob in blobs])
    assert rendered(blobs, [min(cut, len(blobs)) for cut in cuts]) == whole


def test_history_json_of_the_golden_record_is_indented_and_sorted() -> None:
    text = rendered([codec.encode_record(golden_record())])
    assert json.loads(text) == [GOLDEN_RECORD_JSON]
    assert text.startswith(b'[\n  {\n    "actor": {\n      "groups": [\n        "release"')
    assert text.endswith(b'    "trigger": "confirm"\n  }\n]')
    assert rendered([]) == b"[]"


def _without_ledgers(record: dict[str, Any]) -> dict[str, Any]:
    nodes = {key: {**node, "ledger": []} for key, node in record["nodes"].items()}
    return {**_without_actor(record), "ledger": None, "nodes": nodes}


def _without_actor(record: dict[str, Any]) -> dict[str, Any]:
    return {**_without_plan(record), "actor": None}


def _without_plan(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "plan": None}


def test_history_json_of_a_format_3_record() -> None:
    """Format 3 named no actor: a record's reads as null."""
    blob = (GOLDEN / "record_v3.bin").read_bytes()
    items = assert_holds(rendered([blob]), [golden_record_v3()])
    assert items == [_without_actor(GOLDEN_RECORD_JSON)]


def test_history_json_of_a_format_1_record() -> None:
    """Format 1 had no ``appended`` and no ledgers: they read as empty."""
    blob = (GOLDEN / "record_v1.bin").read_bytes()
    items = assert_holds(rendered([blob]), [golden_record_v1()])
    assert items == [{**_without_ledgers(GOLDEN_RECORD_JSON), "appended": {}}]


def test_history_json_of_a_format_2_record() -> None:
    """Format 2 had no ledgers: a node's reads as empty, a record's as null."""
    blob = (GOLDEN / "record_v2.bin").read_bytes()
    items = assert_holds(rendered([blob]), [golden_record_v2()])
    assert items == [_without_ledgers(GOLDEN_RECORD_JSON)]


def as_json(value: Any) -> Any:
    """How a user value is written: bytes in hex, datetimes in ISO 8601 in UTC, inf as null."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, list | tuple):
        return [as_json(item) for item in value]
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    return value


@FAST
@given(st.lists(user_values(), max_size=4))
def test_history_json_writes_user_values_as_json(values: list[Any]) -> None:
    """bytes as hex, datetimes in ISO 8601 in UTC, nested maps and lists, wherever they are."""
    record = StepRecord(
        seq=1,
        time=T0,
        kind="transition",
        data=frozen_map({f"k{i}": value for i, value in enumerate(values)}),
        appended=frozen_map({"log": values}),
        result=frozen_map({"deep": {"inner": values}}),
        events=(frozen_map({"values": values}),),
    )
    (item,) = assert_holds(rendered([codec.encode_record(record)]), [record])
    expected = as_json(values)
    assert item["data"] == {f"k{i}": value for i, value in enumerate(expected)}
    assert item["appended"] == {"log": expected}
    assert item["result"] == {"deep": {"inner": expected}}
    assert item["events"] == [{"values": expected}]
