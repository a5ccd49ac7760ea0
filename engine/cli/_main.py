"""The ``phasegraph`` command line: parse, call the engine, render, exit with a status.

Each ``cli_*`` module registers its own commands; this module builds the parser, runs the
chosen command and maps errors to one line on stderr and an exit status (see
:mod:`phasegraph.cli._support`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from phasegraph import __version__
from phasegraph.cli import _definitions as cli_definitions
from phasegraph.cli import _durable as cli_durable
from phasegraph.cli import _errors as cli_errors
from phasegraph.cli import _human as cli_human
from phasegraph.cli import _runs as cli_runs
from phasegraph.cli import _serve as cli_serve
from phasegraph.cli._support import Handler, report_error
from phasegraph.errors import PhasegraphError
from phasegraph.store import DEFAULT_STORE_URL

__all__ = ["build_parser", "main"]

_COMMAND_MODULES = (
    cli_runs,
    cli_human,
    cli_definitions,
    cli_durable,
    cli_errors,
    cli_serve,
)


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=os.environ.get("PHASEGRAPH_STORE", DEFAULT_STORE_URL),
        help="where runs are kept: memory://, sqlite:///PATH or redis://HOST:PORT/DB "
        "(env PHASEGRAPH_STORE; default %(default)s)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    common.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    return common


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every command."""
    parser = argparse.ArgumentParser(
        prog="phasegraph",
        description="Run explicit state-machine workflows with a durable snapshot per step.",
        epilog="Exit status: 0 completed, 1 run failed, 2 bad input, 3 waiting or parked.",
    )
    parser.add_argument("--version", action="version", version=f"phasegraph {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common()

    def add(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        command = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        command.set_defaults(handler=handler)
        return command

    for module in _COMMAND_MODULES:
        module.register(add)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``phasegraph`` console script."""
    args = build_parser().parse_args(argv)
    try:
        code: int = asyncio.run(args.handler(args))
    except PhasegraphError as exc:
        return report_error(args, exc)
    except KeyboardInterrupt:
        print(
            "phasegraph: interrupted; committed steps are kept (resume to continue)",
            file=sys.stderr,
        )
        return 130
    return code
