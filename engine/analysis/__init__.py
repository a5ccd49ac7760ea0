"""Looking at definitions without running them: ``check`` and ``diagram``.

May import :mod:`phasegraph.run` and everything below it.
"""

from __future__ import annotations

from phasegraph.analysis._check import (
    Code,
    Finding,
    Report,
    Severity,
    Target,
    analyze_graph,
    analyze_machine,
    check,
    machine_family,
    resolve,
    step_bound,
)
from phasegraph.analysis._diagram import (
    FORMATS,
    Format,
    diagram,
    draft_diagram,
    graph_diagram,
    machine_diagram,
)
from phasegraph.analysis._findings import github_annotation

__all__ = [
    "FORMATS",
    "Code",
    "Finding",
    "Format",
    "Report",
    "Severity",
    "Target",
    "analyze_graph",
    "analyze_machine",
    "check",
    "diagram",
    "draft_diagram",
    "github_annotation",
    "graph_diagram",
    "machine_diagram",
    "machine_family",
    "resolve",
    "step_bound",
]
