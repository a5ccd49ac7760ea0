"""Shared pieces of the command line: running a command, exit codes, output, inputs.

Exit status: 0 run completed (or command succeeded), 1 run failed, 2 bad input (bad
file, unknown run, unreachable store, ...), 3 run waiting or parked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from phasegraph.api import Engine
from phasegraph.cli._commands import Handler
from phasegraph.errors import ErrorCode, InputError, PhasegraphError
from phasegraph.model import RunState, RunStatus
from phasegraph.run import RunOptions
from phasegraph.store import open_store
from phasegraph.views import jsonable, run_summary, state_view

__all__ = [
    "BAD_INPUT_CODES",
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_WAITING",
    "emit",
    "exit_for",
    "finished",
    "interrupt_lines",
    "lease_ttl",
    "parse_inputs",
    "run_command",
    "with_engine",
]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_WAITING = 0, 1, 2, 3

BAD_INPUT_CODES = frozenset(
    {
        ErrorCode.SPEC,
        ErrorCode.INPUT,
        ErrorCode.RUN_NOT_FOUND,
        ErrorCode.LEASE_HELD,
        ErrorCode.STORE_UNAVAILABLE,
        ErrorCode.CODEC,
        ErrorCode.UNSUPPORTED_FORMAT,
        ErrorCode.RUN_STATE,
    }
)
"""Error codes that mean "the request was wrong" (exit 2) rather than "the run failed"."""


def run_command(handler: Handler, args: argparse.Namespace) -> int:
    """Run a command's handler to its end and return the process's exit status.

    A :class:`~phasegraph.errors.PhasegraphError` becomes one line on stderr and exit 2
    (bad input) or 1; Ctrl-C becomes exit 130.
    """
    try:
        code = asyncio.run(handler(args))
    except PhasegraphError as exc:
        print(f"phasegraph: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT if exc.code in BAD_INPUT_CODES else EXIT_FAILED
    except KeyboardInterrupt:
        print(
            "phasegraph: interrupted; committed steps are kept (resume to continue)",
            file=sys.stderr,
        )
        return 130
    return code


def exit_for(status: RunStatus) -> int:
    """The exit status for a run that stopped in ``status``."""
    if status is RunStatus.COMPLETED:
        return EXIT_OK
    if status in {RunStatus.WAITING, RunStatus.PARKED}:
        return EXIT_WAITING
    return EXIT_FAILED


def emit(args: argparse.Namespace, payload: Any, text: str) -> None:
    """Print ``payload`` as JSON with ``--json``, else ``text`` (if any)."""
    if args.json:
        print(json.dumps(jsonable(payload), indent=2, sort_keys=True))
    elif text:
        print(text)


def parse_inputs(pairs: Sequence[str], input_file: str | None) -> dict[str, Any]:
    """Parse ``--input KEY=VALUE`` pairs (JSON values when they parse) and ``--input-file``.

    Raises:
        InputError: A malformed pair or an unreadable file.
    """
    values: dict[str, Any] = {}
    if input_file:
        try:
            loaded = json.loads(Path(input_file).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"--input-file {input_file}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise InputError(f"--input-file {input_file}: expected a JSON object")
        values.update(loaded)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InputError(f"{pair!r}: expected KEY=VALUE")
        try:
            values[key] = json.loads(raw)  # numbers, booleans, lists and objects as JSON
        except json.JSONDecodeError:
            values[key] = raw  # anything else is a plain string
    return values


def finished(args: argparse.Namespace, state: RunState) -> int:
    """Report a run that stopped (completed, failed, waiting...) and return its exit status."""
    text = f"run {state.run_id} {state.status}: {run_summary(state)}"
    if state.errors and not args.json:
        text += "".join(f"\n  {e.node} ({e.state}): {e.message}" for e in state.errors)
    text += interrupt_lines(state)
    emit(args, state_view(state), text)
    return exit_for(state.status)


def interrupt_lines(state: RunState) -> str:
    """Pending interrupts and how to answer them, one per line (empty if none)."""
    lines = []
    for interrupt in state.interrupts.values():
        due = (
            f", timeout at {interrupt.deadline:%Y-%m-%d %H:%M:%S %Z}" if interrupt.deadline else ""
        )
        lines.append(
            f"\n  waiting on {interrupt.kind} from node {interrupt.node}{due}"
            f"\n    phasegraph reply {state.run_id} --id {interrupt.id} --confirm"
            f"  (or --reject FEEDBACK, --trigger NAME)"
        )
    return "".join(lines)


async def with_engine(args: argparse.Namespace, body: Callable[[Engine], Awaitable[int]]) -> int:
    """Open the store named by ``--store`` and call ``body`` with an engine on it."""
    async with open_store(args.store) as store:
        return await body(Engine(store, options=RunOptions(lease_ttl=lease_ttl())))


def lease_ttl() -> float:
    """Seconds a run's lease outlives a killed process (env ``PHASEGRAPH_LEASE_TTL``, 30).

    Raises:
        InputError: The variable is not a positive number.
    """
    raw = os.environ.get("PHASEGRAPH_LEASE_TTL", "30")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InputError(f"PHASEGRAPH_LEASE_TTL={raw!r}: expected a positive number of seconds")
    return value
