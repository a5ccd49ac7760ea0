"""Commands that start, continue and inspect runs: run, resume, status, history, show."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from types import MappingProxyType
from typing import Any

from phasegraph.api import Engine
from phasegraph.cli._gates import gate_lines, open_gates, run_budget, run_json
from phasegraph.cli._handler import Handlers
from phasegraph.cli._migrate import refuse_gone_flags, say_drift
from phasegraph.cli._support import (
    EXIT_OK,
    emit,
    emit_bytes,
    finished,
    local_actor,
    parse_inputs,
    progress,
    resume_command,
    sqlite_file,
    store_label,
    store_writable,
    with_engine,
)
from phasegraph.errors import InputError, PhasegraphError, StoreUnavailableError
from phasegraph.events import EventId
from phasegraph.model import MIGRATE, NodeStatus, RunState, RunStatus
from phasegraph.run._fork import nothing_to_resume
from phasegraph.run._options import check_run_id
from phasegraph.store._holder import holder_gone, owner_label
from phasegraph.views import meta_view, run_summary, state_view

__all__ = ["HANDLERS", "drive_children_here", "tell_parent"]

_FOLLOW_POLL = 0.2  # seconds between looks at a followed run's new steps
_AFTER_STEP = 10**9  # an event index past any step's last
_PAUSES = frozenset({"run_waiting", "run_parked"})  # a followed run stopped for a person

# The read-only commands (status, history, show) import none of what drives a run: the
# live progress display and the YAML loader are imported by the commands that use them.


async def _cmd_run(args: argparse.Namespace) -> int:
    run_input = parse_inputs(args.input, args.input_file)
    if args.run_id:
        check_run_id(args.run_id)
    approve = [*(["confirm"] if args.approve else []), *args.approve_with]

    async def body(engine: Engine) -> int:
        # Chosen here, so that an interrupted run can be named (see run_command).
        args.run_id = args.run_id or engine.ids.new_run_id()
        if args.detach:
            return await _start_detached(args, engine, run_input)
        with contextlib.ExitStack() as shown:
            start = engine.start(args.graph, run_input, run_id=args.run_id, actor=local_actor())
            async with start as run:
                # Shown once the run exists (its first step is committed), not before.
                watch = await progress(args, engine, args.run_id, graph=args.graph, state=run.state)
                shown.enter_context(watch)
                await run.drive()
            state = await drive_children_here(engine, run.state, may_be_child=False)
            if approve:
                state = await _approve_all(args, engine, state, approve)
        return await finished(args, engine, state)

    return await with_engine(args, body, creates=True)


async def _start_detached(args: argparse.Namespace, engine: Engine, run_input: Any) -> int:
    """Create the run (its first step committed) and hand it to the workers."""
    from phasegraph.cli._worker import can_hand_over, detached, hand_over

    can_hand_over(args, engine.store)
    start = engine.start(args.graph, run_input, run_id=args.run_id, actor=local_actor())
    async with start as run:
        state = run.state
    await hand_over(engine, state.run_id)
    return detached(args, state)


async def _cmd_resume(args: argparse.Namespace) -> int:
    refuse_gone_flags(args)

    async def body(engine: Engine) -> int:
        if args.detach:
            return await _resume_detached(args, engine)
        ended = await engine.get(args.run)
        if ended.status.terminal:  # said before any "resuming" line, which would mislead
            raise nothing_to_resume(args.run, ended.status)
        await say_drift(args, engine, ended)
        with await progress(args, engine, args.run, state=ended):
            state = await engine.resume(args.run)
            state = await drive_children_here(engine, state)
        return await finished(args, engine, state)

    return await with_engine(args, body)


async def _resume_detached(args: argparse.Namespace, engine: Engine) -> int:
    """Hand an unfinished run to the workers (they drive it under its recorded graph)."""
    from phasegraph.cli._worker import can_hand_over, detached, hand_over

    can_hand_over(args, engine.store)
    state = await engine.get(args.run)
    if state.status.terminal:
        raise nothing_to_resume(args.run, state.status)
    await hand_over(engine, state.run_id)
    return detached(args, state)


async def drive_children_here(
    engine: Engine, state: RunState, *, may_be_child: bool = True
) -> RunState:
    """Go on in this process with the child runs ``state`` waits for (and their parents).

    A run whose gates wait for child runs is driven with them until none can go on (see
    :func:`~phasegraph.worker.drive_locally`); so is a child run that ended (its parent
    is answered, and goes on here). Any other run is returned as it is.

    Args:
        engine: The engine.
        state: The run as this command's own drive left it.
        may_be_child: Whether the run may be a child run (a run this command created is not).
    """
    from phasegraph.run._children import CHILD_RUN  # loaded already: it prepared the graph

    waits = any(gate.kind == CHILD_RUN for gate in state.interrupts.values())
    if not waits:
        if not (may_be_child and state.status.terminal):
            return state  # the usual run: nothing more to import or read
        from phasegraph.worker._children import parent_of

        if await parent_of(engine, state.run_id) is None:
            return state
    from phasegraph.worker import drive_locally  # only a run with child runs needs it

    return await drive_locally(engine, state.run_id)


async def tell_parent(engine: Engine, state: RunState) -> str | None:
    """Hand the end of a child run this command ended (cancelled) to its parent's gate.

    On a store with a work queue the answer goes to the parent's inbox and the parent to
    the workers; elsewhere the parent's next drive finds the child ended and answers.

    Returns:
        The parent run, if ``state`` is a child run.
    """
    from phasegraph.worker import has_work_queue, work_queue_of
    from phasegraph.worker._children import ChildRuns, parent_of
    from phasegraph.worker._mail import QueueMailbox

    if not has_work_queue(engine.store):
        link = await parent_of(engine, state.run_id)
        return None if link is None else link.run
    queue = work_queue_of(engine.store)
    try:
        children = ChildRuns(engine, QueueMailbox(queue), log=logging.getLogger("phasegraph.cli"))
        return await children.ended(state)
    finally:
        await queue.aclose()


async def _cmd_status(args: argparse.Namespace) -> int:
    path = sqlite_file(args.store)
    if not args.run and path is not None and not path.exists():
        emit(args, [], f"no runs: there is no store at {path.resolve()} (yet)")
        return EXIT_OK

    if args.follow and not args.run:
        raise InputError("--follow follows one run: name it ('phasegraph status RUN --follow')")

    async def body(engine: Engine) -> int:
        if args.follow:
            return await _follow(args, engine)
        await (_status_of_run(args, engine) if args.run else _status_of_runs(args, engine))
        return EXIT_OK

    # Read-only where the store cannot be written (liveness is then not asked).
    return await with_engine(args, body, read_only=not store_writable(args.store))


async def _status_of_run(args: argparse.Namespace, engine: Engine) -> None:
    state = await engine.get(args.run)
    order = await _dag_order(engine, state)
    # A node its machine failed has no error of its own: the log says why.
    why = {e.node: e.message for e in state.errors if e.severity != "warning"}
    lines = []
    for node_id, node in sorted(state.nodes.items(), key=lambda n: order.get(n[0], 0)):
        error = node.error
        if error is None and node.status is NodeStatus.FAILED:
            error = why.get(node_id)
        lines.append(
            f"  {node_id:<20} {node.status:<10} {node.state}" + (f"  ({error})" if error else "")
        )
    from phasegraph.cli._worker import queued_runs  # only a status command asks workers
    from phasegraph.worker import has_work_queue

    # On a store with a work queue the workers drive runs: the hints hand answers to them.
    args.workers_drive = has_work_queue(engine.store)
    gates = await open_gates(engine, state)
    nodes = "\n".join(lines) + gate_lines(args, state, gates)
    head = f"run {state.run_id} ({state.graph}) {state.status} at step {state.seq}"
    driving = False
    known, holder = (False, None) if state.status.terminal else await live_holder(engine, args.run)
    if state.status is not RunStatus.RUNNING and holder is not None:
        driving = True  # a gate opened while other nodes work: its driver is still on it
        head += f" (a live process drives it: {owner_label(holder)!r})"
    elif state.status is RunStatus.RUNNING:
        abandoned = known and holder is None
        if abandoned and await queued_runs(engine, [state.run_id]):
            head += " (queued: the next free 'phasegraph worker' drives it)"
        elif abandoned and state.seq == 0:
            head += (
                f" (not started: created, and no process has driven it yet; drive it with "
                f"'{resume_command(args, state.run_id)}')"
            )
        elif abandoned:
            head += (
                f" (abandoned: no live process drives it; continue it with "
                f"'{resume_command(args, state.run_id)}')"
            )
        elif holder is not None:
            driving = True
            head += f" (a live process drives it: {owner_label(holder)!r})"
    budget = await run_budget(engine, state)
    view = run_json(state, gates, driving=driving, budget=budget)
    text = f"{head}: {run_summary(state)}\n"
    if budget is not None:
        from phasegraph.run._spend import budget_line  # only a run with a budget shows it

        text += f"{budget_line(budget)}\n"
    emit(args, view, text + nodes, plain=True)


async def _follow(args: argparse.Namespace, engine: Engine) -> int:
    """Show a run's progress from the store until it ends or waits; report it as ``run`` does.

    Whoever drives the run (a worker, a server, another terminal) commits its steps; the
    events of each new record are derived as the driver's own bus would publish them
    (:func:`~phasegraph.events.events_for`), so the lines are the ones ``run`` prints, and
    a driver with ``--durable-stream`` has its model's streamed text shown as it comes.
    The follower keeps the id of the last event it showed: when the store cannot be read
    for a while, it says so and goes on after that event, missing and repeating nothing.
    """
    from phasegraph.cli._progress import progress_for  # here: only this command shows it
    from phasegraph.server._feed import EventFeed
    from phasegraph.worker import has_work_queue

    args.workers_drive = has_work_queue(engine.store)
    state = await engine.get(args.run)
    order = tuple(await _dag_order(engine, state)) or tuple(state.nodes)
    opening = (
        f"following run {state.run_id} ({state.graph}) from step {state.seq}: Ctrl-C stops "
        "following, not the run"
    )
    display = progress_for(
        engine.bus,
        quiet=args.quiet or args.json,
        run_id=state.run_id,
        order=order,
        state=state,
        opening=opening,
    )
    # After every event of the step read: what the display shows already.
    feed = EventFeed(engine, state.run_id, EventId(state.seq, 0, 0, _AFTER_STEP))
    with display:
        stopped = state.status is not RunStatus.RUNNING
        outage = False
        while not stopped:
            await asyncio.sleep(_FOLLOW_POLL)
            try:
                events = await feed.catch_up()
            except StoreUnavailableError as exc:
                if not outage and not args.quiet:
                    print(f"cannot read the store ({exc}); retrying", file=sys.stderr)
                outage = True
                continue
            outage = False
            for event in events:
                engine.bus.publish(event)
                stopped = stopped or (event.node is None and event.kind in _PAUSES)
            stopped = stopped or feed.terminal
    return await finished(args, engine, await engine.get(args.run))


async def _status_of_runs(args: argparse.Namespace, engine: Engine) -> None:
    from phasegraph.cli._worker import queued_runs  # only a status command asks workers

    status = RunStatus(args.status) if args.status else None
    runs = await engine.list_runs(status=status, limit=args.limit)
    undriven = [
        m.run_id
        for m in runs
        if not m.unreadable
        and m.status == RunStatus.RUNNING
        and await is_abandoned(engine, m.run_id)
    ]
    # A run nobody drives is only abandoned if no worker is going to take it either.
    queued = await queued_runs(engine, undriven)
    # One created and never driven (a fork made with --no-run, say) has not stopped: it
    # has not started.
    created = {m.run_id for m in runs if m.seq == 0}
    unstarted = [run_id for run_id in undriven if run_id not in queued and run_id in created]
    abandoned = [run_id for run_id in undriven if run_id not in queued and run_id not in created]
    shown = {
        **dict.fromkeys(abandoned, "abandoned"),
        **dict.fromkeys(unstarted, "not started"),
        **dict.fromkeys(queued, "queued"),
    }
    lines = [
        f"{m.run_id:<28} unreadable: {m.unreadable}"
        if m.unreadable
        else f"{m.run_id:<28} {m.graph:<20} {shown.get(m.run_id, m.status):<11} step {m.seq}"
        for m in runs
    ]
    if abandoned:
        lines.append(
            "abandoned: running, but no live process drives it (it stopped or crashed); "
            f"continue one with '{resume_command(args, abandoned[0])}'"
        )
    if unstarted:
        lines.append(
            "not started: created, and no process has driven it yet; "
            f"drive one with '{resume_command(args, unstarted[0])}'"
        )
    text = "\n".join(lines) or f"no runs in {store_label(args.store)}"
    emit(args, [meta_view(meta) for meta in runs], text, plain=True)


async def _dag_order(engine: Engine, state: RunState) -> dict[str, int]:
    """Node id → its place in the graph's DAG order (empty if the graph cannot be read)."""
    try:
        order = (await engine.prepared_for(state)).workflow.order
    except PhasegraphError:
        return {}
    return {node: index for index, node in enumerate(order)}


