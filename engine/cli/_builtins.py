"""Commands that show what phasegraph ships: machines, tools.

The machine list loads the machines' YAML and nothing of the engine that runs them; a
description (``machines NAME``, ``tools``) reads the concern actions and the tools too.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from types import MappingProxyType

from phasegraph.cli._handler import Handlers
from phasegraph.cli._layout import render_list, render_text, summary_line
from phasegraph.cli._support import EXIT_OK, emit
from phasegraph.errors import InputError

__all__ = ["HANDLERS"]


def _width() -> int:
    """The terminal's width when stdout is one, else 80 (a pipe, a file, a test)."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else 80


async def _cmd_machines(args: argparse.Namespace) -> int:
    from phasegraph.spec import load_machine

    if args.name is not None:
        from phasegraph.cli._describe import describe_machine

        described = describe_machine(load_machine(args.name))
        emit(args, described.to_json(), render_text(described, _width()).rstrip("\n"))
        return EXIT_OK
    from phasegraph.spec._loader import builtin_machines

    rows = [load_machine(name) for name in builtin_machines()]
    text = render_list({m.name: summary_line(m.description) for m in rows}, _width())
    emit(
        args,
        [{"name": m.name, "description": m.description} for m in rows],
        f"{text}\nphasegraph machines NAME describes one.",
    )
    return EXIT_OK


async def _cmd_tools(args: argparse.Namespace) -> int:
    from phasegraph.cli._describe import builtin_tools, describe_tool
    from phasegraph.spec._suggest import did_you_mean

    tools = builtin_tools()
    if args.name is not None and args.name not in tools:
        known = ", ".join(sorted(tools))
        raise InputError(
            f"no built-in tool {args.name!r} (known: {known})" + did_you_mean(args.name, tools)
        )
    names = sorted(tools) if args.name is None else [args.name]
    described = [describe_tool(name, tools[name]) for name in names]
    width = _width()
    emit(
        args,
        [d.to_json() for d in described] if args.name is None else described[0].to_json(),
        "\n".join(render_text(d, width) for d in described).rstrip("\n"),
    )
    return EXIT_OK


HANDLERS: Handlers = MappingProxyType(
    {
        "machines": _cmd_machines,
        "tools": _cmd_tools,
    }
)
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
