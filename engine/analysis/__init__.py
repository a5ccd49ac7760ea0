"""Looking at definitions without running them: ``check`` and ``diagram``.

May import :mod:`phasegraph.run` and everything below it.
"""

from __future__ import annotations

from phasegraph.analysis._check import Code, Finding, Report, Severity, check, check_all
from phasegraph.analysis._diagram import FORMATS, Format, diagram

__all__ = [
    "FORMATS",
    "Code",
    "Finding",
    "Format",
    "Report",
    "Severity",
    "check",
    "check_all",
    "diagram",
]
