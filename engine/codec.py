"""Run states and step records ⇄ bytes: the strict, versioned, canonical msgpack codec.

Every payload is one msgpack map, the envelope ``{"body": ..., "kind": ..., "v": ...}``:
``v`` is the format version (:data:`FORMAT_VERSION`) and ``kind`` says what ``body`` holds,
``"snapshot"`` (a :class:`~phasegraph.model.RunState`) or ``"record"`` (a
:class:`~phasegraph.model.StepRecord`). ``specs/snapshot-format.md`` documents every field.

* **Canonical**: map keys are sorted at every level, user data included, so equal values
  of the same types give identical bytes.
* **Closed type table**: user data may hold None, bool, int (64-bit), float, str, bytes,
  list/tuple, dict with str keys and timezone-aware datetimes, nested at most
  :data:`MAX_DEPTH` levels. Anything else raises :class:`CodecError`: there is no
  ``str()`` fallback, nothing is pickled, and decoding never imports anything.
* **Versioned**: a payload from a newer format raises :class:`UnsupportedFormatError`; an
  older one is upgraded by the migration table before it is read.

Decoded user data is plain: tuples come back as lists, nested dicts as dicts, datetimes
in UTC. The model's own mapping fields (``data``, ``nodes``, ...) come back read-only.
Fields whose model type is precise (ids, seqs, enums, state paths, counters) are trusted
to match it on encode (``mypy --strict`` checks the callers) and checked on decode;
values typed ``Any`` and all datetimes are checked on encode too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

import msgpack

from phasegraph import model
from phasegraph.errors import CodecError, UnsupportedFormatError

__all__ = [
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "Migration",
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

Migration = Callable[[str, Any], Any]
"""Turns a format-``n`` body of a kind (``snapshot``/``record``) into a format-``n + 1`` body."""

_MIGRATIONS: Final[Mapping[int, Migration]] = MappingProxyType({})
"""Version ``n`` → the migration from ``n`` to ``n + 1``. Empty until format 2 exists."""

_SCALARS: Final = frozenset({str, int, float, bool, type(None), bytes})
_STR: Final = frozenset({str})
_CONTAINERS: Final = frozenset({dict, list})
_ENVELOPE: Final = frozenset({"body", "kind", "v"})
_SUPPORTED: Final = (
    "None, bool, int, float, str, bytes, list, tuple, dict with str keys, aware datetime"
)
# What msgpack raises for a value it cannot pack or bytes it cannot unpack.
_PACK_ERRORS: Final = (TypeError, ValueError, OverflowError)
_UNPACK_ERRORS: Final = (msgpack.UnpackException, ValueError, TypeError, OverflowError)

_Decoder = Callable[[Any, str], Any]
"""Takes a wire value and a label naming it in messages (``interrupt.payload``)."""


def _type_name(value: object) -> str:
    return type(value).__qualname__


def _packb(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True, datetime=True)
    return packed


def _packs(value: Any) -> bool:
    try:
        _packb(value)
    except _PACK_ERRORS:
        return False
    return True


# --------------------------------------------------------------------------- user data


class _Unencodable(CodecError):
    """A value outside the type table; ``path`` collects where it sits, innermost first."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []
        self.key: str | None = None  # the outermost map key on the path, once known

    def where(self) -> str:
        return "".join(reversed(self.path)) or "top level"


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


# --------------------------------------------------------------------------- engine fields


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


def _when(value: datetime | None, label: str) -> Any:
    return None if value is None else _aware(value, label)


def _user(value: Mapping[str, Any], label: str) -> dict[str, Any]:
    if not value:
        return {}
    try:
        return _canon_map(value, 0)
    except _Unencodable as exc:
        exc.path.append(label)
        raise


def _each(
    items: Iterable[tuple[Any, Any]], encode: Callable[[Any], Any], label: str
) -> dict[Any, Any]:
    """Encode ``(key, item)`` pairs into a dict, naming the failing item in errors."""
    out = {}
    for key, item in items:
        try:
            out[key] = encode(item)
        except _Unencodable as exc:
            exc.path.append(f"{label}[{key!r}].")
            raise
    return out


# Body builders. Each dict literal lists its keys in sorted order, which keeps the bytes
# canonical without sorting the engine's own fields at run time; specs/snapshot-format.md
# names every key. Written out rather than table-driven: this is the per-step hot path.
def _node_body(node: model.NodeState) -> dict[str, Any]:
    counters = node.counters
    return {
        "c": {key: counters[key] for key in sorted(counters)} if counters else {},
        "e": node.error,
        "n": node.steps,
        "o": node.outcome,
        "p": node.path,
        "s": node.status,
    }


def _nodes(nodes: Mapping[str, model.NodeState]) -> dict[str, Any]:
    return {key: _node_body(nodes[key]) for key in sorted(nodes)} if nodes else {}


