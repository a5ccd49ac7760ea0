"""Descriptions for people: a name, a summary and titled sections of terms, as wrapped text.

A :class:`Description` is what ``phasegraph machines NAME`` and ``phasegraph tools``
show (built by :mod:`phasegraph.cli._describe`); :func:`render_text` wraps one to a
terminal's width, and the docs site renders the same value as Markdown. Standard library
only: the machine list uses :func:`render_list` without loading the engine.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["Description", "Entry", "Section", "render_list", "render_text", "summary_line"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of a section: a term (a state, a trigger, a key) and what it is."""

    term: str
    text: str


@dataclass(frozen=True, slots=True)
class Section:
    """A titled list of entries, with an optional sentence before them."""

    title: str
    entries: tuple[Entry, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class Description:
    """Everything shown about one machine or tool.

    Attributes:
        kind: ``machine`` or ``tool``.
        name: Its name.
        summary: Its description (paragraphs split by blank lines).
        sections: States, triggers, budgets, arguments... in reading order.
    """

    kind: str
    name: str
    summary: str
    sections: tuple[Section, ...]

    def to_json(self) -> dict[str, Any]:
        """The description as JSON types (``--json``)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "summary": self.summary,
            "sections": [
                {
                    "title": s.title,
                    "note": s.note,
                    "entries": [{"term": e.term, "text": e.text} for e in s.entries],
                }
                for s in self.sections
            ],
        }


_SENTENCE_END: Final = re.compile(r"(?<!\be\.g)(?<!\bi\.e)\.(?:\s|$)")


def summary_line(text: str) -> str:
    """The first sentence of ``text``, on one line."""
    flat = " ".join(text.split())
    end = _SENTENCE_END.search(flat)
    return flat if end is None else flat[: end.start() + 1]


_TERM_MAX: Final = 20


def _wrap(text: str, width: int, indent: str, first: str | None = None) -> list[str]:
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=indent if first is None else first,
        subsequent_indent=indent,
        break_on_hyphens=False,
    ) or [indent.rstrip()]


def _entries(entries: tuple[Entry, ...], width: int, margin: str) -> list[str]:
    column = min(max((len(e.term) for e in entries), default=0), _TERM_MAX) + 2 + len(margin)
    lines = []
    previous = None
    for entry in entries:
        indent = " " * column
        if entry.term == previous:  # one term's further entries (a trigger's transitions)
            lines += _wrap(entry.text, width, indent)
        elif len(margin + entry.term) + 2 > column:  # a long term gets a line of its own
            lines += _wrap(entry.term, width, margin)
            lines += _wrap(entry.text, width, indent)
        else:
            first = f"{margin}{entry.term:<{column - len(margin)}}"
            lines += _wrap(entry.text, width, indent, first)
        previous = entry.term
    return lines


def render_list(rows: Mapping[str, str], width: int = 80) -> str:
    """Name -> one line about it, as wrapped columns no wider than ``width``."""
    entries = tuple(Entry(name, text) for name, text in rows.items())
    return "\n".join(_entries(entries, max(width, 40), "")) + "\n"


def render_text(description: Description, width: int = 80) -> str:
    """``description`` as plain text, no line longer than ``width`` (but one unbreakable word)."""
    width = max(width, 40)
    lines = [f"{description.name} ({description.kind})", ""]
    for paragraph in description.summary.replace("``", "`").split("\n\n"):
        lines += _wrap(" ".join(paragraph.split()), width, "  ")
        lines.append("")
    for section in description.sections:
        lines.append(section.title)
        if section.note:
            lines += _wrap(section.note, width, "  ")
        lines += _entries(section.entries, width, "  ")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
