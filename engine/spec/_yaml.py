r"""Read YAML documents, within limits, and remember where every node of them is.

The only module that imports ``yaml``. One reader builds a document's data straight from
the parser's events — libyaml's (PyYAML's C binding), or PyYAML's pure-Python parser
where a build lacks libyaml — and records, by key path, the mark (line and column) of
every node and every mapping key, and every key that repeats, so later checks can name
``path:line:col`` for any part of the document. It resolves and constructs scalars as
PyYAML's SafeLoader does, and handles anchors and aliases, explicit tags and merge keys
(``<<``) itself. Problems of reading and parsing come back as located
:class:`~phasegraph.errors.Problem` values, never as exceptions. Why events rather than
a composed node tree is written in ``docs/internals.md`` ("YAML: one reader").

Text YAML cannot hold is refused with a located problem too: bytes that are not UTF-8,
control characters and lone surrogates (YAML allows neither, even escaped in a string),
and the escapes ``"\ud800"`` … ``"\udfff"``, which name half of a UTF-16 pair, not a
character (no file or store could keep the string). So is a value YAML reads as something
it cannot be: an integer longer than Python converts from text (4300 digits), a date
past the calendar (``2024-02-30``), ``!!bool maybe``, a tag no constructor knows.

Definitions are small, so a document that is not is refused before it is built
(:class:`YamlLimits`): nesting is limited as it is read, and so are aliases: their
number, and the size and depth of the document with every alias written out (ten
anchors that each repeat the previous one ten times are ten billion nodes to whatever
walks the data). Aliases stay allowed within the limits because graphs share action
settings with them; an alias shares the anchored value (as PyYAML does), so reading one
never copies it, and the written-out size is summed as the events pass.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from phasegraph.core._sources import read_bytes
from phasegraph.errors import Problem, SourceLocation

try:  # libyaml's event parser: PyYAML's wheels ship it
    from yaml._yaml import CParser as _LIBYAML_PARSER
except ImportError:  # pragma: no cover - a PyYAML built without libyaml reads ~7x slower
    _LIBYAML_PARSER = None  # type: ignore[assignment, misc]

__all__ = [
    "Document",
    "Mark",
    "YamlLimits",
    "YamlPath",
    "dump_text",
    "location",
    "parse_text",
    "read_file",
]

YamlPath = tuple[Any, ...]
"""A key path into a parsed document: mapping keys and list indexes."""

Mark = tuple[int, int]
"""Where a node starts: its 0-based line and column, as YAML counts them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class YamlLimits:
    """How large a YAML document may be before it is refused unbuilt.

    Attributes:
        max_depth: Deepest nesting of collections (the top-level mapping is level 1),
            as written and with every alias written out.
        max_aliases: Most alias uses (``*name``, ``<<: *name``) in one document; 0
            refuses aliases altogether (each one is reported).
        max_nodes: Most nodes a document that uses aliases may have with every alias
            written out.
    """

    max_depth: int = 64
    max_aliases: int = 256
    max_nodes: int = 200_000


_SURROGATE = re.compile("[\ud800-\udfff]")
_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")  # as YAML (and its marks) count lines
_MAX_CHARACTER_PROBLEMS = 20
_SYNTAX = "YAML syntax error: {}; check indentation, quotes and brackets"
_BAD_ESCAPE = "found invalid Unicode character escape code"  # libyaml refuses surrogates so
_TOO_DEEP = "exceeded maximum nesting depth"  # libyaml's own limit, 1,000 levels

_CORE = "tag:yaml.org,2002:"
_STR, _MERGE = _CORE + "str", _CORE + "merge"
_SET, _OMAP, _PAIRS = (_CORE + name for name in ("set", "omap", "pairs"))
_SCALAR_TAGS = frozenset(_CORE + n for n in ("null", "bool", "int", "float", "binary", "timestamp"))
# Which node each collection tag belongs on, for the message about a tag on the wrong one.
_MAPPING_TAGS = {None: None, "!": None, _CORE + "map": None, _SET: _SET}
_SEQUENCE_TAGS = {None: None, "!": None, _CORE + "seq": None, _OMAP: _OMAP, _PAIRS: _PAIRS}
# What a scalar of a tag is, for a message about one that is not.
_KINDS = {"int": "an integer", "float": "a number", "bool": "a boolean", "timestamp": "a date"}
# What PyYAML's scalar constructors raise for a value their tag cannot hold.
_UNREADABLE = (ValueError, LookupError, AttributeError, TypeError)

