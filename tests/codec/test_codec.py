"""Tests for phasegraph.codec: round trips, canonical bytes, golden files and strictness.

Golden files live in ``tests/golden/``. After an intended format change, regenerate the
files of the current format version with::

    PHASEGRAPH_REGEN_GOLDEN=1 .venv/bin/pytest tests/codec/test_codec.py -k golden

(refused when ``CI`` is set), then bump ``FORMAT_VERSION`` if old bytes no longer decode
as before, keep the old files, and add a migration.
"""

from __future__ import annotations

import contextlib
import os
import random
import zlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

import msgpack
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import REPO, TESTS
from payloads import (
    T0,
    T1,
    format_4_body,
    golden_record,
    golden_record_v1,
    golden_record_v2,
    golden_record_v3,
    golden_record_v5,
    golden_record_v6,
    golden_state,
    golden_state_v2,
    golden_state_v3,
    golden_state_v5,
    golden_state_v6,
    golden_state_v7,
    loop_record,
)
from phasegraph import codec
from phasegraph.codec import _chunks, _envelope
from phasegraph.codec import _envelope as codec_envelope
from phasegraph.codec import _wire as codec_wire
from phasegraph.codec._history import history_page_json
from phasegraph.errors import CodecError, UnsupportedFormatError
from phasegraph.model import (
    Actor,
    Effect,
    ErrorRecord,
    Interrupt,
    LedgerEntry,
    NodeOutcome,
    NodeState,
    NodeStatus,
    OnUnknown,
    Plan,
    PlanItem,
    RunState,
    RunStatus,
    StepRecord,
    apply_records,
    replace,
)

GOLDEN = TESTS / "golden"
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------- strategies
# Reusable generators of everything the codec must carry. User data holds lists, never
# tuples: tuples are written as arrays and come back as lists (see test_tuples_...).

OFFSETS = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]


def aware_datetimes() -> st.SearchStrategy[datetime]:
    """Timezone-aware datetimes whose UTC form stays inside datetime's range."""
    return st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from(OFFSETS),
    )


def texts(max_size: int = 12) -> st.SearchStrategy[str]:
    """Strings msgpack can carry (UTF-8: no lone surrogates)."""
    return st.text(st.characters(exclude_categories=["Cs"]), max_size=max_size)


def scalars() -> st.SearchStrategy[Any]:
    return (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**64 - 1)
        | st.floats(allow_nan=False)
        | texts()
        | st.binary(max_size=8)
        | aware_datetimes()
    )


def user_values() -> st.SearchStrategy[Any]:
    """Any value the type table allows, nested."""
    return st.recursive(
        scalars(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts(6), inner, max_size=3),
        max_leaves=8,
    )


def user_maps(max_size: int = 4) -> st.SearchStrategy[Mapping[str, Any]]:
    """A read-only top-level map of user data, like ``RunState.data``."""
    return st.dictionaries(texts(8), user_values(), max_size=max_size).map(MappingProxyType)


def paths() -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(texts(6), max_size=3).map(tuple)


def ledger_entries() -> st.SearchStrategy[LedgerEntry]:
    return st.builds(
        LedgerEntry,
        id=texts(),
        index=st.integers(-1, 2**31),
        tool=texts(),
        arguments=user_maps(2),
        effect=st.sampled_from(Effect),
        on_unknown=st.sampled_from(OnUnknown),
        result=st.none() | user_maps(2),
    )


def node_states() -> st.SearchStrategy[NodeState]:
    return st.builds(
        NodeState,
        status=st.sampled_from(NodeStatus),
        path=paths(),
        outcome=st.none() | st.sampled_from(NodeOutcome),
        counters=st.dictionaries(texts(6), st.integers(0, 2**63 - 1), max_size=3).map(
            MappingProxyType
        ),
        steps=st.integers(0, 2**63 - 1),
        error=st.none() | texts(),
        payload=user_maps(2),
        ledger=st.lists(ledger_entries(), max_size=2).map(tuple),
        retried=st.none() | st.integers(0, 2**63 - 1),
    )


def interrupts() -> st.SearchStrategy[Mapping[str, Interrupt]]:
    one = st.builds(
        Interrupt,
        id=texts(),
        node=texts(),
        kind=texts(),
        payload=user_maps(2),
        deadline=st.none() | aware_datetimes(),
        created_at=st.none() | aware_datetimes(),
        parked=st.booleans(),
    )
    return st.dictionaries(texts(6), one, max_size=2).map(MappingProxyType)


