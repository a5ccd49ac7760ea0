"""A machine's, tool's or concern action's description as Markdown.

It is the :class:`~phasegraph.cli._layout.Description` that ``phasegraph machines NAME``
and ``phasegraph tools`` print as text.
"""

from __future__ import annotations

from typing import Final

from phasegraph.cli._layout import Description, Section
from refpages._markdown import code, plain, table

__all__ = ["description_markdown"]

_TERMS: Final = {
    "States": "State",
    "Hooks": "Hook",
    "Triggers": "Trigger",
    "Outcomes": "Outcome",
    "Budgets": "Budget",
    "Settings": "Key",
    "Writes": "Action",
    "Arguments": "Argument",
    "Effect": "Kind",
    "Serves": "Machine",
}
"""The first column's header for each section's terms."""


def _section(section: Section, level: int) -> list[str]:
    lines = [f"{'#' * level} {section.title}", ""]
    if section.note:
        lines += [plain(section.note), ""]
    if section.entries and not any(e.text for e in section.entries):
        lines += [", ".join(code(e.term) for e in section.entries), ""]
    elif section.entries:
        rows = [(code(e.term), plain(e.text)) for e in section.entries]
        lines.append(table((_TERMS.get(section.title, "Name"), "What"), rows))
    return lines


def description_markdown(description: Description, level: int = 2) -> str:
    """``description`` under a heading of ``level``, its sections one level below."""
    lines = [f"{'#' * level} {description.name}", ""]
    lines += [plain(paragraph) for paragraph in description.summary.split("\n\n")]
    lines.append("")
    for section in description.sections:
        lines += _section(section, level + 1)
    return "\n".join(lines) + "\n"
