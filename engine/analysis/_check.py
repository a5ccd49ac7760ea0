"""``phasegraph check``: load a machine or graph, report every problem and deeper finding.

A target is a built-in name or a YAML file. It is loaded the ordinary way; every problem
the loader rejects (bad YAML, unknown names, unbound hooks, triggers a state does not
accept, dependency cycles, predicates naming unknown budgets, ...) becomes an error
:class:`~phasegraph.analysis._rules.Finding` located at its file, line and column. A
definition that loads is then analysed by :mod:`phasegraph.analysis._rules`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from phasegraph.analysis._children import child_graph_findings
from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.analysis._kinds import Kind, kind_of
from phasegraph.analysis._rules import analyze_graph, analyze_machine, step_bound
from phasegraph.analysis._runnable import graph_run_findings, machine_file_findings
from phasegraph.analysis._spend import spend_findings
from phasegraph.core._sources import is_file, read_bytes
from phasegraph.errors import InputError, Problem, SourceLocation, SpecError
from phasegraph.model import MachineDef
from phasegraph.spec import load_graph
from phasegraph.spec._catalog import is_name
from phasegraph.spec._loader import (
    builtin_graphs,
    builtin_machines,
    graph_source,
    load_machine_family,
    machine_source,
)

__all__ = [
    "Code",
    "Finding",
    "Report",
    "Severity",
    "Target",
    "analyze_graph",
    "analyze_machine",
    "check",
    "check_all",
    "machine_family",
    "resolve",
    "step_bound",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """A definition to check or draw: a built-in name or a file, and what it holds.

    Attributes:
        kind: ``machine`` or ``graph``; ``None`` when the file is neither.
        source: What the loader is given (a built-in name or a path).
        shown: How the target is named in output.
    """

    kind: Kind | None
    source: str | Path
    shown: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """Everything found in one definition.

    Attributes:
        target: The definition, as named in output.
        kind: ``machine`` or ``graph`` (``None`` when the file is neither).
        findings: Findings, ordered by file, line and column.
    """

    target: str
    kind: Kind | None
    findings: tuple[Finding, ...]

    @property
    def errors(self) -> int:
        """How many findings are errors."""
        return sum(1 for f in self.findings if f.severity is Severity.ERROR)

    @property
    def warnings(self) -> int:
        """How many findings are warnings."""
        return sum(1 for f in self.findings if f.severity is Severity.WARNING)


# --------------------------------------------------------------------------- targets


def resolve(target: str | Path) -> Target:
    """Find what ``target`` names: a built-in machine or graph, or a YAML file.

    A bare name (no ``/``, no ``.yaml`` suffix) is a built-in, as for the loader. A file
    is a machine if it has a top-level ``machine:`` or ``states:`` key, a graph if it has
    ``nodes:``.

    Raises:
        InputError: The file cannot be read, or no built-in has that name.
    """
    text = str(target)
    if is_name(target) and not is_file(Path(text)):
        machines, graphs = text in builtin_machines(), text in builtin_graphs()
        if machines and graphs:
            raise InputError(
                f"{text!r} is both a built-in machine and a built-in graph: give its path "
                f"({machine_source(text)} or {graph_source(text)})"
            )
        if machines:
            return Target(kind="machine", source=text, shown=str(machine_source(text)))
        if graphs:
            return Target(kind="graph", source=text, shown=str(graph_source(text)))
        known = ", ".join([*builtin_machines(), *builtin_graphs()]) or "none"
        raise InputError(f"no built-in machine or graph is called {text!r} (built-ins: {known})")
    try:
        # Only to tell its kind: the loader says where a byte is not UTF-8.
        content = read_bytes(Path(target)).decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read {text}: {exc.strerror or exc}") from exc
    return Target(kind=kind_of(content), source=Path(target), shown=text)


# --------------------------------------------------------------------------- loading

_SPEC_CODES: tuple[tuple[re.Pattern[str], Code], ...] = tuple(
    (re.compile(pattern), code)
    for pattern, code in (
        (r"^YAML syntax error", Code.YAML),
        (r"names unknown budget", Code.UNKNOWN_BUDGET),
        (r"^dependency cycle", Code.DAG_CYCLE),
        (r"leaves hook .* unbound", Code.UNBOUND_HOOK),
        (r"binds hook .* does not have", Code.UNKNOWN_HOOK),
        (r"declares trigger .* does not accept", Code.TRIGGER_NOT_ACCEPTED),
        (r"unknown machine", Code.UNKNOWN_MACHINE),
        (r"nested machines recurse", Code.NESTING_CYCLE),
    )
)


def _from_problems(problems: Iterable[Problem]) -> list[Finding]:
    """Turn the loader's problems into error findings, coded by what they say."""
    findings = []
    for problem in problems:
        code = next((c for p, c in _SPEC_CODES if p.search(problem.message)), Code.INVALID)
        findings.append(
            Finding(
                severity=Severity.ERROR,
                code=code,
                message=problem.message,
                location=problem.location,
            )
        )
    return findings


