"""Read the common YAML document straight from libyaml's events, with every mark.

:mod:`._yaml` composes a node tree in pure Python so that it can refuse bad aliases and
deep nesting while it composes, and name where every node is. That costs about 0.5 ms a
node: a graph of 5,000 nodes took seconds to read. Most documents use none of what
needs the tree — no anchors, aliases, explicit tags, merge keys or complex keys — and for
those this module builds the same data, marks and duplicate keys in one pass over the
events of libyaml's parser (PyYAML's C binding), at a few microseconds a node. Any
document it does not handle, it hands back (``None``), and the full loader reads it:
so every refusal and every message stays the full loader's.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.reader import Reader
from yaml.resolver import Resolver

try:  # libyaml's event parser: PyYAML's wheels ship it; a build without it reads slowly
    from yaml._yaml import CParser as _CParser
except ImportError:  # pragma: no cover - every supported wheel has it
    _CParser = None  # type: ignore[assignment, misc]

__all__ = ["FastRead", "int_too_long", "read_fast"]

_Marks = dict[tuple[Any, ...], yaml.Mark]
FastRead = tuple[Any, _Marks, _Marks, list[tuple[Any, yaml.Mark]]]
"""The data, the node marks and key marks by key path, and the repeated keys."""

_RESOLVER = Resolver()
_CONSTRUCTOR = SafeConstructor()
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_NO_KEY = object()


class _Unhandled(Exception):
    """The document needs the full loader."""


class _Frame:
    __slots__ = ("container", "key", "path", "seen")

    def __init__(self, container: dict[Any, Any] | list[Any], path: tuple[Any, ...]) -> None:
        self.container = container
        self.path = path
        self.key: Any = _NO_KEY
        self.seen: set[Any] = set()


def read_fast(text: str, max_depth: int) -> FastRead | None:
    """Read ``text`` if it is a common document; ``None`` leaves it to the full loader."""
    if _CParser is None or Reader.NON_PRINTABLE.search(text):
        return None
    parser = _CParser(text)
    try:
        return _Builder(max_depth).build(parser)
    except (_Unhandled, yaml.YAMLError):
        return None
    finally:
        parser.dispose()


def int_too_long(value: int) -> bool:
    """Whether ``value`` has more decimal digits than Python converts to or from text.

    Past that limit (``sys.get_int_max_str_digits()``, 4300 by default) ``int()`` of its
    digits raises, and so does ``str()`` of the value (a hexadecimal or octal one still
    reads): no message, JSON output or store could write it.
    """
    limit = sys.get_int_max_str_digits()
    # 10**limit has about 3.32 * limit bits: only integers near it are compared with it.
    return limit > 0 and value.bit_length() > 3 * limit and abs(value) >= 10**limit


def _mark(event: Any) -> yaml.Mark:
    start = event.start_mark
    return yaml.Mark("<unicode string>", start.index, start.line, start.column, "", 0)


def _scalar(event: Any) -> Any:
    if event.tag not in (None, "!"):
        raise _Unhandled  # explicit tags keep the full loader's checks and messages
    tag: str = _RESOLVER.resolve(  # type: ignore[no-untyped-call]
        yaml.ScalarNode, event.value, event.implicit
    )
    if tag == _STR:
        return event.value
    if tag == _MERGE:
        raise _Unhandled
    construct = _CONSTRUCTOR.yaml_constructors.get(tag)
    if construct is None:
        raise _Unhandled
    try:
        value = construct(_CONSTRUCTOR, yaml.ScalarNode(tag, event.value, style=event.style))
    except Exception:  # a date past the calendar, say: the full loader words the refusal
        raise _Unhandled from None
    if type(value) is int and int_too_long(value):
        raise _Unhandled
    return value


class _Builder:
    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.node_marks: dict[tuple[Any, ...], yaml.Mark] = {}
        self.key_marks: dict[tuple[Any, ...], yaml.Mark] = {}
        self.duplicates: list[tuple[Any, yaml.Mark]] = []
        self.stack: list[_Frame] = []
        self.root: Any = None

    def build(self, parser: Any) -> FastRead:
        documents = 0
        while True:
            event = parser.get_event()
            kind = type(event)
            if kind is yaml.ScalarEvent:
                self._value(event, _scalar(event), None)
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                self._open(event, {} if kind is yaml.MappingStartEvent else [])
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                self.stack.pop()
            elif kind is yaml.DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise _Unhandled  # the full loader words this refusal
            elif kind is yaml.StreamEndEvent:
                return self.root, self.node_marks, self.key_marks, self.duplicates
            elif kind is yaml.AliasEvent:
                raise _Unhandled

    def _open(self, event: Any, container: dict[Any, Any] | list[Any]) -> None:
        if event.anchor is not None or event.tag not in (None, "!"):
            raise _Unhandled
        if len(self.stack) >= self.max_depth:
            raise _Unhandled  # the full loader refuses it, saying where
        path = self._value(event, container, container)
        self.stack.append(_Frame(container, path))

    def _value(self, event: Any, value: Any, container: object) -> tuple[Any, ...]:
        """Place a scalar or a new collection; returns its key path."""
        if event.anchor is not None:
            raise _Unhandled
        if not self.stack:
            self.root = value
            self.node_marks[()] = _mark(event)
            return ()
        frame = self.stack[-1]
        parent = frame.container
        if isinstance(parent, list):
            path = (*frame.path, len(parent))
            parent.append(value)
        elif frame.key is _NO_KEY:
            if container is not None:
                raise _Unhandled  # a collection as a mapping key
            self._key(frame, value, event)
            return frame.path
        else:
            path = (*frame.path, frame.key)
            parent[frame.key] = value
            frame.key = _NO_KEY
        self.node_marks[path] = _mark(event)
        return path

    def _key(self, frame: _Frame, key: Any, event: Any) -> None:
        try:
            repeated = key in frame.seen
        except TypeError:
            raise _Unhandled from None  # an unhashable key: the full loader words it
        mark = _mark(event)
        if repeated:
            self.duplicates.append((key, mark))
        frame.seen.add(key)
        frame.key = key
        self.key_marks[(*frame.path, key)] = mark
