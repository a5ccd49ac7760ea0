"""Commands that branch and check recorded runs: fork, replay."""

from __future__ import annotations

import argparse
import sys
from types import MappingProxyType

from phasegraph.api import Engine
from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import (
    EXIT_FAILED,
    EXIT_OK,
    emit,
    finished,
    local_actor,
    parse_inputs,
    progress,
    with_engine,
)
from phasegraph.model import RunStatus, StepRecord
from phasegraph.run import ReplayReport
from phasegraph.run._replay import report_view

__all__ = ["HANDLERS"]


async def _cmd_fork(args: argparse.Namespace) -> int:
    patch = parse_inputs(args.set, None)

    async def body(engine: Engine) -> int:
        new_id = await engine.fork(args.run, args.at, patch, actor=local_actor())
        args.run_id = new_id  # an interrupted fork names the new run (see run_command)
        state = await engine.get(new_id)
        (created,) = await engine.history(new_id, stop=1)
        at = created.result["at"]  # the head's seq when --at was not given
        if not args.no_run and state.status is RunStatus.RUNNING:
            # Driven as the server drives a fork: to its end or its next wait.
            print(f"forked run {args.run} at step {at} as {new_id}", file=sys.stderr)
            with await progress(args, engine, new_id):
                state = await engine.resume(new_id)
            return await finished(args, engine, state)
        view = {
            "run_id": new_id,
            "forked_from": args.run,
            "at": at,
            "status": state.status,
            "patched": sorted(patch),
        }
        # Plain output is the id alone, so scripts can write NEW=$(phasegraph fork ...).
        emit(args, view, new_id)
        return EXIT_OK

    return await with_engine(args, body)


async def _cmd_replay(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        report = await engine.replay(args.run, graph=args.graph)
        emit(args, report_view(report), _report_text(report))
        return EXIT_OK if report.identical else EXIT_FAILED

    return await with_engine(args, body, read_only=True)


def _report_text(report: ReplayReport) -> str:
    graph = f"graph {report.graph!r}" + (" (changed since the run started)" * report.graph_changed)
    head = f"run {report.run_id} replayed against {graph}"
    divergence = report.divergence
    if divergence is None:
        return f"{head}: identical ({report.steps} steps, head {report.head})"
    where = f"seq {divergence.seq}" + (f", node {divergence.node!r}" if divergence.node else "")
    replayed = _describe(divergence.replayed) if divergence.replayed else "(no step)"
    return (
        f"{head}: diverged at {where} "
        f"(after {report.steps} identical steps; head {report.head})\n"
        f"  {divergence.reason}\n"
        f"  recorded: {_describe(divergence.recorded)}\n"
        f"  replayed: {replayed}"
    )


def _describe(record: StepRecord) -> str:
    """``transition a work --again--> done; nodes: a completed; run completed``."""
    parts = [f"{record.kind} {record.node or '-'}"]
    if record.trigger:
        parts[0] += (
            f" {'/'.join(record.source) or '-'} --{record.trigger}--> {'/'.join(record.dest)}"
        )
    elif record.dest:
        parts[0] += f" {'/'.join(record.dest)}"
    if record.nodes:
        parts.append(
            "nodes: "
            + ", ".join(
                f"{node_id} {node.status}" + (f" ({node.error})" if node.error else "")
                for node_id, node in record.nodes.items()
            )
        )
    if record.data or record.appended:
        parts.append(f"data: {', '.join(sorted({*record.data, *record.appended}))}")
    parts.append(f"run {record.status}")
    return "; ".join(parts)


HANDLERS: Handlers = MappingProxyType(
    {
        "fork": _cmd_fork,
        "replay": _cmd_replay,
    }
)
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