def error_records() -> st.SearchStrategy[tuple[ErrorRecord, ...]]:
    one = st.builds(
        ErrorRecord,
        time=aware_datetimes(),
        node=texts(),
        state=texts(),
        message=texts(),
        severity=texts(),
        recovered=st.booleans(),
        details=user_maps(2),
    )
    return st.lists(one, max_size=2).map(tuple)


def node_maps() -> st.SearchStrategy[Mapping[str, NodeState]]:
    return st.dictionaries(texts(6), node_states(), max_size=3).map(MappingProxyType)


def run_states() -> st.SearchStrategy[RunState]:
    return st.builds(
        RunState,
        run_id=texts(),
        graph=texts(),
        graph_source=texts(),
        graph_digest=texts(),
        definition=texts(),
        seq=st.integers(0, 2**63 - 1),
        status=st.sampled_from(RunStatus),
        input=user_maps(),
        data=user_maps(),
        nodes=node_maps(),
        interrupts=interrupts(),
        errors=error_records(),
        writers=st.dictionaries(texts(6), paths(), max_size=3).map(MappingProxyType),
        created_at=aware_datetimes(),
        updated_at=aware_datetimes(),
    )


def step_records(kinds: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[StepRecord]:
    """Step records; ``kinds`` draws their kind (default: any text)."""
    return st.builds(
        StepRecord,
        seq=st.integers(0, 2**63 - 1),
        time=aware_datetimes(),
        kind=texts() if kinds is None else kinds,
        node=st.none() | texts(),
        source=paths(),
        trigger=st.none() | texts(),
        dest=paths(),
        result=user_maps(),
        data=user_maps(),
        nodes=node_maps(),
        status=st.sampled_from(RunStatus),
        errors=error_records(),
        interrupts=st.none() | interrupts(),
        events=st.lists(user_maps(2), max_size=2).map(tuple),
        ledger=st.none() | ledger_entries(),
    )


def reordered(value: Any, rnd: random.Random) -> Any:
    """The same value with every dict rebuilt in a shuffled key order."""
    if isinstance(value, Mapping):
        keys = list(value)
        rnd.shuffle(keys)
        return {key: reordered(value[key], rnd) for key in keys}
    if isinstance(value, list):
        return [reordered(item, rnd) for item in value]
    return value


# --------------------------------------------------------------------------- properties


@FAST
@given(run_states())
def test_snapshot_round_trips_exactly(state: RunState) -> None:
    data = codec.encode_snapshot(state)
    decoded = codec.decode_snapshot(data)
    assert decoded == state
    assert codec.encode_snapshot(decoded) == data


@FAST
@given(step_records())
def test_record_round_trips_exactly(record: StepRecord) -> None:
    data = codec.encode_record(record)
    decoded = codec.decode_record(data)
    assert decoded == record
    assert codec.encode_record(decoded) == data


@FAST
@given(user_values())
def test_value_round_trips(value: Any) -> None:
    data = _envelope.encode_value(value)
    assert _envelope.decode_value(data) == value
    assert _envelope.encode_value(_envelope.decode_value(data)) == data


@FAST
@given(user_maps(6), st.randoms(use_true_random=False))
def test_key_order_never_changes_the_bytes(data: Mapping[str, Any], rnd: random.Random) -> None:
    shuffled = MappingProxyType(reordered(data, rnd))
    record = StepRecord(seq=1, time=datetime(2025, 1, 1, tzinfo=UTC), kind="k", data=data)
    twin = StepRecord(seq=1, time=datetime(2025, 1, 1, tzinfo=UTC), kind="k", data=shuffled)
    assert codec.encode_record(record) == codec.encode_record(twin)
    assert _envelope.encode_value(data) == _envelope.encode_value(shuffled)


@FAST
@given(run_states(), st.randoms(use_true_random=False))
def test_snapshot_bytes_ignore_insertion_order(state: RunState, rnd: random.Random) -> None:
    twin = RunState(
        **{
            **{name: getattr(state, name) for name in RunState.__struct_fields__},
            "data": MappingProxyType(reordered(state.data, rnd)),
            "nodes": MappingProxyType(reordered(state.nodes, rnd)),
            "interrupts": MappingProxyType(reordered(state.interrupts, rnd)),
        }
    )
    assert codec.encode_snapshot(twin) == codec.encode_snapshot(state)


def assert_maps_sorted(value: Any) -> None:
    if isinstance(value, dict):
        assert list(value) == sorted(value)
        for item in value.values():
            assert_maps_sorted(item)
    elif isinstance(value, list):
        for item in value:
            assert_maps_sorted(item)


@FAST
@given(run_states(), step_records())
def test_every_map_on_the_wire_is_key_sorted(state: RunState, record: StepRecord) -> None:
    for data in (codec.encode_snapshot(state), codec.encode_record(record)):
        assert_maps_sorted(msgpack.unpackb(data, timestamp=3))


# --------------------------------------------------------------------------- golden files


# (format version, file, expected object, encoder, decoder). When the format moves on,
# keep the old rows: old files must still decode (through the migrations) to the object.
GOLDEN_CASES: list[
    tuple[int, str, Callable[[], Any], Callable[[Any], bytes], Callable[[bytes], Any]]
] = [
    (1, "snapshot_v1.bin", golden_state_v2, codec.encode_snapshot, codec.decode_snapshot),
    (1, "record_v1.bin", golden_record_v1, codec.encode_record, codec.decode_record),
    (2, "snapshot_v2.bin", golden_state_v2, codec.encode_snapshot, codec.decode_snapshot),
    (2, "record_v2.bin", golden_record_v2, codec.encode_record, codec.decode_record),
    (3, "snapshot_v3.bin", golden_state_v3, codec.encode_snapshot, codec.decode_snapshot),
    (3, "record_v3.bin", golden_record_v3, codec.encode_record, codec.decode_record),
    (4, "snapshot_v4.bin", golden_state_v5, codec.encode_snapshot, codec.decode_snapshot),
    (4, "record_v4.bin", golden_record_v5, codec.encode_record, codec.decode_record),
    (5, "snapshot_v5.bin", golden_state_v5, codec.encode_snapshot, codec.decode_snapshot),
    (5, "record_v5.bin", golden_record_v5, codec.encode_record, codec.decode_record),
    (6, "snapshot_v6.bin", golden_state_v6, codec.encode_snapshot, codec.decode_snapshot),
    (6, "record_v6.bin", golden_record_v6, codec.encode_record, codec.decode_record),
    (7, "snapshot_v7.bin", golden_state_v7, codec.encode_snapshot, codec.decode_snapshot),
    (7, "record_v7.bin", golden_record_v6, codec.encode_record, codec.decode_record),
    (8, "snapshot_v8.bin", golden_state, codec.encode_snapshot, codec.decode_snapshot),
    (8, "record_v8.bin", golden_record, codec.encode_record, codec.decode_record),
]


@pytest.mark.parametrize(("version", "name", "expected", "encode", "decode"), GOLDEN_CASES)
def test_golden_bytes(
    version: int,
    name: str,
    expected: Callable[[], Any],
    encode: Callable[[Any], bytes],
    decode: Callable[[bytes], Any],
) -> None:
    path = GOLDEN / name
    if os.environ.get("PHASEGRAPH_REGEN_GOLDEN") == "1" and version == codec.FORMAT_VERSION:
        if os.environ.get("CI"):
            pytest.fail(
                "PHASEGRAPH_REGEN_GOLDEN is refused in CI: golden files are regenerated by hand"
            )
        path.write_bytes(encode(expected()))
    data = path.read_bytes()
    assert msgpack.unpackb(data, timestamp=3)["v"] == version
    assert decode(data) == expected()
    if version == codec.FORMAT_VERSION:
        assert encode(decode(data)) == data


def test_golden_objects_set_every_field() -> None:
    """Guard the golden objects: a field left at its default would go untested."""
    for value, cls in ((golden_state(), RunState), (golden_record(), StepRecord)):
        for field in msgspec.structs.fields(cls):
            assert getattr(value, field.name) != field.default, field.name


WIRE_ONLY = {"lists"}  # a snapshot's list segments: data, in another form
LAYOUTS = [
    (codec_wire.Snapshot, RunState, "## Snapshot body"),
    (codec_wire.Record, StepRecord, "## Step record body"),
    (codec_wire.Node, NodeState, "### Node state"),
    (codec_wire.Interrupt, Interrupt, "### Interrupt"),
    (codec_wire.Ledger, LedgerEntry, "### Ledger entry"),
    (codec_wire.Error, ErrorRecord, "### Error record"),
    (codec_wire.Actor, Actor, "### Actor"),
    (codec_wire.Segment, None, "### List segment"),
    (codec_wire.Plan, Plan, "### Plan"),
    (codec_wire.PlanItem, PlanItem, "### Plan item"),
]


def spec_table(heading: str) -> dict[str, str]:
    """Wire key → field name, from the table under ``heading`` in the format spec."""
    text = (REPO / "specs" / "snapshot-format.md").read_text()
    section = text.split(f"\n{heading}", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]
    return {key.strip().strip("`"): name.strip().strip("`") for key, name in rows}


@pytest.mark.parametrize(("layout", "cls", "heading"), LAYOUTS)
def test_wire_layout_covers_the_model_and_matches_the_spec(
    layout: type[msgspec.Struct], cls: type | None, heading: str
) -> None:
    wire = {field.encode_name: field.name for field in msgspec.structs.fields(layout)}
    if cls is not None:  # a segment is a form of data, not a model type
        model_only = {name for name in wire.values() if name not in WIRE_ONLY}
        assert sorted(model_only) == sorted(cls.__struct_fields__)
    assert spec_table(heading) == wire
    assert list(wire) == sorted(wire)  # declared in wire-key order, as the spec lists them


# --------------------------------------------------------------------------- decoded types


def test_decoded_values_have_model_types() -> None:
    state = codec.decode_snapshot(codec.encode_snapshot(golden_state()))
    assert type(state.status) is RunStatus
    assert type(state.nodes["plan"].outcome) is NodeOutcome
    assert type(state.nodes["plan"].status) is NodeStatus
    assert type(state.nodes["review"].path) is tuple
    assert type(state.errors) is tuple
    assert type(state.writers["score"]) is tuple
    assert state.created_at.tzinfo is not None
    assert state.data["when"] == T1
    assert state.data["when"].utcoffset() == timedelta(0)
    for mapping in (state.data, state.input, state.nodes, state.interrupts, state.writers):
        assert isinstance(mapping, MappingProxyType)
        with pytest.raises(TypeError):
            mapping["x"] = 1  # type: ignore[index]


def test_tuples_in_user_data_come_back_as_lists() -> None:
    record = StepRecord(seq=1, time=T0, kind="k", data=MappingProxyType({"pair": (1, (2, 3))}))
    data = codec.encode_record(record)
    assert codec.decode_record(data).data["pair"] == [1, [2, 3]]
    assert codec.encode_record(codec.decode_record(data)) == data


def test_rebuild_from_snapshot_and_records() -> None:
    """A reader rebuilds seq N from the nearest snapshot plus the records after it."""
    start = golden_state()
    records = [
        StepRecord(
            seq=8, time=T1, kind="transition", node="review", data=MappingProxyType({"x": 1})
        ),
        StepRecord(seq=9, time=T1, kind="status", status=RunStatus.COMPLETED),
    ]
    state = codec.decode_snapshot(codec.encode_snapshot(start))
    for blob in [codec.encode_record(r) for r in records]:
        state = apply_records(state, [codec.decode_record(blob)])
    expected = apply_records(start, records[:2])
    assert state == expected
    assert codec.encode_snapshot(state) == codec.encode_snapshot(expected)


# --------------------------------------------------------------------------- envelope


def envelope(*, seal: bool | None = None, **fields: Any) -> bytes:
    """An envelope of ``fields``, with the checksum ``z`` format 2 puts last (by default
    when ``v`` is an int of at least 2), computed as the spec says."""
    packed: bytes = msgpack.packb(fields, use_bin_type=True, datetime=True)
    version = fields.get("v")
    if seal is None:
        seal = type(version) is int and version >= 2
    if not seal:
        return packed
    entries = packed[1:]  # small maps only: a one-byte fixmap header
    header = bytes([0x80 | (len(fields) + 1)])
    return header + entries + b"\xa1z\xce" + zlib.crc32(entries).to_bytes(4, "big")


def test_newer_format_is_refused_with_upgrade_advice() -> None:
    newer = codec.FORMAT_VERSION + 1
    data = envelope(v=newer, kind="snapshot", body={"anything": "new"}, extra=1)
    with pytest.raises(UnsupportedFormatError) as caught:
        codec.decode_snapshot(data)
    message = str(caught.value)
    assert f"version {newer}" in message
    assert f"up to {codec.FORMAT_VERSION}" in message
    assert "upgrade phasegraph" in message
    with pytest.raises(UnsupportedFormatError):
        codec.decode_record(envelope(v=newer, kind="record", body=None))


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "not valid msgpack"),
        (b"\xc1", "not valid msgpack"),
        (envelope(v=1, kind="snapshot") + b"\x00", "not valid msgpack"),  # trailing bytes
        (msgpack.packb([1, "snapshot", {}]), "envelope map"),
        (envelope(kind="snapshot", body={}), "format version"),
        (envelope(v="1", kind="snapshot", body={}), "format version"),
        (envelope(v=True, kind="snapshot", body={}), "format version"),
        (envelope(v=0, kind="snapshot", body={}), "unknown format version 0"),
        (envelope(v=1, kind="snapshot"), "envelope has fields"),
        (envelope(v=1, kind="snapshot", body={}, more=1), "envelope has fields"),
        (envelope(v=1, kind="record", body={}), "holds a 'record'"),
        (envelope(v=1, kind="snapshot", body=[]), "snapshot map"),
        (envelope(v=1, kind="snapshot", body={"q": 1}), "snapshot map"),
        (msgpack.packb(msgpack.ExtType(7, b"x")), "extension type 7"),
    ],
)
def test_bad_envelopes_are_codec_errors(data: bytes, fragment: str) -> None:
    with pytest.raises(CodecError) as caught:
        codec.decode_snapshot(data)
    assert type(caught.value) is CodecError
    assert fragment in str(caught.value)


