"""The checksum every payload of format 2 and later carries, verified before anything is read.

A payload is the envelope map ``{body, kind, v, z}``: ``z``, the last key, is the CRC-32
of the bytes between the map's one-byte header and the key ``z`` (the ``body``, ``kind``
and ``v`` entries as written), always as a msgpack uint32 (``0xce`` and four big-endian
bytes). The checksum therefore sits at a fixed place — the last seven bytes are
``a1 7a ce`` and the four checksum bytes — and is checked before the payload is parsed:
a flipped bit anywhere in it is refused as corruption, not read as a changed value.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

__all__ = ["intact", "seal", "seal_parts", "sealed", "verified"]

_HEADER: Final = 0x84  # a fixmap of four entries: body, kind, v, z
_TRAILER: Final = b"\xa1z\xce"  # the key "z", then a uint32 marker
_TAIL: Final = len(_TRAILER) + 4
_TRAILER_AND_CRC: Final = struct.Struct(">3sI").unpack_from


def seal(encoded: bytes) -> bytes:
    """Add the checksum to ``encoded``, the canonical bytes of the map ``{body, kind, v}``."""
    entries = memoryview(encoded)[1:]  # without the fixmap-of-three header (0x83)
    crc = zlib.crc32(entries)
    return b"".join((b"\x84", entries, _TRAILER, crc.to_bytes(4, "big")))


def seal_parts(head: bytes, body: bytes, tail: bytes) -> bytes:
    """:func:`seal` of the map ``{body, kind, v}`` encoded as ``0x83 + head + body + tail``.

    ``head`` and ``tail`` are the envelope's fixed bytes around an encoded ``body``; the
    result is the same bytes, without building the unsealed map first.
    """
    crc = zlib.crc32(tail, zlib.crc32(body, zlib.crc32(head)))
    return b"".join((b"\x84", head, body, tail, _TRAILER, crc.to_bytes(4, "big")))


def sealed(data: bytes) -> bool:
    """Whether ``data`` has the shape of a checksummed payload (header and trailer)."""
    return len(data) > _TAIL and data[0] == _HEADER and data[-_TAIL:-4] == _TRAILER


def intact(data: bytes) -> bool:
    """Whether the checksum of a :func:`sealed` payload matches its bytes."""
    return zlib.crc32(memoryview(data)[1:-_TAIL]) == int.from_bytes(data[-4:], "big")


def verified(data: bytes) -> bool:
    """:func:`sealed` and :func:`intact` in one call: the usual check of every payload read.

    Payloads are read by the thousand (a history, the records after a snapshot): the two
    checks are written out here rather than called, the trailer and the checksum read in
    one unpacking, and the CRC taken over a copied slice (a few hundred bytes copy faster
    than a memoryview is made).
    """
    end = len(data) - _TAIL
    if end <= 0 or data[0] != _HEADER:
        return False
    found: tuple[bytes, int] = _TRAILER_AND_CRC(data, end)
    return found[0] == _TRAILER and zlib.crc32(data[1:end]) == found[1]