def _interrupt_body(item: model.Interrupt) -> dict[str, Any]:
    return {
        "ca": _when(item.created_at, "created_at"),
        "dl": _when(item.deadline, "deadline"),
        "id": item.id,
        "k": item.kind,
        "n": item.node,
        "p": _user(item.payload, "payload"),
    }


def _interrupts(items: Mapping[str, model.Interrupt]) -> dict[str, Any]:
    return _each(((key, items[key]) for key in sorted(items)), _interrupt_body, "interrupts")


def _error_body(item: model.ErrorRecord) -> dict[str, Any]:
    return {
        "m": item.message,
        "n": item.node,
        "r": item.recovered,
        "s": item.state,
        "sv": item.severity,
        "t": _aware(item.time, "time"),
        "x": _user(item.details, "details"),
    }


def _errors(items: tuple[model.ErrorRecord, ...]) -> list[Any]:
    return list(_each(enumerate(items), _error_body, "errors").values()) if items else []


def _snapshot_body(state: model.RunState) -> dict[str, Any]:
    writers = state.writers
    return {
        "ca": _aware(state.created_at, "created_at"),
        "d": _user(state.data, "data"),
        "e": _errors(state.errors),
        "g": state.graph,
        "gd": state.graph_digest,
        "gs": state.graph_source,
        "i": _interrupts(state.interrupts),
        "id": state.run_id,
        "in": _user(state.input, "input"),
        "ns": _nodes(state.nodes),
        "q": state.seq,
        "s": state.status,
        "ua": _aware(state.updated_at, "updated_at"),
        "w": {key: writers[key] for key in sorted(writers)},
    }


def _record_body(record: model.StepRecord) -> dict[str, Any]:
    interrupts, events = record.interrupts, record.events
    return {
        "d": _user(record.data, "data"),
        "dst": record.dest,
        "e": _errors(record.errors),
        "ev": [_user(event, f"events[{i}]") for i, event in enumerate(events)] if events else [],
        "i": None if interrupts is None else _interrupts(interrupts),
        "k": record.kind,
        "n": record.node,
        "ns": _nodes(record.nodes),
        "q": record.seq,
        "r": _user(record.result, "result"),
        "s": record.status,
        "src": record.source,
        "t": _aware(record.time, "time"),
        "tr": record.trigger,
    }


# --------------------------------------------------------------------------- field decoders


def _exact(kind: type) -> _Decoder:
    def decode(value: Any, label: str) -> Any:
        if type(value) is not kind:
            raise CodecError(f"{label} must be of type {kind.__name__}, not {_type_name(value)}")
        return value

    return decode


def _optional(convert: _Decoder) -> _Decoder:
    """Let ``None`` through either way; convert anything else (encoders and decoders alike)."""
    return lambda value, label: None if value is None else convert(value, label)


def _member(enum: type[StrEnum]) -> _Decoder:
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


def _map_of(item: _Decoder | type) -> _Decoder:
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


def _list_of(decode: _Decoder) -> _Decoder:
    def decode_list(value: Any, label: str) -> tuple[Any, ...]:
        if type(value) is not list:
            raise CodecError(f"{label} must be a list, found {_type_name(value)}")
        return tuple(decode(item, label) for item in value)

    return decode_list


# --------------------------------------------------------------------------- shapes


class _Shape:
    """How one model type is read back: wire key → (attribute, decoder).

    The encoders above write the same keys; the round-trip tests keep the two in step.
    """

    __slots__ = ("_cls", "_fields", "_keys", "_what")

    def __init__(self, cls: Callable[..., Any], what: str, **fields: tuple[str, _Decoder]):
        self._cls, self._what, self._keys = cls, what, frozenset(fields)
        self._fields = tuple(
            (wire, attr, decode, f"{what}.{attr}") for wire, (attr, decode) in fields.items()
        )

    def __call__(self, body: Any, label: str) -> Any:
        if type(body) is not dict or body.keys() != self._keys:
            found = ", ".join(sorted(map(repr, body))) if type(body) is dict else _type_name(body)
            expected = ", ".join(sorted(self._keys))
            raise CodecError(f"{label} must be a {self._what} map of {expected}; found {found}")
        return self._cls(**{attr: dec(body[wire], name) for wire, attr, dec, name in self._fields})


