"""User data on the wire: the closed type table, checked on encode and on decode.

User data (run data, inputs, payloads, results, event fields) may hold only None, bool,
int, float, str, bytes, list/tuple, dict with str keys and aware datetimes, nested at
most :data:`MAX_DEPTH` deep. Encoding returns the value with every dict key-sorted (so
equal values give equal bytes) or raises :class:`Unencodable` naming where the offending
value sits; decoding rejects what msgpack lets through but the encoder never writes.
msgpack itself stays in :mod:`phasegraph.codec._envelope`: this module sees plain Python values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final

from phasegraph.errors import CodecError

__all__ = [
    "MAX_DEPTH",
    "STR",
    "Unencodable",
    "aware",
    "canonical",
    "canonical_map",
    "check_plain",
    "encode_failure",
    "type_name",
]

MAX_DEPTH: Final = 100
"""How deeply lists and dicts may nest inside one user-data value."""

STR: Final = frozenset({str})
"""For the one-call check ``STR.issuperset(map(type, items))``: every item is a str."""

_SCALARS: Final = frozenset({str, int, float, bool, type(None), bytes})
_CONTAINERS: Final = frozenset({dict, list})
_SUPPORTED: Final = "None, bool, int, float, str, bytes, list, tuple, dict, aware datetime"


def type_name(value: object) -> str:
    """The name of ``value``'s type, as error messages show it."""
    return type(value).__qualname__


# --------------------------------------------------------------------------- encoding


class Unencodable(CodecError):
    """A value outside the type table; ``path`` collects where it sits, innermost first."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []
        self.key: str | None = None  # the outermost map key on the path, once known

    def where(self) -> str:
        """The path to the value, outermost first (``data['out'][0]``)."""
        return "".join(reversed(self.path)).lstrip(".") or "top level"


def encode_failure(exc: Exception, what: str, **context: Any) -> CodecError:
    """Turn a failed encode into a :class:`CodecError` that says what and where."""
    if isinstance(exc, Unencodable):
        return CodecError(f"{what} cannot be encoded: at {exc.where()}: {exc.reason}", **context)
    if isinstance(exc, OverflowError):
        reason = "an int is outside the 64-bit range"
    elif isinstance(exc, UnicodeEncodeError):
        reason = f"a str is not valid UTF-8 ({exc.reason})"
    else:
        reason = str(exc)
    return CodecError(f"{what} cannot be encoded: {reason}", **context)


def canonical(value: Any, depth: int) -> Any:
    """Return ``value`` with every dict sorted by key, or raise :class:`Unencodable`."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth > MAX_DEPTH:
        raise Unencodable(f"nested deeper than {MAX_DEPTH} levels")
    if kind is dict or kind is MappingProxyType or isinstance(value, dict):
        return canonical_map(value, depth)
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        return _canonical_list(value, depth)
    if kind is datetime:
        return aware(value, "")
    if isinstance(value, str | int | float | bytes):  # enum members and such: packed as the base
        return value
    raise Unencodable(f"{type_name(value)} is not a supported type (supported: {_SUPPORTED})")


def canonical_map(value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    """A key-sorted copy of a user-data map; see :func:`canonical`."""
    try:
        keys = sorted(value)
    except TypeError:  # keys of mixed types; refused just below
        keys = list(value)
    if not STR.issuperset(map(type, keys)):  # one C-speed check for the usual all-str case
        for key in keys:
            if not isinstance(key, str):
                raise Unencodable(f"key {key!r} ({type_name(key)}) is not a str")
    out: dict[str, Any] = {}
    for key in keys:
        item = value[key]
        if type(item) in _SCALARS:  # the common case, without a call
            out[key] = item
            continue
        try:
            out[key] = canonical(item, depth + 1)
        except Unencodable as exc:
            exc.path.append(f"[{key!r}]")
            exc.key = key
            raise
    return out


def _canonical_list(value: list[Any] | tuple[Any, ...], depth: int) -> Any:
    if _SCALARS.issuperset(map(type, value)):
        return value  # msgpack writes a tuple as an array, like a list
    out: list[Any] = []
    for index, item in enumerate(value):
        if type(item) in _SCALARS:
            out.append(item)
            continue
        try:
            out.append(canonical(item, depth + 1))
        except Unencodable as exc:
            exc.path.append(f"[{index}]")
            raise
    return out


def aware(value: Any, label: str) -> Any:
    """Return ``value`` if it is an aware datetime that stays in range in UTC, else raise."""
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
    exc = Unencodable(reason)
    exc.path.append(label)
    raise exc


# --------------------------------------------------------------------------- decoding


def check_plain(value: dict[Any, Any] | list[Any], depth: int, label: str) -> None:
    """Reject what msgpack lets through but the encoder never writes: bytes keys, deep nests.

    Raises:
        CodecError: Named after ``label`` (``record.data``).
    """
    if depth > MAX_DEPTH:
        raise CodecError(f"{label} is nested deeper than {MAX_DEPTH} levels")
    items: Iterable[Any] = value
    if type(value) is dict:
        if not STR.issuperset(map(type, value)):
            raise CodecError(f"{label} has a map key that is not a str")
        items = value.values()
    if not _CONTAINERS.isdisjoint(map(type, items)):  # descend only where there is something
        for item in items:
            if type(item) is dict or type(item) is list:
                check_plain(item, depth + 1, label)
