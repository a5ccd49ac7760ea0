"""Commands about definitions rather than runs: check, diagram."""

from __future__ import annotations

import argparse
import json
import sys

from phasegraph.analysis import FORMATS, Report, check, diagram
from phasegraph.cli._support import EXIT_FAILED, EXIT_OK, AddCommand

__all__ = ["register"]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


async def _cmd_check(args: argparse.Namespace) -> int:
    # Resolve every target first: one that cannot be read is bad input (exit 2) before
    # anything is reported.
    reports: list[Report] = [check(target) for target in args.targets]
    errors = sum(r.errors for r in reports)
    if args.json:
        findings = [
            {**f.to_json(), "target": r.target, "kind": r.kind} for r in reports for f in r.findings
        ]
        print(json.dumps(findings, indent=2, sort_keys=True))
    else:
        for report in reports:
            for finding in report.findings:
                print(finding)
        warnings = sum(r.warnings for r in reports)
        print(
            f"checked {_plural(len(reports), 'definition')}: {_plural(errors, 'error')}, "
            f"{_plural(warnings, 'warning')}",
            file=sys.stdout,
        )
    return EXIT_FAILED if errors else EXIT_OK


async def _cmd_diagram(args: argparse.Namespace) -> int:
    text = diagram(args.target, args.format)
    if args.json:
        print(json.dumps({"format": args.format, "diagram": text}, indent=2, sort_keys=True))
    else:
        print(text, end="")
    return EXIT_OK


def register(add: AddCommand) -> None:
    """Add this module's commands to the parser."""
    check_cmd = add(
        "check",
        _cmd_check,
        "check machines and graphs without running them: problems, unreachable states, "
        "loops no budget bounds, states that cannot finish (exit 1 on errors)",
    )
    check_cmd.add_argument(
        "targets",
        nargs="+",
        metavar="FILE|NAME",
        help="a YAML file (a machine has `states:`, a graph `nodes:`) or a built-in name",
    )
    draw = add(
        "diagram",
        _cmd_diagram,
        "draw a machine's states or a graph's layers as Mermaid (renders on GitHub) or dot",
    )
    draw.add_argument("target", metavar="FILE|NAME", help="a YAML file or a built-in name")
    draw.add_argument(
        "--format", choices=FORMATS, default=FORMATS[0], help="output format (default mermaid)"
    )
