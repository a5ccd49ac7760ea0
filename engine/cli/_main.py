"""The ``phasegraph`` command line: parse, call the engine, render, exit with a status.

The parser is built from :data:`phasegraph.cli._commands.COMMANDS` alone; the chosen
command's module is imported only after parsing, so ``--help`` and ``--version`` never
load the engine. Running a handler and mapping its errors to one line on stderr and an
exit status is :func:`phasegraph.cli._support.run_command`.
"""

from __future__ import annotations

import argparse
import os
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
        help="where runs are kept: memory://, sqlite:///PATH, redis://HOST:PORT/DB or "
        "redis+cluster://HOST:PORT (env PHASEGRAPH_STORE; default %(default)s)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    common.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    return common


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every command (importing none of their modules)."""
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
        parsed = sub.add_parser(
            command.name, parents=[common], help=command.help, description=command.help
        )
        command.arguments(parsed)
        parsed.set_defaults(load_handler=command.handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``phasegraph`` console script."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.load_handler()  # imports the command's module, and the engine with it
    # Imported here, not at the top, for the same reason: it needs the engine.
    from phasegraph.cli._support import run_command

    return run_command(handler, args)