def raw_body(value: Any) -> dict[str, Any]:
    body = msgpack.unpackb(value, timestamp=3)["body"]
    assert isinstance(body, dict)
    return body


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("q", "7", "snapshot.seq must be of type int"),
        ("q", True, "snapshot.seq must be of type int"),
        ("s", "sleeping", "snapshot.status must be one of"),
        ("ca", 1700000000, "snapshot.created_at must be of type datetime"),
        ("d", {"k": {b"bytes-key": 1}}, "map key that is not a str"),
        ("d", [1], "snapshot.data must be a map"),
        ("ns", {"n": {"s": "pending"}}, "node map of"),
        ("w", {"k": [1]}, "snapshot.writers must be a list of str"),
        ("e", [{"t": 1}], "error map of"),
    ],
)
def test_bad_body_fields_are_named(field: str, value: Any, fragment: str) -> None:
    body = raw_body(codec.encode_snapshot(golden_state()))
    body[field] = value
    with pytest.raises(CodecError, match=fragment):
        codec.decode_snapshot(envelope(v=1, kind="snapshot", body=body))


def test_migrations_run_in_order_and_gaps_are_errors() -> None:
    def one_to_two(kind: str, body: Any) -> Any:
        return [*body, f"1->2 {kind}"]

    def two_to_three(kind: str, body: Any) -> Any:
        return [*body, f"2->3 {kind}"]

    table = {1: one_to_two, 2: two_to_three}
    assert codec_envelope._upgrade("record", [], 1, table, 3) == ["1->2 record", "2->3 record"]
    assert codec_envelope._upgrade("record", [], 2, table, 3) == ["2->3 record"]
    assert codec_envelope._upgrade("record", [], 3, table, 3) == []
    with pytest.raises(CodecError, match="no migration from format version 2 to 3"):
        codec_envelope._upgrade("record", [], 1, {1: one_to_two}, 3)

    def picky(kind: str, body: Any) -> Any:
        return body["needed"]

    with pytest.raises(CodecError, match="cannot migrate a record from format version 1"):
        codec_envelope._upgrade("record", {}, 1, {1: picky}, 2)


