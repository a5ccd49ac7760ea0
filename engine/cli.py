"""The ``phasegraph`` command line: parse, call the engine, render, exit with a status.

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

from phasegraph import __version__
from phasegraph.api import Engine
from phasegraph.errors import ErrorCode, InputError, PhasegraphError
from phasegraph.loader import builtin_graphs, builtin_machines, load_graph, load_machine
from phasegraph.model import RunState, RunStatus
from phasegraph.progress import progress_for
from phasegraph.store import DEFAULT_STORE_URL, open_store
from phasegraph.views import jsonable, record_view, run_summary, state_view

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_WAITING = 0, 1, 2, 3

_BAD_INPUT_CODES = {
    ErrorCode.SPEC,
    ErrorCode.INPUT,
    ErrorCode.RUN_NOT_FOUND,
    ErrorCode.LEASE_HELD,
    ErrorCode.STORE_UNAVAILABLE,
    ErrorCode.CODEC,
    ErrorCode.UNSUPPORTED_FORMAT,
    ErrorCode.RUN_STATE,
}

Handler = Callable[[argparse.Namespace], Awaitable[int]]


def _exit_for(status: RunStatus) -> int:
    if status is RunStatus.COMPLETED:
        return EXIT_OK
    if status in {RunStatus.WAITING, RunStatus.PARKED}:
        return EXIT_WAITING
    return EXIT_FAILED


def _emit(args: argparse.Namespace, payload: Any, text: str) -> None:
    if args.json:
        print(json.dumps(jsonable(payload), indent=2, sort_keys=True))
    elif text:
        print(text)


def _parse_inputs(pairs: Sequence[str], input_file: str | None) -> dict[str, Any]:
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
            raise InputError(f"--input {pair!r}: expected KEY=VALUE")
        try:
            values[key] = json.loads(raw)  # numbers, booleans, lists and objects as JSON
        except json.JSONDecodeError:
            values[key] = raw  # anything else is a plain string
    return values


def _finished(args: argparse.Namespace, state: RunState) -> int:
    text = f"run {state.run_id} {state.status}: {run_summary(state)}"
    if state.errors and not args.json:
        text += "".join(f"\n  {e.node} ({e.state}): {e.message}" for e in state.errors)
    _emit(args, state_view(state), "" if args.quiet and not args.json else text)
    return _exit_for(state.status)


async def _with_engine(args: argparse.Namespace, body: Callable[[Engine], Awaitable[int]]) -> int:
    async with open_store(args.store) as store:
        return await body(Engine(store))


async def _cmd_run(args: argparse.Namespace) -> int:
    run_input = _parse_inputs(args.input, args.input_file)

    async def body(engine: Engine) -> int:
        with progress_for(engine.bus, quiet=args.quiet or args.json):
            state = await engine.run(args.graph, run_input, run_id=args.run_id)
        return _finished(args, state)

    return await _with_engine(args, body)


async def _cmd_resume(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        with progress_for(engine.bus, quiet=args.quiet or args.json):
            state = await engine.resume(
                args.run, graph=args.graph, allow_changed=args.allow_changed_graph
            )
        return _finished(args, state)

    return await _with_engine(args, body)


async def _cmd_status(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        if args.run:
            state = await engine.get(args.run)
            nodes = "\n".join(
                f"  {node_id:<20} {node.status:<10} {node.state}"
                + (f"  ({node.error})" if node.error else "")
                for node_id, node in state.nodes.items()
            )
            _emit(
                args,
                state_view(state),
                f"run {state.run_id} ({state.graph}) {state.status} at step {state.seq}: "
                f"{run_summary(state)}\n{nodes}",
            )
            return EXIT_OK
        status = RunStatus(args.status) if args.status else None
        runs = await engine.list_runs(status=status, limit=args.limit)
        lines = [f"{m.run_id:<28} {m.graph:<20} {m.status:<10} step {m.seq}" for m in runs]
        _emit(args, runs, "\n".join(lines) or "no runs")
        return EXIT_OK

    return await _with_engine(args, body)


async def _cmd_history(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        await engine.store.read(args.run)  # unknown run → one clear error, not an empty list
        records = await engine.history(args.run, start=args.start, stop=args.stop)
        lines = []
        for r in records:
            move = f"{'/'.join(r.source) or '-'} --{r.trigger}--> " if r.trigger else ""
            lines.append(
                f"{r.seq:>5}  {r.time:%H:%M:%S}  {r.kind:<10} {r.node or '-':<16} "
                f"{move}{'/'.join(r.dest)}  [{r.status}]"
            )
        _emit(args, [record_view(r) for r in records], "\n".join(lines))
        return EXIT_OK

    return await _with_engine(args, body)


async def _cmd_show(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        state = await engine.get(args.run, args.at)
        view = state_view(state)
        text = json.dumps(view, indent=2, sort_keys=True)
        _emit(args, view, text)
        return EXIT_OK

    return await _with_engine(args, body)


async def _cmd_machines(args: argparse.Namespace) -> int:
    names = builtin_machines()
    rows = [load_machine(name) for name in names]
    _emit(
        args,
        [{"name": m.name, "description": m.description} for m in rows],
        "\n".join(f"{m.name:<20} {m.description}" for m in rows),
    )
    return EXIT_OK


async def _cmd_graphs(args: argparse.Namespace) -> int:
    rows = [load_graph(name) for name in builtin_graphs()]
    _emit(
        args,
        [{"name": g.name, "description": g.description, "nodes": len(g.nodes)} for g in rows],
        "\n".join(f"{g.name:<20} {g.description}" for g in rows),
    )
    return EXIT_OK


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``phasegraph`` console script."""
    args = build_parser().parse_args(argv)
    try:
        code: int = asyncio.run(args.handler(args))
    except PhasegraphError as exc:
        print(f"phasegraph: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT if exc.code in _BAD_INPUT_CODES else EXIT_FAILED
    except KeyboardInterrupt:
        print(
            "phasegraph: interrupted; committed steps are kept (resume to continue)",
            file=sys.stderr,
        )
        return 130
    return code
