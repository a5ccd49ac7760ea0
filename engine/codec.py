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
Fields the model types precisely (ids, seqs, enums, paths, counters) are trusted on encode
(``mypy --strict`` checks callers) and checked on decode; ``Any`` values and datetimes are
checked both ways.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar

import msgpack

from phasegraph import model
from phasegraph.errors import CodecError, UnsupportedFormatError

__all__ = [
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "check_encodable",
    "decode_record",
    "decode_snapshot",
    "decode_value",
    "encode_record",
    "encode_snapshot",
    "encode_value",
]

FORMAT_VERSION: Final = 1
"""The format version this phasegraph writes, and the newest it reads."""

MAX_DEPTH: Final = 100
"""How deeply lists and dicts may nest inside one user-data value."""

_Migration = Callable[[str, Any], Any]
"""Turns a format-``n`` body of a kind (``snapshot``/``record``) into a format-``n + 1`` body;
raises :class:`CodecError` for a body it cannot upgrade."""

_MIGRATIONS: Final[Mapping[int, _Migration]] = MappingProxyType({})
"""Version ``n`` → the migration from ``n`` to ``n + 1``. Empty until format 2 exists."""

_SCALARS: Final = frozenset({str, int, float, bool, type(None), bytes})
_STR: Final = frozenset({str})
_CONTAINERS: Final = frozenset({dict, list})
_ENVELOPE: Final = frozenset({"body", "kind", "v"})
_SUPPORTED: Final = "None, bool, int, float, str, bytes, list, tuple, dict, aware datetime"
# What msgpack raises for a value it cannot pack or bytes it cannot unpack.
_PACK_ERRORS: Final = (TypeError, ValueError, OverflowError)
_UNPACK_ERRORS: Final = (msgpack.UnpackException, ValueError, TypeError, OverflowError)

_T = TypeVar("_T")
_Convert = Callable[[Any, str], Any]
"""Converts one field's value; the label names the field in messages (``interrupt.payload``)."""
_Field = tuple[str, _Convert | None, _Convert]
"""A wire field: model attribute, encoder (``None``: written as is) and decoder."""


def _optional(convert: _Convert) -> _Convert:
    """Let ``None`` through; convert anything else (used by encoders and decoders alike)."""
    return lambda value, label: None if value is None else convert(value, label)


def _type_name(value: object) -> str:
    return type(value).__qualname__


def _packb(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True, datetime=True)
    return packed


# --------------------------------------------------------------------------- encoding


class _Unencodable(CodecError):
    """A value outside the type table; ``path`` collects where it sits, innermost first."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []
        self.key: str | None = None  # the outermost map key on the path, once known

    def where(self) -> str:
        return "".join(reversed(self.path)).lstrip(".") or "top level"


def _failure(exc: Exception, what: str, **context: Any) -> CodecError:
    """Turn a failed encode into a :class:`CodecError` that says what and where."""
    if isinstance(exc, _Unencodable):
        return CodecError(f"{what} cannot be encoded: at {exc.where()}: {exc.reason}", **context)
    if isinstance(exc, OverflowError):
        reason = "an int is outside the 64-bit range"
    elif isinstance(exc, UnicodeEncodeError):
        reason = f"a str is not valid UTF-8 ({exc.reason})"
    else:
        reason = str(exc)
    return CodecError(f"{what} cannot be encoded: {reason}", **context)


def _canon(value: Any, depth: int) -> Any:
    """Return ``value`` with every dict sorted by key, or raise :class:`_Unencodable`."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth > MAX_DEPTH:
        raise _Unencodable(f"nested deeper than {MAX_DEPTH} levels")
    if kind is dict or kind is MappingProxyType or isinstance(value, dict):
        return _canon_map(value, depth)
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        return _canon_list(value, depth)
    if kind is datetime:
        return _aware(value, "")
    if isinstance(value, str | int | float | bytes):  # enum members and such: packed as the base
        return value
    raise _Unencodable(f"{_type_name(value)} is not a supported type (supported: {_SUPPORTED})")


