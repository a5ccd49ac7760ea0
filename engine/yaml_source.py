"""Read YAML documents and remember where every node of them is.

The only module that imports ``yaml``. A document is parsed by a SafeLoader subclass that
records the mark (line and column) of every node and every mapping key by its key path,
and every key that repeats, so later checks can name ``path:line:col`` for any part of
the document. Problems of reading and parsing come back as located
:class:`~phasegraph.errors.Problem` values, never as exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from phasegraph.errors import Problem, SourceLocation

__all__ = ["Document", "YamlPath", "location", "parse_text", "read_file"]

YamlPath = tuple[Any, ...]
"""A key path into a parsed document: mapping keys and list indexes."""


class _MarkedLoader(yaml.SafeLoader):
    """A SafeLoader that records where every node starts and which keys repeat."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.node_marks: dict[YamlPath, yaml.Mark] = {}
        self.key_marks: dict[YamlPath, yaml.Mark] = {}
        self.duplicates: list[tuple[Any, yaml.Mark]] = []
        self._walked: set[int] = set()

    def load_marked(self) -> Any:
        """Parse the single document, recording marks before constructing it."""
        node = self.get_single_node()
        if node is None:
            return None
        self._record(node, ())
        return self.construct_document(node)

    def _record(self, node: yaml.Node, path: YamlPath) -> None:
        self.node_marks[path] = node.start_mark
        if id(node) in self._walked:  # an alias: walked once, so anchors never loop or explode
            return
        self._walked.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._record(item, (*path, index))
        elif isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    self.duplicates.append((key, key_node.start_mark))
                seen.add(key)
                self.key_marks[(*path, key)] = key_node.start_mark
                self._record(value_node, (*path, key))


def location(path: str, mark: yaml.Mark | None) -> SourceLocation:
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


def read_file(path: Path, what: str) -> tuple[Document | None, list[Problem]]:
    """Read and parse the ``what`` (``machine`` or ``graph``) file at ``path``.

    Returns:
        The document (None when it cannot be used at all) and every problem found.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        problem = Problem(
            f"cannot read {what} file: {reason}; check the path", location(str(path), None)
        )
        return None, [problem]
    return parse_text(text, str(path), what)


def parse_text(text: str, shown: str, what: str) -> tuple[Document | None, list[Problem]]:
    """Parse ``text``, a ``what`` (``machine`` or ``graph``) document, located as ``shown``.

    Returns:
        The document (None when it is not a mapping or not YAML) and every problem found.
    """
    loader = _MarkedLoader(text)
    try:
        data = loader.load_marked()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        detail = " ".join(
            str(x) for x in (getattr(exc, "problem", exc), getattr(exc, "context", "")) if x
        )
        message = f"YAML syntax error: {detail}; check indentation, quotes and brackets"
        return None, [Problem(message, location(shown, mark))]
    finally:
        loader.dispose()
    twice = "duplicate key {!r}: it would silently replace the earlier one; keep one"
    problems = [
        Problem(twice.format(key), location(shown, mark)) for key, mark in loader.duplicates
    ]
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"a {type(data).__name__}"
        needs = "`initial:` and `states:`" if what == "machine" else "`nodes:`"
        message = f"a {what} file is a mapping with {needs}, not {found}"
        return None, [*problems, Problem(message, location(shown, loader.node_marks.get(())))]
    return Document(shown, data, loader.node_marks, loader.key_marks), problems