# --------------------------------------------------------------------------- corrupt bytes


def test_every_truncation_is_a_codec_error() -> None:
    for data, decode in (
        (codec.encode_snapshot(golden_state()), codec.decode_snapshot),
        (codec.encode_record(golden_record()), codec.decode_record),
    ):
        for end in range(len(data)):
            with pytest.raises(CodecError):
                decode(data[:end])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_codec_error(data: bytes) -> None:
    for decode in (codec.decode_snapshot, codec.decode_record, _envelope.decode_value):
        with contextlib.suppress(CodecError):
            decode(data)


FLIP_CASES: list[tuple[bytes, Callable[[Any], bytes], Callable[[bytes], Any], type]] = [
    (codec.encode_snapshot(golden_state()), codec.encode_snapshot, codec.decode_snapshot, RunState),
    (codec.encode_record(golden_record()), codec.encode_record, codec.decode_record, StepRecord),
]


@pytest.mark.parametrize(("blob", "decode"), [(case[0], case[2]) for case in FLIP_CASES])
def test_every_bit_flip_is_refused_as_corruption(
    blob: bytes, decode: Callable[[bytes], Any]
) -> None:
    """The checksum catches every single flipped bit, inside a value or anywhere else."""
    for bit in range(len(blob) * 8):
        flipped = bytearray(blob)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CodecError) as caught:
            decode(bytes(flipped))
        assert type(caught.value) is CodecError, bit  # never taken for a newer format
        if bit >= 8 and bit < (len(blob) - 7) * 8:  # the checksum's shape is intact
            assert "checksum does not match" in str(caught.value), bit


