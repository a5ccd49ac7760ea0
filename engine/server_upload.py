"""Graphs uploaded over HTTP: size and shape limits, then the loader, then a policy check.

An uploaded graph is text from a client, so before the project's loader (a YAML safe
loader) sees it, it is checked for size, nesting depth and YAML aliases (an alias can
repeat a subtree exponentially often — cheap to send, ruinous to expand). It is then
written to the server's upload folder under its content hash (runs record where their
graph came from, so a restarted server can resume them) and loaded from there. A graph
that loads is still refused if it names machine files (uploads use the built-in
machines), imports a ``python:`` module the server was not told to allow, or runs
``shell:`` commands on a server that does not allow them.

Problems are located as ``graph_yaml:LINE:COL``: the request field, never a server path.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import jsonschema

from phasegraph.errors import Problem, SourceLocation, SpecError
from phasegraph.loader import load_graph, machine_source
from phasegraph.model import GraphDef

__all__ = ["UPLOAD_FIELD", "UploadPolicy", "load_upload", "yaml_shape_problems"]

UPLOAD_FIELD: Final = "graph_yaml"
"""The request field that carries an uploaded graph; problems are located in it."""

_UPLOAD_KINDS: Final = frozenset({"python", "shell", "human"})
_REFERENCES: Final = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})
_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True, slots=True, kw_only=True)
class UploadPolicy:
    """What an uploaded graph may be and do.

    Attributes:
        upload_dir: Where accepted graphs are kept (runs refer to them by path).
        max_bytes: Largest accepted graph, UTF-8 encoded.
        max_depth: Deepest accepted nesting of YAML collections.
        allow_python_modules: Modules ``python:`` actions may import (exact names).
        allow_shell: Whether ``shell:`` actions are accepted.
    """

    upload_dir: Path
    max_bytes: int = 256 * 1024
    max_depth: int = 32
    allow_python_modules: frozenset[str] = frozenset()
    allow_shell: bool = False


@dataclass(slots=True)
class _Shape:
    """A line-by-line scan of YAML text for nesting depth and aliases (no parsing)."""

    max_depth: int
    problems: list[Problem] = field(default_factory=list)
    indents: list[int] = field(default_factory=list)
    quote: str | None = None
    flow: int = 0
    block_indent: int | None = None  # inside a block scalar under a line of this indent
    too_deep: bool = False

    def line(self, number: int, text: str) -> None:
        stripped = text.lstrip(" ")
        indent = len(text) - len(stripped)
        if self.block_indent is not None:
            if not stripped or indent > self.block_indent:
                return  # block scalar content is text, whatever it looks like
            self.block_indent = None
        continuing = self.quote is not None or self.flow > 0
        if not continuing:
            if not stripped or stripped.startswith("#"):
                return
            while self.indents and indent < self.indents[-1]:
                self.indents.pop()
            if not self.indents or indent > self.indents[-1]:
                self.indents.append(indent)
        self._tokens(number, text, indent)

    def _tokens(self, number: int, text: str, start: int) -> None:
        dashes, at_start, i = 0, True, start
        while i < len(text):
            char, after = text[i], text[i + 1 : i + 2]
            if self.quote is not None:
                i += self._in_quote(char, after)
                continue
            if char == "#" and (i == 0 or text[i - 1] in " \t"):
                break
            if at_start and self._token_start(number, i, char, after, text):
                if self.block_indent is not None:
                    break
                at_start = char in "-?"  # a nested "- - x" starts another node at once
                dashes += at_start
            else:
                at_start = self._structure(char, after, at_start)
            self._check_depth(number, i, len(self.indents) + dashes + self.flow)
            i += 1

    def _structure(self, char: str, after: str, at_start: bool) -> bool:
        """Track flow brackets; whether a node may begin after ``char``."""
        if char in "[{":
            self.flow += 1
            return True
        if char in "]}":
            self.flow = max(self.flow - 1, 0)
            return False
        if char in ",:" and (self.flow or after in ("", " ")):
            return True
        return at_start and char in " \t"

    def _in_quote(self, char: str, after: str) -> int:
        if self.quote == '"' and char == "\\":
            return 2
        if char == self.quote:
            if self.quote == "'" and after == "'":
                return 2  # '' is an escaped quote
            self.quote = None
        return 1

    def _token_start(self, number: int, i: int, char: str, after: str, text: str) -> bool:
        """Handle a character where a node may begin; True if it was an indicator."""
        if char in "\"'":
            self.quote = char
            return True
        if char == "*" and after and after in _NAME_CHARS:
            if self.problems and self.problems[-1].location == SourceLocation(UPLOAD_FIELD, number):
                return True  # one problem per line is enough
            self.problems.append(
                Problem(
                    "YAML aliases (*name) are not accepted in uploaded graphs: write the "
                    "value out in full",
                    SourceLocation(UPLOAD_FIELD, number),
                )
            )
            return True
        if char in "|>" and self.flow == 0:
            self.block_indent = len(text) - len(text.lstrip(" "))
            return True
        return char in "-?" and after in ("", " ")

    def _check_depth(self, number: int, i: int, depth: int) -> None:
        if depth > self.max_depth and not self.too_deep:
            self.too_deep = True
            self.problems.append(
                Problem(
                    f"collections nest deeper than {self.max_depth} levels; flatten the graph",
                    SourceLocation(UPLOAD_FIELD, number, i + 1),
                )
            )


def yaml_shape_problems(text: str, max_depth: int) -> list[Problem]:
    """Aliases and over-deep nesting in YAML ``text``, found without parsing it.

    The scan is conservative: it may overestimate depth (a flow collection inside a
    long block scalar of a quoted string is read as text, so rarely), never underestimate.
    """
    shape = _Shape(max_depth)
    for number, line in enumerate(text.splitlines(), 1):
        shape.line(number, line)
    return shape.problems


def load_upload(text: str, policy: UploadPolicy) -> GraphDef:
    """Check, store and load an uploaded graph.

    Blocking (file I/O and parsing): call it in a worker thread.

    Raises:
        SpecError: The text is too large, too deep, uses aliases or machine files, does
            not load, or uses actions the policy refuses; every problem at once, each
            located in ``graph_yaml``.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > policy.max_bytes:
        raise SpecError(
            [Problem(f"the graph is {size} bytes; at most {policy.max_bytes} are accepted")]
        )
    problems = yaml_shape_problems(text, policy.max_depth)
    problems += [
        Problem(
            "uploaded graphs use built-in machines only: remove `machines:`",
            SourceLocation(UPLOAD_FIELD, number, 1),
        )
        for number, line in enumerate(text.splitlines(), 1)
        if line.startswith(("machines:", '"machines":', "'machines':"))
    ]
    if problems:
        raise SpecError(problems)
    path, created = _keep(text, policy.upload_dir)
    try:
        definition = load_graph(path)
        problems = _policy_problems(definition, policy)
    except SpecError as exc:
        problems = list(exc.problems)
    if problems:
        if created:
            with contextlib.suppress(OSError):
                path.unlink()
        raise SpecError(_relocated(problems, str(path)))
    return definition


