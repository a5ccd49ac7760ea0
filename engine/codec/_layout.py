"""The wire layout of run states and step records: one table row per field, both ways.

Each model type on the wire is a :class:`Shape`: short wire keys mapped to the model
attribute, an encoder (or ``None``: written as is) and a strict decoder. These tables are
the reference definition of the body format (``specs/snapshot-format.md`` documents the
same tables, and a test keeps the two in step). Fields the model types precisely (ids,
seqs, enums, paths, counters) are trusted on encode (``mypy --strict`` checks callers) and
checked on decode; ``Any`` values and datetimes are checked both ways.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar

from phasegraph import model
from phasegraph.codec._values import (
    STR,
    Unencodable,
    aware,
    canonical_map,
    check_plain,
    type_name,
)
from phasegraph.errors import CodecError

__all__ = [
    "ERROR",
    "INTERRUPT",
    "NODE",
    "RECORD",
    "SNAPSHOT",
    "Shape",
    "plain",
]

_T = TypeVar("_T")
_Convert = Callable[[Any, str], Any]
"""Converts one field's value; the label names the field in messages (``interrupt.payload``)."""
_Field = tuple[str, _Convert | None, _Convert]
"""A wire field: model attribute, encoder (``None``: written as is) and decoder."""


def _optional(convert: _Convert) -> _Convert:
    """Let ``None`` through; convert anything else (used by encoders and decoders alike)."""
    return lambda value, label: None if value is None else convert(value, label)


# --------------------------------------------------------------------------- encoders


def _user(value: Mapping[str, Any], label: str) -> dict[str, Any]:
    if not value:
        return {}
    try:
        return canonical_map(value, 0)
    except Unencodable as exc:
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
        except Unencodable as exc:
            exc.path.append(f"{label}[{key!r}]")
            raise
    return list(out.values()) if listed else out


def _each_user(items: tuple[Mapping[str, Any], ...], label: str) -> Any:
    return _each(items, lambda item: _user(item, ""), label)


def _sorted(value: Mapping[str, Any], label: str) -> dict[str, Any]:
    return {key: value[key] for key in sorted(value)} if value else {}


def _many(shape: Shape[Any]) -> _Convert:
    return lambda items, label: _each(items, shape.encode, label)


# --------------------------------------------------------------------------- decoders


def _exact(kind: type) -> _Convert:
    def decode(value: Any, label: str) -> Any:
        if type(value) is not kind:
            raise CodecError(f"{label} must be of type {kind.__name__}, not {type_name(value)}")
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
    if type(value) is not list or not STR.issuperset(map(type, value)):
        raise CodecError(f"{label} must be a list of str")
    return tuple(value)


def _frozen(value: dict[str, Any]) -> Mapping[str, Any]:
    """A read-only view of a decoded map (the shared empty map when it is empty)."""
    # The dict is fresh from msgpack and ours alone, so a read-only view needs no copy.
    return MappingProxyType(value) if value else model.EMPTY


def plain(value: Any, label: str) -> Mapping[str, Any]:
    """Decode a user-data map: str keys, plain values, nested at most ``MAX_DEPTH``.

    Raises:
        CodecError: It is not such a map; the message names ``label``.
    """
    if type(value) is not dict:
        raise CodecError(f"{label} must be a map, found {type_name(value)}")
    check_plain(value, 0, label)
    return _frozen(value)


def _map_of(item: _Convert | type) -> _Convert:
    """Decode a map with str keys whose values are ``item`` (a decoder, or an exact type)."""

    def decode_map(value: Any, label: str) -> Mapping[str, Any]:
        if type(value) is not dict or not STR.issuperset(map(type, value)):
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
            raise CodecError(f"{label} must be a list, found {type_name(value)}")
        return tuple(decode(item, label) for item in value)

    return decode_list


# --------------------------------------------------------------------------- shapes


