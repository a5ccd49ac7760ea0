"""Run states and step records ⇄ bytes: the strict, versioned, canonical msgpack codec.

The only place that knows the wire format (``specs/snapshot-format.md``). Owns
``msgspec``. May import :mod:`phasegraph.model` and :mod:`phasegraph.errors`.
"""

from __future__ import annotations

from phasegraph.codec._envelope import (
    FORMAT_VERSION,
    MAX_DEPTH,
    SnapshotCache,
    check_encodable,
    collector_paused,
    decode_record,
    decode_snapshot,
    decode_value,
    encode_record,
    encode_snapshot,
    encode_value,
)

__all__ = [
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "SnapshotCache",
    "check_encodable",
    "collector_paused",
    "decode_record",
    "decode_snapshot",
    "decode_value",
    "encode_record",
    "encode_snapshot",
    "encode_value",
]
