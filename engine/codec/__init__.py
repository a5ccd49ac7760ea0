"""Run states and step records ⇄ bytes: the strict, versioned, canonical msgpack codec.

The only place that knows the wire format (``specs/snapshot-format.md``). Owns
``msgspec``. May import :mod:`phasegraph.model` and :mod:`phasegraph.errors`.
"""

from __future__ import annotations

from phasegraph.codec._envelope import (
    FORMAT_VERSION,
    MAX_DEPTH,
    SnapshotCache,
    StoredSnapshot,
    check_encodable,
    collector_paused,
    decode_record,
    decode_snapshot,
    decode_value,
    encode_record,
    encode_snapshot,
    encode_value,
    read_snapshot,
)
from phasegraph.codec._json import to_json

__all__ = [
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "SnapshotCache",
    "StoredSnapshot",
    "check_encodable",
    "collector_paused",
    "decode_record",
    "decode_snapshot",
    "decode_value",
    "encode_record",
    "encode_snapshot",
    "encode_value",
    "read_snapshot",
    "to_json",
]