def _canon_map(value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    try:
        keys = sorted(value)
    except TypeError:  # keys of mixed types; refused just below
        keys = list(value)
    if not _STR.issuperset(map(type, keys)):  # one C-speed check for the usual all-str case
        for key in keys:
            if not isinstance(key, str):
                raise _Unencodable(f"key {key!r} ({_type_name(key)}) is not a str")
    out: dict[str, Any] = {}
    for key in keys:
        item = value[key]
        if type(item) in _SCALARS:  # the common case, without a call
            out[key] = item
            continue
        try:
            out[key] = _canon(item, depth + 1)
        except _Unencodable as exc:
            exc.path.append(f"[{key!r}]")
            exc.key = key
            raise
    return out


def _canon_list(value: list[Any] | tuple[Any, ...], depth: int) -> Any:
    if _SCALARS.issuperset(map(type, value)):
        return value  # msgpack writes a tuple as an array, like a list
    out: list[Any] = []
    for index, item in enumerate(value):
        if type(item) in _SCALARS:
            out.append(item)
            continue
        try:
            out.append(_canon(item, depth + 1))
        except _Unencodable as exc:
            exc.path.append(f"[{index}]")
            raise
    return out


def _aware(value: Any, label: str) -> Any:
    if isinstance(value, datetime) and value.utcoffset() is not None:
        if 1 < value.year < 9999:  # only the edge years can leave datetime's range in UTC
            return value
        try:
            value.astimezone(UTC)
            return value
        except OverflowError:
            reason = f"{value!r} is outside the years 1-9999 once converted to UTC"
    else:
        reason = f"{value!r} is not a timezone-aware datetime (add e.g. tzinfo=UTC)"
    exc = _Unencodable(reason)
    exc.path.append(label)
    raise exc


def _user(value: Mapping[str, Any], label: str) -> dict[str, Any]:
    if not value:
        return {}
    try:
        return _canon_map(value, 0)
    except _Unencodable as exc:
        exc.path.append(label)
        raise


def _each(items: Any, encode: Callable[[Any], Any], label: str) -> Any:
    """Encode a tuple of model values (as an array) or a mapping of them (key-sorted map)."""
    listed = isinstance(items, tuple)
    if not items:
        return [] if listed else {}
    out = {}
    for key in range(len(items)) if listed else sorted(items):
        try:
            out[key] = encode(items[key])
        except _Unencodable as exc:
            exc.path.append(f"{label}[{key!r}]")
            raise
    return list(out.values()) if listed else out


def _each_user(items: tuple[Mapping[str, Any], ...], label: str) -> Any:
    return _each(items, lambda item: _user(item, ""), label)


def _sorted(value: Mapping[str, Any], label: str) -> dict[str, Any]:
    return {key: value[key] for key in sorted(value)} if value else {}


def _many(shape: _Shape[Any]) -> _Convert:
    return lambda items, label: _each(items, shape.encode, label)


# --------------------------------------------------------------------------- decoding


def _exact(kind: type) -> _Convert:
    def decode(value: Any, label: str) -> Any:
        if type(value) is not kind:
            raise CodecError(f"{label} must be of type {kind.__name__}, not {_type_name(value)}")
        return value

    return decode


def _member(enum: type[StrEnum]) -> _Convert:
    members = {member.value: member for member in enum}

    def decode(value: Any, label: str) -> Any:
        member = members.get(value) if type(value) is str else None
        if member is None:
            raise CodecError(f"{label} must be one of {', '.join(enum)}, found {value!r}")
        return member

    return decode


def _path(value: Any, label: str) -> tuple[str, ...]:
    if type(value) is not list or not _STR.issuperset(map(type, value)):
        raise CodecError(f"{label} must be a list of str")
    return tuple(value)


def _frozen(value: dict[str, Any]) -> Mapping[str, Any]:
    # The dict is fresh from msgpack and ours alone, so a read-only view needs no copy.
    return MappingProxyType(value) if value else model.EMPTY


def _check_plain(value: dict[Any, Any] | list[Any], depth: int, label: str) -> None:
    """Reject what msgpack lets through but the encoder never writes: bytes keys, deep nests."""
    if depth > MAX_DEPTH:
        raise CodecError(f"{label} is nested deeper than {MAX_DEPTH} levels")
    items: Iterable[Any] = value
    if type(value) is dict:
        if not _STR.issuperset(map(type, value)):
            raise CodecError(f"{label} has a map key that is not a str")
        items = value.values()
    if not _CONTAINERS.isdisjoint(map(type, items)):  # descend only where there is something
        for item in items:
            if type(item) is dict or type(item) is list:
                _check_plain(item, depth + 1, label)


def _plain(value: Any, label: str) -> Mapping[str, Any]:
    if type(value) is not dict:
        raise CodecError(f"{label} must be a map, found {_type_name(value)}")
    _check_plain(value, 0, label)
    return _frozen(value)


def _map_of(item: _Convert | type) -> _Convert:
    """Decode a map with str keys whose values are ``item`` (a decoder, or an exact type)."""

    def decode_map(value: Any, label: str) -> Mapping[str, Any]:
        if type(value) is not dict or not _STR.issuperset(map(type, value)):
            raise CodecError(f"{label} must be a map with str keys")
        if not isinstance(item, type):
            return _frozen({key: item(entry, label) for key, entry in value.items()})
        if not {item}.issuperset(map(type, value.values())):
            raise CodecError(f"{label} must map str to {item.__name__}")
        return _frozen(value)

    return decode_map


def _list_of(decode: _Convert) -> _Convert:
    def decode_list(value: Any, label: str) -> tuple[Any, ...]:
        if type(value) is not list:
            raise CodecError(f"{label} must be a list, found {_type_name(value)}")
        return tuple(decode(item, label) for item in value)

    return decode_list


# --------------------------------------------------------------------------- wire layout


class _Shape(Generic[_T]):
    """One model type on the wire: wire key → (attribute, encoder or None, decoder).

    Encoding writes the attributes under their wire keys in sorted key order, which keeps
    the bytes canonical without sorting at run time, passing each value through its
    encoder when it has one. Decoding checks the exact key set, decodes every field and
    builds the dataclass.
    """

    __slots__ = ("_cls", "_decoders", "_encoders", "_get", "_keys", "_what", "_wires")

    def __init__(self, cls: Callable[..., _T], what: str, **fields: _Field) -> None:
        self._cls, self._what, self._keys = cls, what, frozenset(fields)
        self._wires = tuple(sorted(fields))
        self._get = attrgetter(*(fields[wire][0] for wire in self._wires))
        rows = [(wire, *fields[wire]) for wire in self._wires]
        self._encoders = tuple((wire, enc, f".{attr}") for wire, attr, enc, _ in rows if enc)
        self._decoders = tuple((wire, attr, dec, f"{what}.{attr}") for wire, attr, _, dec in rows)

    def encode(self, value: _T) -> dict[str, Any]:
        body = dict(zip(self._wires, self._get(value), strict=False))  # same length by design
        for wire, encode, label in self._encoders:
            body[wire] = encode(body[wire], label)
        return body

    def decode(self, body: Any, label: str) -> _T:
        if type(body) is not dict or body.keys() != self._keys:
            found = ", ".join(sorted(map(repr, body))) if type(body) is dict else _type_name(body)
            expected = ", ".join(sorted(self._keys))
            raise CodecError(f"{label} must be a {self._what} map of {expected}; found {found}")
        return self._cls(
            **{attr: dec(body[wire], name) for wire, attr, dec, name in self._decoders}
        )


# The wire layout, one row per field: specs/snapshot-format.md documents the same tables.
_TEXT, _INT, _BOOL, _TIME = _exact(str), _exact(int), _exact(bool), _exact(datetime)
_NODE = _Shape(
    model.NodeState,
    "node",
    c=("counters", _sorted, _map_of(int)),
    e=("error", None, _optional(_TEXT)),
    n=("steps", None, _INT),
    o=("outcome", None, _optional(_member(model.NodeOutcome))),
    p=("path", None, _path),
    pl=("payload", _user, _plain),
    s=("status", None, _member(model.NodeStatus)),
)
_INTERRUPT = _Shape(
    model.Interrupt,
    "interrupt",
    ca=("created_at", _optional(_aware), _optional(_TIME)),
    dl=("deadline", _optional(_aware), _optional(_TIME)),
    id=("id", None, _TEXT),
    k=("kind", None, _TEXT),
    n=("node", None, _TEXT),
    p=("payload", _user, _plain),
    pk=("parked", None, _BOOL),
)
_ERROR = _Shape(
    model.ErrorRecord,
    "error",
    m=("message", None, _TEXT),
    n=("node", None, _TEXT),
    r=("recovered", None, _BOOL),
    s=("state", None, _TEXT),
    sv=("severity", None, _TEXT),
    t=("time", _aware, _TIME),
    x=("details", _user, _plain),
)
_SNAPSHOT = _Shape(
    model.RunState,
    "snapshot",
    ca=("created_at", _aware, _TIME),
    d=("data", _user, _plain),
    e=("errors", _many(_ERROR), _list_of(_ERROR.decode)),
    g=("graph", None, _TEXT),
    gd=("graph_digest", None, _TEXT),
    gs=("graph_source", None, _TEXT),
    i=("interrupts", _many(_INTERRUPT), _map_of(_INTERRUPT.decode)),
    id=("run_id", None, _TEXT),
    ns=("nodes", _many(_NODE), _map_of(_NODE.decode)),
    q=("seq", None, _INT),
    s=("status", None, _member(model.RunStatus)),
    ua=("updated_at", _aware, _TIME),
    w=("writers", _sorted, _map_of(_path)),
    **{"in": ("input", _user, _plain)},  # ``in`` is a Python keyword
)
_RECORD = _Shape(
    model.StepRecord,
    "record",
    d=("data", _user, _plain),
    dst=("dest", None, _path),
    e=("errors", _many(_ERROR), _list_of(_ERROR.decode)),
    ev=("events", _each_user, _list_of(_plain)),
    i=("interrupts", _optional(_many(_INTERRUPT)), _optional(_map_of(_INTERRUPT.decode))),
    k=("kind", None, _TEXT),
    n=("node", None, _optional(_TEXT)),
    ns=("nodes", _many(_NODE), _map_of(_NODE.decode)),
    q=("seq", None, _INT),
    r=("result", _user, _plain),
    s=("status", None, _member(model.RunStatus)),
    src=("source", None, _path),
    t=("time", _aware, _TIME),
    tr=("trigger", None, _optional(_TEXT)),
)


# --------------------------------------------------------------------------- public API


def encode_snapshot(state: model.RunState) -> bytes:
    """Encode a whole run state as canonical snapshot bytes.

    Raises:
        CodecError: A value is outside the type table or a datetime is naive; the
            message names the field and the key path.
    """
    try:
        return _packb({"body": _SNAPSHOT.encode(state), "kind": "snapshot", "v": FORMAT_VERSION})
    except _PACK_ERRORS as exc:  # _Unencodable too: it is a ValueError
        what = f"the snapshot of run {state.run_id!r} at step {state.seq}"
        raise _failure(exc, what, run_id=state.run_id, seq=state.seq) from None


def encode_record(record: model.StepRecord) -> bytes:
    """Encode one step record as canonical bytes (once per step: the hot path).

    Raises:
        CodecError: A value is outside the type table or a datetime is naive; the
            message names the step, the node, the field and the key path.
    """
    try:
        return _packb({"body": _RECORD.encode(record), "kind": "record", "v": FORMAT_VERSION})
    except _PACK_ERRORS as exc:
        what = f"step {record.seq}" + (f" of node {record.node!r}" if record.node else "")
        raise _failure(exc, what, node_id=record.node, seq=record.seq) from None


def encode_value(value: Any) -> bytes:
    """Encode a plain value as canonical msgpack with no envelope, for hashing or sending.

    Raises:
        CodecError: The value is outside the type table.
    """
    try:
        return _packb(_canon(value, 0))
    except _PACK_ERRORS as exc:
        raise _failure(exc, "the value") from None


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
        _packb(_canon_map(values, 0))
    except _PACK_ERRORS as exc:
        if isinstance(exc, _Unencodable):
            key = exc.key
        else:  # msgpack's own limits (int range, UTF-8): find the key it refuses
            key = next((key for key in values if not _packs(values[key])), None)
        what = "a key" if key is None else f"the value of key {key!r}"
        who = f"node {node_id!r}: " if node_id else ""
        raise _failure(exc, who + what, node_id=node_id) from None


def _packs(value: Any) -> bool:
    try:
        _packb(_canon(value, 1))
    except _PACK_ERRORS:
        return False
    return True


def _reject_ext(code: int, data: bytes) -> Any:
    raise CodecError(f"unknown msgpack extension type {code} (phasegraph uses only -1, time)")


def _unpack(data: bytes) -> Any:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CodecError(f"expected bytes to decode, got {_type_name(data)}")
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
    bad = f"not a phasegraph {kind}"
    if type(envelope) is not dict:
        raise CodecError(f"{bad}: expected an envelope map, found {_type_name(envelope)}")
    version = envelope.get("v")
    if type(version) is not int:
        raise CodecError(f"{bad}: the envelope has no integer format version 'v'")
    if version > FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"this {kind} was written in format version {version}, but this phasegraph "
            f"reads format versions up to {FORMAT_VERSION}: upgrade phasegraph to read it"
        )
    if version < 1:
        raise CodecError(f"{bad}: unknown format version {version}")
    if envelope.keys() != _ENVELOPE:
        found = ", ".join(sorted(map(repr, envelope)))
        raise CodecError(f"{bad}: the envelope has fields {found}, not body, kind, v")
    if envelope["kind"] != kind:
        raise CodecError(f"{bad}: the envelope holds a {envelope['kind']!r}")
    return _upgrade(kind, envelope["body"], version, _MIGRATIONS, FORMAT_VERSION)


def decode_snapshot(data: bytes) -> model.RunState:
    """Decode snapshot bytes back into the exact run state that was encoded.

    Raises:
        UnsupportedFormatError: The snapshot was written by a newer format version.
        CodecError: The bytes are not a snapshot of a format this phasegraph reads.
    """
    return _SNAPSHOT.decode(_open(data, "snapshot"), "the snapshot body")


def decode_record(data: bytes) -> model.StepRecord:
    """Decode step-record bytes back into the exact record that was encoded.

    Raises:
        UnsupportedFormatError: The record was written by a newer format version.
        CodecError: The bytes are not a step record of a format this phasegraph reads.
    """
    return _RECORD.decode(_open(data, "record"), "the record body")


def decode_value(data: bytes) -> Any:
    """Decode bytes written by :func:`encode_value` (sequences come back as lists).

    Raises:
        CodecError: The bytes are not one msgpack value of the supported types.
    """
    value = _unpack(data)
    if type(value) is dict or type(value) is list:
        _check_plain(value, 0, "the value")
    return value