class Shape(Generic[_T]):
    """One model type on the wire: wire key → (attribute, encoder or None, decoder).

    Encoding writes the attributes under their wire keys in sorted key order, which keeps
    the bytes canonical without sorting at run time, passing each value through its
    encoder when it has one. Decoding checks the exact key set, decodes every field in
    wire-key order (so the first bad field in that order is the one named) and builds the
    dataclass.
    """

    __slots__ = ("_cls", "_decoders", "_encoders", "_get", "_what", "_wires", "wire_keys")

    def __init__(self, cls: Callable[..., _T], what: str, **fields: _Field) -> None:
        self._cls, self._what = cls, what
        self.wire_keys: Final = frozenset(fields)
        """The exact set of wire keys a body of this shape has."""
        self._wires = tuple(sorted(fields))
        self._get = attrgetter(*(fields[wire][0] for wire in self._wires))
        rows = [(wire, *fields[wire]) for wire in self._wires]
        self._encoders = tuple((wire, enc, f".{attr}") for wire, attr, enc, _ in rows if enc)
        self._decoders = tuple((wire, attr, dec, f"{what}.{attr}") for wire, attr, _, dec in rows)

    @property
    def layout(self) -> dict[str, str]:
        """Wire key → model attribute, in wire-key order."""
        return {wire: attr for wire, attr, _, _ in self._decoders}

    def field_decoder(self, wire: str) -> Callable[[Any], Any]:
        """The strict decoder of one field, labelled as :meth:`decode` labels it."""
        (_, _, decode, label), *_ = (row for row in self._decoders if row[0] == wire)
        return lambda value: decode(value, label)

    def encode(self, value: _T) -> dict[str, Any]:
        """The body of ``value``: its fields under their wire keys, in sorted key order.

        Raises:
            Unencodable: A user value is outside the type table.
        """
        body = dict(zip(self._wires, self._get(value), strict=False))  # same length by design
        for wire, encode, label in self._encoders:
            body[wire] = encode(body[wire], label)
        return body

    def decode(self, body: Any, label: str) -> _T:
        """Check ``body`` strictly and build the model value.

        Raises:
            CodecError: A key is missing or unknown, or a field has the wrong type; the
                message names the field (``record.seq``), or ``label`` for the body itself.
        """
        if type(body) is not dict or body.keys() != self.wire_keys:
            found = ", ".join(sorted(map(repr, body))) if type(body) is dict else type_name(body)
            expected = ", ".join(sorted(self.wire_keys))
            raise CodecError(f"{label} must be a {self._what} map of {expected}; found {found}")
        return self._cls(
            **{attr: dec(body[wire], name) for wire, attr, dec, name in self._decoders}
        )


# The wire layout, one row per field: specs/snapshot-format.md documents the same tables.
_TEXT, _INT, _BOOL, _TIME = _exact(str), _exact(int), _exact(bool), _exact(datetime)
NODE: Final = Shape(
    model.NodeState,
    "node",
    c=("counters", _sorted, _map_of(int)),
    e=("error", None, _optional(_TEXT)),
    n=("steps", None, _INT),
    o=("outcome", None, _optional(_member(model.NodeOutcome))),
    p=("path", None, _path),
    pl=("payload", _user, plain),
    s=("status", None, _member(model.NodeStatus)),
)
INTERRUPT: Final = Shape(
    model.Interrupt,
    "interrupt",
    ca=("created_at", _optional(aware), _optional(_TIME)),
    dl=("deadline", _optional(aware), _optional(_TIME)),
    id=("id", None, _TEXT),
    k=("kind", None, _TEXT),
    n=("node", None, _TEXT),
    p=("payload", _user, plain),
    pk=("parked", None, _BOOL),
)
ERROR: Final = Shape(
    model.ErrorRecord,
    "error",
    m=("message", None, _TEXT),
    n=("node", None, _TEXT),
    r=("recovered", None, _BOOL),
    s=("state", None, _TEXT),
    sv=("severity", None, _TEXT),
    t=("time", aware, _TIME),
    x=("details", _user, plain),
)
SNAPSHOT: Final = Shape(
    model.RunState,
    "snapshot",
    ca=("created_at", aware, _TIME),
    d=("data", _user, plain),
    e=("errors", _many(ERROR), _list_of(ERROR.decode)),
    g=("graph", None, _TEXT),
    gd=("graph_digest", None, _TEXT),
    gs=("graph_source", None, _TEXT),
    i=("interrupts", _many(INTERRUPT), _map_of(INTERRUPT.decode)),
    id=("run_id", None, _TEXT),
    ns=("nodes", _many(NODE), _map_of(NODE.decode)),
    q=("seq", None, _INT),
    s=("status", None, _member(model.RunStatus)),
    ua=("updated_at", aware, _TIME),
    w=("writers", _sorted, _map_of(_path)),
    **{"in": ("input", _user, plain)},  # ``in`` is a Python keyword
)
RECORD: Final = Shape(
    model.StepRecord,
    "record",
    d=("data", _user, plain),
    dst=("dest", None, _path),
    e=("errors", _many(ERROR), _list_of(ERROR.decode)),
    ev=("events", _each_user, _list_of(plain)),
    i=("interrupts", _optional(_many(INTERRUPT)), _optional(_map_of(INTERRUPT.decode))),
    k=("kind", None, _TEXT),
    n=("node", None, _optional(_TEXT)),
    ns=("nodes", _many(NODE), _map_of(NODE.decode)),
    q=("seq", None, _INT),
    r=("result", _user, plain),
    s=("status", None, _member(model.RunStatus)),
    src=("source", None, _path),
    t=("time", aware, _TIME),
    tr=("trigger", None, _optional(_TEXT)),
)
