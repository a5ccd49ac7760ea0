"""Commands about definitions rather than runs: check, diagram."""

from __future__ import annotations

import argparse
import json
import sys
from types import MappingProxyType
from typing import TYPE_CHECKING

from phasegraph.analysis import Report, check_all
from phasegraph.analysis._diagram import draft_diagram
from phasegraph.analysis._findings import github_annotation
from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, with_engine
from phasegraph.errors import InputError

if TYPE_CHECKING:
    from phasegraph.api import Engine

__all__ = ["HANDLERS"]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


async def _cmd_check(args: argparse.Namespace) -> int:
    reports, misfits = await _reports(args)
    errors = sum(r.errors for r in reports) + len(misfits)
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
        for misfit in misfits:
            print(misfit)
        strict = " (--strict: warnings fail)" if args.strict and warnings else ""
        notes = sum(len(r.findings) - r.errors - r.warnings for r in reports)
        noted = f", {_plural(notes, 'note')} (not defects)" if notes else ""
        print(
            f"checked {_plural(len(reports), 'definition')}: {_plural(errors, 'error')}, "
            f"{_plural(warnings, 'warning')}{noted}{strict}",
            file=sys.stdout,
        )
    return EXIT_FAILED if errors or (args.strict and warnings) else EXIT_OK


async def _reports(args: argparse.Namespace) -> tuple[list[Report], list[str]]:
    """The reports of what ``check`` was given, and the misfits of ``--against RUN``.

    Every target is resolved first: one that cannot be read is bad input (exit 2) before
    anything is reported; a finding two targets share is reported once.
    """
    if bool(args.targets) == bool(args.run) or (args.against and len(args.targets) != 1):
        raise InputError(
            "check FILE... (or a built-in's name), or the definition a run follows with "
            "--run RUN; --against RUN checks one graph FILE"
        )
    reports = await _stored_reports(args) if args.run else check_all(args.targets)
    return reports, await _misfits(args) if args.against else []


async def _stored_reports(args: argparse.Namespace) -> list[Report]:
    """The check of the definition run ``args.run`` follows, read from its store."""
    from phasegraph.core._sources import reading
    from phasegraph.run._definitions import stored_files

    async def body(engine: Engine) -> int:
        state = await engine.get(args.run)
        if not state.definition:  # an older run: it follows its file
            found.extend(check_all([state.graph_source]))
            return 0
        stored = await engine.definitions.stored(state.definition, args.run)
        files, graph = stored_files(stored, state.graph_source)
        with reading(files):
            found.extend(check_all([graph]))
        return 0

    found: list[Report] = []
    await with_engine(args, body, read_only=True)
    return found


async def _misfits(args: argparse.Namespace) -> list[str]:
    """Each thing of run ``args.against`` without a place in the graph checked, as a line."""
    lines: list[str] = []

    async def body(engine: Engine) -> int:
        migration = await engine.migrate(args.against, args.targets[0], dry_run=True)
        lines.extend(f"{problem} [{_MISFIT}]" for problem in migration.problems)
        return 0

    await with_engine(args, body, read_only=True)
    return lines


_MISFIT = "run-does-not-fit"


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
