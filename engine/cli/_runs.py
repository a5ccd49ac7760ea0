"""Commands that start, continue and inspect runs: run, resume, status, history, show."""

from __future__ import annotations

import argparse
import json

from phasegraph.api import Engine
from phasegraph.cli._progress import progress_for
from phasegraph.cli._support import (
    EXIT_OK,
    AddCommand,
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

__all__ = ["register"]


async def _cmd_run(args: argparse.Namespace) -> int:
    run_input = parse_inputs(args.input, args.input_file)

    async def body(engine: Engine) -> int:
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
        lines = []
        for r in records:
            move = f"{'/'.join(r.source) or '-'} --{r.trigger}--> " if r.trigger else ""
            lines.append(
                f"{r.seq:>5}  {r.time:%H:%M:%S}  {r.kind:<10} {r.node or '-':<16} "
                f"{move}{'/'.join(r.dest)}  [{r.status}]"
            )
        emit(args, [record_view(r) for r in records], "\n".join(lines))
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


def register(add: AddCommand) -> None:
    """Add this module's commands to the parser."""
    run = add("run", _cmd_run, "start a run of a graph and drive it to the end (or a wait)")
    run.add_argument("graph", help="a built-in graph name (see 'phasegraph graphs') or a YAML path")
    run.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an input value (JSON if it parses, else a string); repeatable",
    )
    run.add_argument("--input-file", metavar="FILE", help="a JSON object of input values")
    run.add_argument("--run-id", help="use this run id instead of a generated one")
    run.add_argument(
        "--approve",
        action="store_true",
        help="answer every review gate with 'confirm' (for demos and CI)",
    )
    resume = add("resume", _cmd_resume, "continue a run from its last committed step")
    resume.add_argument("run", help="the run id")
    resume.add_argument("--graph", help="use this graph file instead of the recorded one")
    resume.add_argument(
        "--allow-changed-graph",
        action="store_true",
        help="continue even if the graph changed since the run started",
    )
    status = add("status", _cmd_status, "show one run, or list runs")
    status.add_argument("run", nargs="?", help="the run id (omit to list runs)")
    status.add_argument("--status", choices=[s.value for s in RunStatus], help="list only these")
    status.add_argument("--limit", type=int, default=20, help="how many runs to list")
    history = add("history", _cmd_history, "list a run's committed steps")
    history.add_argument("run", help="the run id")
    history.add_argument("--from", dest="start", type=int, default=0, metavar="SEQ")
    history.add_argument(
        "--to", dest="stop", type=int, default=None, metavar="SEQ", help="stop before this seq"
    )
    show = add("show", _cmd_show, "print a run's full snapshot (at the head or any step)")
    show.add_argument("run", help="the run id")
    show.add_argument("--at", type=int, default=None, metavar="SEQ", help="the step to show")
    add("machines", _cmd_machines, "list the built-in machines")
    add("graphs", _cmd_graphs, "list the built-in graphs")