_TEXT, _INT, _BOOL, _TIME = _exact(str), _exact(int), _exact(bool), _exact(datetime)
_NODE = _Shape(
    model.NodeState,
    "node",
    c=("counters", _map_of(int)),
    e=("error", _optional(_TEXT)),
    n=("steps", _INT),
    o=("outcome", _optional(_member(model.NodeOutcome))),
    p=("path", _path),
    s=("status", _member(model.NodeStatus)),
)
_INTERRUPT = _Shape(
    model.Interrupt,
    "interrupt",
    ca=("created_at", _optional(_TIME)),
    dl=("deadline", _optional(_TIME)),
    id=("id", _TEXT),
    k=("kind", _TEXT),
    n=("node", _TEXT),
    p=("payload", _plain),
)
_ERROR = _Shape(
    model.ErrorRecord,
    "error",
    m=("message", _TEXT),
    n=("node", _TEXT),
    r=("recovered", _BOOL),
    s=("state", _TEXT),
    sv=("severity", _TEXT),
    t=("time", _TIME),
    x=("details", _plain),
)
_SNAPSHOT = _Shape(
    model.RunState,
    "snapshot",
    ca=("created_at", _TIME),
    d=("data", _plain),
    e=("errors", _list_of(_ERROR)),
    g=("graph", _TEXT),
    gd=("graph_digest", _TEXT),
    gs=("graph_source", _TEXT),
    i=("interrupts", _map_of(_INTERRUPT)),
    id=("run_id", _TEXT),
    ns=("nodes", _map_of(_NODE)),
    q=("seq", _INT),
    s=("status", _member(model.RunStatus)),
    ua=("updated_at", _TIME),
    w=("writers", _map_of(_path)),
    **{"in": ("input", _plain)},  # ``in`` is a Python keyword
)
_RECORD = _Shape(
    model.StepRecord,
    "record",
    d=("data", _plain),
    dst=("dest", _path),
    e=("errors", _list_of(_ERROR)),
    ev=("events", _list_of(_plain)),
    i=("interrupts", _optional(_map_of(_INTERRUPT))),
    k=("kind", _TEXT),
    n=("node", _optional(_TEXT)),
    ns=("nodes", _map_of(_NODE)),
    q=("seq", _INT),
    r=("result", _plain),
    s=("status", _member(model.RunStatus)),
    src=("source", _path),
    t=("time", _TIME),
    tr=("trigger", _optional(_TEXT)),
)


# --------------------------------------------------------------------------- public API


def encode_snapshot(state: model.RunState) -> bytes:
    """Encode a whole run state as canonical snapshot bytes.

    Raises:
        CodecError: A value is outside the type table or a datetime is naive; the
            message names the field and the key path.
    """
    try:
        return _packb({"body": _snapshot_body(state), "kind": "snapshot", "v": FORMAT_VERSION})
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
        return _packb({"body": _record_body(record), "kind": "record", "v": FORMAT_VERSION})
    except _PACK_ERRORS as exc:
        what = f"step {record.seq}" + (f" of node {record.node!r}" if record.node else "")
        raise _failure(exc, what, node_id=record.node, seq=record.seq) from None


def encode_value(value: Any) -> bytes:
    """Encode one plain value as canonical msgpack, with no envelope and no version.

    For values that are hashed or sent rather than stored (event payloads, fingerprints);
    :func:`decode_value` reads them back.

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
    who = f"node {node_id!r}: " if node_id else ""
    try:
        _packb(_canon_map(values, 0))
    except _Unencodable as exc:
        what = f"{who}the value of key {exc.key!r}" if exc.key is not None else f"{who}a key"
        raise _failure(exc, what, node_id=node_id) from None
    except _PACK_ERRORS as exc:  # msgpack's own limits: find the key it refuses
        culprit = next((key for key in values if not _packs(_canon(values[key], 1))), None)
        what = f"{who}the value of key {culprit!r}" if culprit is not None else f"{who}a value"
        raise _failure(exc, what, node_id=node_id) from None


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


def _upgrade(
    kind: str,
    body: Any,
    version: int,
    *,
    migrations: Mapping[int, Migration] = _MIGRATIONS,
    target: int = FORMAT_VERSION,
) -> Any:
    """Apply the migrations ``version → version + 1 → … → target`` to ``body``, in order."""
    for step in range(version, target):
        migrate = migrations.get(step)
        if migrate is None:
            raise CodecError(f"no migration from format version {step} to {step + 1}")
        body = migrate(kind, body)
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
    return _upgrade(kind, envelope["body"], version)


def decode_snapshot(data: bytes) -> model.RunState:
    """Decode snapshot bytes back into the exact run state that was encoded.

    Raises:
        UnsupportedFormatError: The snapshot was written by a newer format version.
        CodecError: The bytes are not a snapshot of a format this phasegraph reads.
    """
    state: model.RunState = _SNAPSHOT(_open(data, "snapshot"), "the snapshot body")
    return state


def decode_record(data: bytes) -> model.StepRecord:
    """Decode step-record bytes back into the exact record that was encoded.

    Raises:
        UnsupportedFormatError: The record was written by a newer format version.
        CodecError: The bytes are not a step record of a format this phasegraph reads.
    """
    record: model.StepRecord = _RECORD(_open(data, "record"), "the record body")
    return record


def decode_value(data: bytes) -> Any:
    """Decode bytes written by :func:`encode_value` (sequences come back as lists).

    Raises:
        CodecError: The bytes are not one msgpack value of the supported types.
    """
    value = _unpack(data)
    if type(value) is dict or type(value) is list:
        _check_plain(value, 0, "the value")
    return value
