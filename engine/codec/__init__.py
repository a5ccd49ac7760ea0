"""Run states and step records ⇄ bytes: the strict, versioned, canonical msgpack codec.

The only place that knows the wire format (``specs/snapshot-format.md``). Owns
``msgspec``. May import :mod:`phasegraph.model` and :mod:`phasegraph.errors`.
"""

from __future__ import annotations

from phasegraph.codec._envelope import (
    FORMAT_VERSION,
    decode_record,
    decode_snapshot,
    encode_record,
    encode_snapshot,
)

__all__ = [
    "FORMAT_VERSION",
    "decode_record",
    "decode_snapshot",
    "encode_record",
    "encode_snapshot",
]
