"""The ``worker`` command, and handing runs to workers (``--detach``).

A worker takes run work from the store's queue (Redis or Postgres) until SIGINT or
SIGTERM; on either it
stops its drives at their last committed step and hands their runs back to the queue, so
the other workers continue them at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from types import MappingProxyType

from phasegraph.actions import ActionResult
from phasegraph.api import Engine
from phasegraph.cli._collector import tune_collector
from phasegraph.cli._handler import Handlers
from phasegraph.cli._logs import configure_logging
from phasegraph.cli._support import (
    EXIT_OK,
    emit,
    lease_ttl,
    local_actor,
    stream_settings,
    tracer_provider,
)
from phasegraph.errors import InputError
from phasegraph.model import RunState
from phasegraph.run import RunOptions
from phasegraph.store import DEFAULT_STORE_URL, Store, open_store
from phasegraph.store._open import redact_url
from phasegraph.worker import Worker, WorkerOptions, WorkQueue, has_work_queue, work_queue_of
from phasegraph.worker._mail import cancel_by_worker, post_reply

__all__ = [
    "HANDLERS",
    "can_hand_over",
    "cancel_through_worker",
    "default_worker_name",
    "detached",
    "hand_over",
    "queued_runs",
    "reply_by_worker",
    "require_queue",
    "worker_queue",
]


async def _cmd_worker(args: argparse.Namespace) -> int:
    ttl = args.lease_ttl if args.lease_ttl is not None else lease_ttl()
    name = args.name or default_worker_name()
    options = WorkerOptions(
        concurrency=args.concurrency,
        reclaim_after=args.reclaim_after if args.reclaim_after is not None else ttl,
    )
    # Worker lines (runs taken over, drives given up) as text on stderr.
    configure_logging("text", quiet=args.quiet, logger_name="phasegraph.worker")
    run_options = RunOptions(lease_ttl=ttl, owner=f"worker {name}")
    async with (
        open_store(args.store) as store,
        worker_queue(store, args.partitions) as queue,
        Engine(
            store,
            options=run_options,
            streams=stream_settings(args),
            tracer_provider=tracer_provider(args),
            trace_content=getattr(args, "otel_content", None),
        ) as engine,
    ):
        worker = Worker(engine, queue, name=name, options=options)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def started(partitions: int) -> None:
            tune_collector()  # a store refused or without a queue never tunes the process
            print(
                f"worker {name} on {redact_url(args.store)}: {partitions} partition(s), "
                f"{options.concurrency} runs at once; a dead worker's runs are taken over "
                f"after {options.reclaim_after:g} s; Ctrl-C or SIGTERM stops it (its runs "
                "go on in other workers)",
                file=sys.stderr,
                flush=True,
            )

        await worker.run(stop, started)
        stats = worker.stats
        print(
            f"worker {name} stopped: {stats.drives} drives, {stats.steps} steps, "
            f"{stats.reclaimed} entries taken over, {stats.deadlines} deadlines fired",
            file=sys.stderr,
            flush=True,
        )
    return EXIT_OK


def default_worker_name() -> str:
    """``HOST:PID``: unique among live workers, and says where to look for one."""
    return f"{socket.gethostname()}:{os.getpid()}"


@contextlib.asynccontextmanager
async def worker_queue(store: Store, partitions: int = 1) -> AsyncIterator[WorkQueue]:
    queue = work_queue_of(store, partitions=partitions)
    try:
        yield queue
    finally:
        await queue.aclose()


def can_hand_over(args: argparse.Namespace, store: Store) -> None:
    """Refuse ``--detach`` up front (nothing committed) where no worker can take the run.

    Raises:
        InputError: The store has no work queue (it is not Redis or Postgres), or ``--approve`` was
            given (it answers gates in this process, which does not drive the run).
    """
    if getattr(args, "approve", False) or getattr(args, "approve_with", None):
        raise InputError(
            "--approve answers gates in the process that drives the run; with --detach a "
            "worker drives it: answer its gates with 'phasegraph reply'"
        )
    require_queue(store, args.store, "--detach hands the run to")


def require_queue(store: Store, url: str, what: str, instead: str = "") -> None:
    """Refuse, before anything is committed or served, where no worker could take a run.

    Raises:
        InputError: The store has no work queue (it is not Redis or Postgres).
    """
    if not has_work_queue(store):
        raise InputError(
            f"{what} 'phasegraph worker' processes, which share runs through Redis or "
            f"Postgres: the store {redact_url(url)} has no work queue (use --store "
            f"redis://HOST:PORT/DB or postgresql://HOST/DATABASE{instead})"
        )


async def hand_over(engine: Engine, run_id: str) -> None:
    """Put the run in the work queue of ``engine``'s store, for any worker to drive.

    Raises:
        InputError: The store has no work queue (it is not Redis or Postgres).
    """
    async with worker_queue(engine.store) as queue:
        await queue.enqueue(run_id)


async def queued_runs(engine: Engine, run_ids: Sequence[str]) -> set[str]:
    """Of ``run_ids``, those in the workers' queue (none where the store has no queue)."""
    if not run_ids or not has_work_queue(engine.store):
        return set()
    async with worker_queue(engine.store) as queue:
        return {run_id for run_id in run_ids if await queue.queued(run_id)}


async def reply_by_worker(
    args: argparse.Namespace, engine: Engine, result: ActionResult
) -> int | None:
    """Hand a reply to the worker driving the run (checked against its open gate first).

    Returns:
        The exit status, or None when no worker has the run (the refusal stands).

    Raises:
        RunStateError: The run has no such open gate.
        IllegalTriggerError: The gate does not accept the trigger.
    """
    if not has_work_queue(engine.store):
        return None
    async with worker_queue(engine.store) as queue:
        if not await queue.queued(args.run):
            return None
        state = await post_reply(
            engine,
            queue,
            args.run,
            args.id,
            result,
            actor=local_actor(),
            step=args.step,
            trusted=True,
        )
    emit(
        args,
        {"run_id": args.run, "status": state.status, "seq": state.seq, "queued": True},
        f"reply to {args.id} handed to the worker driving run {args.run}: it is applied "
        f"between two of the run's steps; follow it with {_status_command(args, args.run)}",
    )
    return EXIT_OK


async def cancel_through_worker(args: argparse.Namespace, engine: Engine) -> RunState | None:
    """Ask the worker driving the run to cancel it; the run once cancelled.

    Returns:
        The cancelled run, or None when no worker has the run (the refusal stands).

    Raises:
        RunStateError: The run ended otherwise first, or no worker acted on the request
            within two lease lengths.
    """
    if not has_work_queue(engine.store):
        return None
    async with worker_queue(engine.store) as queue:
        if not await queue.queued(args.run):
            return None
        return await cancel_by_worker(engine, queue, args.run, args.reason, actor=local_actor())


def detached(args: argparse.Namespace, state: RunState) -> int:
    """Report a run handed to the workers; the exit status is 0."""
    emit(
        args,
        {"run_id": state.run_id, "status": state.status, "seq": state.seq, "queued": True},
        f"run {state.run_id} ({state.graph}) queued for the workers at step {state.seq}; "
        f"follow it with {_status_command(args, state.run_id)}",
    )
    return EXIT_OK


def _status_command(args: argparse.Namespace, run_id: str) -> str:
    """``'phasegraph status RUN'``, quoted, with the store if one was given."""
    where = "" if args.store == DEFAULT_STORE_URL else f" --store {shlex.quote(args.store)}"
    return f"'phasegraph status {run_id}{where}'"


HANDLERS: Handlers = MappingProxyType({"worker": _cmd_worker})
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
