"""Run states and step records ⇄ bytes: the strict, versioned, canonical msgpack codec.

The only place that knows the wire format (``specs/snapshot-format.md``). Owns
``msgspec``. May import :mod:`phasegraph.model` and :mod:`phasegraph.errors`.
"""

from __future__ import annotations

from phasegraph.codec._envelope import (
    FORMAT_VERSION,
    MAX_DEPTH,
    RecordBody,
    SnapshotCache,
    StoredSnapshot,
    check_encodable,
    decode_record,
    decode_snapshot,
    decode_value,
    encode_record,
    encode_snapshot,
    encode_value,
    read_record,
    read_records,
    read_snapshot,
)
from phasegraph.codec._history import history_json, history_page_json
from phasegraph.codec._json import json_int, to_json

__all__ = [
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "RecordBody",
    "SnapshotCache",
    "StoredSnapshot",
    "check_encodable",
    "decode_record",
    "decode_snapshot",
    "decode_value",
    "encode_record",
    "encode_snapshot",
    "encode_value",
    "history_json",
    "history_page_json",
    "json_int",
    "read_record",
    "read_records",
    "read_snapshot",
    "to_json",
]
