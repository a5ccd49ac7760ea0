"""Find where a function, class or type is defined in a source file, by name.

``read_file(path, symbol=NAME)`` uses this to return one definition instead of a whole
file. Python is parsed with :mod:`ast` (exact); a few brace languages (JavaScript and
TypeScript, Go, Rust, Java) are matched by declaration patterns and their extent found by
counting braces (good enough for well-formatted code; braces inside strings can fool it).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import PurePath
from types import MappingProxyType

__all__ = ["Span", "find_symbols"]

Span = tuple[int, int]
"""First and last line (1-based, inclusive) of a definition."""

_JS = (
    r"^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\*?\s+(?P<name>\w+)",
    r"^\s*(?:export\s+)?(?:default\s+)?(?:abstract\s+)?class\s+(?P<name>\w+)",
    r"^\s*(?:export\s+)?(?:const|let|var)\s+(?P<name>\w+)\s*=\s*(?:async\s*)?"
    r"(?:\([^)]*\)|\w+)\s*(?::[^=]*)?=>",
    r"^\s*(?:export\s+)?(?:interface|type|enum)\s+(?P<name>\w+)",
)
_PATTERNS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        ".js": _JS,
        ".jsx": _JS,
        ".ts": _JS,
        ".tsx": _JS,
        ".go": (
            r"^func\s+(?:\([^)]*\)\s*)?(?P<name>\w+)",
            r"^type\s+(?P<name>\w+)\s+(?:struct|interface)",
        ),
        ".rs": (
            r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(?P<name>\w+)",
            r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:struct|enum|trait)\s+(?P<name>\w+)",
            r"^\s*impl(?:<[^>]*>)?\s+(?:\w+\s+for\s+)?(?P<name>\w+)",
        ),
        ".java": (
            r"^\s*(?:(?:public|private|protected|static|final|abstract)\s+)*"
            r"(?:class|interface|enum|record)\s+(?P<name>\w+)",
            r"^\s*(?:(?:public|private|protected|static|final|abstract|synchronized)\s+)+"
            r"[\w<>\[\], ]+\s+(?P<name>\w+)\s*\(",
        ),
    }
)
_COMPILED = MappingProxyType(
    {suffix: tuple(re.compile(p) for p in patterns) for suffix, patterns in _PATTERNS.items()}
)


def _python(text: str) -> dict[str, Span]:
    spans: dict[str, Span] = {}
    # ast.walk goes outside-in, so a name keeps its outermost definition.
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.setdefault(node.name, (first, node.end_lineno or node.lineno))
    return spans


def _block_end(lines: list[str], start: int) -> int:
    """The line where the brace block opened at or after ``start`` closes (0-based)."""
    depth, opened = 0, False
    for index in range(start, len(lines)):
        for char in lines[index]:
            if char == "{":
                depth, opened = depth + 1, True
            elif char == "}" and opened:
                depth -= 1
                if depth == 0:
                    return index
        if not opened and lines[index].rstrip().endswith(";"):
            return index  # a declaration without a body
    return len(lines) - 1


def _braces(text: str, patterns: tuple[re.Pattern[str], ...]) -> dict[str, Span]:
    lines = text.splitlines()
    spans: dict[str, Span] = {}
    for index, line in enumerate(lines):
        for pattern in patterns:
            found = pattern.match(line)
            if found:
                # The first definition of a name wins, as an outer one starts first.
                spans.setdefault(found["name"], (index + 1, _block_end(lines, index) + 1))
                break
    return spans


def find_symbols(path: str, text: str) -> dict[str, Span] | None:
    """Definitions in ``text`` by name, or None if the file's language is not supported.

    Raises:
        SyntaxError: A Python file does not parse.
    """
    suffix = PurePath(path).suffix.lower()
    if suffix == ".py":
        return _python(text)
    patterns = _COMPILED.get(suffix)
    return None if patterns is None else _braces(text, patterns)
