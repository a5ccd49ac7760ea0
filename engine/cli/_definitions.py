"""Commands about definitions rather than runs: check, diagram."""

from __future__ import annotations

import argparse
import json
import sys
from types import MappingProxyType

from phasegraph.analysis import Report, check_all
from phasegraph.analysis._diagram import draft_diagram
from phasegraph.analysis._findings import github_annotation
from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

__all__ = ["HANDLERS"]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


async def _cmd_check(args: argparse.Namespace) -> int:
    # Resolve every target first: one that cannot be read is bad input (exit 2) before
    # anything is reported; a finding two targets share is reported once.
    reports: list[Report] = check_all(args.targets)
    errors = sum(r.errors for r in reports)
    warnings = sum(r.warnings for r in reports)
    if args.annotations == "github":
        for report in reports:
            for finding in report.findings:
                print(github_annotation(finding))
    if args.json:
        findings = [
            {**f.to_json(), "target": r.target, "kind": r.kind} for r in reports for f in r.findings
        ]
        print(json.dumps(findings, indent=2, sort_keys=True))
    elif args.annotations is None:
        for report in reports:
            for finding in report.findings:
                print(finding)
        strict = " (--strict: warnings fail)" if args.strict and warnings else ""
        notes = sum(len(r.findings) - r.errors - r.warnings for r in reports)
        noted = f", {_plural(notes, 'note')} (not defects)" if notes else ""
        print(
            f"checked {_plural(len(reports), 'definition')}: {_plural(errors, 'error')}, "
            f"{_plural(warnings, 'warning')}{noted}{strict}",
            file=sys.stdout,
        )
    return EXIT_FAILED if errors or (args.strict and warnings) else EXIT_OK


async def _cmd_diagram(args: argparse.Namespace) -> int:
    # A file that does not load is still drawn as far as its YAML goes, its problems
    # marked on the drawing and listed on stderr (exit 2, as for any bad input).
    text, problems = draft_diagram(args.target, args.format)
    if args.json:
        shown = {
            "format": args.format,
            "diagram": text,
            "problems": [str(problem) for problem in problems],
        }
        print(json.dumps(shown, indent=2, sort_keys=True))
    else:
        print(text, end="")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT if problems else EXIT_OK


HANDLERS: Handlers = MappingProxyType(
    {
        "check": _cmd_check,
        "diagram": _cmd_diagram,
    }
)
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
