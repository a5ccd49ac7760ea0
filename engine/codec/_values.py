"""User data on the wire: the closed type table, checked on encode and on decode.

User data (run data, inputs, payloads, results, event fields) may hold only None, bool,
int, float, str, bytes, list/tuple, dict (or read-only mapping) with str keys and aware
datetimes, nested at most :data:`MAX_DEPTH` deep. msgspec would write much more (sets,
dataclasses, UUIDs, ...), so everything is checked here first: :func:`plain_map` returns
the value as it is written (the same object in the usual case) or raises
:class:`Unencodable` naming where the offending value sits; :func:`check_plain` refuses
what msgpack can carry but the encoder never writes (non-str keys, deeper nests).
This module sees plain Python values only; msgspec stays in the envelope module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final

from phasegraph.errors import CodecError

__all__ = [
    "MAX_DEPTH",
    "Unencodable",
    "aware",
    "check_plain",
    "encode_failure",
    "limit_reason",
    "plain_map",
    "plain_value",
    "type_name",
]

MAX_DEPTH: Final = 100
"""How deeply lists and dicts may nest inside one user-data value."""

_STR: Final = frozenset({str})
_SCALARS: Final = frozenset({str, int, float, bool, type(None), bytes})
_CONTAINERS: Final = frozenset({dict, list})
_SUPPORTED: Final = "None, bool, int, float, str, bytes, list, tuple, dict, aware datetime"
# Subclasses of these (enum members and such) are written as their plain base value.
_BASES: Final[tuple[tuple[type, Callable[[Any], Any]], ...]] = (
    (str, str.__str__),
    (int, int.__int__),
    (float, float.__float__),
    (bytes, bytes.__bytes__),
)


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
    return CodecError(f"{what} cannot be encoded: {limit_reason(exc)}", **context)


def limit_reason(exc: Exception) -> str:
    """Why msgspec refused a value of a supported type (an int past 64 bits, bad UTF-8)."""
    if isinstance(exc, OverflowError):
        return "an int is outside the 64-bit range"
    if isinstance(exc, UnicodeEncodeError):
        return f"a str is not valid UTF-8 ({exc.reason})"
    return str(exc)


def plain_value(value: Any, depth: int) -> Any:
    """``value`` as msgspec writes it, or raise :class:`Unencodable`.

    The same object when it needs no change; read-only mappings become dicts and
    subclasses of the scalar types their base value. msgspec sorts the keys.
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth > MAX_DEPTH:
        raise Unencodable(f"nested deeper than {MAX_DEPTH} levels")
    if kind is dict or kind is MappingProxyType or isinstance(value, dict):
        return plain_map(value, depth)
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        return _plain_items(value, depth)
    if kind is datetime:
        return aware(value, "")
    for base, plain in _BASES:
        if isinstance(value, base):
            return plain(value)
    raise Unencodable(f"{type_name(value)} is not a supported type (supported: {_SUPPORTED})")


def plain_map(value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    """A user-data map as a dict of plain values; see :func:`plain_value`."""
    if _STR.issuperset(map(type, value)) and _SCALARS.issuperset(map(type, value.values())):
        return value if type(value) is dict else dict(value)  # the usual, flat case
    out: dict[str, Any] = {}
    for key, item in value.items():
        if type(key) is not str:
            if not isinstance(key, str):
                raise Unencodable(f"key {key!r} ({type_name(key)}) is not a str")
            key = str.__str__(key)  # a subclass of str: its plain str
        if type(item) in _SCALARS:  # the common case, without a call
            out[key] = item
            continue
        try:
            out[key] = plain_value(item, depth + 1)
        except Unencodable as exc:
            exc.path.append(f"[{key!r}]")
            exc.key = key
            raise
    return out


def _plain_items(value: list[Any] | tuple[Any, ...], depth: int) -> list[Any] | tuple[Any, ...]:
    if _SCALARS.issuperset(map(type, value)):
        return value  # msgspec writes a tuple as an array, like a list
    out: list[Any] = []
    for index, item in enumerate(value):
        if type(item) in _SCALARS:
            out.append(item)
            continue
        try:
            out.append(plain_value(item, depth + 1))
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
    """Refuse what msgpack can carry but the encoder never writes: non-str keys, deep nests.

    Raises:
        CodecError: Named after ``label`` (``record.data``).
    """
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
                check_plain(item, depth + 1, label)
