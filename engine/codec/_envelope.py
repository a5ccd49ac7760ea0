"""Run states and step records ⇄ bytes: the strict, versioned, canonical msgpack codec.

Every payload is one msgpack map, the envelope ``{"body": ..., "kind": ..., "v": ...,
"z": ...}``: ``v`` is the format version (:data:`FORMAT_VERSION`), ``kind`` says what
``body`` holds, ``"snapshot"`` (a :class:`~phasegraph.model.RunState`) or ``"record"`` (a
:class:`~phasegraph.model.StepRecord`), and ``z`` is the checksum of the rest, verified
before anything else is read (:mod:`~phasegraph.codec._checksum`; format 1 had none).
``specs/snapshot-format.md`` documents every field.

msgspec writes and reads the bytes, with the layout of :mod:`~phasegraph.codec._wire`.
Map keys are sorted at every level (``order="sorted"``), so equal values give identical
bytes. User data may hold only the types of :mod:`~phasegraph.codec._values`; anything
else is a :class:`CodecError`, with no ``str()`` fallback, no pickle, no import on decode.

Decoding takes one typed msgspec call when the payload is of the current version and
valid, the usual case. Anything else — an older version, a newer one, bytes that are not
valid — goes the checked way: the envelope is read untyped and checked in the order the
spec gives (a newer ``v`` raises :class:`UnsupportedFormatError` whatever the body holds),
an older body goes through the migrations, and a bad body is named field by field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from types import MappingProxyType, NoneType, UnionType
from typing import Any, Final, Generic, TypeAlias, TypeVar, Union, get_args, get_origin

import msgspec
from msgspec import UNSET, UnsetType

from phasegraph import model
from phasegraph.codec._checksum import (
    intact,
    seal,
    seal_parts,
    sealed,
    verified,
)
from phasegraph.codec._chunks import SnapshotCache
from phasegraph.codec._segments import Layout, join
from phasegraph.codec._values import (
    MAX_DEPTH,
    Unencodable,
    check_plain,
    encode_failure,
    limit_reason,
    plain_map,
    plain_value,
    type_name,
)
from phasegraph.codec._wire import (
    Record,
    Segment,
    Snapshot,
    Wire,
    check_record,
    node_map_wire,
    record_wire,
    run_state,
    snapshot_wire,
    step_record,
)
from phasegraph.errors import CodecError, UnsupportedFormatError

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
    "read_record",
    "read_records",
    "read_snapshot",
]

RecordBody: TypeAlias = Record
"""A step record as :func:`read_record` reads it: checked, in its wire form (``seq`` is its seq)."""

FORMAT_VERSION: Final = 8
"""The format version this phasegraph writes, and the newest it reads."""

_Migration = Callable[[str, Any], Any]
"""Turns a format-``n`` body of a kind (``snapshot``/``record``) into a format-``n + 1`` body;
raises :class:`CodecError` for a body it cannot upgrade."""


def _one_to_two(kind: str, body: Any) -> Any:
    """Format 2 adds a record's ``appended`` lists and a snapshot's list segments (none)."""
    if type(body) is not dict:
        return body  # refused, with its reason, when the body is checked
    return {**body, "a": {}} if kind == "record" else {**body, "ls": {}}


def _with_ledgers(nodes: Any) -> Any:
    if type(nodes) is not dict:
        return nodes
    return {k: {**n, "l": []} if type(n) is dict else n for k, n in nodes.items()}


def _two_to_three(kind: str, body: Any) -> Any:
    """Format 3 adds each node's ledger (empty) and a record's ledger entry (nil)."""
    if type(body) is not dict:
        return body
    body = {**body, "ns": _with_ledgers(body.get("ns"))} if "ns" in body else body
    return {**body, "l": None} if kind == "record" else body


def _three_to_four(kind: str, body: Any) -> Any:
    """Format 4 adds a record's ``actor`` and an interrupt's ``reviewers`` and ``seq``.

    All three are written only when set, so a format-3 body reads as a format-4 one
    that names nobody: the body is kept as it is.
    """
    return body


def _four_to_five(kind: str, body: Any) -> Any:
    """Format 5 leaves out a record's and a node's empty and nil fields.

    Every such key of a format-4 body is present, with the value it reads as: the body
    is kept as it is (and read directly, like a format-5 one).
    """
    return body


def _five_to_six(kind: str, body: Any) -> Any:
    """Format 6 adds a snapshot's ``plans``, a record's ``plan`` and a node's ``result``.

    All three are written only when set, so a format-5 body reads as a format-6 one
    without plans: the body is kept as it is (and read directly).
    """
    return body


def _six_to_seven(kind: str, body: Any) -> Any:
    """Format 7 adds a snapshot's ``definition`` (the stored definition the run follows).

    It is written only when set: a format-6 body reads as a run created before
    definitions were stored (its definition is pinned when it is next opened).
    """
    return body


def _seven_to_eight(kind: str, body: Any) -> Any:
    """Format 8 adds a node's ``retried`` (the step of a call a retry makes again).

    It is written only when set, so a format-7 body reads as a format-8 one whose nodes
    retry nothing yet: the body is kept as it is (and read directly).
    """
    return body


_MIGRATIONS: Final[Mapping[int, _Migration]] = MappingProxyType(
    {
        1: _one_to_two,
        2: _two_to_three,
        3: _three_to_four,
        4: _four_to_five,
        5: _five_to_six,
        6: _six_to_seven,
        7: _seven_to_eight,
    }
)
"""Version ``n`` → the migration from ``n`` to ``n + 1``."""

_READ_DIRECTLY: Final = frozenset({4, 5, 6, 7, FORMAT_VERSION})
"""The versions whose bodies the current layout reads as they are (format 5 only leaves
out keys format 4 writes, formats 6, 7 and 8 only add keys left out when empty), so an
older run's history is read as fast as a new one's."""

_B = TypeVar("_B")
_R = TypeVar("_R")


class _Envelope(msgspec.Struct, Generic[_B], forbid_unknown_fields=True, gc=False):
    body: _B
    kind: str
    v: int
    z: int | None = None  # the checksum; written by seal(), after the other three


class _Sealed(msgspec.Struct, Generic[_B], forbid_unknown_fields=True):
    """What is encoded, before :func:`seal` appends the checksum ``z``."""

    body: _B
    kind: str
    v: int


class _ListsOnly(msgspec.Struct):
    """The list segments of a snapshot body, every other field skipped."""

    lists: dict[str, Segment] = msgspec.field(name="ls")


class _ListsEnvelope(msgspec.Struct):
    body: _ListsOnly
    kind: str
    v: int


def _reject_ext(code: int, data: memoryview) -> Any:
    raise CodecError(f"unknown msgpack extension type {code} (phasegraph uses only -1, time)")


_ENCODE: Final = msgspec.msgpack.Encoder(order="sorted").encode
_DECODE_ANY: Final = msgspec.msgpack.Decoder(ext_hook=_reject_ext).decode
_DECODE_SNAPSHOT: Final = msgspec.msgpack.Decoder(_Envelope[Snapshot], ext_hook=_reject_ext).decode
_DECODE_RECORD: Final = msgspec.msgpack.Decoder(_Envelope[Record], ext_hook=_reject_ext).decode
_DECODE_LISTS: Final = msgspec.msgpack.Decoder(_ListsEnvelope, ext_hook=_reject_ext).decode
# What msgspec raises for a value it cannot write, and for bytes it cannot read (a
# UnicodeDecodeError is a ValueError; RecursionError: nested deeper than the stack allows).
_ENCODE_ERRORS: Final = (TypeError, ValueError, OverflowError)
_DECODE_ERRORS: Final = (msgspec.DecodeError, ValueError, TypeError, OverflowError, RecursionError)
_ENVELOPE: Final = frozenset({"body", "kind", "v", "z"})
_ENVELOPE_V1: Final = frozenset({"body", "kind", "v"})


# --------------------------------------------------------------------------- encoding


def encode_snapshot(state: model.RunState, cache: SnapshotCache | None = None) -> bytes:
    """Encode a whole run state as canonical snapshot bytes.

    Args:
        state: The run state.
        cache: The run's :class:`SnapshotCache`: node chunks unchanged since the last
            snapshot it saw are spliced in rather than encoded again (same bytes), and a
            long list of run data is written as the items added since the last committed
            snapshot, referring to earlier snapshots for the rest (see
            :func:`read_snapshot`). Without it the snapshot stands alone.

    Raises:
        CodecError: A value is outside the type table or a datetime is naive; the
            message names the field and the key path.
    """
    try:
        nodes = data = lists = None
        if cache is not None:
            if isinstance(state.nodes, model.ChunkedMap):
                nodes = cache.nodes(state.nodes, lambda chunk: _ENCODE(node_map_wire(chunk)))
            data, planned, cache.referred = cache.lists.plan(state.seq, state.data, _list_items)
            lists = {
                key: Segment(items=msgspec.Raw(items), refs=refs)  # type: ignore[arg-type]
                for key, (items, refs) in planned.items()
            }
        wire = snapshot_wire(state, nodes, data, lists)
        return seal(_ENCODE(_Sealed(wire, "snapshot", FORMAT_VERSION)))
    except _ENCODE_ERRORS as exc:  # Unencodable too: it is a ValueError
        what = f"the snapshot of run {state.run_id!r} at step {state.seq}"
        refused = _located(exc, lambda: snapshot_wire(state))
        raise encode_failure(refused, what, run_id=state.run_id, seq=state.seq) from None


def _list_items(key: str, items: list[Any] | tuple[Any, ...]) -> bytes:
    """The encoded items of a long list (a data key's value)."""
    try:
        return _ENCODE(plain_value(items, 1))
    except Unencodable as exc:
        exc.path += [f"[{key!r}]", ".data"]
        raise


def _envelope_parts(kind: str) -> tuple[bytes, bytes]:
    """The bytes of a ``kind`` envelope before and after its body (map header aside)."""
    empty = _ENCODE(_Sealed(None, kind, FORMAT_VERSION))  # the body encodes as nil (0xc0)
    at = empty.index(b"\xa4body\xc0") + 5
    return empty[1:at], empty[at + 1 :]


_RECORD_HEAD, _RECORD_TAIL = _envelope_parts("record")


def encode_record(record: model.StepRecord) -> bytes:
    """Encode one step record as canonical bytes (once per step: the hot path).

    Raises:
        CodecError: A value is outside the type table or a datetime is naive; the
            message names the step, the node, the field and the key path.
    """
    try:
        return seal_parts(_RECORD_HEAD, _ENCODE(record_wire(record)), _RECORD_TAIL)
    except _ENCODE_ERRORS as exc:
        what = f"step {record.seq}" + (f" of node {record.node!r}" if record.node else "")
        refused = _located(exc, lambda: record_wire(record))
        raise encode_failure(refused, what, node_id=record.node, seq=record.seq) from None


def encode_value(value: Any) -> bytes:
    """Encode a plain value as canonical msgpack with no envelope, for hashing or sending.

    Raises:
        CodecError: The value is outside the type table.
    """
    try:
        return _ENCODE(plain_value(value, 0))
    except _ENCODE_ERRORS as exc:
        raise encode_failure(_located(exc, lambda: plain_value(value, 0)), "the value") from None


def check_encodable(values: Mapping[str, Any], *, node_id: str | None = None) -> None:
    """Check that input from outside (a run's input) can be stored, up front.

    For the edges that take values before any step holds them (the command line, the
    HTTP API), to refuse bad input as such. A step's own values are checked once, when
    its record is encoded (:func:`encode_record` names the step, node and path).

    Args:
        values: Top-level key → value.
        node_id: The node the values came from, if any, named in the error.

    Raises:
        CodecError: A value cannot be encoded; the message names the top-level key, the
            path inside its value and the offending Python type.
    """
    try:
        _ENCODE(plain_map(values, 0))
    except _ENCODE_ERRORS as exc:
        refused = _located(exc, lambda: plain_map(values, 0))
        key = refused.key if isinstance(refused, Unencodable) else None
        what = "a key" if key is None else f"the value of key {key!r}"
        who = f"node {node_id!r}: " if node_id else ""
        raise encode_failure(refused, who + what, node_id=node_id) from None


def _located(exc: Exception, wire: Callable[[], Any]) -> Exception:
    """``exc``, or for msgspec's own refusals an :class:`Unencodable` saying where.

    msgspec refuses an int past 64 bits or a str that is not UTF-8 without saying where
    it sits; ``wire()`` rebuilds what was being encoded, and the value is looked for in
    it (only after a refusal: the hot path pays nothing).
    """
    if isinstance(exc, Unencodable):
        return exc
    try:
        path = _refused_at(wire())
    except _ENCODE_ERRORS:
        return exc
    if not path:
        return exc
    located = Unencodable(limit_reason(exc))
    located.path = [label for label, _ in path]
    outermost = path[-1][1]
    located.key = outermost if isinstance(outermost, str) else None
    return located


def _refused_at(value: Any) -> list[tuple[str, Any]] | None:
    """Where in ``value`` the encoder refuses: (label, map key or None), innermost first.

    ``None`` if it encodes; an empty path if ``value`` itself is refused.
    """
    try:
        _ENCODE(value)
    except _ENCODE_ERRORS:
        pass
    else:
        return None
    parts: Iterable[tuple[str, Any, Any]] = ()
    if isinstance(value, msgspec.Struct):
        fields = ((name, getattr(value, name)) for name in value.__struct_fields__)
        # A key left out (UNSET) is not written, so cannot be what the encoder refused.
        parts = ((f".{name}", None, item) for name, item in fields if item is not UNSET)
    elif isinstance(value, dict):
        parts = ((f"[{key!r}]", key, item) for key, item in value.items())
    elif isinstance(value, list | tuple):
        parts = ((f"[{index}]", None, item) for index, item in enumerate(value))
    for label, key, item in parts:
        inner = _refused_at(item)
        if inner is not None:
            return [*inner, (label, key)]
    return []


# --------------------------------------------------------------------------- decoding


def decode_snapshot(data: bytes) -> model.RunState:
    """Decode snapshot bytes back into the exact run state that was encoded.

    A snapshot that refers to earlier snapshots for a long list (one written with a
    :class:`SnapshotCache`) needs them: read it with :func:`read_snapshot`.

    Raises:
        UnsupportedFormatError: The snapshot was written by a newer format version.
        CodecError: The bytes are not a snapshot of a format this phasegraph reads, or
            the snapshot refers to others.
    """
    return read_snapshot(data).state({})


def read_snapshot(data: bytes) -> StoredSnapshot:
    """Read snapshot bytes: the state, once the snapshots it refers to are given.

    Raises:
        UnsupportedFormatError: The snapshot was written by a newer format version.
        CodecError: The bytes are not a snapshot of a format this phasegraph reads.
    """
    if verified(data):
        try:
            envelope = _DECODE_SNAPSHOT(data)
        except _DECODE_ERRORS:
            pass  # not the usual case: the checked way below says why
        else:
            if envelope.v in _READ_DIRECTLY and envelope.kind == "snapshot":
                return StoredSnapshot(envelope.body, len(data))
    return StoredSnapshot(_checked(data, "snapshot", Snapshot), len(data))


class StoredSnapshot:
    """A snapshot read from its bytes; :meth:`state` rebuilds the run state it holds.

    Attributes:
        seq: The snapshot's seq.
        needs: The seqs of the earlier snapshots whose list segments it refers to
            (empty for a snapshot that stands alone).
    """

    __slots__ = ("_layouts", "_size", "_wire", "needs", "seq")

    def __init__(self, wire: Snapshot, size: int) -> None:
        self._wire = wire
        self._size = size
        self._layouts: dict[str, Layout] = {}
        self.seq = wire.seq
        self.needs = tuple(sorted({ref for s in wire.lists.values() for ref, _ in s.refs}))

    def state(self, referred: Mapping[int, bytes]) -> model.RunState:
        """The run state, given the bytes of the snapshot at each seq of :attr:`needs`.

        Raises:
            CodecError: A needed snapshot is missing or does not hold what is referred to;
                the message names its seq.
        """
        wire = self._wire
        if not wire.lists:
            return run_state(wire)
        read: dict[int, dict[str, Segment]] = {}

        def segment(seq: int, key: str) -> list[Any]:
            if seq not in read:
                if seq not in referred:
                    raise CodecError(
                        f"the snapshot at seq {wire.seq} refers to the snapshot at seq {seq} "
                        "for a long list, and that one was not given"
                    )
                read[seq] = _lists_of(referred[seq], seq)
            part = read[seq].get(key)
            if part is None:
                raise CodecError(
                    f"the snapshot at seq {wire.seq} refers to the snapshot at seq {seq} "
                    f"for data key {key!r}, which holds no segment of it"
                )
            return part.items

        lists = {}
        for key, own in wire.lists.items():
            check_plain(own.items, 1, "snapshot.lists")
            lists[key] = join(wire.seq, key, own.items, own.refs, segment)
            chain = (*own.refs, (wire.seq, len(own.items))) if own.items else tuple(own.refs)
            size = sum(len(referred[ref]) for ref, _ in own.refs) + self._size
            self._layouts[key] = Layout(tuple(chain), size, lists[key])
        return run_state(wire, lists)

    def layouts(self) -> Mapping[str, Layout]:
        """How the state's long lists are segmented (after :meth:`state`), for a writer."""
        return self._layouts


def _lists_of(data: bytes, seq: int) -> dict[str, Segment]:
    """The list segments held by the snapshot bytes ``data`` (of the snapshot at ``seq``)."""
    if not sealed(data):
        raise CodecError(f"the snapshot at seq {seq} holds no list segments (format 1 or damaged)")
    if not intact(data):
        raise _corrupt(f"the snapshot at seq {seq}")
    try:
        envelope = _DECODE_LISTS(data)
    except _DECODE_ERRORS as exc:
        raise CodecError(f"the list segments of the snapshot at seq {seq}: {exc}") from None
    if envelope.kind != "snapshot" or envelope.v < 2:
        raise CodecError(f"the snapshot at seq {seq} holds no list segments")
    for part in envelope.body.lists.values():
        check_plain(part.items, 1, "snapshot.lists")
    return envelope.body.lists


def _corrupt(what: str) -> CodecError:
    return CodecError(
        f"{what} is corrupt: its checksum does not match its bytes (they changed after "
        "they were written: a damaged disk, memory or copy, or an edit)"
    )


def decode_record(data: bytes) -> model.StepRecord:
    """Decode step-record bytes back into the exact record that was encoded.

    Raises:
        UnsupportedFormatError: The record was written by a newer format version.
        CodecError: The bytes are not a step record of a format this phasegraph reads.
    """
    return step_record(_record_body(data))


def decode_records(blobs: Iterable[bytes]) -> list[model.StepRecord]:
    """:func:`decode_record` of each of ``blobs``, in one loop: a history's read.

    As :func:`read_records` does for bodies, the usual case (a valid payload of the
    current format) is taken here without a call of :func:`decode_record` per record.

    Raises:
        UnsupportedFormatError: A record was written by a newer format version.
        CodecError: A record is not a step record of a format this phasegraph reads: the
            error :func:`decode_record` raises for the first such record (which one is
            not said: decode them one by one to name it).
    """
    return _each_record(blobs, step_record, decode_record)


def read_record(data: bytes) -> RecordBody:
    """Read step-record bytes as :func:`decode_record` does, keeping the record unbuilt.

    Every check :func:`decode_record` makes is made, with the same errors; what comes
    back is the record's body as it is on the wire, for the read that goes through many
    records at once without needing a model value for each: rendering a history as JSON
    (:func:`~phasegraph.codec.history_json`). Its ``seq`` is the record's seq.

    Raises:
        UnsupportedFormatError: The record was written by a newer format version.
        CodecError: The bytes are not a step record of a format this phasegraph reads.
    """
    body = _record_body(data)
    check_record(body)
    return body


def read_records(blobs: Iterable[bytes]) -> list[RecordBody]:
    """:func:`read_record` of each of ``blobs``, in one loop: the reads of many records.

    The usual case (a valid payload of the current format) is taken here without going
    through :func:`read_record` and its helper for each record: a history or the records
    after a snapshot are read by the dozen or the thousand, and those calls cost more than
    the checks.

    Raises:
        UnsupportedFormatError: A record was written by a newer format version.
        CodecError: A record is not a step record of a format this phasegraph reads: the
            error :func:`read_record` raises for the first such record (which one is not
            said: read them one by one to name it).
    """
    return _each_record(blobs, _body_checked, read_record)


def _body_checked(body: Record) -> Record:
    check_record(body)
    return body


def _each_record(
    blobs: Iterable[bytes], take: Callable[[Record], _R], one: Callable[[bytes], _R]
) -> list[_R]:
    """``take`` of each current-format record body of ``blobs``, in one loop.

    A record that is not a valid payload of the current format goes through ``one``, the
    checked way, which says why or reads an older format.
    """
    out: list[_R] = []
    append, decode = out.append, _DECODE_RECORD
    for data in blobs:
        if verified(data):
            try:
                envelope = decode(data)
            except _DECODE_ERRORS:
                pass
            else:
                if envelope.v in _READ_DIRECTLY and envelope.kind == "record":
                    append(take(envelope.body))
                    continue
        append(one(data))
    return out


def _record_body(data: bytes) -> Record:
    """The body of step-record bytes, its layout checked (its user data not yet)."""
    if verified(data):
        try:
            envelope = _DECODE_RECORD(data)
        except _DECODE_ERRORS:
            pass
        else:
            if envelope.v in _READ_DIRECTLY and envelope.kind == "record":
                return envelope.body
    return _checked(data, "record", Record)


def decode_value(data: bytes) -> Any:
    """Decode bytes written by :func:`encode_value` (sequences come back as lists).

    Raises:
        CodecError: The bytes are not one msgpack value of the supported types.
    """
    value = _unpack(data)
    if type(value) is dict or type(value) is list:
        check_plain(value, 0, "the value")
    return value


def _unpack(data: bytes) -> Any:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CodecError(f"expected bytes to decode, got {type_name(data)}")
    try:
        return _DECODE_ANY(data)
    except CodecError:
        raise
    except RecursionError:
        raise CodecError(f"not valid msgpack: nested deeper than {MAX_DEPTH} levels") from None
    except _DECODE_ERRORS as exc:
        raise CodecError(f"not valid msgpack: {exc}") from None


_W = TypeVar("_W", bound=Wire)


def _checked(data: bytes, kind: str, layout: type[_W]) -> _W:
    """The body of a payload of any version, checked step by step as the spec orders it."""
    checksummed = sealed(data)
    if checksummed and not intact(data):
        raise _corrupt(f"this {kind}")
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
    expected = _ENVELOPE_V1 if version == 1 else _ENVELOPE
    if envelope.keys() != expected:
        found = ", ".join(sorted(map(repr, envelope)))
        wanted = ", ".join(sorted(expected))
        raise CodecError(f"not a phasegraph {kind}: the envelope has fields {found}, not {wanted}")
    if version > 1 and not checksummed:
        raise CodecError(
            f"this {kind} is corrupt: its checksum is not where format {version} puts it"
        )
    if envelope["kind"] != kind:
        raise CodecError(f"not a phasegraph {kind}: the envelope holds a {envelope['kind']!r}")
    body = _upgrade(kind, envelope["body"], version, _MIGRATIONS, FORMAT_VERSION)
    try:
        return msgspec.convert(body, layout)
    except msgspec.ValidationError as exc:
        problem = exc
    raise _explain(problem, layout, f"the {kind} body")  # outside: msgspec's error not chained


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


# --------------------------------------------------------------------------- messages
# msgspec says what is wrong and where, in wire keys: "Expected `int`, got `str` - at
# `$.ns[...].n`". The path is walked through the layout to name the model field instead
# ("node.steps must be of type int, not str"); a message of another form is kept as is.

_PATH_STEP: Final = re.compile(r"\.([^.\[]+)|\[[^\]]*\]")
_EXPECTED: Final = re.compile(r"Expected `(.+)`, got `(.+)`")
_ENUM: Final = re.compile(r"Invalid enum value (.+)")
_FIELD: Final = re.compile(r"Object (missing required|contains unknown) field `(.+)`")
_WIRE_NAMES: Final = {"object": "map", "array": "list", "null": "nil"}


def _explain(exc: msgspec.ValidationError, layout: type[Wire], label: str) -> CodecError:
    """The model-level message of a msgspec validation error in a body of ``layout``."""
    problem, _, where = str(exc).partition(" - at ")
    on_key = where.startswith("`key` in ")
    path = where.removeprefix("`key` in ").strip("`")
    kind: Any = layout  # the type at the bad value, and the one holding it
    holder: Any = None
    try:
        for step in _PATH_STEP.finditer(path, 1):
            if step.group(1) is None:  # [...] or [0]: a map's value or a list's item
                kind, holder = _items(kind), kind
            else:  # .key: a field of a map of the format
                wire = _optional(kind)
                spec = next(f for f in msgspec.structs.fields(wire) if f.encode_name == step[1])
                kind, holder, label = spec.type, None, f"{wire.what()}.{spec.name}"
    except (LookupError, StopIteration, TypeError, ValueError):  # a path of another form
        return CodecError(f"{label} is invalid: {exc}")
    if on_key:
        return CodecError(f"{label} has a map key that is not a str")
    if holder is not None and not (isinstance(kind, type) and issubclass(kind, Wire)):
        kind = holder  # a scalar inside a list or map: say what the whole should be
    if found := _ENUM.fullmatch(problem):
        return CodecError(f"{label} must be {_describe(kind)}, found {found[1]}")
    if found := _FIELD.fullmatch(problem):
        what = "missing" if found[1] == "missing required" else "unknown"
        return CodecError(f"{label} must be {_describe(kind)}; {what} key {found[2]!r}")
    if found := _EXPECTED.fullmatch(problem):
        got = _WIRE_NAMES.get(found[2], found[2])
        return CodecError(
            f"{label} must be {_describe(kind)}, "
            + (f"found {got} in it" if kind is holder else f"not {got}")
        )
    return CodecError(f"{label} is invalid: {problem}")


def _optional(kind: Any) -> Any:
    """``X`` of ``X | None`` or of an optional key's ``X | UnsetType``; any other type as it is."""
    if get_origin(kind) in (Union, UnionType):
        (kind,) = (arg for arg in get_args(kind) if arg is not NoneType and arg is not UnsetType)
    return kind


def _items(kind: Any) -> Any:
    """The type of the values of a ``dict``, or of the items of a ``list``/``tuple``."""
    return get_args(_optional(kind))[-1 if get_origin(_optional(kind)) is dict else 0]


def _describe(kind: Any) -> str:
    """What a value of ``kind`` must be, as messages say it (``a list of str``)."""
    inner = _optional(kind)
    if inner is not kind:  # an optional key holds the type alone; nil is said
        return f"{_describe(inner)} or nil" if NoneType in get_args(kind) else _describe(inner)
    if isinstance(kind, type) and issubclass(kind, Wire):
        keys = ", ".join(field.encode_name for field in msgspec.structs.fields(kind))
        return f"{_a(kind.what())} map of {keys}"
    if isinstance(kind, type) and issubclass(kind, Enum):
        return "one of " + ", ".join(str(member.value) for member in kind)
    if get_origin(kind) in (dict, list, tuple):
        return _a(_noun(kind))
    return f"of type {_noun(kind)}"


def _noun(kind: Any, s: str = "") -> str:
    """A value of ``kind`` as a noun (``map of str to int``); ``s`` makes a map or list plural."""
    if isinstance(kind, type) and issubclass(kind, Wire):
        return f"{kind.what()} map{s}"
    if get_origin(kind) is dict:
        items = _items(kind)
        return f"map{s}" if items is Any else f"map{s} of str to {_noun(items, 's')}"
    if get_origin(kind) in (list, tuple):
        return f"list{s} of {_noun(_items(kind), 's')}"
    return str(getattr(kind, "__name__", kind))


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun
