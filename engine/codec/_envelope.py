"""Run states and step records ⇄ bytes: the strict, versioned, canonical msgpack codec.

Every payload is one msgpack map, the envelope ``{"body": ..., "kind": ..., "v": ...}``:
``v`` is the format version (:data:`FORMAT_VERSION`) and ``kind`` says what ``body`` holds,
``"snapshot"`` (a :class:`~phasegraph.model.RunState`) or ``"record"`` (a
:class:`~phasegraph.model.StepRecord`). ``specs/snapshot-format.md`` documents every field.

Map keys are sorted at every level, so equal values give identical bytes. User data may
hold only None, bool, int (64-bit), float, str, bytes, list/tuple, dict with str keys and
aware datetimes (read back as lists, dicts and UTC datetimes); anything else is a
:class:`CodecError`, with no ``str()`` fallback, no pickle, no import on decode. A newer
``v`` raises :class:`UnsupportedFormatError`; an older one goes through the migrations.

This module owns msgpack, the envelope and the versions; the body layout lives in
:mod:`~phasegraph.codec._layout`, the user-data type table in
:mod:`~phasegraph.codec._values`, and the fast decoder of step records (the history path)
in :mod:`~phasegraph.codec._records`.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, Final

import msgpack

from phasegraph import model
from phasegraph.codec._layout import RECORD, SNAPSHOT
from phasegraph.codec._records import decode_record_body
from phasegraph.codec._values import (
    MAX_DEPTH,
    Unencodable,
    canonical,
    canonical_map,
    check_plain,
    encode_failure,
    type_name,
)
from phasegraph.errors import CodecError, UnsupportedFormatError

__all__ = [
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "check_encodable",
    "collector_paused",
    "decode_record",
    "decode_snapshot",
    "decode_value",
    "encode_record",
    "encode_snapshot",
    "encode_value",
]

FORMAT_VERSION: Final = 1
"""The format version this phasegraph writes, and the newest it reads."""

_Migration = Callable[[str, Any], Any]
"""Turns a format-``n`` body of a kind (``snapshot``/``record``) into a format-``n + 1`` body;
raises :class:`CodecError` for a body it cannot upgrade."""

_MIGRATIONS: Final[Mapping[int, _Migration]] = MappingProxyType({})
"""Version ``n`` → the migration from ``n`` to ``n + 1``. Empty until format 2 exists."""

_ENVELOPE: Final = frozenset({"body", "kind", "v"})
# What msgpack raises for a value it cannot pack or bytes it cannot unpack.
_PACK_ERRORS: Final = (TypeError, ValueError, OverflowError)
_UNPACK_ERRORS: Final = (msgpack.UnpackException, ValueError, TypeError, OverflowError)


def _packb(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True, datetime=True)
    return packed


# --------------------------------------------------------------------------- public API


def encode_snapshot(state: model.RunState) -> bytes:
    """Encode a whole run state as canonical snapshot bytes.

    Raises:
        CodecError: A value is outside the type table or a datetime is naive; the
            message names the field and the key path.
    """
    try:
        return _packb({"body": SNAPSHOT.encode(state), "kind": "snapshot", "v": FORMAT_VERSION})
    except _PACK_ERRORS as exc:  # Unencodable too: it is a ValueError
        what = f"the snapshot of run {state.run_id!r} at step {state.seq}"
        raise encode_failure(exc, what, run_id=state.run_id, seq=state.seq) from None


def encode_record(record: model.StepRecord) -> bytes:
    """Encode one step record as canonical bytes (once per step: the hot path).

    Raises:
        CodecError: A value is outside the type table or a datetime is naive; the
            message names the step, the node, the field and the key path.
    """
    try:
        return _packb({"body": RECORD.encode(record), "kind": "record", "v": FORMAT_VERSION})
    except _PACK_ERRORS as exc:
        what = f"step {record.seq}" + (f" of node {record.node!r}" if record.node else "")
        raise encode_failure(exc, what, node_id=record.node, seq=record.seq) from None


def encode_value(value: Any) -> bytes:
    """Encode a plain value as canonical msgpack with no envelope, for hashing or sending.

    Raises:
        CodecError: The value is outside the type table.
    """
    try:
        return _packb(canonical(value, 0))
    except _PACK_ERRORS as exc:
        raise encode_failure(exc, "the value") from None


def check_encodable(values: Mapping[str, Any], *, node_id: str | None = None) -> None:
    """Check that values an action returned can be encoded, before anything is committed.

    Args:
        values: Top-level key → value (a data update, a payload, an output).
        node_id: The node that produced ``values``, named in the error.

    Raises:
        CodecError: A value cannot be encoded; the message names the node, the top-level
            key, the path inside its value and the offending Python type.
    """
    try:
        _packb(canonical_map(values, 0))
    except _PACK_ERRORS as exc:
        if isinstance(exc, Unencodable):
            key = exc.key
        else:  # msgpack's own limits (int range, UTF-8): find the key it refuses
            key = next((key for key in values if not _packs(values[key])), None)
        what = "a key" if key is None else f"the value of key {key!r}"
        who = f"node {node_id!r}: " if node_id else ""
        raise encode_failure(exc, who + what, node_id=node_id) from None


def _packs(value: Any) -> bool:
    try:
        _packb(canonical(value, 1))
    except _PACK_ERRORS:
        return False
    return True


def _reject_ext(code: int, data: bytes) -> Any:
    raise CodecError(f"unknown msgpack extension type {code} (phasegraph uses only -1, time)")


def _unpack(data: bytes) -> Any:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CodecError(f"expected bytes to decode, got {type_name(data)}")
    try:
        return msgpack.unpackb(
            data, raw=False, strict_map_key=True, timestamp=3, ext_hook=_reject_ext
        )
    except CodecError:
        raise
    except _UNPACK_ERRORS as exc:
        raise CodecError(f"not valid msgpack: {exc}") from None


def _upgrade(kind: str, body: Any, old: int, table: Mapping[int, _Migration], new: int) -> Any:
    """Apply the migrations ``old → old + 1 → … → new`` from ``table`` to ``body``, in order."""
    for step in range(old, new):
        migrate = table.get(step)
        if migrate is None:
            raise CodecError(f"no migration from format version {step} to {step + 1}")
        try:
            body = migrate(kind, body)
        except CodecError:
            raise
        except (LookupError, TypeError, ValueError) as exc:  # a body too broken to upgrade
            raise CodecError(
                f"cannot migrate a {kind} from format version {step}: {exc!r}"
            ) from None
    return body


def _open(data: bytes, kind: str) -> Any:
    """Validate the envelope and return its body, upgraded to :data:`FORMAT_VERSION`."""
    envelope = _unpack(data)
    if type(envelope) is not dict:
        raise CodecError(
            f"not a phasegraph {kind}: expected an envelope map, found {type_name(envelope)}"
        )
    version = envelope.get("v")
    if type(version) is not int:
        raise CodecError(f"not a phasegraph {kind}: the envelope has no integer format version 'v'")
    if version > FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"this {kind} was written in format version {version}, but this phasegraph "
            f"reads format versions up to {FORMAT_VERSION}: upgrade phasegraph to read it"
        )
    if version < 1:
        raise CodecError(f"not a phasegraph {kind}: unknown format version {version}")
    if envelope.keys() != _ENVELOPE:
        found = ", ".join(sorted(map(repr, envelope)))
        raise CodecError(
            f"not a phasegraph {kind}: the envelope has fields {found}, not body, kind, v"
        )
    if envelope["kind"] != kind:
        raise CodecError(f"not a phasegraph {kind}: the envelope holds a {envelope['kind']!r}")
    if version == FORMAT_VERSION:  # the usual case: nothing to migrate
        return envelope["body"]
    return _upgrade(kind, envelope["body"], version, _MIGRATIONS, FORMAT_VERSION)


def decode_snapshot(data: bytes) -> model.RunState:
    """Decode snapshot bytes back into the exact run state that was encoded.

    Raises:
        UnsupportedFormatError: The snapshot was written by a newer format version.
        CodecError: The bytes are not a snapshot of a format this phasegraph reads.
    """
    return SNAPSHOT.decode(_open(data, "snapshot"), "the snapshot body")


def decode_record(data: bytes) -> model.StepRecord:
    """Decode step-record bytes back into the exact record that was encoded.

    Raises:
        UnsupportedFormatError: The record was written by a newer format version.
        CodecError: The bytes are not a step record of a format this phasegraph reads.
    """
    return decode_record_body(_open(data, "record"))


def decode_value(data: bytes) -> Any:
    """Decode bytes written by :func:`encode_value` (sequences come back as lists).

    Raises:
        CodecError: The bytes are not one msgpack value of the supported types.
    """
    value = _unpack(data)
    if type(value) is dict or type(value) is list:
        check_plain(value, 0, "the value")
    return value


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a block decodes many payloads at once.

    Decoding allocates several container objects per payload, none of them in a cycle,
    and the collector starts on allocation counts: while a long history is decoded it
    runs over and over, re-scanning records that cannot be garbage (a third of the time
    of a 10,000-record read). msgpack's documentation recommends the same for large
    unpacks. Keep the block synchronous, with no ``await`` and no user code in it: the
    pause is process-wide. A collector that was already off stays off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