def machine_family(source: str | Path) -> tuple[MachineDef, dict[str, MachineDef]]:
    """Load a machine and every machine nested in it, found the way the loader finds them.

    Returns:
        The machine, and every machine of the family (itself included) by name.

    Raises:
        SpecError: The machine or one nested in it is invalid.
    """
    return load_machine_family(source)


def check(target: str | Path) -> Report:
    """Check one machine or graph (a built-in name or a path) and report every finding.

    Raises:
        InputError: The target cannot be read at all.
    """
    resolved = resolve(target)
    try:
        if resolved.kind == "machine":
            root, family = machine_family(resolved.source)
            findings = analyze_machine(root.name, family)
            if isinstance(resolved.source, Path):
                findings += machine_file_findings(root, family, resolved.source)
        elif resolved.kind == "graph":
            definition = load_graph(resolved.source)
            findings = analyze_graph(definition)
            findings += graph_run_findings(definition, str(resolved.source))
            findings += child_graph_findings(definition)
            findings += spend_findings(definition)
        else:
            message = (
                "cannot tell what this file is: a machine file has top-level `states:` (and "
                "`initial:`), a graph file has `nodes:`"
            )
            findings = [
                Finding(
                    severity=Severity.ERROR,
                    code=Code.INVALID,
                    message=message,
                    location=SourceLocation(resolved.shown),
                )
            ]
    except SpecError as exc:
        findings = _from_problems(exc.problems)
    return Report(target=resolved.shown, kind=resolved.kind, findings=_ordered(findings))


def check_all(targets: Iterable[str | Path]) -> list[Report]:
    """Check each target; a finding several targets share is reported once, by the first.

    A machine nested in several checked definitions (``check states/*.yaml``) is
    analysed with each of them, and a file may be named by a relative path in one
    target and found by its absolute path in another: both name the same place.

    Raises:
        InputError: A target cannot be read at all (before any is checked).
    """
    listed = list(targets)
    for target in listed:
        resolve(target)
    seen: set[tuple[object, ...]] = set()
    reports = []
    for target in listed:
        report = check(target)
        fresh = []
        for finding in report.findings:
            key = _identity(finding)
            if key not in seen:
                seen.add(key)
                fresh.append(finding)
        reports.append(replace(report, findings=tuple(fresh)))
    return reports


def _identity(finding: Finding) -> tuple[object, ...]:
    where = finding.location
    path = Path(where.path).resolve() if where is not None and where.path else None
    place = (where.line, where.column) if where is not None else (None, None)
    return (path, *place, finding.severity, finding.code, finding.message)


def _ordered(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    def key(finding: Finding) -> tuple[str, int, int]:
        where = finding.location or SourceLocation("")
        return where.path, where.line or 0, where.column or 0

    return tuple(sorted(dict.fromkeys(findings), key=key))
