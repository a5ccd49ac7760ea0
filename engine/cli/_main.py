"""The ``phasegraph`` command line: parse, call the engine, render, exit with a status.

The parser is built from :data:`phasegraph.cli._commands.COMMANDS` alone; the chosen
command's module is imported only after parsing, so ``--help`` and ``--version`` never
load the engine. Running a handler and mapping its errors to one line on stderr and an
exit status is :func:`phasegraph.cli._support.run_command`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from phasegraph import __version__
from phasegraph._vocabulary import DEFAULT_STORE_URL
from phasegraph.cli._commands import COMMANDS
from phasegraph.cli._handler import Handler

__all__ = ["build_parser", "main"]


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=os.environ.get("PHASEGRAPH_STORE", DEFAULT_STORE_URL),
        help="where runs are kept: memory://, sqlite:///PATH, redis://HOST:PORT/DB, "
        "redis+cluster://HOST:PORT or postgresql://[USER@]HOST[:PORT]/DATABASE (env "
        "PHASEGRAPH_STORE; default %(default)s)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    common.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    return common


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser for every command (importing none of their modules).

    Args:
        only: Build the sub-parser of this command alone (see :func:`_command_of`).
    """
    parser = argparse.ArgumentParser(
        prog="phasegraph",
        description="Run explicit state-machine workflows with a durable snapshot per step.",
        epilog="Exit status: 0 completed, 1 run failed or cancelled, 2 bad input (nothing "
        "committed), 3 waiting or parked, 4 stopped, resumable, 130 interrupted, 141 pipe "
        "closed.",
    )
    parser.add_argument("--version", action="version", version=f"phasegraph {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common()
    for command in COMMANDS:
        if only is not None and command.name != only:
            continue
        parsed = sub.add_parser(
            command.name, parents=[common], help=command.help, description=command.help
        )
        command.arguments(parsed)
        parsed.set_defaults(load_handler=command.handler)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` starts with, or None when it starts with anything else.

    Then the top-level parser reads nothing but the command's name and hands every later
    word to that command's sub-parser, whose errors and help are its own (the top-level
    usage names no command: ``COMMAND``). So the parser of that one command parses
    ``argv`` exactly as the whole one would, without building every other sub-parser
    (a good part of a short command's start-up). Anything else (an option first, no
    command, an unknown one) gets the whole parser, and its help or error.
    """
    if argv and argv[0] in _NAMES:
        return argv[0]
    return None


_NAMES = frozenset(command.name for command in COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``phasegraph`` console script."""
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(only=_command_of(words)).parse_args(words)
    handler: Handler = args.load_handler()  # imports the command's module, and the engine with it
    # Imported here, not at the top, for the same reason: it needs the engine.
    from phasegraph.cli._support import run_command

    return run_command(handler, args)
