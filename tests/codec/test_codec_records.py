"""Tests of step-record decoding: the one-call typed decode and the checked way agree.

``decode_record`` takes one typed msgspec call when the payload is of the current version
and valid; anything else goes the checked way (the envelope read untyped and checked in
the spec's order, then the body converted with the same layout). The reference here is
the checked way alone. On every input — valid records of every kind, bodies with a field
changed to anything, truncated or bit-flipped bytes, other versions — ``decode_record``
must give the same record (same types throughout) or raise the same error class with the
same message; never any other exception. Whatever decodes re-encodes to bytes that
decode to it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_codec import (
    FAST,
    envelope,
    raw_body,
    step_records,
    texts,
    user_values,
)

from payloads import golden_record, golden_state, loop_record, shape
from phasegraph import codec
from phasegraph.codec import _envelope as codec_envelope
from phasegraph.codec import _wire as codec_wire
from phasegraph.errors import CodecError, UnsupportedFormatError
from phasegraph.model import StepRecord

KINDS = [
    "created",
    "start",
    "transition",
    "fail",
    "wait",
    "reply",
    "cancel",
    "status",
    "intent",
    "effect",
]
"""Every step-record kind the engine writes (``StepRecord.kind``)."""


def step_records_of_every_kind() -> st.SearchStrategy[StepRecord]:
    """Step records of the engine's own kinds and of any other text."""
    return step_records(st.sampled_from(KINDS) | texts())


def outcome(decode: Callable[[Any], Any], data: Any) -> tuple[Any, ...]:
    """What decoding gives: the value and its types, or the error class and message."""
    try:
        value = decode(data)
    except CodecError as exc:
        return "refused", type(exc), str(exc)
    return "decoded", value, shape(value)


def checked_record(data: bytes) -> StepRecord:
    """The reference: every envelope check in the spec's order, then the layout."""
    return codec_wire.step_record(codec_envelope._checked(data, "record", codec_wire.Record))


def wire_keys(layout: type[msgspec.Struct]) -> list[str]:
    return sorted(field.encode_name for field in msgspec.structs.fields(layout))


def assert_stable(record: StepRecord) -> None:
    """A decoded record is made of model types and survives another round trip."""
    assert type(record) is StepRecord
    again = codec.decode_record(codec.encode_record(record))
    assert (again, shape(again)) == (record, shape(record))


# --------------------------------------------------------------------------- valid records


@pytest.mark.parametrize("record", [loop_record(7), golden_record()], ids=["loop", "golden"])
def test_typed_decode_builds_what_the_checked_way_builds(record: StepRecord) -> None:
    data = codec.encode_record(record)
    decoded = codec.decode_record(data)
    assert decoded == record
    assert shape(decoded) == shape(checked_record(data))


@FAST
@given(step_records_of_every_kind())
def test_every_kind_round_trips(record: StepRecord) -> None:
    data = codec.encode_record(record)
    decoded = codec.decode_record(data)
    assert decoded == record
    assert shape(decoded) == shape(checked_record(data))
    assert codec.encode_record(decoded) == data


# --------------------------------------------------------------------------- corrupt input


def odd_values() -> st.SearchStrategy[Any]:
    """Values of every wire type, right and wrong, including the model's own shapes."""
    return (
        user_values()
        | st.sampled_from(["running", "pending", "success", "", "q", "loop"])
        | st.sampled_from([[], {}, ["a", 1], {"k": []}, {"k": [{"j": b"x"}]}, [[]], 1.5, -1])
    )


NODE_BODY = raw_body(codec.encode_record(loop_record(3)))["ns"]["loop"]
ERROR_BODY = raw_body(codec.encode_record(golden_record()))["e"][0]
INTERRUPT_BODY = next(iter(raw_body(codec.encode_snapshot(golden_state()))["i"].values()))
PLACES = ["field", "drop", "extra", "node", "node drop", "error", "interrupt", "event"]


def corrupted(body: dict[str, Any], place: str, key: int, value: Any) -> dict[str, Any]:
    """``body`` with one thing changed at ``place`` (``key`` picks which field)."""
    body = dict(body)
    fields = wire_keys(codec_wire.Record)
    if place == "field":
        body[fields[key % len(fields)]] = value
    elif place == "drop":
        body.pop(fields[key % len(fields)], None)  # an optional key (ac) may be absent
    elif place == "extra":
        body["zz"] = value
    elif place.startswith("node"):
        node, wires = dict(NODE_BODY), wire_keys(codec_wire.Node)
        if place == "node drop":
            node.pop(wires[key % len(wires)], None)  # an optional key may be absent
        else:
            node[wires[key % len(wires)]] = value
        body["ns"] = {**body.get("ns", {}), "extra-node": node}
    elif place == "error":
        error, wires = dict(ERROR_BODY), wire_keys(codec_wire.Error)
        error[wires[key % len(wires)]] = value
        body["e"] = [error]
    elif place == "interrupt":
        item, wires = dict(INTERRUPT_BODY), wire_keys(codec_wire.Interrupt)
        item[wires[key % len(wires)]] = value
        body["i"] = {"gate": item}
    else:
        body["ev"] = [value]
    return body


