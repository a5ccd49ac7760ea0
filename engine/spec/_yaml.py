r"""Read YAML documents, within limits, and remember where every node of them is.

With :mod:`._fastyaml`, the only modules that import ``yaml``. A document that needs it
(anchors, aliases, tags, refusals) is parsed by a SafeLoader subclass that
records the mark (line and column) of every node and every mapping key by its key path,
and every key that repeats, so later checks can name ``path:line:col`` for any part of
the document. Problems of reading and parsing come back as located
:class:`~phasegraph.errors.Problem` values, never as exceptions.

Text YAML cannot hold is refused with a located problem too: bytes that are not UTF-8,
control characters and lone surrogates (YAML allows neither, even escaped in a string),
and the escapes ``"\ud800"`` … ``"\udfff"``, which name half of a UTF-16 pair, not a
character (no file or store could keep the string). So is a value YAML reads as something
it cannot be: an integer longer than Python converts from text (4300 digits), a date
past the calendar (``2024-02-30``), ``!!bool maybe``.

Definitions are small, so a document that is not is refused before it is built
(:class:`YamlLimits`): nesting is limited while composing (the composer recurses once
per level), and so are aliases: their number, and the size and depth of the document
with every alias written out (ten anchors that each repeat the previous one ten times
are ten billion nodes to whatever walks the data). Aliases stay allowed within the
limits because graphs share action settings with them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from phasegraph.errors import Problem, SourceLocation, SpecError
from phasegraph.spec._fastyaml import FastRead, int_too_long, read_fast

__all__ = [
    "Document",
    "YamlLimits",
    "YamlPath",
    "location",
    "parse_text",
    "read_file",
]

YamlPath = tuple[Any, ...]
"""A key path into a parsed document: mapping keys and list indexes."""


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


_Mark = yaml.Mark | None

_SURROGATE = re.compile("[\ud800-\udfff]")
_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")  # as YAML (and its marks) count lines
_MAX_CHARACTER_PROBLEMS = 20
# What a scalar of a tag is, for a message about one that is not.
_KINDS = {"int": "an integer", "float": "a number", "bool": "a boolean", "timestamp": "a date"}
# What PyYAML's scalar constructors raise for a value their tag cannot hold.
_UNREADABLE = (ValueError, LookupError, AttributeError, TypeError)


def _start(event: yaml.Event) -> _Mark:
    # The pure-Python parser always gives yaml.Mark; the C one (never used here) another type.
    mark = event.start_mark
    return mark if isinstance(mark, yaml.Mark) else None


class _MarkedLoader(yaml.SafeLoader):
    """A SafeLoader that records where every node starts and which keys repeat.

    It also refuses, while composing, documents past the limits: ``refused`` collects
    alias refusals (composing goes on to find them all); a limit past which composing
    cannot safely go on raises :class:`SpecError` at once.
    """

    def __init__(self, stream: str, shown: str, limits: YamlLimits) -> None:
        super().__init__(stream)
        self.shown = shown
        self.limits = limits
        self.node_marks: dict[YamlPath, yaml.Mark] = {}
        self.key_marks: dict[YamlPath, yaml.Mark] = {}
        self.duplicates: list[tuple[Any, yaml.Mark]] = []
        self.refused: list[Problem] = []
        self.escapes: list[Problem] = []
        self.unreadable: list[Problem] = []
        self.aliases: list[tuple[_Mark, yaml.Node]] = []
        self._walked: set[int] = set()
        self._depth = 0
        self._open: set[str] = set()

    def compose_checked(self) -> yaml.Node | None:
        """Compose the single document and check it against the limits.

        Raises:
            SpecError: The document passes a limit.
        """
        node = self.get_single_node()
        if self.refused:
            raise SpecError(self.refused)
        if node is not None and self.aliases:
            self._check_expansion(node)
        return node

    def load_marked(self) -> Any:
        """Parse the single document, recording marks before constructing it.

        Raises:
            SpecError: The document passes a limit (nothing is constructed).
        """
        node = self.compose_checked()
        if node is None:
            return None
        self._record(node, ())
        return self.construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Construct a node; a scalar no value of its tag can be is noted, located."""
        if not isinstance(node, yaml.ScalarNode):
            return super().construct_object(node, deep)
        try:
            value = super().construct_object(node, deep)
        except _UNREADABLE as exc:
            self.recursive_objects.pop(node, None)  # left behind by the failed construction
            message = _unreadable(node, exc)
        else:
            if type(value) is not int or not int_too_long(value):
                return value
            message = _too_long()
        self.unreadable.append(Problem(message, location(self.shown, node.start_mark)))
        self.constructed_objects[node] = None  # an alias of it is not reported again
        return None

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        """Compose one node, refusing nesting and aliases past the limits."""
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            return self._alias(event, parent, index)
        if not isinstance(event, yaml.CollectionStartEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > self.limits.max_depth:
            text = f"YAML collections nest deeper than {self.limits.max_depth} levels here"
            raise self._refuse(f"{text}; no definition needs that: flatten it", _start(event))
        if event.anchor is not None:
            self._open.add(event.anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if event.anchor is not None:
                self._open.discard(event.anchor)

    def _alias(self, event: yaml.AliasEvent, parent: yaml.Node | None, index: int) -> yaml.Node:
        limit, mark = self.limits.max_aliases, _start(event)
        if len(self.aliases) >= limit:
            self.get_event()  # type: ignore[no-untyped-call]
            if limit == 0:
                self._note("YAML aliases (*name) are not accepted here: write the value out", mark)
            elif not self.refused:
                text = f"more than {limit} YAML aliases (*name) in one file"
                self._note(f"{text}; write some of the values out in full", mark)
            # Refused: an empty value stands in so that composing finds every refusal.
            return yaml.ScalarNode("tag:yaml.org,2002:null", "", mark, mark)
        if event.anchor in self._open:
            text = f"alias *{event.anchor} is inside the collection it names"
            raise self._refuse(f"{text}, so it would repeat forever: write the value out", mark)
        node = super().compose_node(parent, index)
        if node is None:  # never: an alias always names a composed node
            return yaml.ScalarNode("tag:yaml.org,2002:null", "", mark, mark)
        self.aliases.append((mark, node))
        return node

    def _note(self, message: str, mark: _Mark) -> None:
        where = location(self.shown, mark)
        last = self.refused[-1].location if self.refused else None
        if last is None or last.line != where.line:  # one per line is enough
            self.refused.append(Problem(message, where))

    def _refuse(self, message: str, mark: _Mark) -> SpecError:
        return SpecError([*self.refused, Problem(message, location(self.shown, mark))])

    def _check_expansion(self, root: yaml.Node) -> None:
        """Refuse a document whose aliases, written out, make it too big or too deep."""
        limits = self.limits
        sizes = _expanded(root, limits.max_nodes + 1)
        size, depth = sizes[id(root)]
        if size > limits.max_nodes:
            mark, _ = max(self.aliases, key=lambda use: sizes[id(use[1])][0])
            text = (
                f"YAML aliases expand this file to more than {limits.max_nodes} values (an "
                "anchor that repeats other anchors grows exponentially); write the values "
                "out once, or use fewer aliases"
            )
            raise self._refuse(text, mark)
        if depth > limits.max_depth:
            mark, _ = max(self.aliases, key=lambda use: sizes[id(use[1])][1])
            text = f"YAML aliases nest this file deeper than {limits.max_depth} levels"
            raise self._refuse(f"{text}; no definition needs that: write the value out", mark)

    def _record(self, node: yaml.Node, path: YamlPath) -> None:
        self.node_marks[path] = node.start_mark
        if id(node) in self._walked:  # an alias: walked once, so anchors never loop or explode
            return
        self._walked.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            self._check_escapes(node)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._record(item, (*path, index))
        elif isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                self._check_escapes(key_node)
                key = self.construct_object(key_node)
                if key in seen:
                    self.duplicates.append((key, key_node.start_mark))
                seen.add(key)
                self.key_marks[(*path, key)] = key_node.start_mark
                self._record(value_node, (*path, key))

    def _check_escapes(self, node: yaml.ScalarNode) -> None:
        """Note a scalar holding a surrogate: only an escape can put one there.

        The text itself was checked before parsing, and libyaml refuses these escapes
        outright, so only this loader (PyYAML's pure-Python scanner) lets them through.
        """
        found = _SURROGATE.search(node.value)
        if found is not None:
            message = _surrogate_escape(node.value, found.start())
            self.escapes.append(Problem(message, location(self.shown, node.start_mark)))


def _surrogate_escape(value: str, at: int) -> str:
    code = ord(value[at])
    pair = value[at : at + 2]
    hint = "write the character itself, or escape it with \\U and 8 hex digits"
    if len(pair) == 2 and 0xD800 <= code <= 0xDBFF and 0xDC00 <= ord(pair[1]) <= 0xDFFF:
        whole = 0x10000 + ((code - 0xD800) << 10) + (ord(pair[1]) - 0xDC00)
        hint = f"write the character itself, or escape it as \\U{whole:08X}"
    return (
        f"the escape \\u{code:04x} names half of a UTF-16 surrogate pair, not a character, "
        f"and cannot be stored: {hint}"
    )


def _unreadable(node: yaml.ScalarNode, exc: Exception) -> str:
    """Why a scalar cannot be read as its tag says, and what to do."""
    kind = node.tag.rpartition(":")[2]
    if kind == "int" and sum(map(str.isdigit, node.value)) > sys.get_int_max_str_digits() > 0:
        return _too_long()
    what = _KINDS.get(kind, f"a !!{kind}")
    dated = kind == "timestamp" and isinstance(exc, ValueError)  # "month must be in 1..12"
    why = f" ({str(exc).rstrip('.')})" if dated else ""
    return (
        f"{node.value!r:.60} is not {what}{why}: write one, or quote the value to keep it as text"
    )


def _too_long() -> str:
    limit = sys.get_int_max_str_digits()
    return (
        f"this integer has more than {limit} digits, more than phasegraph reads: quote it "
        "to keep it as text"
    )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _expanded(root: yaml.Node, cap: int) -> dict[int, tuple[int, int]]:
    """Node id -> (size, collection depth) with aliases written out; sizes stop at ``cap``.

    Iterative and memoised by node, so it costs one visit per distinct node however
    often aliases repeat it. A node met again while it is open (a cycle) counts as
    ``cap``: too big.
    """
    found: dict[int, tuple[int, int]] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in found:
            continue
        children = _children(node)
        if not children_done:
            open_nodes.add(id(node))
            stack.append((node, True))
            for child in children:
                if id(child) in open_nodes:
                    found[id(child)] = (cap, 0)
                elif id(child) not in found:
                    stack.append((child, False))
            continue
        open_nodes.discard(id(node))
        size = min(cap, 1 + sum(found[id(child)][0] for child in children))
        nests = isinstance(node, yaml.CollectionNode)
        depth = nests + max((found[id(child)][1] for child in children), default=0)
        found[id(node)] = (size, depth)
    return found


def location(path: str, mark: _Mark) -> SourceLocation:
    """The 1-based location of a YAML ``mark`` in ``path`` (just the path without a mark)."""
    if mark is None:
        return SourceLocation(path)
    return SourceLocation(path, mark.line + 1, mark.column + 1)


def _same(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    return loc


@dataclass(frozen=True, slots=True)
class Document:
    """A parsed YAML mapping, where each of its nodes is, and how to place spec paths.

    Attributes:
        path: The file (or other name) problems are located in.
        data: The parsed mapping.
        node_marks: Where each node starts, by key path.
        key_marks: Where each mapping key starts, by the key path of its value.
        locate: Maps a key path into a checked (maybe salvaged) spec to the same place in
            the document.
    """

    path: str
    data: dict[Any, Any]
    node_marks: Mapping[YamlPath, yaml.Mark]
    key_marks: Mapping[YamlPath, yaml.Mark]
    locate: Callable[[tuple[str | int, ...]], tuple[str | int, ...]] = _same

    def at(self, loc: tuple[str | int, ...]) -> SourceLocation:
        """The location of ``loc``, a key path into the checked (maybe salvaged) spec."""
        return self.place(self.locate(loc))

    def problem(self, loc: tuple[str | int, ...], message: str) -> Problem:
        """A problem located at ``loc`` (a key path into the checked spec)."""
        return Problem(message, self.at(loc))

    def place(self, loc: tuple[str | int, ...]) -> SourceLocation:
        """The location of a document path, or of its deepest ancestor in the file."""
        path: YamlPath = ()
        for part in loc:
            options = [part, int(part)] if isinstance(part, str) and part.isdigit() else [part]
            step = next((option for option in options if (*path, option) in self.node_marks), None)
            if step is None:
                break
            path = (*path, step)
        return location(self.path, self.key_marks.get(path) or self.node_marks.get(path))


def read_file(
    path: Path, what: str, limits: YamlLimits | None = None
) -> tuple[Document | None, list[Problem]]:
    """Read and parse the ``what`` (``machine`` or ``graph``) file at ``path``.

    Returns:
        The document (None when it cannot be used at all) and every problem found.
    """
    try:
        data = path.read_bytes()
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
    limits = limits or YamlLimits()
    refused = _character_problems(text, shown)
    if refused:
        return None, refused
    fast = read_fast(text, limits.max_depth)
    if fast is not None:
        data, node_marks, key_marks, duplicates = fast
    else:
        read = _read_marked(text, shown, limits)
        if isinstance(read, list):
            return None, read
        data, node_marks, key_marks, duplicates = read
    twice = "duplicate key {!r}: it would silently replace the earlier one; keep one"
    problems = [Problem(twice.format(key), location(shown, mark)) for key, mark in duplicates]
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"a {type(data).__name__}"
        needs = "`initial:` and `states:`" if what == "machine" else "`nodes:`"
        message = f"a {what} file is a mapping with {needs}, not {found}"
        return None, [*problems, Problem(message, location(shown, node_marks.get(())))]
    return Document(shown, data, node_marks, key_marks), problems


def _place(problem: Problem) -> tuple[int, int]:
    where = problem.location
    return (0, 0) if where is None else (where.line or 0, where.column or 0)


def _read_marked(text: str, shown: str, limits: YamlLimits) -> FastRead | list[Problem]:
    """Read with the full loader (anchors, aliases, tags, refusals); problems if it fails."""
    loader = _MarkedLoader(text, shown, limits)  # the text's characters were checked
    try:
        data = loader.load_marked()
    except SpecError as exc:
        return list(exc.problems)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        detail = " ".join(
            str(x) for x in (getattr(exc, "problem", exc), getattr(exc, "context", "")) if x
        )
        message = f"YAML syntax error: {detail}; check indentation, quotes and brackets"
        return [Problem(message, location(shown, mark))]
    finally:
        loader.dispose()
    if loader.escapes or loader.unreadable:
        return sorted([*loader.escapes, *loader.unreadable], key=_place)
    return data, loader.node_marks, loader.key_marks, loader.duplicates