def test_a_format_1_payload_without_checksum_still_decodes() -> None:
    # Format 1 had no checksum: its bytes are read as they are (golden files test more).
    body = raw_body((GOLDEN / "record_v1.bin").read_bytes())
    assert codec.decode_record(envelope(v=1, kind="record", body=body)) == golden_record_v1()
    with pytest.raises(CodecError, match="checksum is not where format 2 puts it"):
        codec.decode_record(envelope(v=2, kind="record", body=body, z=0, seal=False))


@FAST
@given(st.sampled_from(["ca", "d", "e", "i", "id", "in", "ns", "q", "s", "w"]), user_values())
def test_any_value_in_any_field_decodes_or_raises_codec_error(field: str, value: Any) -> None:
    body = raw_body(codec.encode_snapshot(golden_state()))
    body[field] = value
    try:
        state = codec.decode_snapshot(envelope(v=1, kind="snapshot", body=body))
    except CodecError:
        return
    assert codec.decode_snapshot(codec.encode_snapshot(state)) == state


def test_nesting_limit_is_the_same_both_ways() -> None:
    def nest(depth: int) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = [value]
        return value

    deepest = {"k": nest(_envelope.MAX_DEPTH)}
    _envelope.check_encodable(deepest)
    assert _envelope.decode_value(_envelope.encode_value(deepest)) == deepest
    with pytest.raises(CodecError, match="nested deeper"):
        _envelope.check_encodable({"k": nest(_envelope.MAX_DEPTH + 1)})
    body = raw_body(codec.encode_record(golden_record()))
    body["d"] = {"k": nest(_envelope.MAX_DEPTH + 1)}
    with pytest.raises(CodecError, match=r"record\.data is nested deeper"):
        codec.decode_record(envelope(v=1, kind="record", body=body))
    with pytest.raises(CodecError, match="nested deeper"):
        _envelope.decode_value(msgpack.packb({"k": nest(_envelope.MAX_DEPTH + 1)}))


