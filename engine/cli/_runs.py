"""Commands that start, continue and inspect runs: run, resume, status, history, show."""

from __future__ import annotations

import argparse
import json
from types import MappingProxyType

from phasegraph.api import Engine
from phasegraph.cli._commands import Handlers
from phasegraph.cli._progress import progress_for
from phasegraph.cli._support import (
    EXIT_OK,
    emit,
    finished,
    interrupt_lines,
    parse_inputs,
    with_engine,
)
from phasegraph.errors import IllegalTriggerError
from phasegraph.model import RunState, RunStatus
from phasegraph.spec import builtin_graphs, builtin_machines, load_graph, load_machine
from phasegraph.views import record_view, run_summary, state_view

__all__ = ["HANDLERS"]


async def _cmd_run(args: argparse.Namespace) -> int:
    run_input = parse_inputs(args.input, args.input_file)

    async def body(engine: Engine) -> int:
        # Chosen here, so that an interrupted run can be named (see run_command).
        args.run_id = args.run_id or engine.ids.new_run_id()
        with progress_for(engine.bus, quiet=args.quiet or args.json):
            state = await engine.run(args.graph, run_input, run_id=args.run_id)
            if args.approve:
                state = await _approve_all(engine, state)
        return finished(args, state)

    return await with_engine(args, body)


async def _cmd_resume(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        with progress_for(engine.bus, quiet=args.quiet or args.json):
            state = await engine.resume(
                args.run, graph=args.graph, allow_changed=args.allow_changed_graph
            )
        return finished(args, state)

    return await with_engine(args, body)


async def _cmd_status(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        if args.run:
            state = await engine.get(args.run)
            nodes = "\n".join(
                f"  {node_id:<20} {node.status:<10} {node.state}"
                + (f"  ({node.error})" if node.error else "")
                for node_id, node in state.nodes.items()
            )
            nodes += interrupt_lines(state)
            emit(
                args,
                state_view(state),
                f"run {state.run_id} ({state.graph}) {state.status} at step {state.seq}: "
                f"{run_summary(state)}\n{nodes}",
            )
            return EXIT_OK
        status = RunStatus(args.status) if args.status else None
        runs = await engine.list_runs(status=status, limit=args.limit)
        lines = [f"{m.run_id:<28} {m.graph:<20} {m.status:<10} step {m.seq}" for m in runs]
        emit(args, runs, "\n".join(lines) or "no runs")
        return EXIT_OK

    return await with_engine(args, body)


async def _cmd_history(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        records = await engine.history(args.run, start=args.start, stop=args.stop)
        if args.json:
            emit(args, [record_view(r) for r in records], "", plain=True)
            return EXIT_OK
        lines = []
        for r in records:
            move = f"{'/'.join(r.source) or '-'} --{r.trigger}--> " if r.trigger else ""
            lines.append(
                f"{r.seq:>5}  {r.time:%H:%M:%S}  {r.kind:<10} {r.node or '-':<16} "
                f"{move}{'/'.join(r.dest)}  [{r.status}]"
            )
        emit(args, None, "\n".join(lines))
        return EXIT_OK

    return await with_engine(args, body)


async def _cmd_show(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        state = await engine.get(args.run, args.at)
        view = state_view(state)
        text = json.dumps(view, indent=2, sort_keys=True)
        emit(args, view, text)
        return EXIT_OK

    return await with_engine(args, body)


async def _cmd_machines(args: argparse.Namespace) -> int:
    names = builtin_machines()
    rows = [load_machine(name) for name in names]
    emit(
        args,
        [{"name": m.name, "description": m.description} for m in rows],
        "\n".join(f"{m.name:<20} {m.description}" for m in rows),
    )
    return EXIT_OK


async def _cmd_graphs(args: argparse.Namespace) -> int:
    rows = [load_graph(name) for name in builtin_graphs()]
    emit(
        args,
        [{"name": g.name, "description": g.description, "nodes": len(g.nodes)} for g in rows],
        "\n".join(f"{g.name:<20} {g.description}" for g in rows),
    )
    return EXIT_OK


async def _approve_all(engine: Engine, state: RunState) -> RunState:
    """Answer every interrupt that accepts ``confirm`` with ``confirm`` (demos and CI)."""
    for _ in range(_MAX_APPROVALS):
        pending = sorted(state.interrupts)
        if not pending:
            return state
        try:
            state = await engine.reply(state.run_id, pending[0], "confirm")
        except IllegalTriggerError:
            return state  # this gate needs a real answer
    return state


_MAX_APPROVALS = 100


HANDLERS: Handlers = MappingProxyType(
    {
        "run": _cmd_run,
        "resume": _cmd_resume,
        "status": _cmd_status,
        "history": _cmd_history,
        "show": _cmd_show,
        "machines": _cmd_machines,
        "graphs": _cmd_graphs,
    }
)
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