_RESOLVER: Final = Resolver()  # read-only: the implicit tags of plain scalars
_CONSTRUCTOR: Final = SafeConstructor()  # read-only: its scalar constructors keep no state
_NO_KEY: Final = object()  # a mapping waits for a key
_MERGE_KEY: Final = object()  # a mapping waits for the value of its ``<<`` key
_UNSEEN: Final = object()


class _Refusal(Exception):
    """The document is refused; these are the problems to report."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self.problems = problems


class _Anchored(NamedTuple):
    value: Any
    mark: Mark
    size: int  # nodes with every alias written out
    depth: int  # collection nesting with every alias written out


class _Merge(NamedTuple):
    value: Any
    mark: Mark
    item_marks: list[Mark] | None  # where each item of a written-out list of mappings is


class _Frame:
    """A collection being read: where it is, what it holds so far, how big it is."""

    __slots__ = (
        "anchor",
        "container",
        "depth",
        "is_list",
        "item_marks",
        "key",
        "key_mark",
        "mark",
        "merges",
        "parent_key",
        "places",
        "size",
        "tag",
    )

    def __init__(self, container: Any, places: _Places | None, mark: Mark, tag: str | None) -> None:
        self.container = container
        self.is_list = type(container) is list
        self.places = places  # None inside a merge source: nothing there is located
        self.mark = mark
        self.tag = tag  # a tag that changes what the collection becomes (!!set, !!omap)
        self.anchor: str | None = None
        self.key: Any = _NO_KEY
        self.key_mark: Mark | None = None
        self.parent_key: Any = _NO_KEY
        self.size = 1
        self.depth = 0  # of the deepest child
        self.merges: list[_Merge] = []
        self.item_marks: list[Mark] | None = None


def _mark(event: Any) -> Mark:
    start = event.start_mark
    return (start.line, start.column)


_Places = dict[Any, int]
"""Where a located collection and its items are (see :func:`_packed`)."""

_SELF: Final = object()  # the key of a collection's own marks in its places

_LOW = (1 << 32) - 1


def _packed(mark: Mark, key: Mark | None = None) -> int:
    """A node's mark and its key's as one int: ``(key + 1) << 64 | line << 32 | column``.

    Each located node of a document is noted in the places of the collection that holds
    it, by its key or index: its packed marks for a scalar (or an alias); for a
    collection, ``-1 - i`` where ``i`` indexes the list of every collection's places
    (the root's first), and its own marks are under ``_SELF`` in its places. A dict of
    ints is not tracked by the garbage collector (a dict holding a dict would be): marks
    kept as a tuple per node, keyed by a tuple path, made reading a graph of 20,000 nodes
    allocate a million tracked tuples, and every collection meanwhile walk them. A line
    or column past 2**32 would need a text of more characters than that.
    """
    line, column = mark
    node = line << 32 | column
    if key is None:
        return node
    return ((key[0] << 32 | key[1]) + 1) << 64 | node


def _node_mark(packed: int) -> Mark:
    """Where the node of ``packed`` marks starts."""
    return ((packed >> 32) & _LOW, packed & _LOW)


def _key_mark(packed: int) -> Mark | None:
    """Where the key of the node of ``packed`` marks starts (None: not a mapping value)."""
    key = packed >> 64
    if not key:
        return None
    key -= 1
    return ((key >> 32) & _LOW, key & _LOW)


def _marks_of(entry: int, tables: Sequence[Mapping[Any, int]]) -> int:
    """The packed marks of a node noted as ``entry`` in its collection's places."""
    return entry if entry >= 0 else tables[-1 - entry][_SELF]


def _noted(
    tables: Sequence[Mapping[Any, int]], index: int = 0, path: YamlPath = ()
) -> Iterator[tuple[YamlPath, int]]:
    """Every node noted in the places ``tables[index]`` and below: key path, packed marks."""
    places = tables[index]
    yield path, places[_SELF]
    for key, entry in places.items():
        if key is _SELF:
            continue
        if entry < 0:
            yield from _noted(tables, -1 - entry, (*path, key))
        else:
            yield (*path, key), entry


def _kind(value: Any) -> str:
    if isinstance(value, dict | set):
        return "mapping"
    return "sequence" if isinstance(value, list) else "scalar"


class _Reader:
    """Builds one document's data, marks and repeated keys from its parser's events."""

    def __init__(self, text: str, shown: str, limits: YamlLimits) -> None:
        self.text = text
        self.shown = shown
        self.limits = limits
        self.tables: list[_Places] = [{}]  # each collection's places, the root's first
        self.duplicates: list[tuple[Any, Mark]] = []
        self.stack: list[_Frame] = []
        self.root: Any = None
        self.root_size, self.root_depth = 0, 0
        self.documents = 0
        self.anchors: dict[str, _Anchored] = {}
        self.open_anchors: set[str] = set()
        self.aliases: list[tuple[Mark, int, int]] = []  # each use: where, size, depth
        self.refused: list[Problem] = []  # aliases past the limit: all are found
        self.bad_values: list[Problem] = []  # scalars no value of their tag can be
        self.plain: dict[str, Any] = {}  # plain scalar text -> its value: graphs repeat
        # Only an escape can put a surrogate in a scalar (the text was checked), and only
        # the pure-Python parser lets one through.
        self.check_escapes = "\\u" in text or "\\U" in text
        self.handlers: dict[type, Callable[[Any], bool | None]] = {
            yaml.ScalarEvent: self._scalar,
            yaml.MappingStartEvent: self._mapping_start,
            yaml.SequenceStartEvent: self._sequence_start,
            yaml.MappingEndEvent: self._end,
            yaml.SequenceEndEvent: self._end,
            yaml.AliasEvent: self._alias,
            yaml.DocumentStartEvent: self._document_start,
            yaml.DocumentEndEvent: _ignore,
            yaml.StreamStartEvent: _ignore,
            yaml.StreamEndEvent: _stop,
        }

    def read(self) -> tuple[Any, list[tuple[Any, Mark]]] | list[Problem]:
        """Read the single document: its data and repeated keys, or why it is refused."""
        source: Any = yaml.SafeLoader if _LIBYAML_PARSER is None else _LIBYAML_PARSER
        events = source(self.text)
        handlers, next_event = self.handlers, events.get_event
        try:
            while True:
                event = next_event()
                if handlers[type(event)](event):
                    break
            self._check_aliases()
        except _Refusal as refusal:
            return refusal.problems
        except yaml.YAMLError as exc:
            return self._syntax_problems(exc)
        finally:
            events.dispose()
        if self.bad_values:
            return sorted(self.bad_values, key=_place)
        return self.root, self.duplicates

    # ----------------------------------------------------------------- placing values

    def _place(
        self, value: Any, mark: Mark, item_marks: list[Mark] | None = None, *, opens: bool = False
    ) -> _Places | None:
        """Put a value where the document has reached, and note where it is.

        ``opens``: the value is a collection about to be read; the places its items are
        noted in come back (None: it is not located, being a key or merged).
        """
        if not self.stack:
            self.root = value
            self.tables[0][_SELF] = _packed(mark)
            return self.tables[0]
        frame = self.stack[-1]
        places = frame.places
        if frame.is_list:
            frame.container.append(value)
            if frame.item_marks is not None:
                frame.item_marks.append(mark)
            if places is None:
                return None
            key: Any = len(frame.container) - 1
            packed = _packed(mark)
        elif frame.key is _NO_KEY:
            self._key(frame, value, mark)
            return None
        elif frame.key is _MERGE_KEY:
            frame.merges.append(_Merge(value, mark, item_marks))
            frame.key = _NO_KEY
            return None
        else:
            key = frame.key
            frame.container[key] = value
            frame.key = _NO_KEY
            if places is None:
                return None
            packed = _packed(mark, frame.key_mark)
            earlier = places.get(key)
            if earlier is not None and earlier < 0:  # a repeated key: the first's items stay
                table = self.tables[-1 - earlier]
                table[_SELF] = packed
                return table if opens else None
        if opens:
            places[key] = -1 - len(self.tables)
            table = {_SELF: packed}
            self.tables.append(table)
            return table
        places[key] = packed
        return None

    def _key(self, frame: _Frame, key: Any, mark: Mark) -> None:
        try:
            repeated = key in frame.container  # holds every earlier key of the mapping
        except TypeError:  # a collection as a key
            detail = "found unhashable key while constructing a mapping"
            raise self._malformed(detail, mark) from None
        frame.key = key
        if frame.places is None:
            return
        if repeated:
            self.duplicates.append((key, mark))
        frame.key_mark = mark

    def _grow(self, size: int, depth: int) -> None:
        """Count a finished node (written out) into the collection that holds it."""
        if not self.stack:
            self.root_size, self.root_depth = size, depth
            return
        frame = self.stack[-1]
        frame.size += size
        if depth > frame.depth:
            frame.depth = depth

    # ----------------------------------------------------------------- events

    def _scalar(self, event: Any) -> None:
        mark = _mark(event)
        value = self._scalar_value(event, mark)
        if self.check_escapes:
            self._check_escapes(event.value, mark)
        if value is _MERGE_KEY:
            self.stack[-1].key = _MERGE_KEY
        else:
            if event.anchor is not None:
                self._anchor(event.anchor, mark)
                self.anchors[event.anchor] = _Anchored(value, mark, 1, 0)
            self._place(value, mark)
        self._grow(1, 0)

    def _scalar_value(self, event: Any, mark: Mark) -> Any:
        """The value of a scalar, resolved and constructed as SafeLoader does."""
        tag, text = event.tag, event.value
        if tag is None:
            if not event.implicit[0]:  # quoted
                return text
            known = self.plain.get(text, _UNSEEN)
            if known is not _UNSEEN:
                return known
        if tag is None or tag == "!":
            tag = _RESOLVER.resolve(yaml.ScalarNode, text, event.implicit)  # type: ignore[no-untyped-call]
        if tag == _STR:
            value: Any = text
        elif tag == _MERGE:
            return self._merge_key(mark)
        else:
            value = self._construct(tag, text, event.style, mark)
            if value is _UNSEEN:
                return None
        if event.tag is None:
            self.plain[text] = value
        return value

    def _construct(self, tag: str, text: str, style: str | None, mark: Mark) -> Any:
        if tag not in _SCALAR_TAGS:
            raise self._malformed(_no_constructor(tag, "scalar"), mark)
        construct = _CONSTRUCTOR.yaml_constructors[tag]
        try:
            value = construct(_CONSTRUCTOR, yaml.ScalarNode(tag, text, style=style))
        except _UNREADABLE as exc:
            message = _unreadable(tag, text, exc)
        except yaml.YAMLError as exc:  # !!binary that is not base64
            raise self._malformed(str(getattr(exc, "problem", exc)), mark) from None
        else:
            if type(value) is not int or not _int_too_long(value):
                return value
            message = _too_long()
        self.bad_values.append(Problem(message, location(self.shown, mark)))
        return _UNSEEN

    def _merge_key(self, mark: Mark) -> Any:
        """``<<`` means something as a mapping key only."""
        frame = self.stack[-1] if self.stack else None
        if frame is not None and not frame.is_list and frame.key is _NO_KEY:
            return _MERGE_KEY
        raise self._malformed(_no_constructor(_MERGE, "scalar"), mark)

    def _mapping_start(self, event: Any) -> None:
        self._start(event, {}, _MAPPING_TAGS)

    def _sequence_start(self, event: Any) -> None:
        self._start(event, [], _SEQUENCE_TAGS)

    def _start(self, event: Any, container: Any, tags: Mapping[str | None, str | None]) -> None:
        mark = _mark(event)
        if len(self.stack) >= self.limits.max_depth:
            raise self._deep(mark)
        if event.tag not in tags:
            raise self._malformed(_no_constructor(event.tag, _kind(container)), mark)
        if event.anchor is not None:
            self._anchor(event.anchor, mark)
            self.open_anchors.add(event.anchor)
        parent = self.stack[-1] if self.stack else None
        parent_key = parent.key if parent is not None else _NO_KEY
        # The items of a list of mappings to merge are checked, and named, one by one.
        item_marks: list[Mark] | None = [] if parent_key is _MERGE_KEY else None
        # What is merged is its pairs, whatever its tag (PyYAML merges nodes, not values).
        merged = item_marks is not None or (parent is not None and parent.item_marks is not None)
        tag = None if merged else tags[event.tag]
        frame = _Frame(container, self._place(container, mark, item_marks, opens=True), mark, tag)
        frame.anchor, frame.parent_key = event.anchor, parent_key
        if frame.is_list:
            frame.item_marks = item_marks
        self.stack.append(frame)

    def _end(self, event: Any) -> None:
        frame = self.stack.pop()
        if frame.merges:
            self._merge(frame)
        value = frame.container
        if frame.tag is not None:
            value = self._retyped(frame)
        if frame.anchor is not None:
            self.open_anchors.discard(frame.anchor)
            self.anchors[frame.anchor] = _Anchored(value, frame.mark, frame.size, frame.depth + 1)
        self._grow(frame.size, frame.depth + 1)

    def _alias(self, event: Any) -> None:
        mark, name, limit = _mark(event), event.anchor, self.limits.max_aliases
        if len(self.aliases) >= limit:
            if limit == 0:
                self._note("YAML aliases (*name) are not accepted here: write the value out", mark)
            elif not self.refused:
                text = f"more than {limit} YAML aliases (*name) in one file"
                self._note(f"{text}; write some of the values out in full", mark)
            # Refused: an empty value stands in so that reading finds every refusal.
            self._place(None, mark)
            self._grow(1, 0)
            return
        if name in self.open_anchors:
            text = f"alias *{name} is inside the collection it names"
            raise self._refuse(f"{text}, so it would repeat forever: write the value out", mark)
        anchored = self.anchors.get(name)
        if anchored is None:
            raise self._malformed(f"found undefined alias {name!r}", mark)
        self.aliases.append((mark, anchored.size, anchored.depth))
        self._place(anchored.value, anchored.mark)  # located where the anchored value is
        self._grow(anchored.size, anchored.depth)

    def _document_start(self, event: Any) -> None:
        self.documents += 1
        if self.documents > 1:
            detail = "expected a single document in the stream, but found another document"
            raise self._malformed(detail, _mark(event))

    # ----------------------------------------------------------------- anchors, merges, tags

    def _anchor(self, name: str, mark: Mark) -> None:
        first = self.anchors.get(name)
        if first is not None or name in self.open_anchors:
            where = "" if first is None else f" (first at line {first.mark[0] + 1})"
            raise self._malformed(f"found duplicate anchor {name!r}{where}", mark)

    def _merge(self, frame: _Frame) -> None:
        """Merge ``<<`` values as SafeLoader does: written keys win, then the earlier source."""
        if self.refused:  # aliases were refused: their stand-ins are no mappings
            return
        sources: list[dict[Any, Any]] = []
        for merge in frame.merges:
            if isinstance(merge.value, dict):
                sources.append(merge.value)
            elif isinstance(merge.value, list):
                for index, item in enumerate(merge.value):
                    if not isinstance(item, dict):
                        where = merge.item_marks[index] if merge.item_marks else merge.mark
                        detail = f"expected a mapping for merging, but found {_kind(item)}"
                        raise self._malformed(f"{detail} while constructing a mapping", where)
                sources.extend(merge.value)
            else:
                detail = "expected a mapping or list of mappings for merging, but found"
                raise self._malformed(
                    f"{detail} {_kind(merge.value)} while constructing a mapping", merge.mark
                )
        merged: dict[Any, Any] = {}
        for source in sources:
            for key, value in source.items():
                merged.setdefault(key, value)
        merged.update(frame.container)
        frame.container.clear()
        frame.container.update(merged)

    def _retyped(self, frame: _Frame) -> Any:
        """A ``!!set`` mapping or ``!!omap``/``!!pairs`` list, put where the collection was."""
        if frame.tag == _SET:
            value: Any = set(frame.container)
        else:
            for index, item in enumerate(frame.container):
                if not isinstance(item, dict) or len(item) != 1:
                    where = frame.mark
                    noted = None if frame.places is None else frame.places.get(index)
                    if noted is not None:
                        where = _node_mark(_marks_of(noted, self.tables))
                    detail = f"expected a mapping of length 1, but found {_kind(item)}"
                    raise self._malformed(f"{detail} while constructing an ordered map", where)
            value = [next(iter(item.items())) for item in frame.container]
        parent = self.stack[-1] if self.stack else None
        if parent is None:
            self.root = value
        elif parent.is_list:
            parent.container[-1] = value
        else:
            parent.container[frame.parent_key] = value
        return value

    # ----------------------------------------------------------------- refusals

    def _note(self, message: str, mark: Mark) -> None:
        where = location(self.shown, mark)
        last = self.refused[-1].location if self.refused else None
        if last is None or last.line != where.line:  # one per line is enough
            self.refused.append(Problem(message, where))

    def _refuse(self, message: str, mark: Mark) -> _Refusal:
        return _Refusal([*self.refused, Problem(message, location(self.shown, mark))])

    def _deep(self, mark: Mark) -> _Refusal:
        text = f"YAML collections nest deeper than {self.limits.max_depth} levels here"
        return self._refuse(f"{text}; no definition needs that: flatten it", mark)

    def _malformed(self, detail: str, mark: Mark) -> _Refusal:
        return _Refusal([Problem(_SYNTAX.format(detail), location(self.shown, mark))])

    def _check_aliases(self) -> None:
        """Refuse aliases past the limits: too many, or written out too big or too deep."""
        if self.refused:
            raise _Refusal(self.refused)
        if not self.aliases:
            return
        limits = self.limits
        if self.root_size > limits.max_nodes:
            cap = limits.max_nodes + 1  # the first alias past the limit is the one named
            mark = max(self.aliases, key=lambda use: min(use[1], cap))[0]
            text = (
                f"YAML aliases expand this file to more than {limits.max_nodes} values (an "
                "anchor that repeats other anchors grows exponentially); write the values "
                "out once, or use fewer aliases"
            )
            raise self._refuse(text, mark)
        if self.root_depth > limits.max_depth:
            mark = max(self.aliases, key=lambda use: use[2])[0]
            text = f"YAML aliases nest this file deeper than {limits.max_depth} levels"
            raise self._refuse(f"{text}; no definition needs that: write the value out", mark)

    def _check_escapes(self, value: str, mark: Mark) -> None:
        found = _SURROGATE.search(value)
        if found is not None:
            at = found.start()
            low = ord(value[at + 1]) if at + 1 < len(value) else None
            message = _surrogate_escape(ord(value[at]), low)
            self.bad_values.append(Problem(message, location(self.shown, mark)))

    def _syntax_problems(self, exc: yaml.YAMLError) -> list[Problem]:
        """The parser's error, located; the few libyaml words its own way, said plainly."""
        at = getattr(exc, "problem_mark", None)
        scalar_at = getattr(exc, "context_mark", None)
        problem = str(getattr(exc, "problem", None) or exc)
        if problem == _BAD_ESCAPE and at is not None and scalar_at is not None:
            escape = _escaped_surrogate(self.text, at.index)
            if escape is not None:  # located at the scalar, as the other bad values are
                scalar = location(self.shown, _mark_of(scalar_at))
                found = Problem(_surrogate_escape(*escape), scalar)
                return sorted([*self.bad_values, found], key=_place)
        if problem.startswith(_TOO_DEEP) and at is not None:
            # libyaml looks far ahead in a flow collection, and stops 1,000 levels down.
            return [self._deep(_mark_of(at)).problems[-1]]
        if problem.startswith("did not find expected") and at is not None:
            # libyaml does not say what it found instead (PyYAML's parser does).
            found_text = self.text[at.index : at.index + 1] or "<stream end>"
            problem = f"{problem}, but found {found_text!r}"
        context = getattr(exc, "context", None)
        detail = f"{problem} {context}" if context else problem
        mark = None if at is None else _mark_of(at)
        return [Problem(_SYNTAX.format(detail), location(self.shown, mark))]


def _ignore(event: Any) -> None:
    return None


def _stop(event: Any) -> bool:
    return True


def _mark_of(mark: Any) -> Mark:
    return (mark.line, mark.column)


def _no_constructor(tag: str, kind: str) -> str:
    needs = "scalar" if tag in _SCALAR_TAGS or tag == _STR else None
    needs = needs or ("mapping" if tag in _MAPPING_TAGS else None)
    needs = needs or ("sequence" if tag in _SEQUENCE_TAGS else None)
    if needs is None:
        return f"could not determine a constructor for the tag {tag!r}"
    return f"expected a {needs} node, but found {kind}"


def _escaped_surrogate(text: str, at: int) -> tuple[int, int | None] | None:
    """The surrogate escaped at ``text[at]`` (its hex digits), and the one after it."""
    digits = 4 if text[at - 1 : at] == "u" else 8
    try:
        code = int(text[at : at + digits], 16)
    except ValueError:
        return None
    if not 0xD800 <= code <= 0xDFFF:
        return None
    after = at + digits
    low = None
    if text[after : after + 2] == "\\u":
        try:
            low = int(text[after + 2 : after + 6], 16)
        except ValueError:
            low = None
    return code, low


def _surrogate_escape(code: int, low: int | None) -> str:
    hint = "write the character itself, or escape it with \\U and 8 hex digits"
    if 0xD800 <= code <= 0xDBFF and low is not None and 0xDC00 <= low <= 0xDFFF:
        whole = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
        hint = f"write the character itself, or escape it as \\U{whole:08X}"
    return (
        f"the escape \\u{code:04x} names half of a UTF-16 surrogate pair, not a character, "
        f"and cannot be stored: {hint}"
    )


def _unreadable(tag: str, text: str, exc: Exception) -> str:
    """Why a scalar cannot be read as its tag says, and what to do."""
    kind = tag.rpartition(":")[2]
    if kind == "int" and sum(map(str.isdigit, text)) > sys.get_int_max_str_digits() > 0:
        return _too_long()
    what = _KINDS.get(kind, f"a !!{kind}")
    dated = kind == "timestamp" and isinstance(exc, ValueError)  # "month must be in 1..12"
    why = f" ({str(exc).rstrip('.')})" if dated else ""
    return f"{text!r:.60} is not {what}{why}: write one, or quote the value to keep it as text"


def _int_too_long(value: int) -> bool:
    """Whether ``value`` has more decimal digits than Python converts to or from text.

    Past that limit (``sys.get_int_max_str_digits()``, 4300 by default) ``int()`` of its
    digits raises, and so does ``str()`` of the value (a hexadecimal or octal one still
    reads): no message, JSON output or store could write it.
    """
    limit = sys.get_int_max_str_digits()
    # 10**limit has about 3.32 * limit bits: only integers near it are compared with it.
    return limit > 0 and value.bit_length() > 3 * limit and abs(value) >= 10**limit


def _too_long() -> str:
    limit = sys.get_int_max_str_digits()
    return (
        f"this integer has more than {limit} digits, more than phasegraph reads: quote it "
        "to keep it as text"
    )


def location(path: str, mark: Mark | None) -> SourceLocation:
    """The 1-based location of a YAML ``mark`` in ``path`` (just the path without a mark)."""
    if mark is None:
        return SourceLocation(path)
    return SourceLocation(path, mark[0] + 1, mark[1] + 1)


def _same(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    return loc


@dataclass(frozen=True, slots=True)
class Document:
    """A parsed YAML mapping, where each of its nodes is, and how to place spec paths.

    Attributes:
        path: The file (or other name) problems are located in.
        data: The parsed mapping (the graph loader empties it once checked).
        places: Where the document and each node in it are: each collection's places,
            the root's first, noting its items by key or index (see ``_packed``).
        locate: Maps a key path into a checked (maybe salvaged) spec to the same place in
            the document.
    """

    path: str
    data: dict[Any, Any]
    places: Sequence[Mapping[Any, int]]
    locate: Callable[[tuple[str | int, ...]], tuple[str | int, ...]] = _same

    @property
    def node_marks(self) -> dict[YamlPath, Mark]:
        """Where each node starts, by key path (built anew from ``places``)."""
        return {path: _node_mark(packed) for path, packed in _noted(self.places)}

    @property
    def key_marks(self) -> dict[YamlPath, Mark]:
        """Where each mapping key starts, by the key path of its value (built anew)."""
        found = ((path, _key_mark(packed)) for path, packed in _noted(self.places))
        return {path: mark for path, mark in found if mark is not None}

    def at(self, loc: tuple[str | int, ...]) -> SourceLocation:
        """The location of ``loc``, a key path into the checked (maybe salvaged) spec."""
        return self.place(self.locate(loc))

    def problem(self, loc: tuple[str | int, ...], message: str) -> Problem:
        """A problem located at ``loc`` (a key path into the checked spec)."""
        return Problem(message, self.at(loc))

    def place(self, loc: tuple[str | int, ...]) -> SourceLocation:
        """The location of a document path, or of its deepest ancestor in the file."""
        tables = self.places
        places: Mapping[Any, int] | None = tables[0]
        if _SELF not in tables[0]:
            return location(self.path, None)
        packed = tables[0][_SELF]
        for part in loc:
            if places is None:
                break  # a scalar, or an alias: nothing inside it is noted
            options = [part, int(part)] if isinstance(part, str) and part.isdigit() else [part]
            step = next((option for option in options if option in places), None)
            if step is None:
                break
            entry = places[step]
            places = None if entry >= 0 else tables[-1 - entry]
            packed = _marks_of(entry, tables)
        return location(self.path, _key_mark(packed) or _node_mark(packed))


def read_file(
    path: Path, what: str, limits: YamlLimits | None = None
) -> tuple[Document | None, list[Problem]]:
    """Read and parse the ``what`` (``machine`` or ``graph``) file at ``path``.

    Returns:
        The document (None when it cannot be used at all) and every problem found.
    """
    try:
        data = read_bytes(path)
    except OSError as exc:
        problem = Problem(
            f"cannot read {what} file: {exc.strerror or exc}; check the path",
            location(str(path), None),
        )
        return None, [problem]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [_not_utf8(data, exc, str(path), what)]
    return parse_text(text, str(path), what, limits)


def _not_utf8(data: bytes, exc: UnicodeDecodeError, shown: str, what: str) -> Problem:
    """Where the first byte that is not UTF-8 is (its column counts bytes)."""
    line_start = data.rfind(b"\n", 0, exc.start) + 1
    where = SourceLocation(shown, data.count(b"\n", 0, exc.start) + 1, exc.start - line_start + 1)
    text = (
        f"a {what} file is UTF-8 text, and byte 0x{data[exc.start]:02x} here is not UTF-8 "
        "(the file was saved in another encoding, or is not text): save it as UTF-8"
    )
    return Problem(text, where)


def _character_problems(text: str, shown: str) -> list[Problem]:
    """Characters YAML does not allow: control characters, lone surrogates, U+FFFE/U+FFFF.

    One problem per line, at most a few: a binary file would list thousands.
    """
    problems: list[Problem] = []
    last_line = 0
    for found in yaml.reader.Reader.NON_PRINTABLE.finditer(text):
        where = _position(text, found.start(), shown)
        if where.line == last_line:
            continue
        last_line = where.line or 0
        code = ord(found.group())
        if 0xD800 <= code <= 0xDFFF:
            kind = "a lone UTF-16 surrogate, not a character"
        else:
            kind = "a control character, which YAML does not allow in a file"
        problems.append(Problem(f"character U+{code:04X} is {kind}: remove it", where))
        if len(problems) == _MAX_CHARACTER_PROBLEMS:
            break
    return problems


def _position(text: str, index: int, shown: str) -> SourceLocation:
    """The 1-based line and column of ``text[index]``, counting lines as YAML does."""
    line, line_start = 1, 0
    for brk in _LINE_BREAK.finditer(text, 0, index):
        line, line_start = line + 1, brk.end()
    return SourceLocation(shown, line, index - line_start + 1)


def parse_text(
    text: str, shown: str, what: str, limits: YamlLimits | None = None
) -> tuple[Document | None, list[Problem]]:
    """Parse ``text``, a ``what`` (``machine`` or ``graph``) document, located as ``shown``.

    Args:
        text: The YAML.
        shown: Where problems are located (a path, or a name such as a request field).
        what: ``machine`` or ``graph``, for messages.
        limits: Size limits (default :class:`YamlLimits`).

    Returns:
        The document (None when it is not a mapping, not YAML or past a limit) and every
        problem found.
    """
    refused = _character_problems(text, shown)
    if refused:
        return None, refused
    reader = _Reader(text, shown, limits or YamlLimits())
    read = reader.read()
    if isinstance(read, list):
        return None, read
    data, duplicates = read
    twice = "duplicate key {!r}: it would silently replace the earlier one; keep one"
    problems = [Problem(twice.format(key), location(shown, mark)) for key, mark in duplicates]
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"a {type(data).__name__}"
        needs = "`initial:` and `states:`" if what == "machine" else "`nodes:`"
        message = f"a {what} file is a mapping with {needs}, not {found}"
        root = reader.tables[0].get(_SELF)
        mark = None if root is None else _node_mark(root)
        return None, [*problems, Problem(message, location(shown, mark))]
    return Document(shown, data, reader.tables), problems


def _place(problem: Problem) -> tuple[int, int]:
    where = problem.location
    return (0, 0) if where is None else (where.line or 0, where.column or 0)


_OTHER_BREAK = re.compile("[\r\x85\u2028\u2029]")
"""Line breaks other than ``\n``: a double-quoted scalar escapes them."""


class _Dumper(yaml.SafeDumper):
    """Writes text of several lines as a literal block, so a diff shows lines, not escapes."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if _OTHER_BREAK.search(value):  # written as is, YAML would read a line break there
        return dumper.represent_scalar(_STR, value, style='"')
    # A literal block cannot keep trailing spaces or control characters exactly: quoted then.
    block = "\n" in value and not any(line != line.rstrip() for line in value.split("\n"))
    if block and not _character_problems(value, ""):
        return dumper.represent_scalar(_STR, value, style="|")
    return dumper.represent_scalar(_STR, value)


_Dumper.add_representer(str, _text)


def dump_text(value: Any) -> str:
    """``value`` (JSON-like data) as a YAML document, keys in the order given.

    Text of several lines is written as a literal block; everything reads back as it was
    with :func:`parse_text`.
    """
    text: str = yaml.dump(value, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return text
