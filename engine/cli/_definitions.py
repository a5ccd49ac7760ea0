"""Commands about definitions rather than runs: check, diagram."""

from __future__ import annotations

import argparse
import json
import sys
from types import MappingProxyType

from phasegraph.analysis import Report, check, diagram, github_annotation
from phasegraph.cli._commands import Handlers
from phasegraph.cli._support import EXIT_FAILED, EXIT_OK

__all__ = ["HANDLERS"]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


async def _cmd_check(args: argparse.Namespace) -> int:
    # Resolve every target first: one that cannot be read is bad input (exit 2) before
    # anything is reported.
    reports: list[Report] = [check(target) for target in args.targets]
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
        print(
            f"checked {_plural(len(reports), 'definition')}: {_plural(errors, 'error')}, "
            f"{_plural(warnings, 'warning')}{strict}",
            file=sys.stdout,
        )
    return EXIT_FAILED if errors or (args.strict and warnings) else EXIT_OK


async def _cmd_diagram(args: argparse.Namespace) -> int:
    text = diagram(args.target, args.format)
    if args.json:
        print(json.dumps({"format": args.format, "diagram": text}, indent=2, sort_keys=True))
    else:
        print(text, end="")
    return EXIT_OK


HANDLERS: Handlers = MappingProxyType(
    {
        "check": _cmd_check,
        "diagram": _cmd_diagram,
    }
)
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