# --------------------------------------------------------------------------- unencodable


class Opaque:
    """A value the type table does not know."""


@pytest.mark.parametrize(
    ("values", "key", "fragments"),
    [
        ({"ok": 1, "bad": {1, 2}}, "bad", ["set is not a supported type"]),
        (
            {"bad": [0, {"x": Opaque()}]},
            "bad",
            ["Opaque is not a supported type", "['bad'][1]['x']"],
        ),
        ({"bad": {1: "int key"}}, "bad", ["key 1 (int) is not a str"]),
        ({"bad": 2**64}, "bad", ["64-bit"]),
        ({"bad": "\ud800"}, "bad", ["not valid UTF-8"]),
        ({"bad": datetime(2025, 1, 1)}, "bad", ["not a timezone-aware datetime"]),
        ({"bad": bytearray(b"x")}, "bad", ["bytearray"]),
    ],
)
def test_check_encodable_names_node_key_and_type(
    values: dict[str, Any], key: str, fragments: list[str]
) -> None:
    with pytest.raises(CodecError) as caught:
        _envelope.check_encodable(values, node_id="build")
    message = str(caught.value)
    assert "node 'build'" in message
    assert f"key {key!r}" in message
    for fragment in fragments:
        assert fragment in message
    assert caught.value.node_id == "build"


def test_check_encodable_accepts_the_whole_type_table() -> None:
    _envelope.check_encodable(
        {
            "none": None,
            "flag": True,
            "int": -(2**63),
            "uint": 2**64 - 1,
            "float": 1.5,
            "text": "é",
            "bytes": b"\x00",
            "list": [1, "a"],
            "tuple": (1, 2),
            "map": {"k": {"j": []}},
            "when": T1,
            "status": RunStatus.RUNNING,
        }
    )


def test_top_level_key_must_be_a_string() -> None:
    with pytest.raises(CodecError, match=r"key 3 \(int\) is not a str"):
        _envelope.check_encodable({3: "x"}, node_id="n")  # type: ignore[dict-item]


def test_encode_record_names_node_field_and_path() -> None:
    record = StepRecord(
        seq=4, time=T0, kind="transition", node="build", data=MappingProxyType({"out": [Opaque()]})
    )
    with pytest.raises(CodecError) as caught:
        codec.encode_record(record)
    message = str(caught.value)
    assert "step 4 of node 'build'" in message
    assert "data['out'][0]" in message
    assert "Opaque" in message
    assert (caught.value.node_id, caught.value.seq) == ("build", 4)


