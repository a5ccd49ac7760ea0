"""Markdown building blocks shared by the reference pages."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

__all__ = ["REPO", "code", "generated_from", "plain", "table"]

REPO: Final = Path(__file__).resolve().parents[3]
"""The repository root (this file is docs/hooks/refpages/_markdown.py)."""

_ROLE: Final = re.compile(r":[a-z]+:`~?([^`]+)`")


def plain(text: str) -> str:
    """Docstring text as Markdown: ``code`` and Sphinx roles become `code`."""

    def role(match: re.Match[str]) -> str:
        target = match[1]
        shown = target.rsplit(".", 1)[-1] if match[0].split("`")[1].startswith("~") else target
        return f"`{shown}`"

    return _ROLE.sub(role, text).replace("``", "`")


def code(text: str) -> str:
    """``text`` as inline code (backticks inside it are kept by a longer fence)."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_CODE_SPAN: Final = re.compile(r"(`+)(?:(?!\1).)+?\1")


def _cell(text: str) -> str:
    """One line; a pipe outside code escaped (inside code a table keeps it as it is)."""
    flat = " ".join(str(text).split())
    parts, end = [], 0
    for span in _CODE_SPAN.finditer(flat):
        parts += [flat[end : span.start()].replace("|", "\\|"), span[0]]
        end = span.end()
    parts.append(flat[end:].replace("|", "\\|"))
    return "".join(parts) or " "


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; cells are put on one line and their pipes escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def generated_from(*sources: str) -> str:
    """The note that says where a page comes from and that it is not edited by hand."""
    listed = ", ".join(code(s) for s in sources)
    return f"*Generated from {listed} when the site is built: edit those, not this page.*\n"