async def is_abandoned(engine: Engine, run_id: str) -> bool | None:
    """Whether a ``running`` run has no live driver (``None``: the store cannot say)."""
    known, holder = await live_holder(engine, run_id)
    return holder is None if known else None


async def live_holder(engine: Engine, run_id: str) -> tuple[bool, str | None]:
    """Whether the store could say who drives a run, and who: its live lease's owner.

    Read from the store's record of the holder (nothing is taken): a live lease whose
    recorded holder process provably died on this machine counts as nobody.
    """
    try:
        holder = await engine.store.holder(run_id)
    except PhasegraphError:
        return False, None
    return True, None if holder is None or holder_gone(holder) else holder


async def _cmd_history(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        if args.json:  # rendered from the stored bytes: no step record is built
            emit_bytes(await engine.history_json(args.run, start=args.start, stop=args.stop))
            return EXIT_OK
        records = await engine.history(args.run, start=args.start, stop=args.stop)
        lines = []
        for r in records:
            move = f"{'/'.join(r.source) or '-'} --{r.trigger}--> " if r.trigger else ""
            if r.kind == "reserve" and r.ledger is not None:  # a model call's most
                spend = r.ledger.arguments
                money = f", {int(spend['money']) / 1_000_000:g} money" if spend.get("money") else ""
                move = f"reserved {spend.get('tokens', 0)} tokens{money} for a model call in "
            elif r.ledger is not None:  # where the node is stays put: say which effect
                entry = r.ledger
                what = f"{entry.tool} #{entry.index}" if entry.tool else "the action"
                move = f"{what} ({entry.effect}, id {entry.id}) in "
            elif r.kind == "settle":  # a crashed call's reservation, charged
                charged = dict(r.result.get("charged") or {})
                move = f"charged a crashed model call its {charged.get('tokens', 0)} tokens in "
            if r.kind == MIGRATE:  # what it moved the run from and to
                before = r.result.get("from", {})
                old, new = str(before.get("graph_digest", "")), str(r.result["graph_digest"])
                move = f"version {old[:12]} -> {new[:12]}" if old != new else "definition stored"
            by = "" if r.actor is None else f"  by {r.actor.name}"
            lines.append(
                f"{r.seq:>5}  {r.time:%H:%M:%S}  {r.kind:<10} {r.node or '-':<16} "
                f"{move}{'/'.join(r.dest)}  [{r.status}]{by}"
            )
        emit(args, None, "\n".join(lines))
        return EXIT_OK

    return await with_engine(args, body, read_only=True)


async def _cmd_show(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        state = await engine.get(args.run, args.at)
        view = state_view(state)
        text = json.dumps(view, indent=2, sort_keys=True)
        emit(args, view, text, plain=True)
        return EXIT_OK

    return await with_engine(args, body, read_only=True)


async def _cmd_graphs(args: argparse.Namespace) -> int:
    from phasegraph.spec import load_graph
    from phasegraph.spec._loader import builtin_graphs

    rows = [load_graph(name) for name in builtin_graphs()]
    emit(
        args,
        [{"name": g.name, "description": g.description, "nodes": len(g.nodes)} for g in rows],
        "\n".join(f"{g.name:<20} {g.description}" for g in rows),
    )
    return EXIT_OK


async def _approve_all(
    args: argparse.Namespace, engine: Engine, state: RunState, names: list[str]
) -> RunState:
    """Answer every gate that accepts one of ``names`` with the first it accepts (demos, CI).

    Gates that accept none of them stay open; one line on stderr names each and what it
    accepts.
    """
    for _ in range(_MAX_APPROVALS):
        gates = await open_gates(engine, state)
        answerable = [
            (gate, next(n for n in names if n in gate.answers))
            for gate in gates
            if any(n in gate.answers for n in names)
        ]
        if not answerable:
            break
        gate, trigger = answerable[0]
        state = await engine.reply(
            state.run_id, gate.interrupt.id, trigger, actor=local_actor(), trusted=True
        )
    left = await open_gates(engine, state)
    if left and not args.json:
        flags = " ".join(
            ["--approve"] * args.approve + [f"--approve-with {n}" for n in args.approve_with]
        )
        what = "; ".join(
            f"node {g.interrupt.node} accepts {', '.join(g.answers) or 'no known trigger'}"
            for g in left
        )
        print(
            f"phasegraph: {flags} could not answer {len(left)} gate"
            f"{'s' * (len(left) != 1)} ({what}): add --approve-with TRIGGER, or reply as "
            "shown below",
            file=sys.stderr,
        )
    return state


_MAX_APPROVALS = 100


HANDLERS: Handlers = MappingProxyType(
    {
        "run": _cmd_run,
        "resume": _cmd_resume,
        "status": _cmd_status,
        "history": _cmd_history,
        "show": _cmd_show,
        "graphs": _cmd_graphs,
    }
)
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
