"""The Python API: every public module, the names in its ``__all__`` and their docstrings.

A module is public when no part of its dotted name starts with ``_``; its public names
are its ``__all__``. Each name's docstring is read from the source of the module that
defines it (a class's or function's docstring, or the string literal under a constant),
following re-exports, so nothing is imported but the public modules themselves.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from refpages._markdown import REPO, code, generated_from, plain

__all__ = ["docstring", "page", "public_modules", "render"]

_SECTION: Final = re.compile(
    r"^(Args|Arguments|Attributes|Returns|Raises|Yields|Example|Examples|Note|Notes):\s*$"
)
_PROSE_SECTIONS: Final = frozenset({"Returns", "Yields", "Note", "Notes", "Example", "Examples"})
_ITEM: Final = re.compile(r"^([\w.*]+)(?: \([^)]*\))?:")


def public_modules(root: Path = REPO / "engine", package: str = "phasegraph") -> list[str]:
    """Every public module of the package whose source is ``root``, sorted by dotted name."""
    names = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(part.startswith("_") for part in parts):
            continue
        names.append(".".join((package, *parts)))
    return sorted(names)


def _tree(module: str) -> tuple[ast.Module, bool]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise LookupError(f"cannot find the source of {module}")
    origin = Path(spec.origin)
    return ast.parse(origin.read_text(encoding="utf-8")), origin.name == "__init__.py"


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _string_after(body: list[ast.stmt], index: int) -> str | None:
    if index + 1 < len(body):
        following = body[index + 1]
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            return inspect.cleandoc(following.value.value)
    return None


def _assigned(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.Assign):
        return [t.id for t in statement.targets if isinstance(t, ast.Name)]
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return [statement.target.id]
    return []


def docstring(module: str, name: str) -> str | None:
    """The docstring of ``name`` as ``module`` has it, following re-exports to the source."""
    tree, is_package = _tree(module)
    for index, statement in enumerate(tree.body):
        if isinstance(statement, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            if statement.name == name:
                return ast.get_docstring(statement)
        elif name in _assigned(statement):
            return _string_after(tree.body, index)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return docstring(_absolute(node, module, is_package), alias.name)
    return None


def _first_line(text: str | None) -> str:
    return (text or "").strip().split("\n\n")[0].replace("\n", " ").strip()


def _section_items(title: str, body: list[str]) -> list[str]:
    """A section's indented lines as bullets: ``name: text`` items, or one text."""
    items: list[str] = []
    for line in body:
        text = line.strip()
        if not text:
            continue
        named = _ITEM.match(text) if title not in _PROSE_SECTIONS else None
        starts = line.startswith("    ") and not line.startswith("     ")
        if items and not (named and starts):
            items[-1] += " " + plain(text)
        elif named:
            items.append(f"- {code(named[1])}:{plain(text[named.end() :])}")
        else:
            items.append(f"- {plain(text)}")
    return items


def docstring_markdown(text: str) -> str:
    """A Google-style docstring as Markdown.

    Sections (``Args:``...) become bold labels over bullet lists, ``::`` blocks code blocks.
    """
    out: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        heading = _SECTION.match(line)
        if heading is None and not line.rstrip().endswith("::"):
            out.append(plain(line))
            continue
        body = []
        while index < len(lines) and (lines[index].startswith(" ") or not lines[index].strip()):
            body.append(lines[index])
            index += 1
        if heading is not None:
            out += ["", f"**{heading[1]}**", "", *_section_items(heading[1], body), ""]
        else:
            out += [
                plain(line.rstrip()[:-1]),
                "",
                "```",
                inspect.cleandoc("\n".join(body)),
                "```",
                "",
            ]
    return "\n".join(out).strip()


class _Shown:
    """An annotation kept as the text it was written as (``from __future__ import annotations``)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _shown(annotation: object) -> object:
    return _Shown(annotation) if isinstance(annotation, str) else annotation


def _signature(module: str, name: str) -> str:
    value = getattr(importlib.import_module(module), name)
    if not callable(value) or not (inspect.isfunction(value) or inspect.isclass(value)):
        return ""
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return ""
    parameters = [p.replace(annotation=_shown(p.annotation)) for p in signature.parameters.values()]
    returned = _shown(signature.return_annotation)
    if inspect.isclass(value):  # a class is called for an instance: no return annotation
        returned = inspect.Signature.empty
    return f"{name}{signature.replace(parameters=parameters, return_annotation=returned)}"


def _entry(module: str, name: str) -> str:
    text = docstring(module, name) or "(undocumented)"
    lines = [f"### {code(f'{module}.{name}')}", ""]
    signature = _signature(module, name)
    if signature:
        lines += ["```python", signature, "```", ""]
    lines += [docstring_markdown(text), ""]
    return "\n".join(lines)


def _index_line(module: str, name: str) -> str:
    anchor = f"{module}{name}".replace(".", "").lower()  # the toc's id of the name's heading
    summary = plain(_first_line(docstring(module, name))) or "(undocumented)"
    return f"- [{code(name)}](#{anchor}): {summary}"


def render(modules: Sequence[str]) -> str:
    """The page for ``modules`` (dotted names; each is imported for its ``__all__``)."""
    sections = [
        "# Python API",
        "",
        "Everything you may import from phasegraph: each public module and the names in "
        "its `__all__`, with their docstrings. A name not listed here is internal, even "
        "when it can be imported: it may change or go without notice.",
        "",
        generated_from("the docstrings of the package"),
        "## Modules",
        "",
    ]
    sections += [
        f"- [{code(m)}](#{m.replace('.', '')}): {_first_line(ast.get_docstring(_tree(m)[0]))}"
        for m in modules
    ]
    sections.append("")
    for module in modules:
        exported = sorted(importlib.import_module(module).__all__)
        summary = docstring_markdown(ast.get_docstring(_tree(module)[0]) or "")
        lines = [f"## {code(module)}", "", summary, ""]
        if not exported and any(other.startswith(f"{module}.") for other in modules):
            lines.append("No names of its own: its public modules follow.")
        elif not exported:
            lines.append("No public names: it is internal to phasegraph.")
        else:
            lines += [_index_line(module, name) for name in exported]
        sections.append("\n".join(lines) + "\n")
        sections += [_entry(module, name) for name in exported]
    return "\n".join(sections)


def page() -> str:
    """The page for every public module of phasegraph."""
    return render(public_modules())