@pytest.mark.parametrize(
    ("field", "value", "path", "reason"),
    [
        ("data", {"out": [1, 2**64]}, "data['out'][1]", "64-bit"),
        ("result", {"payload": {"text": "\ud800"}}, "result['payload']['text']", "UTF-8"),
        ("events", ({"kind": "k", "n": -(2**63) - 1},), "events[0]['n']", "64-bit"),
    ],
)
def test_encode_record_names_the_path_to_a_value_past_the_format_limits(
    field: str, value: Any, path: str, reason: str
) -> None:
    # msgspec refuses these without saying where; the codec finds the value.
    record = StepRecord(seq=4, time=T0, kind="transition", node="build", **{field: value})
    with pytest.raises(CodecError) as caught:
        codec.encode_record(record)
    message = str(caught.value)
    assert message.startswith(f"step 4 of node 'build' cannot be encoded: at {path}: ")
    assert reason in message
    assert (caught.value.node_id, caught.value.seq) == ("build", 4)


def test_encode_snapshot_names_the_path_to_a_value_past_the_format_limits() -> None:
    state = replace(golden_state(), data=MappingProxyType({"big": {"n": 2**70}}))
    with pytest.raises(CodecError, match=r"at data\['big'\]\['n'\]: an int is outside"):
        codec.encode_snapshot(state)
    with pytest.raises(CodecError, match=r"at data\['big'\]\['n'\]: an int is outside"):
        codec.encode_snapshot(state, _chunks.SnapshotCache())


def test_encode_snapshot_names_nested_field() -> None:
    state = golden_state()
    bad = Interrupt(id="i", node="n", kind="k", payload=MappingProxyType({"p": {1, 2}}))
    broken = RunState(
        **{
            **{name: getattr(state, name) for name in RunState.__struct_fields__},
            "interrupts": MappingProxyType({"i": bad}),
        }
    )
    with pytest.raises(CodecError, match=r"interrupts\['i'\]\.payload\['p'\]: set"):
        codec.encode_snapshot(broken)


@pytest.mark.parametrize("where", ["time", "error", "interrupt"])
def test_naive_datetimes_are_refused(where: str) -> None:
    naive = datetime(2025, 1, 1, 12, 0)
    if where == "time":
        record = StepRecord(seq=1, time=naive, kind="k")
    elif where == "error":
        record = StepRecord(
            seq=1,
            time=T0,
            kind="k",
            errors=(ErrorRecord(time=naive, node="n", state="s", message="m"),),
        )
    else:
        item = Interrupt(id="i", node="n", kind="k", deadline=naive)
        record = StepRecord(seq=1, time=T0, kind="k", interrupts=MappingProxyType({"i": item}))
    with pytest.raises(CodecError, match="not a timezone-aware datetime"):
        codec.encode_record(record)


def test_datetimes_that_leave_the_range_in_utc_are_refused() -> None:
    edge = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))
    with pytest.raises(CodecError, match="outside the years 1-9999"):
        _envelope.encode_value({"when": edge})
    fine = datetime(1, 1, 1, 12, tzinfo=timezone(timedelta(hours=5)))
    assert _envelope.decode_value(_envelope.encode_value(fine)) == fine


def test_encode_value_refuses_unknown_types() -> None:
    with pytest.raises(CodecError, match="frozenset is not a supported type"):
        _envelope.encode_value({"k": frozenset()})
    with pytest.raises(CodecError, match="64-bit"):
        _envelope.encode_value(-(2**63) - 1)


class Word(str):
    """A str subclass, like the members of a StrEnum."""


def test_subclasses_and_read_only_maps_are_written_as_their_plain_values() -> None:
    odd = {
        Word("k"): MappingProxyType(
            {"s": Word("x"), "n": NodeStatus.RUNNING, "r": RunStatus.FAILED}
        ),
        "t": (True, MappingProxyType({})),
    }
    plain = {"k": {"n": "running", "r": "failed", "s": "x"}, "t": [True, {}]}
    _envelope.check_encodable(odd)
    assert _envelope.encode_value(odd) == _envelope.encode_value(plain)
    assert _envelope.decode_value(_envelope.encode_value(odd)) == plain
    record = StepRecord(seq=1, time=T0, kind="k", data=MappingProxyType(odd))
    twin = StepRecord(seq=1, time=T0, kind="k", data=MappingProxyType(plain))
    assert codec.encode_record(record) == codec.encode_record(twin)


@pytest.mark.parametrize("text", ["2025-03-01T09:30:15Z", "2025-03-01"])
def test_a_timestamp_written_as_text_is_refused(text: str) -> None:
    """msgspec reads RFC 3339 text as a datetime; the format allows only the timestamp."""
    body = raw_body(codec.encode_record(golden_record()))
    body["t"] = text
    with pytest.raises(CodecError, match=r"^record\.time must be of type datetime, not str$"):
        codec.decode_record(envelope(v=1, kind="record", body=body))
    body = raw_body(codec.encode_snapshot(golden_state()))
    body["i"]["run-0001:review:spec_review"]["dl"] = text
    with pytest.raises(CodecError, match=r"interrupt\.deadline must be of type datetime or nil"):
        codec.decode_snapshot(envelope(v=1, kind="snapshot", body=body))


