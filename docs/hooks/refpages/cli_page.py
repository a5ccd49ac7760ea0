"""The command line: every command and argument, read from the ``phasegraph`` parser."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from phasegraph.cli._main import build_parser
from refpages._markdown import code, generated_from, table

__all__ = ["page", "render"]

_WIDTH = 88  # usage lines are wrapped at a fixed width, so the page does not depend on a terminal


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    return parser._get_formatter()._expand_help(action)


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return code(action.metavar if isinstance(action.metavar, str) else action.dest)
    shown = ", ".join(code(o) for o in action.option_strings)
    if action.nargs != 0:
        metavar = action.metavar or action.dest.upper()
        shown += f" {code(metavar if isinstance(metavar, str) else ' '.join(metavar))}"
    return shown


def _details(action: argparse.Action) -> str:
    parts = []
    if action.required and action.option_strings:
        parts.append("required")
    if action.choices is not None:
        parts.append("one of " + ", ".join(code(str(c)) for c in action.choices))
    if action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction):
        parts.append("repeatable" if action.option_strings else "any number")
    if action.nargs == "?" and not action.option_strings:
        parts.append("optional")
    return "; ".join(parts)


def _rows(parser: argparse.ArgumentParser, skip: set[str]) -> list[tuple[str, str, str]]:
    return [
        (_name(a), _details(a), _help(parser, a))
        for a in parser._actions
        if a.help != argparse.SUPPRESS
        and not isinstance(a, argparse._HelpAction)
        and a.dest not in skip
    ]


def _shared(commands: Sequence[argparse.ArgumentParser]) -> set[str]:
    """The options every command takes (the common ones), by dest."""
    sets = [{a.dest for a in p._actions if a.option_strings} for p in commands]
    return set.intersection(*sets) - {"help"} if sets else set()


def render(parser: argparse.ArgumentParser) -> str:
    """The page for ``parser`` and each of its sub-commands."""
    commands = _commands(parser)
    shared = _shared(list(commands.values()))
    header = ("Argument", "Details", "What it does")
    lines = [
        "# Command line",
        "",
        parser.description or "",
        "",
        generated_from("phasegraph.cli"),
        "```text",
        _usage(parser),
        "```",
        "",
        parser.epilog or "",
        "",
        f"Commands: {', '.join(f'[{name}](#{name})' for name in commands)}.",
        "",
    ]
    if commands:
        first = next(iter(commands.values()))
        common = [a for a in first._actions if a.dest in shared]
        lines += [
            "## Options of every command",
            "",
            table(header, [(_name(a), _details(a), _help(first, a)) for a in common]),
        ]
    for name, command in commands.items():
        lines += [
            f"## {name}",
            "",
            command.description or "",
            "",
            "```text",
            _usage(command),
            "```",
            "",
        ]
        rows = _rows(command, shared)
        lines += [table(header, rows)] if rows else ["No arguments of its own.", ""]
        if command.epilog:
            lines += ["```text", command.epilog.strip(), "```", ""]
    return "\n".join(lines)


def page() -> str:
    """The page for the ``phasegraph`` command."""
    return render(build_parser())