@FAST
@given(
    step_records_of_every_kind() | st.builds(loop_record, st.integers(1, 10**6)),
    st.sampled_from(PLACES),
    st.integers(0, 100),
    odd_values(),
)
def test_any_changed_field_decodes_the_same_both_ways_or_is_refused(
    record: StepRecord, place: str, key: int, value: Any
) -> None:
    body = corrupted(raw_body(codec.encode_record(record)), place, key, value)
    data = envelope(v=codec.FORMAT_VERSION, kind="record", body=body)
    result = outcome(codec.decode_record, data)
    assert result == outcome(checked_record, data)
    if result[0] == "decoded":
        assert_stable(result[1])


def every_corruption(data: bytes) -> list[bytes]:
    """Every truncation and every single-bit flip of ``data``."""
    flips = []
    for bit in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        flips.append(bytes(flipped))
    return [data[:end] for end in range(len(data))] + flips


@pytest.mark.parametrize("record", [loop_record(7), golden_record()], ids=["loop", "golden"])
def test_truncated_and_flipped_bytes_decode_the_same_both_ways_or_are_refused(
    record: StepRecord,
) -> None:
    for data in every_corruption(codec.encode_record(record)):
        result = outcome(codec.decode_record, data)
        assert result == outcome(checked_record, data), data
        if result[0] == "decoded":
            assert_stable(result[1])


def test_truncated_and_flipped_snapshots_decode_the_same_both_ways_or_are_refused() -> None:
    def checked(data: bytes) -> Any:
        return codec_wire.run_state(codec_envelope._checked(data, "snapshot", codec_wire.Snapshot))

    for data in every_corruption(codec.encode_snapshot(golden_state())):
        result = outcome(codec.decode_snapshot, data)
        assert result == outcome(checked, data), data
        if result[0] == "decoded":
            again = codec.decode_snapshot(codec.encode_snapshot(result[1]))
            assert (again, shape(again)) == result[1:]


@pytest.mark.parametrize(
    ("fields", "error", "fragment"),
    [
        ({"v": codec.FORMAT_VERSION + 1}, UnsupportedFormatError, "upgrade phasegraph"),
        ({"v": 0}, CodecError, "unknown format version 0"),
        ({"v": True}, CodecError, "no integer format version"),
        ({"v": "1"}, CodecError, "no integer format version"),
        ({"kind": "snapshot"}, CodecError, "holds a 'snapshot'"),
        ({"extra": 1}, CodecError, "envelope has fields"),
        ({"body": [1, 2]}, CodecError, "must be a record map"),
        ({"body": {"q": 1}}, CodecError, "must be a record map"),
    ],
)
def test_bad_envelopes_raise_the_checked_error(
    fields: dict[str, Any], error: type[CodecError], fragment: str
) -> None:
    body = raw_body(codec.encode_record(loop_record(3)))
    data = envelope(**{"body": body, "kind": "record", "v": codec.FORMAT_VERSION, **fields})
    expected = outcome(checked_record, data)
    assert expected[:2] == ("refused", error)
    assert fragment in expected[2]
    assert outcome(codec.decode_record, data) == expected


def test_a_refused_body_names_the_field_without_msgspec_context() -> None:
    body = raw_body(codec.encode_record(loop_record(3)))
    body["ns"]["loop"]["n"] = "three"
    with pytest.raises(CodecError, match=r"^node\.steps must be of type int, not str$") as caught:
        codec.decode_record(envelope(v=1, kind="record", body=body))
    assert caught.value.__context__ is None  # neither refusal of msgspec is chained in


@FAST
@given(step_records_of_every_kind())
def test_a_record_is_sealed_as_its_whole_envelope_would_be(record: StepRecord) -> None:
    """encode_record seals the body between fixed envelope bytes: the same bytes as
    encoding the envelope map and sealing it."""
    envelope = codec_envelope._Sealed(
        codec_wire.record_wire(record), "record", codec.FORMAT_VERSION
    )
    expected = codec_envelope.seal(codec_envelope._ENCODE(envelope))
    assert codec.encode_record(record) == expected