def test_an_unknown_extension_inside_user_data_is_a_codec_error() -> None:
    body = raw_body(codec.encode_record(golden_record()))
    body["d"] = {"k": msgpack.ExtType(7, b"x")}
    with pytest.raises(CodecError, match="unknown msgpack extension type 7"):
        codec.decode_record(envelope(v=1, kind="record", body=body))


def test_nesting_deeper_than_the_stack_is_a_codec_error() -> None:
    deep = b"\x91" * 100_000 + b"\x00"
    for decode in (codec.decode_snapshot, codec.decode_record, _envelope.decode_value):
        with pytest.raises(CodecError, match="not valid msgpack"):
            decode(deep)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("q", "7", "record.seq must be of type int, not str"),
        ("n", 3, "record.node must be of type str or nil, not int"),
        ("s", "sleeping", "record.status must be one of running, waiting, parked, completed"),
        ("src", ["a", 1], "record.source must be a list of str, found int in it"),
        ("ns", {"n": {"s": "pending"}}, "record.nodes must be a node map of c, e, l, n, o, p, pl"),
        ("ns", [], "record.nodes must be a map of str to node maps, not list"),
        ("ev", [1], "record.events must be a list of maps, found int in it"),
        ("e", [1], "record.errors must be an error map of m, n, r, s, sv, t, x, not int"),
        (
            "i",
            {"g": {}},
            "record.interrupts must be an interrupt map of ca, dl, id, k, n, p, pk, q, rv; missing",
        ),
        ("r", {1: 2}, "record.result has a map key that is not a str"),
        ("zz", 1, "the record body must be a record map of a, ac, d, dst, e, ev, i, k, l, n, ns"),
    ],
)
def test_refused_record_fields_are_named_by_their_model_field(
    field: str, value: Any, message: str
) -> None:
    body = raw_body(codec.encode_record(golden_record()))
    body[field] = value
    with pytest.raises(CodecError) as caught:
        codec.decode_record(envelope(v=1, kind="record", body=body))
    assert str(caught.value).startswith(message)


# --------------------------------------------------------------------------- format 5


@FAST
@given(step_records())
def test_a_format_4_body_with_every_key_reads_as_its_format_5_bytes(record: StepRecord) -> None:
    """Format 5 only leaves keys out: the same record written in full as format 4 wrote it
    reads back equal, through the same code, and re-encodes to the format-5 bytes."""
    data = codec.encode_record(record)
    full = envelope(v=4, kind="record", body=format_4_body(raw_body(data)))
    assert codec.decode_record(full) == record
    assert codec.encode_record(codec.decode_record(full)) == data
    # Read unbuilt (a history's JSON), the two give the same text too.
    assert history_page_json(codec_envelope.read_records([full])) == history_page_json(
        codec_envelope.read_records([data])
    )


def test_format_5_leaves_out_what_is_empty_or_nil() -> None:
    bare = StepRecord(seq=3, time=T0, kind="status", status=RunStatus.COMPLETED)
    assert set(raw_body(codec.encode_record(bare))) == {"k", "q", "s", "t"}
    node = NodeState(status=NodeStatus.RUNNING, path=("work",), steps=2)
    moved = replace(bare, kind="transition", nodes=MappingProxyType({"a": node}))
    assert raw_body(codec.encode_record(moved))["ns"] == {
        "a": {"n": 2, "p": ["work"], "s": "running"}
    }
    # An empty interrupt map (every gate closed) is not nil (unchanged): it is written.
    closed = replace(bare, interrupts=MappingProxyType({}))
    assert raw_body(codec.encode_record(closed))["i"] == {}
    assert codec.decode_record(codec.encode_record(closed)).interrupts == {}
    assert codec.decode_record(codec.encode_record(bare)).interrupts is None


@pytest.mark.parametrize("key", ["r", "ns", "d", "a"])
def test_format_5_refuses_nil_where_a_map_is_left_out(key: str) -> None:
    """A map key may be absent, but nil is not a map: it is refused as before."""
    body = {**raw_body(codec.encode_record(loop_record(3))), key: None}
    with pytest.raises(CodecError, match="must be a map"):
        codec.decode_record(envelope(v=codec.FORMAT_VERSION, kind="record", body=body))
