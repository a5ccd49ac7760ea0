"""Snapshots that re-encode only the nodes that changed since the last one.

(And that write a long list's new items only: :mod:`~phasegraph.codec._segments`; the
cache keeps the layouts of both.)

A run's nodes are a :class:`~phasegraph.model.ChunkedMap`: a step replaces the chunks it
touches and shares the rest. :class:`SnapshotCache` keeps the encoded bytes of each chunk
of the last snapshot it wrote, by identity; the next snapshot encodes only the chunks that
are new objects and splices the rest in. Chunks hold runs of sorted keys, so the spliced
map is byte for byte the canonical one (sorted keys) that encoding the whole map gives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, final

import msgspec

from phasegraph import model
from phasegraph.codec._segments import ListLayouts

__all__ = ["SnapshotCache"]

_FIXMAP_LIMIT: Final = 16
_MAP16_LIMIT: Final = 1 << 16


def map_header(size: int) -> bytes:
    """The msgpack header of a map of ``size`` entries."""
    if size < _FIXMAP_LIMIT:
        return bytes((0x80 | size,))
    if size < _MAP16_LIMIT:
        return b"\xde" + size.to_bytes(2, "big")
    return b"\xdf" + size.to_bytes(4, "big")


def _entries(encoded_map: bytes) -> bytes:
    """The key/value pairs of an encoded map, without its header."""
    first = encoded_map[0]
    return encoded_map[1 if first < 0xDE else 3 if first == 0xDE else 5 :]


@final
class SnapshotCache:
    """The encoded node chunks of the last snapshot of one run.

    Keep one per run being written (the interpreter does); it holds only the chunks of
    the last snapshot, so it stays as large as one encoded node map. It also keeps where
    the run's long lists are segmented: call :meth:`accept` once a snapshot encoded with
    it is committed, so the next one refers to its segments.

    Attributes:
        lists: The segment layouts of the long lists of run data.
        referred: Bytes of earlier segments the last encoded snapshot refers to (with its
            own length, the size of the state it stands for).
    """

    __slots__ = ("_chunks", "lists", "referred")

    def __init__(self) -> None:
        self._chunks: dict[int, tuple[Mapping[str, model.NodeState], bytes]] = {}
        self.lists = ListLayouts()
        self.referred = 0

    def accept(self, seq: int) -> None:
        """The snapshot at ``seq``, encoded with this cache, was committed."""
        self.lists.accept(seq)

    def nodes(
        self,
        nodes: model.ChunkedMap[model.NodeState],
        encode_map: Callable[[Mapping[str, model.NodeState]], bytes],
    ) -> msgspec.Raw:
        """The encoded node map, encoding (with ``encode_map``) only chunks not seen last time."""
        kept: dict[int, tuple[Mapping[str, model.NodeState], bytes]] = {}
        parts = [map_header(len(nodes))]
        for chunk in nodes.chunks:
            known = self._chunks.get(id(chunk))
            # The chunk itself is kept alive with its bytes, so its id cannot be reused.
            if known is None or known[0] is not chunk:
                known = (chunk, _entries(encode_map(chunk)))
            kept[id(chunk)] = known
            parts.append(known[1])
        self._chunks = kept
        return msgspec.Raw(b"".join(parts))
