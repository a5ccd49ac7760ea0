"""A run's stored definition ⇄ bytes: the files its graph was loaded from, kept in the store.

msgpack written and read by msgspec into one typed struct (data only: no pickle, no
import on decode). Unlike the compiled-graph cache this is part of a run's record, read
back by any later phasegraph, so it carries a version (``v``) of its own.
"""

from __future__ import annotations

from typing import Final

import msgspec

from phasegraph.errors import CodecError

__all__ = ["DEFINITION_VERSION", "StoredDefinition", "decode_definition", "encode_definition"]

DEFINITION_VERSION: Final = 1
"""The layout written, and the newest read."""


class StoredDefinition(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The files a graph was loaded from, as a run keeps them.

    Attributes:
        v: The layout version (:data:`DEFINITION_VERSION`).
        graph: The graph file's name among ``files``.
        files: Name → text of the graph file, each machine file its nodes use (built-in
            ones as ``<builtin>/states/NAME.yaml``), each response script and child graph
            file it names; names relative to the graph file's folder.
        code: Python module → sha256 of its file, for each module the graph's actions
            import: code is referenced, not stored, and a change of it is reported.
    """

    v: int = DEFINITION_VERSION
    graph: str
    files: dict[str, str]
    code: dict[str, str] = msgspec.field(default_factory=dict)


_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(StoredDefinition)


def encode_definition(stored: StoredDefinition) -> bytes:
    """The definition as bytes (the same definition always encodes the same)."""
    return _ENCODER.encode(stored)


def decode_definition(data: bytes, key: str) -> StoredDefinition:
    """The definition kept under ``key``.

    Raises:
        CodecError: The bytes are not a stored definition this phasegraph reads.
    """
    try:
        stored = _DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise CodecError(f"the stored definition {key[:12]} is damaged: {exc}") from None
    if stored.v > DEFINITION_VERSION:
        raise CodecError(
            f"the stored definition {key[:12]} has layout {stored.v}; this phasegraph reads "
            f"layouts up to {DEFINITION_VERSION}: upgrade phasegraph to run it"
        )
    return stored