def _keep(text: str, folder: Path) -> tuple[Path, bool]:
    """Write ``text`` under its content hash (atomically); whether it was new."""
    data = text.encode("utf-8", "surrogatepass")
    folder = folder.resolve()  # runs record this path: it must not depend on the cwd
    path = folder / f"upload-{hashlib.sha256(data).hexdigest()[:32]}.yaml"
    if path.is_file():
        return path, False
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".upload-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path, True


def _policy_problems(definition: GraphDef, policy: UploadPolicy) -> list[Problem]:
    problems = _input_schema_problems(definition.input_schema)
    problems += [
        Problem(f"machine {name!r} is not a built-in machine; uploads use built-in ones only")
        for name, machine in definition.machines.items()
        if not _builtin(name, machine.location.path if machine.location else "")
    ]
    allowed = ", ".join(sorted(policy.allow_python_modules)) or "none"
    for node in definition.nodes:
        for hook, action in node.bind.items():
            where = f"node {node.id!r}, hook {hook!r}"
            if action.kind == "python":
                module = str(action.config.get("python", "")).partition(":")[0]
                if module not in policy.allow_python_modules:
                    text = (
                        f"{where}: python module {module!r} is not allowed in uploaded graphs "
                        f"(allowed: {allowed}); start the server with --allow-python {module}"
                    )
                    problems.append(Problem(text, action.location))
            elif action.kind == "shell" and not policy.allow_shell:
                text = (
                    f"{where}: shell actions are not allowed in uploaded graphs; start the "
                    "server with --allow-shell"
                )
                problems.append(Problem(text, action.location))
            elif action.kind not in _UPLOAD_KINDS:  # a kind added later is refused until vetted
                text = f"{where}: {action.kind} actions are not accepted in uploaded graphs"
                problems.append(Problem(text, action.location))
    return problems


def _input_schema_problems(schema: Mapping[str, Any] | None) -> list[Problem]:
    """The graph's `input:` must be a JSON Schema without references.

    A reference can make validation recurse forever (``{$ref: "#"}``) or reach out of
    the document; an uploaded schema is small enough to write out in full.
    """
    if schema is None:
        return []
    where = SourceLocation(UPLOAD_FIELD)
    try:
        jsonschema.Draft202012Validator.check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        return [Problem(f"input: not a valid JSON Schema: {exc.message}", where)]
    used = sorted(_REFERENCES & _keys(schema))
    if used:
        text = f"input: {', '.join(used)} is not accepted in uploaded graphs; write it out"
        return [Problem(text, where)]
    return []


def _keys(value: Any) -> set[str]:
    """Every mapping key anywhere in ``value`` (iteratively: no recursion limit)."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            found.update(str(key) for key in item)
            stack += list(item.values())
        elif isinstance(item, list | tuple):
            stack += list(item)
    return found


def _builtin(name: str, path: str) -> bool:
    try:
        return str(machine_source(name)) == path
    except SpecError:
        return False


def _relocated(problems: list[Problem], path: str) -> list[Problem]:
    """Name the request field instead of the stored file; hide any other server file."""
    located: list[Problem] = []
    for problem in problems:
        where = problem.location
        if where is None or where.path == UPLOAD_FIELD:
            located.append(problem)
        elif where.path == path:
            located.append(
                Problem(problem.message, SourceLocation(UPLOAD_FIELD, where.line, where.column))
            )
        else:
            located.append(
                Problem(
                    "a file the graph refers to has problems (uploads use built-in machines only)"
                )
            )
    return list(dict.fromkeys(located))
