"""Batches of live events (a durable stream's turn in flight) ⇄ bytes.

A batch is a msgpack array of rows ``[id, node, kind, fields, time]`` (time in seconds
since the epoch). It is kept beside the journal only until its turn commits, so it has
no envelope or version: a reader skips a batch it cannot read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from phasegraph.errors import CodecError

__all__ = ["LiveRow", "decode_live", "encode_live"]

LiveRow = tuple[str, str | None, str, Mapping[str, Any], float]
"""One live event: its id, node, kind, fields and time."""

_DECODER: Final = msgspec.msgpack.Decoder(list[tuple[str, str | None, str, dict[str, Any], float]])
_ENCODER: Final = msgspec.msgpack.Encoder(enc_hook=str)  # a field no type fits: its text


def encode_live(rows: Iterable[LiveRow]) -> bytes:
    """A batch of live events as bytes."""
    return _ENCODER.encode([(i, n, k, dict(f), t) for i, n, k, f, t in rows])


def decode_live(batch: bytes) -> list[LiveRow]:
    """The rows of a batch.

    Raises:
        CodecError: The bytes are not a batch of live events.
    """
    try:
        return list(_DECODER.decode(batch))
    except msgspec.DecodeError as exc:
        raise CodecError(f"not a batch of live events: {exc}") from None
