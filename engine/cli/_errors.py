"""The ``errors`` command: a run's error log (failures, recoveries, emergencies).

Each record shows its time, severity, node, state, whether it was recovered and its
message. A record counts as recovered when it says so, or when its node went on to
complete successfully (the failure was overcome by a retry or a reflection).
"""

from __future__ import annotations

import argparse
from types import MappingProxyType

from phasegraph.api import Engine
from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import EXIT_OK, emit, with_engine
from phasegraph.model import ErrorRecord, RunState
from phasegraph.views import errors_view, recovered_nodes, run_summary

__all__ = ["HANDLERS", "render_errors"]


def render_errors(state: RunState, node: str | None = None) -> str:
    """The error log as text: one header line and a message line per record, and totals."""
    records = [r for r in state.errors if node is None or r.node == node]
    scope = f" for node {node}" if node else ""
    if not records:
        return f"run {state.run_id} ({state.graph}): no errors{scope} ({run_summary(state)})"
    overcome = recovered_nodes(state)
    lines = [f"Error log of run {state.run_id} ({state.graph}){scope}", ""]
    recovered = 0
    for record in records:
        ok = record.recovered or record.node in overcome
        recovered += ok
        lines += [_header(record, ok), f"    {record.message}", ""]
    lines.append(
        f"Total: {len(records)} record{'s' * (len(records) != 1)} "
        f"({recovered} recovered, {len(records) - recovered} unrecovered); "
        f"{run_summary(state)}"
    )
    return "\n".join(lines)


def _header(record: ErrorRecord, recovered: bool) -> str:
    mark = "recovered" if recovered else "NOT recovered"
    return (
        f"[{record.time:%Y-%m-%d %H:%M:%S}] {record.severity.upper():<8} "
        f"{record.node} ({record.state or '-'})  {mark}"
    )


async def _cmd_errors(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        state = await engine.get(args.run)
        emit(args, errors_view(state, args.node), render_errors(state, args.node), plain=True)
        return EXIT_OK

    return await with_engine(args, body, read_only=True)


HANDLERS: Handlers = MappingProxyType({"errors": _cmd_errors})
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
